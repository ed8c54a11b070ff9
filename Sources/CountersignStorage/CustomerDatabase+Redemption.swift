import Foundation

/// Redemption links of web purchases (docs/stripe.md, "Redemption links"): one row per link,
/// by the SHA-256 of its token, naming the subscription it redeems and until when. A link is
/// taken once: the first app user to redeem it in time holds it.
extension CustomerDatabase {
    /// What a redemption token is, as the redeemer asks.
    public enum RedemptionClaim: Sendable, Equatable {
        /// Taken now by the redeemer: the subscription it redeems.
        case claimed(subscription: String)
        /// No link of the app has this token.
        case unknown
        /// Past its expiry, never used: the buyer's email, obfuscated, when known.
        case expired(obfuscatedEmail: String?)
        /// Used before, by `redeemedBy`.
        case spent(redeemedBy: String)
    }

    /// Stores a new link: `tokenHash` (hex SHA-256 of the token) for `subscription`, valid until `expires`.
    public func createRedemption(
        app: String, tokenHash: String, subscription: String, obfuscatedEmail: String?, now: Date, expires: Date
    ) async throws {
        try await database.withConnection { sql in
            try await sql.run(
                """
                INSERT INTO web_redemptions (token_hash, app_id, subscription, obfuscated_email, created_ms, expires_ms) \
                VALUES (\(bind: tokenHash), \(bind: app), \(bind: subscription), \(bind: obfuscatedEmail), \
                \(bind: now.epochMilliseconds), \(bind: expires.epochMilliseconds))
                """)
        }
    }

    /// Takes the link `tokenHash` for `user` when it is unused and unexpired at `now`; otherwise
    /// says why not. Two redeemers at once: one takes it, the other reads it spent.
    public func claimRedemption(app: String, tokenHash: String, user: String, now: Date) async throws -> RedemptionClaim {
        try await database.transaction { sql in
            let taken = try await sql.first(
                """
                UPDATE web_redemptions SET redeemed_by = \(bind: user), redeemed_ms = \(bind: now.epochMilliseconds) \
                WHERE token_hash = \(bind: tokenHash) AND app_id = \(bind: app) AND redeemed_by IS NULL \
                AND expires_ms > \(bind: now.epochMilliseconds) RETURNING subscription
                """
            ) { try $0.string("subscription") }
            if let taken { return .claimed(subscription: taken) }
            let row = try await sql.first(
                """
                SELECT redeemed_by, obfuscated_email FROM web_redemptions \
                WHERE token_hash = \(bind: tokenHash) AND app_id = \(bind: app)
                """
            ) { (by: try $0.text("redeemed_by"), email: try $0.text("obfuscated_email")) }
            guard let row else { return .unknown }
            if let by = row.by { return .spent(redeemedBy: by) }
            return .expired(obfuscatedEmail: row.email)
        }
    }

    /// Gives back a link `user` took but could not redeem (the purchase stays with another
    /// user): it stays usable until it expires.
    public func releaseRedemption(app: String, tokenHash: String, user: String) async throws {
        try await database.withConnection { sql in
            try await sql.run(
                """
                UPDATE web_redemptions SET redeemed_by = NULL, redeemed_ms = NULL \
                WHERE token_hash = \(bind: tokenHash) AND app_id = \(bind: app) AND redeemed_by = \(bind: user)
                """)
        }
    }
}
