import CountersignCore
import Foundation

/// Subscriber attributes, as RevenueCat keeps them: string values (nil deletes) per key, each
/// with the device time it was set; a value set earlier than the stored one changes nothing.
extension CustomerDatabase {
    public struct AttributeRecord: Codable, Sendable, Hashable {
        public var value: String?
        public var updatedAtMs: Int64

        enum CodingKeys: String, CodingKey {
            case value, updatedAtMs = "updated_at_ms"
        }

        public init(value: String?, updatedAtMs: Int64) {
            self.value = value
            self.updatedAtMs = updatedAtMs
        }
    }

    /// Stores attributes for the user (created if needed); returns how many changed. An
    /// attribute replaces a stored one updated no later than it; an `updatedAtMs` after `now` is
    /// taken as `now`.
    @discardableResult
    public func setAttributes(app: String, user: String, _ attributes: [String: AttributeRecord], now: Date) async throws -> Int {
        try await database.transactionRetryingUniqueViolations { sql in
            let user = try await Self.customerId(sql, app: app, user: user)
            try await Self.touchCustomer(sql, app: app, user: user, now: now)
            var changed = 0
            for (key, sent) in attributes.sorted(by: { $0.key < $1.key }) {
                // A client's clock, or a client, may say any time: none lies beyond the server's
                // (an attribute dated 9e18 would otherwise never be replaced).
                var attribute = sent
                attribute.updatedAtMs = min(sent.updatedAtMs, now.epochMilliseconds)
                let customerKey: SQLStatement = "app_id = \(bind: app) AND app_user_id = \(bind: user) AND attribute_key = \(bind: key)"
                let stored = try await sql.first("SELECT updated_at_ms FROM subscriber_attributes WHERE \(customerKey)") {
                    try $0.int64("updated_at_ms")
                }
                if let stored {
                    guard attribute.updatedAtMs >= stored else { continue }
                    try await sql.run(
                        """
                        UPDATE subscriber_attributes SET attribute_value = \(bind: attribute.value), updated_at_ms = \(bind: attribute.updatedAtMs) \
                        WHERE \(customerKey)
                        """)
                } else {
                    try await sql.run(
                        """
                        INSERT INTO subscriber_attributes (app_id, app_user_id, attribute_key, attribute_value, updated_at_ms) \
                        VALUES (\(bind: app), \(bind: user), \(bind: key), \(bind: attribute.value), \(bind: attribute.updatedAtMs))
                        """)
                }
                changed += 1
            }
            return changed
        }
    }

    /// The customer's attributes with a value (a key set to nil was deleted).
    public func attributes(app: String, user: String) async throws -> [String: SubscriberAttributeValue] {
        try await database.withConnection { sql in
            let user = try await Self.customerId(sql, app: app, user: user)
            return try await Self.attributes(sql, app: app, user: user).compactMapValues { record in
                record.value.map { SubscriberAttributeValue(value: $0, updatedAtMs: record.updatedAtMs) }
            }
        }
    }

    static func attributes(_ sql: any SQLExecutor, app: String, user: String) async throws -> [String: AttributeRecord] {
        var attributes: [String: AttributeRecord] = [:]
        try await sql.query(
            """
            SELECT attribute_key, attribute_value, updated_at_ms FROM subscriber_attributes WHERE app_id = \(bind: app) AND app_user_id = \(bind: user)
            """
        ) { row in
            attributes[try row.string("attribute_key")] = AttributeRecord(
                value: try row.text("attribute_value"), updatedAtMs: try row.int64("updated_at_ms"))
        }
        return attributes
    }
}
