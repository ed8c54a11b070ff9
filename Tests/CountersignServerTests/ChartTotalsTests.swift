import CountersignAppStore
import CountersignCharts
import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Testing

@testable import CountersignServer

/// The daily sums the server keeps for the charts, held equal to the full computation over the
/// records (`ChartKind.series(transactions:…)`) after every kind of write a chart depends on:
/// purchases, a conversion, a renewal arriving before the transaction it follows, a prorated
/// refund, a purchase moving to another customer, a customer deleted.
@Suite("Revenue charts: the kept sums equal the full computation")
struct ChartTotalsTests {
    static let hour: TimeInterval = 3_600

    /// Posts a signed test-store transaction for `user`; returns its transaction id.
    @discardableResult
    static func post(
        _ harness: ReceiptTests.Harness, user: String, product: String, on start: Date, days: Double = 31, price: Int64,
        currency: String = "USD", trial: Bool = false, chain: String? = nil, storefront: String = "USA", refund: (Date, Int64?)? = nil,
        id: String? = nil
    ) async throws -> String {
        var purchase = TestStoreCA.Purchase(productId: product, type: .autoRenewable, bundleId: harness.app.bundleId, purchaseDate: start)
        purchase.expiresDate = start.addingTimeInterval(days * 86_400)
        purchase.price = price
        purchase.currency = currency
        purchase.storefront = storefront
        purchase.originalTransactionId = chain
        purchase.transactionId = id
        if trial { purchase.introductoryOffer = "FREE_TRIAL" }
        purchase.revocationDate = refund?.0
        purchase.revocationPercentage = refund?.1
        let (jws, payload) = try harness.ca.mintTransaction(purchase, signedDate: Date())
        let posted = try await harness.post(user: user, jws: jws)
        #expect(posted.status == 200, "\(posted.json)")
        return payload.transactionId ?? ""
    }

    /// Every chart by day, unfiltered and by product and country, as the admin API answers it
    /// (CSV) and as the full computation over every stored record gives it: the same bytes.
    static func expectSumsEqualRecords(_ harness: ReceiptTests.Harness, _ step: String) async throws {
        let app = harness.app
        let store = harness.server.store
        let from = ChartDay(milliseconds: Date().addingTimeInterval(-2 * 86_400).epochMilliseconds)
        let to = ChartDay(milliseconds: Date().addingTimeInterval(2 * 86_400).epochMilliseconds)
        let filters: [(query: String, filter: ChartFilter)] = [
            ("", ChartFilter()), ("&product=pro_monthly", ChartFilter(product: "pro_monthly")), ("&country=FR", ChartFilter(country: "FR")),
        ]
        for kind in ChartKind.allCases {
            for (query, filter) in filters {
                let reply = try await harness.send(
                    .get, "/v1/admin/charts/\(kind.rawValue)?format=csv&resolution=day&from=\(from)&to=\(to)\(query)", key: harness.secretKey)
                #expect(reply.status == 200)
                // The full computation, at the same instant's day (the test runs well within one).
                let now = Date()
                let full = kind.series(
                    transactions: try await store.chartTransactions(app: app.id),
                    customersFirstSeenMs: try await store.customersFirstSeen(app: app.id, fromMs: .min, toMs: .max),
                    range: ChartRange(from: from, to: to, resolution: .day), filter: filter, settings: ChartRequest.settings(app, now: now))
                let kept = String(decoding: reply.body, as: UTF8.self)
                #expect(kept == ChartOutput.csv(full), "\(step): \(kind.rawValue)\(query)")
            }
        }
    }

    @Test("after each write a chart depends on, every chart from the kept sums equals the full computation", arguments: TestDatabaseKind.available)
    func sumsFollowEveryWrite(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(
            kind,
            configure: { app, _ in app.usdExchangeRates = .init(asOf: "2026-11-01", usdPerUnit: ["EUR": 1.1]) }
        ) { harness in
            // The test store's certificates are a day old: the history is of the last 20 hours.
            let start = Date().addingTimeInterval(-20 * Self.hour)
            let trial = try await Self.post(harness, user: "ana", product: "pro_monthly", on: start, days: 3, price: 0, trial: true)
            try await Self.post(harness, user: "ben", product: "pro_monthly", on: start + Self.hour, price: 9_990, currency: "EUR", storefront: "FRA")
            let carl = try await Self.post(harness, user: "carl", product: "pro_monthly", on: start + 2 * Self.hour, price: 8_000)
            try await Self.expectSumsEqualRecords(harness, "first purchases")

            // The trial converts, but the second renewal arrives before the first.
            try await Self.post(harness, user: "ana", product: "pro_monthly", on: start + 8 * Self.hour, price: 8_000, chain: trial)
            try await Self.expectSumsEqualRecords(harness, "a renewal before the one it follows")
            try await Self.post(harness, user: "ana", product: "pro_monthly", on: start + 4 * Self.hour, days: 0.1, price: 8_000, chain: trial)
            try await Self.expectSumsEqualRecords(harness, "the late renewal")

            // Apple refunds 40 % of carl's purchase; then carl's purchase is restored by dana: it moves.
            try await Self.post(
                harness, user: "carl", product: "pro_monthly", on: start + 2 * Self.hour, price: 8_000, refund: (start + 9 * Self.hour, 40_000),
                id: carl)
            try await Self.expectSumsEqualRecords(harness, "a prorated refund")
            try await Self.post(harness, user: "dana", product: "pro_monthly", on: start + 10 * Self.hour, price: 8_000, chain: carl)
            let owners = Set(
                try await harness.server.store.chartTransactions(app: harness.app.id).filter { $0.originalTransactionId == carl }.map(\.owner))
            #expect(owners == ["dana"], "the purchase moved to dana")
            try await Self.expectSumsEqualRecords(harness, "a purchase moved to another customer")

            // ana is deleted: her subscription stays (no customer owns it), her first sight goes.
            let deleted = try await harness.send(.delete, "/v1/subscribers/ana", key: harness.secretKey)
            #expect(deleted.status == 200)
            try await Self.expectSumsEqualRecords(harness, "a customer deleted")

            // Nothing was left to catch up on.
            #expect(try await harness.server.store.refreshChartTotals() == 0)
        }
    }
}
