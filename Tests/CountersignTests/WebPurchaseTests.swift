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
        try await Self.withStripe(database) { harness, stripe in
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

    /// The SDK harness on `database`, its demo app selling `pro_monthly` through a fresh stand-in
    /// of Stripe's API.
    static func withStripe(_ database: TestDatabaseKind, _ body: @Sendable @escaping (SDKHarness, StripeAPIStandIn) async throws -> Void)
        async throws
    {
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
            ) { harness in try await body(harness, stripe) }
        }
    }

    /// A redemption link made by the web backend with the app's secret key
    /// (`POST /v1/admin/stripe/redemption_links`), as the URL the app is opened with.
    static func redemptionLink(_ harness: SDKHarness, for subscription: String) async throws -> URL {
        var request = URLRequest(url: harness.serverURL.appendingPathComponent("v1/admin/stripe/redemption_links"))
        request.httpMethod = "POST"
        request.httpBody = Data(#"{"fetch_token":"\#(subscription)"}"#.utf8)
        request.setValue("Bearer \(harness.app.secretApiKeys[0])", forHTTPHeaderField: "Authorization")
        let (data, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 201)
        let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        let link = try #require(object?["redemption_link"] as? String)
        return try #require(URL(string: link))
    }

    @Test(
        "a redemption link works once, for the first app user; used again, by another user or after its hour it fails in RevenueCat's result cases",
        arguments: TestDatabaseKind.available)
    func redemptionLink(_ database: TestDatabaseKind) async throws {
        try await Self.withStripe(database) { harness, stripe in
            let now = harness.serverClock.now
            // Bought on the web without an app user id: no metadata names anyone.
            for id in ["sub_anon", "sub_late", "sub_strip"] {
                await stripe.set(
                    "/v1/subscriptions/\(id)", StripeAPIStandIn.subscription(id, user: nil, start: now - 86_400, end: now + 29 * 86_400))
                await stripe.set("/v1/customers/cus_\(id)", StripeAPIStandIn.customer("cus_\(id)", email: "buyer@example.com"))
            }
            let link = try await Self.redemptionLink(harness, for: "sub_anon")
            #expect(link.scheme?.hasPrefix("cs-") == true && link.host == "redeem_web_purchase")
            let redemption = try #require(link.asWebPurchaseRedemption)

            let alice = try harness.purchases(mode: .enforced, user: "alice", storage: "alice")
            #expect(try await alice.customerInfo(fetchPolicy: .fetchCurrent).entitlements["pro"]?.isActive != true)
            guard case .success(let info) = await alice.redeemWebPurchase(redemption) else {
                Issue.record("the first redemption did not succeed")
                return
            }
            #expect(info.entitlements["pro"]?.isActive == true && info.entitlements["pro"]?.store == .stripe)
            #expect(info.entitlements.verification == .verified)
            let read = try await alice.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(read.entitlements["pro"]?.isActive == true && read.entitlements.verification == .verified)

            // Once: the same link again, by the same user, is spent.
            guard case .invalidToken = await alice.redeemWebPurchase(redemption) else {
                Issue.record("a spent link redeemed again by its user was not .invalidToken")
                return
            }
            // By another user: theirs it is not, and they get nothing.
            let bob = try harness.purchases(mode: .enforced, user: "bob", storage: "bob")
            guard case .purchaseBelongsToOtherUser = await bob.redeemWebPurchase(redemption) else {
                Issue.record("a link redeemed by another user was not .purchaseBelongsToOtherUser")
                return
            }
            #expect(try await bob.customerInfo(fetchPolicy: .fetchCurrent).entitlements["pro"]?.isActive != true)
            #expect(try await alice.customerInfo(fetchPolicy: .fetchCurrent).entitlements["pro"]?.isActive == true)

            // A token the server never made, and one cut short.
            let forgedURL = URL(string: "cs-0000000000://redeem_web_purchase?redemption_token=\(String(repeating: "A", count: 43))")
            let forged = try #require(forgedURL?.asWebPurchaseRedemption)
            guard case .invalidToken = await bob.redeemWebPurchase(forged) else {
                Issue.record("a forged token was not .invalidToken")
                return
            }
            // RevenueCat's completion form: no CustomerInfo, the error's code names the case.
            let completed = await withCheckedContinuation { continuation in
                bob.redeemWebPurchase(webPurchaseRedemption: forged) { info, error in
                    continuation.resume(returning: (info == nil, (error as? PurchasesError)?.errorCode))
                }
            }
            #expect(completed.0 && completed.1 == .invalidWebPurchaseToken)
            #expect(URL(string: "cs-0://redeem_web_purchase?redemption_token=")?.asWebPurchaseRedemption == nil)
            #expect(URL(string: "cs-0://elsewhere?redemption_token=abc")?.asWebPurchaseRedemption == nil)

            // Past its hour (both clocks on, so the answers still verify): expired, naming where a new link goes.
            let lateLink = try await Self.redemptionLink(harness, for: "sub_late")
            let late = try #require(lateLink.asWebPurchaseRedemption)
            harness.serverClock.now = now + 61 * 60
            harness.clock.now = harness.clock.now + 61 * 60
            guard case .expired(let email) = await bob.redeemWebPurchase(late) else {
                Issue.record("an hour-old link was not .expired")
                return
            }
            #expect(email == "b***@e******.**m")
            #expect(try await bob.customerInfo(fetchPolicy: .fetchCurrent).entitlements["pro"]?.isActive != true)

            // The success answer stripped of its signature: enforced, an error, nothing taken.
            let strippedLink = try await Self.redemptionLink(harness, for: "sub_strip")
            let stripped = try #require(strippedLink.asWebPurchaseRedemption)
            let carol = try harness.purchases(mode: .enforced, user: "carol", storage: "carol")
            harness.proxy.attack = .stripSignature
            guard case .error(let error) = await carol.redeemWebPurchase(stripped) else {
                Issue.record("a stripped answer to a redemption was taken")
                return
            }
            #expect(error.errorCode == .signatureVerificationFailed)
            #expect(carol.cachedCustomerInfo?.entitlements["pro"]?.isActive != true)
        }
    }
}
