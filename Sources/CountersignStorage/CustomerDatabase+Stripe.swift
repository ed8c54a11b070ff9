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
    /// subscription now (the current period's transaction, the one a plan change replaced, an
    /// earlier period's refunded, and the renewal state), in one transaction; `.duplicate` and nothing changed when the event was applied before.
    public func applyStripeEvent(
        id: String, type: String, created: Date?, transaction: VerifiedTransaction?, replaced: VerifiedTransaction? = nil,
        refunded: VerifiedTransaction? = nil, renewal: RenewalInfoPayload?, app: AppConfiguration, now: Date
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
            if let replaced, let transaction {
                try await Self.applyReplaced(sql, replaced, newProductId: transaction.productId, app: app, now: now)
            }
            if let refunded { try await Self.upsertTransaction(sql, refunded, app: app, now: now) }
            return .applied
        }
    }

    /// Stores the transaction a plan change within the period replaced (marked upgraded, ended
    /// at the change), with RevenueCat's `PRODUCT_CHANGE` for its owner. After the new plan's
    /// transaction, so the old one's end reads as replaced, not refunded.
    public func applyReplaced(_ replaced: VerifiedTransaction, newProductId: String, app: AppConfiguration, now: Date) async throws {
        try await database.transactionRetryingUniqueViolations { sql in
            try await Self.applyReplaced(sql, replaced, newProductId: newProductId, app: app, now: now)
        }
    }

    static func applyReplaced(_ sql: any SQLExecutor, _ replaced: VerifiedTransaction, newProductId: String, app: AppConfiguration, now: Date)
        async throws
    {
        try await upsertTransaction(sql, replaced, app: app, now: now)
        guard let (subject, owner) = try await eventSubject(sql, transaction: replaced, chain: replaced.originalTransactionId, app: app) else {
            return
        }
        try await emit(
            [EventRules.immediateProductChange(replaced: subject, newProductId: newProductId, app: app, owner: owner, now: now)], on: sql, app: app,
            now: now)
    }

    /// What is stored of a subscription's period: its newest transaction purchased at or after
    /// `fromMs` (the period's start), for a later read of the subscription to keep its id, or to
    /// see the plan changed within the period.
    public struct StoredPeriod: Sendable {
        public var transactionId: String
        public var productId: String
        public var purchaseMs: Int64
        public var expiresMs: Int64?
        public var priceMilliunits: Int64?
        public var currency: String?
        /// Its refund (when, and the share in thousandths of a percent; nil share: all of it): a
        /// later read of the subscription, which names no refunds, keeps it.
        public var refund: (date: Date, percentage: Int64?)?
        /// The chain's owner, if it has one.
        public var owner: String?
    }

    /// The newest stored transaction (not one a plan change replaced) of `chain` purchased from
    /// `fromMs` (and before `beforeMs`, when given).
    public func storedPeriod(app: String, environment: String, chain: String, fromMs: Int64, beforeMs: Int64 = .max) async throws
        -> StoredPeriod?
    {
        try await database.withConnection { sql in
            try await sql.first(
                """
                SELECT p.transaction_id, p.product_id, p.purchase_date_ms, p.expires_date_ms, p.price_milliunits, p.currency, \
                p.revocation_date_ms, p.revocation_percentage, o.app_user_id AS owner FROM purchases p \
                LEFT JOIN purchase_owners o ON o.app_id = p.app_id AND o.original_transaction_id = p.original_transaction_id \
                WHERE p.app_id = \(bind: app) AND p.environment = \(bind: environment) AND p.original_transaction_id = \(bind: chain) \
                AND p.purchase_date_ms >= \(bind: fromMs) AND p.purchase_date_ms < \(bind: beforeMs) AND p.is_upgraded = 0 \
                ORDER BY p.purchase_date_ms DESC, p.transaction_id DESC LIMIT 1
                """
            ) { row in
                let revoked = try row.integer("revocation_date_ms")
                let percentage = try row.integer("revocation_percentage")
                return StoredPeriod(
                    transactionId: try row.string("transaction_id"), productId: try row.string("product_id"),
                    purchaseMs: try row.int64("purchase_date_ms"), expiresMs: try row.integer("expires_date_ms"),
                    priceMilliunits: try row.integer("price_milliunits"), currency: try row.text("currency"),
                    refund: revoked.map { (Date(epochMilliseconds: $0), percentage) }, owner: try row.text("owner"))
            }
        }
    }
}
