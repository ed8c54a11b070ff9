import CountersignAppStore
import CountersignCore
import CountersignServerCore
import Foundation
import Testing

@testable import CountersignServer

/// Stripe's webhook signature from the attacker's side (one test per signed part, each tampered
/// with alone), and a subscription's facts as Stripe's API reference describes the object. The
/// flow against a real stand-in (localstripe) is `scripts/stripe-check.py`, run by `.ci/run`.
@Suite("Stripe: signatures and subscriptions")
struct StripeTests {
    static let secret = "whsec_test_secret"
    static let now = Date(timeIntervalSince1970: 1_796_000_000)
    static let payload = Array(
        #"{"id":"evt_1","type":"customer.subscription.updated","data":{"object":{"id":"sub_1","object":"subscription"}}}"#.utf8)

    static func verify(_ header: String?, payload: [UInt8] = payload, secrets: [String] = [secret], now: Date = now) -> StripeSignature.Refusal? {
        do {
            try StripeSignature.verify(header: header, payload: payload, secrets: secrets, now: now)
            return nil
        } catch {
            return error
        }
    }

    @Test("a signature Stripe made over the exact body, within five minutes, under any of the endpoint's secrets, is taken")
    func validSignature() {
        let header = StripeSignature.header(payload: Self.payload, secret: Self.secret, timestamp: 1_796_000_000)
        #expect(Self.verify(header) == nil)
        // Rotation: the old secret listed first, the event signed with the new one.
        #expect(Self.verify(header, secrets: ["whsec_old", Self.secret]) == nil)
        // Several v1 (Stripe sends one per active secret during a roll), and a v0 beside them.
        let other = StripeSignature.header(payload: Self.payload, secret: "whsec_other", timestamp: 1_796_000_000)
        let mac = header.split(separator: "v1=")[1]
        #expect(Self.verify(other + ",v1=\(mac),v0=00") == nil)
        #expect(Self.verify(header, now: Self.now.addingTimeInterval(299)) == nil)
    }

    @Test("each signed part tampered with alone is refused: the body, the timestamp, the signature, the secret")
    func tamperedParts() {
        let header = StripeSignature.header(payload: Self.payload, secret: Self.secret, timestamp: 1_796_000_000)
        var body = Self.payload
        body[body.count - 3] = UInt8(ascii: "x")
        #expect(Self.verify(header, payload: body) == .noMatch, "the body")
        #expect(Self.verify(header.replacingOccurrences(of: "t=1796000000", with: "t=1796000001")) == .noMatch, "the timestamp")
        var flipped = Array(header.utf8)
        flipped[flipped.count - 1] = flipped[flipped.count - 1] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
        #expect(Self.verify(String(decoding: flipped, as: UTF8.self)) == .noMatch, "the signature")
        #expect(
            Self.verify(StripeSignature.header(payload: Self.payload, secret: "whsec_forged", timestamp: 1_796_000_000)) == .noMatch, "the secret")
    }

    @Test("a replay outside five minutes either way, a missing or malformed header, a v0 alone: refused, and no value traps")
    func refusedHeaders() {
        #expect(Self.verify(StripeSignature.header(payload: Self.payload, secret: Self.secret, timestamp: 1_796_000_000 - 301)) == .outsideTolerance)
        #expect(Self.verify(StripeSignature.header(payload: Self.payload, secret: Self.secret, timestamp: 1_796_000_000 + 301)) == .outsideTolerance)
        #expect(Self.verify(StripeSignature.header(payload: Self.payload, secret: Self.secret, timestamp: .max)) == .outsideTolerance)
        #expect(Self.verify(StripeSignature.header(payload: Self.payload, secret: Self.secret, timestamp: .min)) == .outsideTolerance)
        #expect(Self.verify(nil) == .missing)
        #expect(Self.verify("") == .missing)
        #expect(Self.verify("v1=abcd") == .malformed)
        #expect(Self.verify("t=1796000000") == .malformed)
        #expect(Self.verify("t=1796000000,t=1796000000,v1=" + String(repeating: "0", count: 64)) == .malformed)
        #expect(Self.verify("t=99999999999999999999999,v1=" + String(repeating: "0", count: 64)) == .malformed)
        #expect(Self.verify("t=1796000000,v0=" + String(repeating: "0", count: 64)) == .malformed)
        #expect(Self.verify("t=1796000000,v1=zz") == .malformed)
    }

    // MARK: Subscriptions as facts

    static func app() -> (AppConfiguration, StripeSettings) {
        var app = AppConfiguration.makeDemo()
        let settings = StripeSettings(
            secretKey: "sk_test_1", webhookSecrets: [secret], products: ["price_monthly": "pro_monthly", "prod_pro": "pro_monthly"])
        app.stripe = settings
        return (app, settings)
    }

    /// A subscription as Stripe's API reference shows one (API version 2024-06-20: the period on
    /// the subscription).
    static func subscription(
        status: String = "active", cancelAtPeriodEnd: Bool = false, _ fields: String = "",
        price: String = #"{"id":"price_monthly","product":"prod_pro","unit_amount":999,"currency":"usd"}"#
    ) throws -> Stripe.Subscription {
        let json = """
            {"id":"sub_1","object":"subscription","customer":"cus_1","status":"\(status)","cancel_at_period_end":\(cancelAtPeriodEnd),
             "current_period_start":1796000000,"current_period_end":1798592000,"start_date":1790000000,"livemode":false,
             "metadata":{"app_user_id":"web-1"},"items":{"object":"list","data":[{"id":"si_1","price":\(price)}]}\(fields)}
            """
        return try Stripe.decoder().decode(Stripe.Subscription.self, from: Data(json.utf8))
    }

    @Test("an active subscription: the period's transaction, its price in milliunits, its owner bound by metadata, auto-renew on")
    func activeSubscription() throws {
        let (app, settings) = Self.app()
        let facts = try Self.subscription().facts(app: app, settings: settings, now: Self.now)
        let payload = facts.transaction.payload
        #expect(facts.transaction.originalTransactionId == "sub_1" && facts.transaction.productId == "pro_monthly")
        #expect(
            payload.purchaseDate == Date(timeIntervalSince1970: 1_796_000_000) && payload.expiresDate == Date(timeIntervalSince1970: 1_798_592_000))
        #expect(payload.price == 9_990 && payload.currency == "USD" && payload.environment == .stripeTest)
        #expect(payload.appAccountToken == AppAccountToken.forAppUserID("web-1").uuidString.lowercased())
        #expect(facts.appUserId == "web-1" && facts.renewal.autoRenewStatus == 1 && facts.renewal.isInBillingRetryPeriod == false)
    }

    @Test("Stripe's amounts by currency: cents, zero-decimal (JPY) and three-decimal (KWD) currencies; none past the ledger's range")
    func amounts() {
        #expect(Stripe.Subscription.milliunits(999, currency: "usd") == 9_990)
        #expect(Stripe.Subscription.milliunits(1_000, currency: "jpy") == 1_000_000)
        #expect(Stripe.Subscription.milliunits(1_234, currency: "KWD") == 1_234)
        #expect(Stripe.Subscription.milliunits(.max, currency: "jpy") == nil)
        #expect(Stripe.Subscription.milliunits(-1, currency: "usd") == nil)
        #expect(Stripe.Subscription.milliunits(100, currency: nil) == nil)
    }

    @Test("trialing, cancelled at period end, past due, cancelled at once: a trial, auto-renew off, billing retry with grace, access ended")
    func states() throws {
        let (app, settings) = Self.app()
        let trial = try Self.subscription(#","trial_end":1798592000"#).facts(app: app, settings: settings, now: Self.now)
        #expect(trial.transaction.payload.periodType == "normal")
        let trialing = try Stripe.decoder().decode(
            Stripe.Subscription.self,
            from: Data(
                #"{"id":"sub_1","customer":"cus_1","status":"trialing","current_period_start":1796000000,"current_period_end":1796604800,"items":{"data":[{"price":{"id":"price_monthly","unit_amount":999,"currency":"usd"}}]}}"#
                    .utf8))
        let trialFacts = try trialing.facts(app: app, settings: settings, now: Self.now)
        #expect(trialFacts.transaction.payload.periodType == "trial" && trialFacts.transaction.payload.price == 0)
        let ending = try Self.subscription(cancelAtPeriodEnd: true).facts(app: app, settings: settings, now: Self.now)
        #expect(ending.renewal.autoRenewStatus == 0 && ending.transaction.payload.expiresDate == Date(timeIntervalSince1970: 1_798_592_000))
        let ended = try Self.subscription(status: "canceled", #","ended_at":1797000000"#).facts(app: app, settings: settings, now: Self.now)
        #expect(ended.transaction.payload.expiresDate == Date(timeIntervalSince1970: 1_797_000_000) && ended.renewal.autoRenewStatus == 0)
        let pastDue = try Self.subscription(status: "past_due").facts(app: app, settings: settings, now: Self.now)
        #expect(pastDue.renewal.isInBillingRetryPeriod == true)
        #expect(pastDue.renewal.gracePeriodExpiresDate == Date(timeIntervalSince1970: 1_798_592_000 + 7 * 86_400))
    }

    @Test("a price the app does not map is refused 4223; the product id maps when the price does not; the period may sit on the item")
    func mapping() throws {
        let (app, settings) = Self.app()
        let merch = try Self.subscription(price: #"{"id":"price_merch","product":"prod_merch","unit_amount":500,"currency":"usd"}"#)
        #expect {
            try merch.facts(app: app, settings: settings, now: Self.now)
        } throws: { error in
            (error as? APIError)?.code == APIErrorCode.stripeProductNotMapped.rawValue
        }
        let byProduct = try Self.subscription(price: #"{"id":"price_new","product":"prod_pro","unit_amount":1299,"currency":"eur"}"#)
            .facts(app: app, settings: settings, now: Self.now)
        #expect(byProduct.transaction.productId == "pro_monthly" && byProduct.transaction.payload.price == 12_990)
        let newer = try Stripe.decoder().decode(
            Stripe.Subscription.self,
            from: Data(
                #"{"id":"sub_2","customer":{"id":"cus_1","object":"customer"},"status":"active","items":{"data":[{"current_period_start":1796000000,"current_period_end":1798592000,"price":{"id":"price_monthly","product":{"id":"prod_pro"},"unit_amount":999,"currency":"usd"}}]}}"#
                    .utf8))
        #expect(
            try newer.facts(app: app, settings: settings, now: Self.now).transaction.payload.expiresDate == Date(timeIntervalSince1970: 1_798_592_000)
        )
    }

    @Test("the settings are checked at start: a key, secrets, a URL, mapped auto-renewable products")
    func settingsValidation() throws {
        let (app, settings) = Self.app()
        try settings.validate(app: app, environment: [:])
        var bad = settings
        bad.webhookSecrets = []
        #expect(throws: ConfigurationError.self) { try bad.validate(app: app, environment: [:]) }
        bad = settings
        bad.products = ["price_x": "lifetime"]
        #expect(throws: ConfigurationError.self) { try bad.validate(app: app, environment: [:]) }
        bad = settings
        bad.secretKey = nil
        bad.secretKeyEnvironmentVariable = "STRIPE_KEY"
        #expect(throws: ConfigurationError.self) { try bad.validate(app: app, environment: [:]) }
        try bad.validate(app: app, environment: ["STRIPE_KEY": "sk_test_from_env"])
        bad = settings
        bad.apiBaseURL = "ftp://example.com"
        #expect(throws: ConfigurationError.self) { try bad.validate(app: app, environment: [:]) }
        for scheme in ["https", "9app", "my app", "", String(repeating: "a", count: 65), "a/b"] {
            bad = settings
            bad.redemptionLinkScheme = scheme
            #expect(throws: ConfigurationError.self, "\(scheme)") { try bad.validate(app: app, environment: [:]) }
        }
        bad = settings
        bad.redemptionLinkScheme = "rc-d458f1e3a2"
        try bad.validate(app: app, environment: [:])
        #expect(StripeWeb.redemptionScheme(app, bad) == "rc-d458f1e3a2")
        #expect(StripeWeb.redemptionScheme(app, settings).utf8.count == 13 && StripeWeb.redemptionScheme(app, settings).hasPrefix("cs-"))
    }

    @Test("an email obfuscated as RevenueCat shows one: the first letter of each part and the last of the top-level domain")
    func obfuscatedEmail() {
        #expect(StripeWeb.obfuscated(email: "test@revenuecat.com") == "t***@r*********.**m")
        #expect(StripeWeb.obfuscated(email: "a@b.co.uk") == "a***@b.c*.*k")
        #expect(StripeWeb.obfuscated(email: "x@localhost") == "x***@l********")
        for bad in ["", "@example.com", "nobody", "a@", "a@b@c", String(repeating: "a", count: 600) + "@example.com"] {
            #expect(StripeWeb.obfuscated(email: bad) == nil, "\(bad)")
        }
    }
}
