import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import HTTPTypes
import HummingbirdTesting
import Testing

@testable import CountersignServer

/// Redemption links over HTTP, from the attacker's side: who may make one, what each refusal
/// answers (RevenueCat's codes and error body, which its SDK reads into its result cases), and
/// that a refused redemption changes nothing. Both databases.
@Suite("Stripe: redemption links")
struct StripeRedemptionTests {
    static let day: TimeInterval = 86_400

    static func withStripe(
        _ kind: TestDatabaseKind, transferBehavior: AppConfiguration.TransferBehavior = .transfer, clock: ManualClock,
        _ body: @Sendable @escaping (ReceiptTests.Harness, StripeAPIStandIn) async throws -> Void
    ) async throws {
        try await ReceiptTests.withStripe(kind, secret: "whsec_redeem", transferBehavior: transferBehavior, clock: clock, body)
    }

    /// `POST /v1/admin/stripe/redemption_links` with `key`.
    static func makeLink(_ harness: ReceiptTests.Harness, _ fetchToken: String, key: String? = nil) async throws -> Reply {
        try await harness.send(
            .post, "/v1/admin/stripe/redemption_links", key: key ?? harness.secretKey, body: Data(#"{"fetch_token":"\#(fetchToken)"}"#.utf8),
            headers: [.contentType: "application/json"])
    }

    /// `POST /v1/subscribers/redeem_purchase` for `user`, signed as the SDK sends it.
    static func redeem(_ harness: ReceiptTests.Harness, _ token: String, as user: String) async throws -> Reply {
        try await harness.signed(
            .post, "/v1/subscribers/redeem_purchase", json: ["app_user_id": user, "redemption_token": token],
            paramKeys: ["app_user_id", "redemption_token"]
        ).reply
    }

    static func hasPro(_ harness: ReceiptTests.Harness, _ user: String) async throws -> Bool {
        let reply = try await harness.send(.get, "/v1/subscribers/\(user)", key: harness.key)
        let entitlements = (reply.json["subscriber"] as? [String: Any])?["entitlements"] as? [String: Any]
        return entitlements?["pro"] != nil
    }

    @Test("only the app's secret key makes a link, and only of a subscription of its account and mapped price", arguments: TestDatabaseKind.available)
    func making(_ kind: TestDatabaseKind) async throws {
        let clock = ManualClock(Date())
        try await Self.withStripe(kind, clock: clock) { harness, api in
            let now = clock.now
            await api.set(
                "/v1/subscriptions/sub_a", StripeAPIStandIn.subscription("sub_a", user: nil, start: now - Self.day, end: now + 29 * Self.day))
            await api.set("/v1/customers/cus_sub_a", StripeAPIStandIn.customer("cus_sub_a", email: "someone@example.com"))
            // The app's public key (every copy of the app holds it) makes none.
            #expect(try await Self.makeLink(harness, "sub_a", key: harness.key).status == 403)
            // Another account's subscription reads as missing with this account's key.
            let foreign = try await Self.makeLink(harness, "sub_elsewhere")
            #expect(foreign.status == 422 && foreign.json["code"] as? Int == APIErrorCode.stripeObjectNotFound.rawValue)
            #expect(try await Self.makeLink(harness, "../customers/cus_sub_a").json["code"] as? Int == APIErrorCode.invalidField.rawValue)
            var unmapped = StripeAPIStandIn.subscription("sub_other", user: nil, start: now - Self.day, end: now + 29 * Self.day)
            unmapped = unmapped.replacingOccurrences(of: "price_monthly", with: "price_unknown")
            await api.set("/v1/subscriptions/sub_other", unmapped)
            #expect(try await Self.makeLink(harness, "sub_other").json["code"] as? Int == APIErrorCode.stripeProductNotMapped.rawValue)

            let made = try await Self.makeLink(harness, "sub_a")
            #expect(made.status == 201)
            let token = try #require(made.json["redemption_token"] as? String)
            let scheme = StripeWeb.redemptionScheme(harness.app, try #require(harness.app.stripe))
            #expect(made.json["redemption_link"] as? String == "\(scheme)://redeem_web_purchase?redemption_token=\(token)")
            #expect(made.json["expires_at_ms"] as? Int64 == (now + 3600).epochMilliseconds)
            #expect(made.json["obfuscated_email"] as? String == "s***@e******.**m")
            #expect(made.json["subscription_id"] as? String == "sub_a")
            // Two links of one subscription are two tokens.
            #expect(try await Self.makeLink(harness, "sub_a").json["redemption_token"] as? String != token)
        }
    }

    @Test(
        "each refusal answers 403 with RevenueCat's code and body, and changes nothing: unknown, spent, expired, bound by metadata",
        arguments: TestDatabaseKind.available)
    func refusals(_ kind: TestDatabaseKind) async throws {
        let clock = ManualClock(Date())
        try await Self.withStripe(kind, clock: clock) { harness, api in
            let now = clock.now
            await api.set(
                "/v1/subscriptions/sub_r", StripeAPIStandIn.subscription("sub_r", user: nil, start: now - Self.day, end: now + 29 * Self.day))
            await api.set("/v1/customers/cus_sub_r", StripeAPIStandIn.customer("cus_sub_r", email: "buyer@example.com"))
            // Bought on the web by dana, named in the metadata.
            await api.set(
                "/v1/subscriptions/sub_d", StripeAPIStandIn.subscription("sub_d", user: "dana", start: now - Self.day, end: now + 29 * Self.day))

            for token in ["", "short", String(repeating: "A", count: 43), String(repeating: "é", count: 43)] {
                let reply = try await Self.redeem(harness, token, as: "eve")
                #expect(reply.status == 403 && reply.json["code"] as? Int == 7849, "\(token)")
            }
            let first = try #require(try await Self.makeLink(harness, "sub_r").json["redemption_token"] as? String)
            #expect(try await Self.redeem(harness, first, as: "ann").status == 200)
            let again = try await Self.redeem(harness, first, as: "ann")
            #expect(again.status == 403 && again.json["code"] as? Int == 7849)
            let other = try await Self.redeem(harness, first, as: "eve")
            #expect(other.status == 403 && other.json["code"] as? Int == 7852)

            let late = try #require(try await Self.makeLink(harness, "sub_r").json["redemption_token"] as? String)
            clock.now = now + 3600
            let expired = try await Self.redeem(harness, late, as: "eve")
            #expect(expired.status == 403 && expired.json["code"] as? Int == 7853)
            #expect((expired.json["purchase_redemption_error_info"] as? [String: Any])?["obfuscated_email"] as? String == "b***@e******.**m")
            #expect(try await !Self.hasPro(harness, "eve"))
            #expect(try await Self.hasPro(harness, "ann"))

            // The metadata names dana: eve's redemption is refused, and the link stays usable by dana.
            let bound = try #require(try await Self.makeLink(harness, "sub_d").json["redemption_token"] as? String)
            let refused = try await Self.redeem(harness, bound, as: "eve")
            #expect(refused.status == 403 && refused.json["code"] as? Int == 7852)
            #expect(try await !Self.hasPro(harness, "eve"))
            #expect(try await Self.redeem(harness, bound, as: "dana").status == 200)
        }
    }

    @Test(
        "a new link for a purchase someone holds follows the app's transfer behaviour, as RevenueCat's restore behaviour",
        arguments: TestDatabaseKind.available)
    func ownedByAnother(_ kind: TestDatabaseKind) async throws {
        for behavior in [AppConfiguration.TransferBehavior.transfer, .keepWithOriginal] {
            let clock = ManualClock(Date())
            try await Self.withStripe(kind, transferBehavior: behavior, clock: clock) { harness, api in
                let now = clock.now
                await api.set(
                    "/v1/subscriptions/sub_t", StripeAPIStandIn.subscription("sub_t", user: nil, start: now - Self.day, end: now + 29 * Self.day))
                let first = try #require(try await Self.makeLink(harness, "sub_t").json["redemption_token"] as? String)
                #expect(try await Self.redeem(harness, first, as: "ann").status == 200)
                let second = try #require(try await Self.makeLink(harness, "sub_t").json["redemption_token"] as? String)
                let moved = try await Self.redeem(harness, second, as: "bob")
                let (bob, ann) = (try await Self.hasPro(harness, "bob"), try await Self.hasPro(harness, "ann"))
                if behavior == .transfer {
                    #expect(moved.status == 200)
                    #expect(bob && !ann)
                } else {
                    #expect(moved.status == 403 && moved.json["code"] as? Int == 7852)
                    #expect(!bob && ann)
                    // Refused, the link was given back: ann, the owner, may still use it.
                    #expect(try await Self.redeem(harness, second, as: "ann").status == 200)
                }
            }
        }
    }
}
