import CountersignAppStore
import CountersignCore
import CountersignLedger
import Foundation

extension CustomerDatabase {
    /// A `CONSUMPTION_REQUEST` to answer: stored with the notification (so a server that stops
    /// before answering answers after it starts again) and answered by the server's
    /// consumption service through the App Store Server API.
    public struct ConsumptionRequestDue: Sendable {
        public var notificationUUID: String
        public var transactionId: String
        public var environment: String
        public var attempts: Int
        public var receivedAt: Date
        /// The product's kind as recorded (`autoRenewable`, `nonRenewing`, `consumable`, `nonConsumable`).
        public var productKind: String?
        public var purchaseDate: Date?
        public var expiresDate: Date?
        /// A customer's device posted the purchase (the server granted what it unlocks).
        public var delivered: Bool
        /// The owner's `$appleRefundHandlingPreference` attribute.
        public var customerPreference: String?
    }

    /// The reserved attribute (RevenueCat's) by which one customer's refund preference overrides the app's.
    public static let refundPreferenceAttribute = "$appleRefundHandlingPreference"

    /// What became of a consumption request.
    public enum ConsumptionRequestStatus: String, Sendable {
        case pending, sent, failed
    }

    /// Stores a consumption request to answer (once per notification).
    static func recordConsumptionRequest(
        _ sql: any SQLExecutor, notificationUUID: String, transaction: VerifiedTransaction, app: String, now: Date
    ) async throws {
        try await sql.run(
            """
            INSERT INTO consumption_requests (notification_uuid, app_id, transaction_id, environment, received_at_ms, status, attempts, \
            next_attempt_ms) VALUES (\(bind: notificationUUID), \(bind: app), \(bind: transaction.transactionId), \
            \(bind: transaction.environment), \(bind: now.epochMilliseconds), 'pending', 0, \(bind: now.epochMilliseconds))
            """)
    }

    /// Consumption requests of `app` due at `now`, oldest first, each held by the caller until
    /// `leaseUntil` (its next attempt moved there, so no other server sends it meanwhile; one
    /// that dies holding it leaves it to whoever looks after that).
    public func takeDueConsumptionRequests(app: String, now: Date, leaseUntil: Date, limit: Int) async throws -> [ConsumptionRequestDue] {
        let time = now.epochMilliseconds
        return try await database.withConnection { sql in
            let candidates = try await sql.all(
                """
                SELECT c.notification_uuid, c.transaction_id, c.environment, c.attempts, c.received_at_ms, c.next_attempt_ms, \
                p.product_type, p.purchase_date_ms, p.expires_date_ms, o.app_user_id, \
                (SELECT a.attribute_value FROM subscriber_attributes a WHERE a.app_id = o.app_id AND a.app_user_id = o.app_user_id \
                AND a.attribute_key = \(bind: Self.refundPreferenceAttribute)) AS preference \
                FROM consumption_requests c \
                LEFT JOIN purchases p ON p.app_id = c.app_id AND p.environment = c.environment AND p.transaction_id = c.transaction_id \
                LEFT JOIN purchase_owners o ON o.app_id = c.app_id AND o.original_transaction_id = p.original_transaction_id \
                WHERE c.app_id = \(bind: app) AND c.status = 'pending' AND c.next_attempt_ms <= \(bind: time) \
                ORDER BY c.received_at_ms LIMIT \(bind: limit)
                """
            ) { row in
                (
                    ConsumptionRequestDue(
                        notificationUUID: try row.string("notification_uuid"), transactionId: try row.string("transaction_id"),
                        environment: try row.string("environment"), attempts: try row.int("attempts"),
                        receivedAt: Date(epochMilliseconds: try row.int64("received_at_ms")), productKind: try row.text("product_type"),
                        purchaseDate: try row.integer("purchase_date_ms").map(Date.init(epochMilliseconds:)),
                        expiresDate: try row.integer("expires_date_ms").map(Date.init(epochMilliseconds:)),
                        delivered: try row.text("app_user_id") != nil, customerPreference: try row.text("preference")),
                    next: try row.int64("next_attempt_ms")
                )
            }
            var taken: [ConsumptionRequestDue] = []
            for (candidate, next) in candidates {
                let held = try await sql.count(
                    """
                    UPDATE consumption_requests SET next_attempt_ms = \(bind: leaseUntil.epochMilliseconds) \
                    WHERE notification_uuid = \(bind: candidate.notificationUUID) AND status = 'pending' \
                    AND next_attempt_ms = \(bind: next) RETURNING notification_uuid
                    """)
                if held > 0 { taken.append(candidate) }
            }
            return taken
        }
    }

    /// Records an attempt: `status` sent or failed for good, or pending again at `retryAt`.
    public func finishConsumptionRequest(
        _ request: ConsumptionRequestDue, status: ConsumptionRequestStatus, httpStatus: Int?, error: String?, retryAt: Date?, now: Date
    ) async throws {
        try await database.withConnection { sql in
            try await sql.run(
                """
                UPDATE consumption_requests SET status = \(bind: status.rawValue), attempts = attempts + 1, \
                next_attempt_ms = \(bind: (retryAt ?? now).epochMilliseconds), last_status = \(bind: httpStatus), \
                last_error = \(bind: error.map { String($0.prefix(500)) }), \
                answered_at_ms = \(bind: status == .sent ? now.epochMilliseconds : nil) \
                WHERE notification_uuid = \(bind: request.notificationUUID)
                """)
        }
    }

    /// The app's consumption requests, newest first (for operators and tests).
    public func consumptionRequests(app: String, limit: Int = 100) async throws -> [(
        transactionId: String, status: String, attempts: Int, lastError: String?
    )] {
        try await database.withConnection { sql in
            try await sql.all(
                """
                SELECT transaction_id, status, attempts, last_error FROM consumption_requests WHERE app_id = \(bind: app) \
                ORDER BY received_at_ms DESC LIMIT \(bind: limit)
                """
            ) { row in
                (try row.string("transaction_id"), try row.string("status"), try row.int("attempts"), try row.text("last_error"))
            }
        }
    }
}
