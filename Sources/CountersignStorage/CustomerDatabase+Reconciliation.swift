import CountersignAppStore
import CountersignCore
import CountersignLedger
import Foundation

/// What reconciliation asks the App Store about: the chains whose state may be out of date.
extension CustomerDatabase {
    /// The user's auto-renewable chains with their environment (what a refresh asks about).
    public func subscriptionChains(app: String, user: String) async throws -> [(chain: String, environment: String)] {
        try await database.withConnection { sql in
            let user = try await Self.customerId(sql, app: app, user: user)
            return try await sql.all(
                """
                SELECT DISTINCT p.original_transaction_id, p.environment FROM purchase_owners o \
                JOIN purchases p ON p.app_id = o.app_id AND p.original_transaction_id = o.original_transaction_id \
                WHERE o.app_id = \(bind: app) AND o.app_user_id = \(bind: user) AND p.product_type = 'autoRenewable'
                """
            ) { (try $0.string("original_transaction_id"), try $0.string("environment")) }
        }
    }

    /// Owned subscriptions whose state is in doubt, not asked about since `recheckAfter`: past
    /// their expiry within the last week with nothing newer (a renewal may have gone unnoticed),
    /// in billing retry, or in a grace period. At most `limit`; each is noted as asked.
    public func chainsInDoubt(app: String, now: Date, recheckAfter: TimeInterval, limit: Int) async throws -> [(chain: String, environment: String)] {
        let time = now.epochMilliseconds
        let weekAgo = time - 7 * 86_400_000
        let checkedBefore = time - Int64(recheckAfter * 1000)
        return try await database.transaction { sql in
            let chains = try await sql.all(
                """
                SELECT p.original_transaction_id, p.environment FROM purchases p \
                JOIN purchase_owners o ON o.app_id = p.app_id AND o.original_transaction_id = p.original_transaction_id \
                LEFT JOIN chain_checks c ON c.app_id = p.app_id AND c.original_transaction_id = p.original_transaction_id \
                WHERE p.expires_date_ms > \(bind: weekAgo) AND p.expires_date_ms <= \(bind: time) AND p.app_id = \(bind: app) \
                AND p.product_type = 'autoRenewable' AND p.revocation_date_ms IS NULL AND o.app_user_id IS NOT NULL \
                AND (c.checked_at_ms IS NULL OR c.checked_at_ms < \(bind: checkedBefore)) \
                AND NOT EXISTS (SELECT 1 FROM purchases q WHERE q.app_id = p.app_id \
                AND q.original_transaction_id = p.original_transaction_id AND q.expires_date_ms > p.expires_date_ms) \
                UNION \
                SELECT s.original_transaction_id, p.environment FROM subscription_states s \
                JOIN purchase_owners o ON o.app_id = s.app_id AND o.original_transaction_id = s.original_transaction_id \
                JOIN purchases p ON p.app_id = s.app_id AND p.transaction_id = s.original_transaction_id \
                LEFT JOIN chain_checks c ON c.app_id = s.app_id AND c.original_transaction_id = s.original_transaction_id \
                WHERE s.app_id = \(bind: app) AND (s.in_billing_retry = 1 OR s.grace_period_expires_ms > \(bind: time)) \
                AND o.app_user_id IS NOT NULL AND (c.checked_at_ms IS NULL OR c.checked_at_ms < \(bind: checkedBefore)) \
                LIMIT \(bind: limit)
                """
            ) { (chain: try $0.string("original_transaction_id"), environment: try $0.string("environment")) }
            for (chain, _) in chains {
                try await sql.run(
                    """
                    INSERT INTO chain_checks (app_id, original_transaction_id, checked_at_ms) VALUES (\(bind: app), \(bind: chain), \(bind: time)) \
                    ON CONFLICT (app_id, original_transaction_id) DO UPDATE SET checked_at_ms = \(bind: time)
                    """)
            }
            return chains
        }
    }
}
