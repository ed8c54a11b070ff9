import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// RevenueCat's export rows with `store = stripe`, imported as the App Store's are, then
/// confirmed from Stripe's API (the stand-in serves the subscriptions). Both databases.
@Suite("Import: RevenueCat's Stripe rows")
struct StripeImportTests {
    static let day: TimeInterval = 86_400

    @Test(
        "Stripe rows are recorded under the app's products and Stripe's environments, then each subscription is read back from Stripe",
        arguments: TestDatabaseKind.available)
    func stripeRows(_ kind: TestDatabaseKind) async throws {
        let api = StripeAPIStandIn()
        try await api.makeApplication().test(.live) { stand in
            let port = try #require(stand.port)
            try await FreshDatabase.with(kind) { location, _ in
                let database = try await Database.open(location, logger: FreshDatabase.logger, now: Date())
                let store = CustomerDatabase(database: database)
                var app = ImportTests.app()
                app.stripe = StripeSettings(
                    secretKey: "sk_test_import", webhookSecrets: ["whsec_import"], apiBaseURL: "http://127.0.0.1:\(port)",
                    products: ["price_monthly": "pro_monthly", "prod_price_monthly": "pro_monthly"])
                let now = Date()
                let (first, second, end) = (now - 40 * Self.day, now - 10 * Self.day, now + 20 * Self.day)
                // Stripe has renewed nothing since: its current period is the export's second row.
                await api.set(
                    "/v1/subscriptions/sub_imp",
                    StripeAPIStandIn.subscription("sub_imp", user: nil, start: second, end: end, created: first))
                let header =
                    "store,product_identifier,rc_original_app_user_id,rc_last_seen_app_user_id_alias,start_time,end_time,store_transaction_id,original_store_transaction_id,is_auto_renewable,is_sandbox,price_in_purchased_currency,currency\n"
                let rows = [
                    "stripe,prod_price_monthly,walt,walt,\(SecurityReviewThreeTests.stamp(first)),\(SecurityReviewThreeTests.stamp(second)),sub_imp,sub_imp,true,true,9.99,USD",
                    "stripe,prod_price_monthly,walt,walt,\(SecurityReviewThreeTests.stamp(second)),\(SecurityReviewThreeTests.stamp(end)),in_second,sub_imp,true,true,9.99,USD",
                    // Stripe no longer knows this one (another account's, or deleted): kept as imported, reported.
                    "stripe,pro_monthly,xena,xena,\(SecurityReviewThreeTests.stamp(second)),\(SecurityReviewThreeTests.stamp(end)),sub_gone,sub_gone,true,false,9.99,USD",
                    // Not a subscription id: refused.
                    "stripe,pro_monthly,yuri,yuri,\(SecurityReviewThreeTests.stamp(second)),\(SecurityReviewThreeTests.stamp(end)),pi_1,pi_1,true,false,9.99,USD",
                ]
                let report = try await RevenueCatImport(app: app, store: store).run(Data((header + rows.joined(separator: "\n")).utf8), now: now)
                #expect(report.newPurchases == 3 && report.refused.map(\.line) == [5])
                #expect(report.stripeConfirmed == 1 && report.stripeUnconfirmed.count == 1 && report.stripeUnconfirmed[0].hasPrefix("sub_gone"))

                let walt = try #require(try await store.lookup(app: app, user: "walt", now: now))
                let periods = walt.transactions.filter { $0.originalTransactionId == "sub_imp" }.sorted {
                    ($0.purchaseDateMs ?? 0) < ($1.purchaseDateMs ?? 0)
                }
                // The read back confirmed the current period's row, under its imported id: no second copy of it.
                #expect(periods.map(\.transactionId) == ["sub_imp", "in_second"])
                #expect(periods.map(\.environment) == ["StripeTest", "StripeTest"] && periods.allSatisfy { $0.productId == "pro_monthly" })
                #expect(periods.map(\.importStatus) == ["awaiting_store", nil])
                let info = try await store.customerInfo(app: app, user: "walt", now: now)
                #expect(
                    info.subscriber.entitlements["pro"]?.expiresDate.flatMap(WireDate.parse)
                        == Date(timeIntervalSince1970: end.timeIntervalSince1970.rounded(.down)))
                #expect(info.subscriber.subscriptions["pro_monthly"]?.store == "stripe")
                let xena = try #require(try await store.lookup(app: app, user: "xena", now: now))
                #expect(xena.transactions.map(\.environment) == ["Stripe"] && xena.transactions.map(\.importStatus) == ["awaiting_store"])

                // Without Stripe in the app's configuration, Stripe rows are refused.
                app.stripe = nil
                let refused = try await RevenueCatImport(app: app, store: store).run(Data((header + rows[0]).utf8), now: now)
                #expect(refused.refused.count == 1 && refused.refused[0].message.contains("does not sell through Stripe"))
                try await database.close()
            }
        }
    }
}
