import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// Events and their webhook deliveries (the outbox): an event is written by the statement or
/// transaction that makes its change, with one delivery row per endpoint of the app, so no
/// committed change goes unreported and nothing is reported that was rolled back.
extension CustomerDatabase {
    /// A delivery's state.
    public enum DeliveryStatus: String, Sendable, Codable, CaseIterable {
        /// Waiting for its first or next attempt.
        case pending
        /// The endpoint answered 2xx.
        case delivered
        /// Every attempt of the schedule failed (redeliverable from the admin API).
        case failed
    }

    /// The statements that store `event` and its deliveries to `app`'s endpoints. A stored event
    /// with the same id (the same change reported again) makes them do nothing.
    static func eventStatements(_ event: WebhookEvent, app: AppConfiguration, now: Date) -> [SQLStatement] {
        let time = now.epochMilliseconds
        var statements = [
            SQLStatement(
                insertEventSQL,
                [
                    .text(event.id), .text(app.id), .text(event.appUserId), .text(event.type.rawValue), .text(event.body), .integer(time),
                    .integer(event.imported ? 1 : 0),
                ])
        ]
        for webhook in app.webhooks ?? [] where event.delivered && webhook.wants(type: event.type.rawValue, environment: event.environment) {
            statements.append(
                SQLStatement(
                    """
                    INSERT INTO webhook_deliveries (event_id, endpoint, app_id, ordering_key, status, attempts, next_attempt_ms, created_at_ms) \
                    VALUES ($1, $2, $3, $4, 'pending', 0, $5, $5) ON CONFLICT (event_id, endpoint) DO NOTHING
                    """, [.text(event.id), .text(webhook.url), .text(app.id), .text(event.appUserId ?? event.id), .integer(time)]))
        }
        return statements
    }

    static let insertEventSQL = """
        INSERT INTO events (event_id, app_id, app_user_id, event_type, body, created_at_ms, imported) VALUES ($1, $2, $3, $4, $5, $6, $7) \
        ON CONFLICT (event_id) DO NOTHING
        """

    /// Stores `events` on `sql` (inside the caller's transaction).
    static func emit(_ events: [WebhookEvent], on sql: any SQLExecutor, app: AppConfiguration, now: Date) async throws {
        for event in events {
            for statement in eventStatements(event, app: app, now: now) { try await sql.run(statement) }
        }
    }

    /// Stores one event in its own transaction (a `TEST` event, say).
    public func emit(_ event: WebhookEvent, app: AppConfiguration, now: Date) async throws {
        try await database.transaction { sql in try await Self.emit([event], on: sql, app: app, now: now) }
    }

    /// A delivery as the admin API lists it.
    public struct Delivery: Sendable, Codable, Hashable {
        public var eventId: String
        public var eventType: String
        public var appUserId: String?
        public var endpoint: String
        public var status: DeliveryStatus
        public var attempts: Int
        public var nextAttemptMs: Int64?
        public var lastError: String?
        public var lastStatus: Int?
        public var deliveredAtMs: Int64?
        public var createdAtMs: Int64

        enum CodingKeys: String, CodingKey {
            case eventId = "event_id", eventType = "event_type", appUserId = "app_user_id", endpoint, status, attempts
            case nextAttemptMs = "next_attempt_ms", lastError = "last_error", lastStatus = "last_status"
            case deliveredAtMs = "delivered_at_ms", createdAtMs = "created_at_ms"
        }
    }

    /// The app's deliveries, newest first, optionally of one status and of one customer's events
    /// (read through `events_by_user`).
    public func deliveries(app: String, status: DeliveryStatus?, user: String? = nil, limit: Int) async throws -> [Delivery] {
        try await database.withConnection { sql in
            var query: SQLStatement = """
                SELECT d.event_id, d.endpoint, d.status, d.attempts, d.next_attempt_ms, d.last_error, d.last_status, d.delivered_at_ms, \
                e.event_type, e.app_user_id, e.created_at_ms FROM webhook_deliveries d JOIN events e ON e.event_id = d.event_id \
                WHERE d.app_id = \(bind: app)
                """
            if let status { query = query + " AND d.status = \(bind: status.rawValue)" }
            if let user { query = query + " AND e.app_id = \(bind: app) AND e.app_user_id = \(bind: user)" }
            return try await sql.all(query + " ORDER BY e.seq DESC LIMIT \(bind: limit)") { row in
                let status = try row.string("status")
                return Delivery(
                    eventId: try row.string("event_id"), eventType: try row.string("event_type"),
                    appUserId: try row.text("app_user_id"), endpoint: try row.string("endpoint"),
                    status: DeliveryStatus(rawValue: status) ?? .pending, attempts: try row.int("attempts"),
                    nextAttemptMs: status == DeliveryStatus.pending.rawValue ? try row.int64("next_attempt_ms") : nil,
                    lastError: try row.text("last_error"), lastStatus: try row.integer("last_status").map { Int($0) },
                    deliveredAtMs: try row.integer("delivered_at_ms"), createdAtMs: try row.int64("created_at_ms")
                )
            }
        }
    }

    /// Puts every delivery of one of the app's events back in the queue, attempts counted
    /// afresh; false when the app has no such event delivery.
    public func redeliver(app: String, eventId: String, now: Date) async throws -> Bool {
        try await database.transaction { sql in
            try await sql.count(
                """
                UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_ms = \(bind: now.epochMilliseconds), \
                lease_until_ms = NULL WHERE app_id = \(bind: app) AND event_id = \(bind: eventId) RETURNING event_id
                """) > 0
        }
    }

    /// A delivery whose turn has come.
    public struct DueDelivery: Sendable {
        public var eventId: String
        public var endpoint: String
        public var attempts: Int
        /// What is sent (``deliveryBody(_:stored:app:user:type:)``).
        public var body: String
    }

    /// Deliveries due at `now` and first in their customer's line (no earlier event of the same
    /// customer still pending for that endpoint), oldest first, each leased to the caller until
    /// `leaseUntil` so no other server sends it meanwhile. A server that dies holding a lease
    /// leaves the delivery to whoever looks after the lease ends: sent again with the same id.
    public func takeDueDeliveries(app: String, endpoint: String, now: Date, leaseUntil: Date, limit: Int) async throws -> [DueDelivery] {
        let time = now.epochMilliseconds
        let candidates = try await database.withConnection { sql in
            try await sql.all(
                """
                SELECT d.event_id, d.endpoint, d.attempts, e.body, e.app_user_id, e.event_type FROM webhook_deliveries d \
                JOIN events e ON e.event_id = d.event_id \
                WHERE d.status = 'pending' AND d.next_attempt_ms <= \(bind: time) AND d.app_id = \(bind: app) AND d.endpoint = \(bind: endpoint) \
                AND (d.lease_until_ms IS NULL OR d.lease_until_ms < \(bind: time)) \
                AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p JOIN events pe ON pe.event_id = p.event_id \
                WHERE p.app_id = d.app_id AND p.endpoint = d.endpoint AND p.ordering_key = d.ordering_key AND p.status = 'pending' \
                AND pe.seq < e.seq) \
                ORDER BY e.seq LIMIT \(bind: limit)
                """
            ) { row in
                (
                    DueDelivery(
                        eventId: try row.string("event_id"), endpoint: try row.string("endpoint"), attempts: try row.int("attempts"),
                        body: try row.string("body")),
                    user: try row.text("app_user_id"), type: try row.string("event_type")
                )
            }
        }
        var taken: [DueDelivery] = []
        for (candidate, user, type) in candidates {
            let leased = try await database.withConnection { sql in
                try await sql.count(
                    """
                    UPDATE webhook_deliveries SET lease_until_ms = \(bind: leaseUntil.epochMilliseconds) \
                    WHERE event_id = \(bind: candidate.eventId) AND endpoint = \(bind: candidate.endpoint) AND status = 'pending' \
                    AND attempts = \(bind: candidate.attempts) AND (lease_until_ms IS NULL OR lease_until_ms < \(bind: time)) RETURNING event_id
                    """)
            }
            guard leased > 0 else { continue }
            var delivery = candidate
            delivery.body = try await database.withConnection { sql in
                try await Self.deliveryBody(sql, stored: candidate.body, app: app, user: user, type: type)
            }
            taken.append(delivery)
        }
        return taken
    }

    /// The body as it is delivered: the stored event with the customer's `aliases` (every id
    /// they were known by, oldest first, their own last; the customer an alias names, for an
    /// event stored under an id merged since), `original_app_user_id` (the customer's first id, as its CustomerInfo says it)
    /// and `subscriber_attributes` (`{"$email": {"value": …, "updated_at_ms": …}}`) as they are
    /// now. A `TRANSFER` names its customers in its own lists and gets none of them.
    static func deliveryBody(_ sql: any SQLExecutor, stored: String, app: String, user: String?, type: String) async throws -> String {
        guard type != WebhookEventType.transfer.rawValue, stored.hasSuffix("}}") else { return stored }
        var ids: [String] = []
        var original: String?
        var attributes: [(key: String, value: String, updated: Int64)] = []
        if let named = user {
            // An event made before a logIn merged its customer names the id of the time; the lists
            // are the customer's as it is now.
            let user = try await Self.customerId(sql, app: app, user: named)
            ids = try await Self.aliases(sql, app: app, user: user) + [user]
            let stored = try await sql.first(
                "SELECT original_app_user_id FROM customers WHERE app_id = \(bind: app) AND app_user_id = \(bind: user)"
            ) { try $0.text("original_app_user_id") }
            original = (stored ?? nil) ?? user
            attributes = try await sql.all(
                """
                SELECT attribute_key, attribute_value, updated_at_ms FROM subscriber_attributes \
                WHERE app_id = \(bind: app) AND app_user_id = \(bind: user) AND attribute_value IS NOT NULL
                """
            ) { (try $0.string("attribute_key"), try $0.string("attribute_value"), try $0.int64("updated_at_ms")) }
        }
        var json = LeanJSONWriter(capacity: 256)
        json.raw(",\"aliases\":[")
        for (index, id) in ids.enumerated() {
            if index > 0 { json.byte(UInt8(ascii: ",")) }
            json.string(id)
        }
        json.raw("],\"original_app_user_id\":")
        if let original { json.string(original) } else { json.raw("null") }
        json.raw(",\"subscriber_attributes\":")
        json.dictionary(Dictionary(attributes.map { ($0.key, ($0.value, $0.updated)) }, uniquingKeysWith: { first, _ in first })) { json, attribute in
            var first = true
            json.byte(UInt8(ascii: "{"))
            json.member("updated_at_ms", first: &first)
            json.integer(attribute.1)
            json.member("value", first: &first)
            json.string(attribute.0)
            json.byte(UInt8(ascii: "}"))
        }
        return String(stored.dropLast(2)) + String(decoding: json.bytes, as: UTF8.self) + "}}"
    }

    /// Records an attempt: delivered, or failed with the next attempt at `retryAt` (nil: the
    /// schedule is used up and the delivery has failed).
    public func finishAttempt(_ delivery: DueDelivery, delivered: Bool, status: Int?, error: String?, retryAt: Date?, now: Date) async throws {
        let time = now.epochMilliseconds
        let newStatus: DeliveryStatus = delivered ? .delivered : retryAt == nil ? .failed : .pending
        try await database.withConnection { sql in
            try await sql.run(
                """
                UPDATE webhook_deliveries SET status = \(bind: newStatus.rawValue), attempts = attempts + 1, lease_until_ms = NULL, \
                last_status = \(bind: status), last_error = \(bind: error.map { String($0.prefix(500)) }), \
                next_attempt_ms = \(bind: retryAt.map(\.epochMilliseconds) ?? time), \
                delivered_at_ms = \(bind: delivered ? time : nil) \
                WHERE event_id = \(bind: delivery.eventId) AND endpoint = \(bind: delivery.endpoint) AND attempts = \(bind: delivery.attempts)
                """)
        }
    }

    /// Deletes what is past its retention: deliveries delivered before `cutoff`, then events made
    /// before it that no delivery refers to any more (pending and failed deliveries keep theirs).
    /// Events an import made are kept: they are dated when the history happened, and are the
    /// customer's history from before the move (ImportTests, "imported events outlive retention").
    @discardableResult
    public func pruneEvents(before cutoff: Date) async throws -> (events: Int, deliveries: Int) {
        let time = cutoff.epochMilliseconds
        return try await database.transaction { sql in
            let deliveries = try await sql.count(
                """
                DELETE FROM webhook_deliveries WHERE status = 'delivered' AND delivered_at_ms < \(bind: time) RETURNING event_id
                """)
            let events = try await sql.count(
                """
                DELETE FROM events WHERE created_at_ms < \(bind: time) AND imported = 0 \
                AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = events.event_id) RETURNING seq
                """)
            return (events, deliveries)
        }
    }

    /// Fails the pending deliveries to endpoints no longer in the configuration (redeliverable
    /// once the endpoint is back).
    public func failUnconfiguredDeliveries(apps: [AppConfiguration], now: Date) async throws {
        let pending = try await database.withConnection { sql in
            try await sql.all("SELECT DISTINCT app_id, endpoint FROM webhook_deliveries WHERE status = 'pending'") {
                (try $0.string("app_id"), try $0.string("endpoint"))
            }
        }
        for (app, endpoint) in pending where !(apps.first { $0.id == app }?.webhooks ?? []).contains(where: { $0.url == endpoint }) {
            try await database.withConnection { sql in
                try await sql.run(
                    """
                    UPDATE webhook_deliveries SET status = 'failed', last_error = 'the endpoint is no longer configured', lease_until_ms = NULL \
                    WHERE status = 'pending' AND app_id = \(bind: app) AND endpoint = \(bind: endpoint)
                    """)
            }
        }
    }

    /// Gives a delivery back untried (its lease ended, its attempts unchanged).
    public func releaseLease(_ delivery: DueDelivery) async throws {
        try await database.withConnection { sql in
            try await sql.run(
                """
                UPDATE webhook_deliveries SET lease_until_ms = NULL \
                WHERE event_id = \(bind: delivery.eventId) AND endpoint = \(bind: delivery.endpoint) AND attempts = \(bind: delivery.attempts)
                """)
        }
    }

    /// The customer's events, newest first (the dashboard's history and tests).
    public func events(app: String, user: String, limit: Int = 100) async throws -> [(type: String, body: String)] {
        try await database.withConnection { sql in
            let user = try await Self.customerId(sql, app: app, user: user)
            return try await sql.all(
                """
                SELECT event_type, body FROM events WHERE app_id = \(bind: app) AND app_user_id = \(bind: user) ORDER BY seq DESC LIMIT \(bind: limit)
                """
            ) { (try $0.string("event_type"), try $0.string("body")) }
        }
    }
}
