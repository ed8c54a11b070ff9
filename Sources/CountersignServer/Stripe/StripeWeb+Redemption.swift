import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignStorage
import Crypto
import Foundation

/// Redemption links (docs/stripe.md, "Redemption links"), as RevenueCat's web purchase links: a
/// customer who bought on the web without an app user id opens
/// `<scheme>://redeem_web_purchase?redemption_token=…` in the app, and the SDK's
/// `redeemWebPurchase` binds the purchase to the current app user. A link is good for one
/// redemption within 60 minutes.
extension StripeWeb {
    /// How long a link can be redeemed (RevenueCat's: 60 minutes).
    static let redemptionLifetime: TimeInterval = 60 * 60

    /// A new link, as `POST /v1/admin/stripe/redemption_links` answers it.
    struct RedemptionLink: Encodable, Sendable {
        var redemptionLink: String
        var redemptionToken: String
        var expiresAtMs: Int64
        var subscriptionId: String
        var obfuscatedEmail: String?

        enum CodingKeys: String, CodingKey {
            case redemptionLink = "redemption_link", redemptionToken = "redemption_token", expiresAtMs = "expires_at_ms"
            case subscriptionId = "subscription_id", obfuscatedEmail = "obfuscated_email"
        }
    }

    /// The URL scheme of `app`'s links: its `redemptionLinkScheme`, else `cs-` and 10 hex digits
    /// of its id's SHA-256.
    static func redemptionScheme(_ app: AppConfiguration, _ settings: StripeSettings) -> String {
        settings.redemptionLinkScheme ?? "cs-" + String(SHA256.hash(data: Data(app.id.utf8)).hexString.prefix(10))
    }

    /// Makes a link for the subscription `fetchToken` names (`sub_…` or `cs_…`), read from
    /// Stripe's API: the subscription is recorded first (by nobody, unless its metadata names an
    /// app user), so the link works before, or without, any of Stripe's events.
    func makeRedemptionLink(for fetchToken: String, app: AppConfiguration, now: Date) async throws -> RedemptionLink {
        let (settings, client) = try client(for: app)
        let subscription = try await subscription(forToken: fetchToken, app: app)
        let facts = try await facts(of: subscription, app: app, settings: settings, now: now)
        if let owner = facts.appUserId {
            _ = try await recordNeverMoving(facts.transaction, app: app, poster: owner, now: now)
        }
        try await applyState(facts, storingTransaction: true, app: app, now: now)
        // The buyer's email says where a new link would go; a customer Stripe cannot read leaves it out.
        let email = try? await client.customer(subscription.customer.id).email
        let token = SecretToken.make()
        let expires = now + Self.redemptionLifetime
        let obfuscated = email.flatMap(Self.obfuscated(email:))
        try await store.createRedemption(
            app: app.id, tokenHash: SecretToken.hash(token), subscription: subscription.id, obfuscatedEmail: obfuscated, now: now,
            expires: expires)
        return RedemptionLink(
            redemptionLink: "\(Self.redemptionScheme(app, settings))://redeem_web_purchase?redemption_token=\(token)",
            redemptionToken: token, expiresAtMs: expires.epochMilliseconds, subscriptionId: subscription.id, obfuscatedEmail: obfuscated)
    }

    /// Redeems `token` for `user`: the subscription it names is read again from Stripe's API and
    /// recorded for `user` under the app's rules, and the CustomerInfo answered. Refusals carry
    /// RevenueCat's codes, which its SDK turns into its result cases: an unknown or used token
    /// (7849, `.invalidToken`), one used by another app user or a purchase that stays with another
    /// user (7852, `.purchaseBelongsToOtherUser`), one past its hour (7853, `.expired` with the
    /// obfuscated email).
    func redeem(token: String, app: AppConfiguration, user: String, now: Date) async throws -> SubscriberResponse {
        guard token.utf8.count == 43, Data(base64URL: token) != nil else {
            throw APIError(.invalidWebRedemptionToken, "Invalid token: this is not a redemption token of this app.")
        }
        let (settings, client) = try client(for: app)
        let hash = SecretToken.hash(token)
        let subscription: String
        switch try await store.claimRedemption(app: app.id, tokenHash: hash, user: user, now: now) {
        case .claimed(let claimed): subscription = claimed
        case .unknown: throw APIError(.invalidWebRedemptionToken, "Invalid token: no redemption link of this app has it.")
        case .spent(let by) where by == user:
            throw APIError(.invalidWebRedemptionToken, "Invalid token: this link was redeemed already (by this app user); a link works once.")
        case .spent:
            throw APIError(.purchaseBelongsToOtherUser, "Purchase belongs to other user: this link was redeemed by another app user.")
        case .expired(let email):
            var refusal = APIError(.expiredWebRedemptionToken, "Token expired: a redemption link works for 60 minutes; ask for a new one.")
            refusal.purchaseRedemptionErrorInfo = email.map(APIError.RedemptionErrorInfo.init(obfuscatedEmail:))
            throw refusal
        }
        do {
            let facts = try await facts(of: client.subscription(subscription), app: app, settings: settings, now: now)
            guard try await store.record(facts.transaction, app: app, poster: user, now: now) != .boundToAnotherUser else {
                throw APIError(.purchaseBelongsToOtherUser, "Purchase belongs to other user: the subscription's metadata names another app user.")
            }
            try await applyState(facts, app: app, now: now)
            return try await store.customerInfo(app: app, user: user, now: now)
        } catch {
            // Not redeemed: the link stays usable (until it expires) by whoever may redeem it.
            try? await store.releaseRedemption(app: app.id, tokenHash: hash, user: user)
            if case LedgerError.purchaseOwnedByAnotherUser = error {
                throw APIError(
                    .purchaseBelongsToOtherUser,
                    "Purchase belongs to other user: it stays with its owner (the app keeps purchases with their original owner).")
            }
            throw error
        }
    }

    /// `someone@example.com` as `s***@e******.**m`: enough for the buyer to know which address,
    /// too little to read it (RevenueCat's `obfuscated_email`). Nil when `email` has no `@`.
    static func obfuscated(email: String) -> String? {
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        guard email.utf8.count <= 512, parts.count == 2, let first = parts[0].first, !parts[1].isEmpty else { return nil }
        let labels = parts[1].split(separator: ".", omittingEmptySubsequences: false)
        let domain = labels.enumerated().map { index, label -> String in
            guard let head = label.first, let tail = label.last else { return "" }
            if index == labels.count - 1 && labels.count > 1 { return String(repeating: "*", count: label.count - 1) + String(tail) }
            return String(head) + String(repeating: "*", count: label.count - 1)
        }
        return "\(first)***@" + domain.joined(separator: ".")
    }
}
