import CountersignServerCore
import CountersignTesting
import Foundation
import HummingbirdTesting
import Testing

extension ReceiptTests {
    /// A server whose app sells through Stripe, its API served by a fresh ``StripeAPIStandIn``:
    /// `products` maps Stripe's prices to the app's products, `configure` edits the app further.
    static func withStripe(
        _ kind: TestDatabaseKind, secret: String, transferBehavior: AppConfiguration.TransferBehavior = .transfer, clock: ManualClock? = nil,
        products: [String: String] = ["price_monthly": "pro_monthly"], configure: @escaping @Sendable (inout AppConfiguration) -> Void = { _ in },
        _ body: @Sendable @escaping (Harness, StripeAPIStandIn) async throws -> Void
    ) async throws {
        let api = StripeAPIStandIn()
        try await api.makeApplication().test(.live) { stand in
            let port = try #require(stand.port)
            try await withHarness(
                kind, transferBehavior: transferBehavior, clock: clock,
                configure: { app, _ in
                    configure(&app)
                    app.stripe = StripeSettings(
                        secretKey: "sk_test_harness", webhookSecrets: [secret], apiBaseURL: "http://127.0.0.1:\(port)", products: products)
                }
            ) { harness in try await body(harness, api) }
        }
    }
}
