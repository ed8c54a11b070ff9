import Countersign
import CountersignServerCore
import CountersignTesting
import Foundation
import HummingbirdTesting
import Testing

@testable import CountersignServer

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A purchase made on the web reaches the app as RevenueCat's SDK shows one: Stripe tells the
/// server (a signed `customer.subscription.created`, the subscription read back from Stripe's API),
/// and the app's `customerInfo()` has the entitlement, verified, from the `stripe` store.
@Suite("SDK: a web purchase through Stripe")
struct WebPurchaseTests {
    static let secret = "whsec_sdk"

    @Test(
        "bought on the web, the entitlement shows in customerInfo() verified, store stripe; an answer stripped of its signature is refused",
        arguments: TestDatabaseKind.available)
    func webPurchaseVerified(_ database: TestDatabaseKind) async throws {
        let stripe = StripeAPIStandIn()
        try await stripe.makeApplication().test(.live) { stand in
            let port = try #require(stand.port)
            try await SDKHarness.run(
                database: database,
                configure: { deployment, _ in
                    deployment.apps[0].stripe = StripeSettings(
                        secretKey: "sk_test_sdk", webhookSecrets: [Self.secret], apiBaseURL: "http://127.0.0.1:\(port)",
                        products: ["price_monthly": "pro_monthly"])
                }
            ) { harness in
                let now = Date()
                await stripe.set(
                    "/v1/subscriptions/sub_web",
                    StripeAPIStandIn.subscription("sub_web", user: "web-buyer", start: now - 86_400, end: now + 29 * 86_400))
                let event = Array(
                    #"{"id":"evt_sdk","object":"event","type":"customer.subscription.created","created":\#(Int(now.timeIntervalSince1970)),"data":{"object":{"id":"sub_web","object":"subscription"}}}"#
                        .utf8)
                var request = URLRequest(url: harness.serverURL.appendingPathComponent("v1/notifications/stripe/\(harness.app.id)"))
                request.httpMethod = "POST"
                request.httpBody = Data(event)
                request.setValue(
                    StripeSignature.header(payload: event, secret: Self.secret, timestamp: Int64(now.timeIntervalSince1970)),
                    forHTTPHeaderField: "Stripe-Signature")
                let (_, response) = try await URLSession.shared.data(for: request)
                #expect((response as? HTTPURLResponse)?.statusCode == 200)

                let purchases = try harness.purchases(mode: .enforced, user: "web-buyer", storage: "web")
                let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                #expect(info.entitlements["pro"]?.isActive == true)
                #expect(info.entitlements.verification == .verified)
                #expect(info.entitlements["pro"]?.store == .stripe && info.entitlements["pro"]?.isSandbox == true)

                // The signature stripped on the way: enforced, the answer is refused, never taken.
                harness.proxy.attack = .stripSignature
                await #expect(throws: (any Error).self) { _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent) }
            }
        }
    }
}
