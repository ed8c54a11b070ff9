import CountersignAppStore
import CountersignCharts
import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Testing

@testable import CountersignServer

/// The revenue charts read back as a team reads them: purchases posted through `POST /v1/receipts`,
/// the charts through `GET /v1/admin/charts/{chart}` (JSON and CSV) with the secret key.
@Suite("Revenue charts over HTTP")
struct ChartRouteTests {
    static let day: TimeInterval = 86_400

    static func post(
        _ harness: ReceiptTests.Harness, user: String, product: String, type: ProductType = .autoRenewable, on start: Date, days: Double = 31,
        price: Int64, currency: String = "USD", trial: Bool = false, storefront: String = "USA", refund: (Date, Int64)? = nil
    ) async throws {
        var purchase = TestStoreCA.Purchase(productId: product, type: type, bundleId: harness.app.bundleId, purchaseDate: start)
        if type == .autoRenewable { purchase.expiresDate = start.addingTimeInterval(days * day) }
        purchase.price = price
        purchase.currency = currency
        if trial { purchase.introductoryOffer = "FREE_TRIAL" }
        purchase.storefront = storefront
        purchase.revocationDate = refund?.0
        purchase.revocationPercentage = refund?.1
        // Signed now, as Apple signs the copy it sends after a refund.
        let (jws, _) = try harness.ca.mintTransaction(purchase, signedDate: Date())
        let posted = try await harness.post(user: user, jws: jws)
        #expect(posted.status == 200, "\(posted.json)")
    }

    static func chart(_ harness: ReceiptTests.Harness, _ path: String) async throws -> [[String: Any]] {
        let reply = try await harness.send(.get, path, key: harness.secretKey)
        #expect(reply.status == 200, "\(String(decoding: reply.body, as: UTF8.self))")
        return reply.json["points"] as? [[String: Any]] ?? []
    }

    /// The sum of `column` over the points (the purchases may straddle a month's end).
    static func total(_ points: [[String: Any]], _ column: String) -> Double {
        points.reduce(0) { $0 + ($1[column] as? Double ?? 0) }
    }

    @Test(
        "a month of purchases reads back as revenue, proceeds, MRR, active subscriptions and trials, in JSON and CSV",
        arguments: TestDatabaseKind.available)
    func monthOfPurchases(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(
            kind,
            configure: { app, _ in
                app.products.append(
                    AppConfiguration.Product(id: "pro_yearly", type: .autoRenewable, entitlements: ["pro"]).described(
                        "Pro Yearly", "A year of Pro", price: "120", period: "P1Y"))
                app.commissionPercentage = 0.15
                app.usdExchangeRates = .init(asOf: "2026-11-01", usdPerUnit: ["EUR": 1.1])
            }
        ) { harness in
            // The test store's certificates are a day old: the history is of the last 20 hours.
            let start = Date().addingTimeInterval(-20 * 3_600)
            let hour: TimeInterval = 3_600
            try await Self.post(harness, user: "u1", product: "pro_monthly", on: start, price: 8_000)
            try await Self.post(harness, user: "u2", product: "pro_yearly", on: start + hour, days: 365, price: 120_000)
            try await Self.post(harness, user: "u3", product: "pro_monthly", on: start + 2 * hour, price: 9_990, currency: "EUR")
            try await Self.post(harness, user: "u4", product: "pro_monthly", on: start + 3 * hour, days: 7, price: 0, trial: true)
            try await Self.post(harness, user: "u5", product: "lifetime", type: .nonConsumable, on: start + 4 * hour, price: 49_990)
            // A yen purchase, with no rate configured: counted apart, never guessed.
            try await Self.post(harness, user: "u6", product: "coins_100", type: .consumable, on: start + 5 * hour, price: 160_000, currency: "JPY")
            // Bought in France, 40 % of it refunded (Apple's revocationPercentage 40000): it keeps $6.
            try await Self.post(
                harness, user: "u7", product: "pro_monthly", on: start + 6 * hour, price: 10_000, storefront: "FRA",
                refund: (start + 7 * hour, 40_000))

            // One point, or two when the 20 hours straddle a month's end; snapshots are now's.
            let query =
                "?resolution=month&from=\(ChartDay(milliseconds: start.epochMilliseconds))&to=\(ChartDay(milliseconds: Date().epochMilliseconds))"
            let revenue = try await Self.chart(harness, "/v1/admin/charts/revenue" + query)
            // 8 + 120 + 9.99 × 1.1 + 49.99 + 60 % of 10; proceeds 85 % of each; the yen purchase has no rate.
            #expect(abs(Self.total(revenue, "revenue_usd") - 194.98) < 0.015)
            #expect(abs(Self.total(revenue, "proceeds_usd") - 165.73) < 0.015)
            #expect(Self.total(revenue, "transactions") == 6)
            #expect(Self.total(revenue, "unpriced_transactions") == 1)

            let mrr = try await Self.chart(harness, "/v1/admin/charts/mrr" + query)
            // u1 ($8), u2 ($120 a year: $10) and u3 (EUR 9.99: $10.99) are active now.
            #expect(mrr.last?["mrr_usd"] as? Double == 28.99)
            #expect(mrr.last?["active_subscriptions"] as? Int == 3)
            let yearlyOnly = try await Self.chart(harness, "/v1/admin/charts/mrr" + query + "&product=pro_yearly")
            #expect(yearlyOnly.last?["mrr_usd"] as? Double == 10)
            // The storefront is the country: the French purchase is the only one of France.
            #expect(try await Self.chart(harness, "/v1/admin/charts/mrr" + query + "&country=US").last?["mrr_usd"] as? Double == 28.99)
            #expect(Self.total(try await Self.chart(harness, "/v1/admin/charts/revenue" + query + "&country=FR"), "revenue_usd") == 6)
            let refunds = try await Self.chart(harness, "/v1/admin/charts/refunds" + query)
            #expect(Self.total(refunds, "transactions") == 6 && Self.total(refunds, "refunded") == 1)

            #expect(try await Self.chart(harness, "/v1/admin/charts/active_trials" + query).last?["active_trials"] as? Int == 1)
            #expect(try await Self.chart(harness, "/v1/admin/charts/active_subscriptions" + query).last?["active_subscriptions"] as? Int == 3)

            // The customers were first seen today: this month's cohort, whose one trial is under way.
            let today = ChartDay(milliseconds: Date().epochMilliseconds)
            let cohort = try await Self.chart(harness, "/v1/admin/charts/trial_conversion?resolution=month&from=\(today)&to=\(today)")
            #expect(cohort.first?["new_customers"] as? Int == 7)
            #expect(cohort.first?["trials"] as? Int == 1)
            #expect(cohort.first?["pending"] as? Int == 1)

            let csv = try await harness.send(.get, "/v1/admin/charts/revenue" + query + "&format=csv", key: harness.secretKey)
            #expect(csv.status == 200)
            #expect(csv.headers[.contentType] == "text/csv; charset=utf-8")
            let lines = String(decoding: csv.body, as: UTF8.self).split(separator: "\n").map(String.init)
            #expect(lines.first == "period,revenue_usd,proceeds_usd,transactions,unpriced_transactions")
            #expect(lines.count == revenue.count + 1)
            for (line, point) in zip(lines.dropFirst(), revenue) {
                let cells = line.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
                #expect(cells[0] == point["period"] as? String)
                #expect(Double(cells[1]) == point["revenue_usd"] as? Double && Int(cells[3]) == point["transactions"] as? Int)
            }
        }
    }

    @Test(
        "a bad chart request is refused with a stable code naming the problem, and only the secret key opens it",
        arguments: TestDatabaseKind.available)
    func refusals(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let cases: [(String, Int, Int)] = [
                ("/v1/admin/charts/ltv", 404, APIErrorCode.notFound.rawValue),
                ("/v1/admin/charts/mrr?from=2026-02-30", 400, APIErrorCode.invalidField.rawValue),
                ("/v1/admin/charts/mrr?from=2026-03-02&to=2026-03-01", 400, APIErrorCode.invalidField.rawValue),
                ("/v1/admin/charts/mrr?from=1970-01-01&to=9999-12-31", 400, APIErrorCode.invalidField.rawValue),
                ("/v1/admin/charts/mrr?resolution=hour", 400, APIErrorCode.invalidField.rawValue),
                ("/v1/admin/charts/mrr?store=play_store", 400, APIErrorCode.invalidField.rawValue),
                ("/v1/admin/charts/mrr?format=xml", 400, APIErrorCode.invalidField.rawValue),
                ("/v1/admin/charts/mrr?country=usa", 400, APIErrorCode.invalidField.rawValue),
            ]
            for (path, status, code) in cases {
                let reply = try await harness.send(.get, path, key: harness.secretKey)
                #expect(reply.status == status, "\(path)")
                #expect(reply.code == code, "\(path)")
            }
            let withPublicKey = try await harness.send(.get, "/v1/admin/charts/mrr", key: harness.key)
            #expect(withPublicKey.status == 403)
            #expect(withPublicKey.code == APIErrorCode.wrongKeyKind.rawValue)
            // The defaults: the 30 days up to today.
            let recent = try await Self.chart(harness, "/v1/admin/charts/new_customers")
            #expect(recent.count == 30)
            #expect(recent.last?["period"] as? String == ChartDay(milliseconds: Date().epochMilliseconds).description)
        }
    }
}
