import CountersignAppStore
import CountersignLedger
import CountersignServerCore
import Foundation

/// Stripe's events, stored as App Store notifications are: by id (`stripe:` and Stripe's event
/// id in `notifications`), so an event delivered twice, or replayed, changes nothing the second
/// time.
extension CustomerDatabase {
    /// Whether the Stripe event `id` was applied before.
    public func stripeEventSeen(_ id: String) async throws -> Bool {
        try await database.withConnection { sql in
            try await sql.first("SELECT 1 AS seen FROM notifications WHERE notification_uuid = \(bind: "stripe:" + id)") { _ in true } ?? false
        }
    }

    /// Stores the Stripe event `id` of `type` and applies what Stripe's API says of its
    /// subscription now (the current period's transaction and the renewal state), in one
    /// transaction; `.duplicate` and nothing changed when the event was applied before.
    public func applyStripeEvent(
        id: String, type: String, created: Date?, transaction: VerifiedTransaction?, renewal: RenewalInfoPayload?, app: AppConfiguration,
        now: Date
    ) async throws -> NotificationOutcome {
        try await database.transactionRetryingUniqueViolations { sql in
            let key = "stripe:" + id
            let seen = try await sql.first("SELECT 1 AS seen FROM notifications WHERE notification_uuid = \(bind: key)") { _ in true }
            guard seen == nil else { return .duplicate }
            try await sql.run(
                """
                INSERT INTO notifications (notification_uuid, app_id, notification_type, subtype, signed_date_ms, received_at_ms) \
                VALUES (\(bind: key), \(bind: app.id), \(bind: type), \(bind: nil as String?), \(bind: (created ?? now).epochMilliseconds), \
                \(bind: now.epochMilliseconds))
                """)
            try await Self.applyStoreState(sql, transaction: transaction, renewal: renewal, app: app, now: now)
            return .applied
        }
    }

    /// The refund stored for a transaction (when, and the share in thousandths of a percent;
    /// nil share: all of it): a later read of a Stripe subscription, which does not name its
    /// refunds, keeps it.
    public func storedRefund(app: String, transactionId: String) async throws -> (date: Date, percentage: Int64?)? {
        try await database.withConnection { sql in
            try await sql.first(
                """
                SELECT revocation_date_ms, revocation_percentage FROM purchases \
                WHERE app_id = \(bind: app) AND transaction_id = \(bind: transactionId) AND revocation_date_ms IS NOT NULL
                """
            ) { row in (Date(epochMilliseconds: try row.int64("revocation_date_ms")), try row.integer("revocation_percentage")) }
        }
    }
}
