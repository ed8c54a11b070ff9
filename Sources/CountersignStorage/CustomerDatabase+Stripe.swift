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
    /// subscription now (the current period's transaction, the one a plan change replaced, and
    /// the renewal state), in one transaction; `.duplicate` and nothing changed when the event was applied before.
    public func applyStripeEvent(
        id: String, type: String, created: Date?, transaction: VerifiedTransaction?, replaced: VerifiedTransaction? = nil,
        renewal: RenewalInfoPayload?, app: AppConfiguration, now: Date
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

    /// What is stored of a subscription's period: its newest transaction purchased at or after
    /// `fromMs` (the period's start), for a later read of the subscription to keep its id, or to
    /// see the plan changed within the period.
    public struct StoredPeriod: Sendable, Equatable {
        public var transactionId: String
        public var productId: String
        public var purchaseMs: Int64
        public var priceMilliunits: Int64?
        public var currency: String?
    }

    public func storedPeriod(app: String, environment: String, chain: String, fromMs: Int64) async throws -> StoredPeriod? {
        try await database.withConnection { sql in
            try await sql.first(
                """
                SELECT transaction_id, product_id, purchase_date_ms, price_milliunits, currency FROM purchases \
                WHERE app_id = \(bind: app) AND environment = \(bind: environment) AND original_transaction_id = \(bind: chain) \
                AND purchase_date_ms >= \(bind: fromMs) AND is_upgraded = 0 ORDER BY purchase_date_ms DESC, transaction_id DESC LIMIT 1
                """
            ) {
                StoredPeriod(
                    transactionId: try $0.string("transaction_id"), productId: try $0.string("product_id"),
                    purchaseMs: try $0.int64("purchase_date_ms"), priceMilliunits: try $0.integer("price_milliunits"),
                    currency: try $0.text("currency"))
            }
        }
    }
}
