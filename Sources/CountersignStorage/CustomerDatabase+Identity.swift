import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// Who an app user id names, as RevenueCat keeps it: the ids merged into a customer (by logIn, or
/// by an import of RevenueCat's aliases) are its aliases, and each of them answers as the customer
/// ("the user can then be referenced by any of their aliases and the same result will be
/// returned"). A customer is one row of `customers`, known by its primary id; an alias is a row
/// of `customer_aliases` and never a customer of its own (a merge removes the merged id's row).
extension CustomerDatabase {
    /// The primary id of the customer `user` names: the customer whose alias it is, else `user`.
    public func customerId(app: String, user: String) async throws -> String {
        try await database.withConnection { sql in try await Self.customerId(sql, app: app, user: user) }
    }

    static func customerId(_ sql: any SQLExecutor, app: String, user: String) async throws -> String {
        try await aliasOwner(sql, app: app, alias: user) ?? user
    }

    /// The customer `alias` was merged into, if any. An alias belongs to one customer of an app
    /// (the table's key; the first claim stands, a later one is left out).
    static func aliasOwner(_ sql: any SQLExecutor, app: String, alias: String) async throws -> String? {
        try await sql.first("SELECT app_user_id FROM customer_aliases WHERE app_id = \(bind: app) AND alias = \(bind: alias)") {
            try $0.string("app_user_id")
        }
    }

    /// The ids merged into the customer `user`, oldest first.
    static func aliases(_ sql: any SQLExecutor, app: String, user: String) async throws -> [String] {
        try await sql.all(
            "SELECT alias FROM customer_aliases WHERE app_id = \(bind: app) AND app_user_id = \(bind: user) ORDER BY first_seen_ms, alias"
        ) { try $0.string("alias") }
    }

    /// logIn: `newUser` becomes the customer; when `currentUser` names an anonymous customer, that
    /// customer merges into `newUser` (RevenueCat's logIn). Either id may be an alias: each is
    /// taken as the customer it names, so logging in from an id merged before merges nothing.
    /// Returns whether `newUser` was seen for the first time.
    public func identify(app: AppConfiguration, currentUser: String, newUser: String, now: Date) async throws -> Bool {
        try await database.transaction { sql in
            let current = try await Self.customerId(sql, app: app.id, user: currentUser)
            let new = try await Self.customerId(sql, app: app.id, user: newUser)
            let existed = try await Self.customerExists(sql, app: app.id, user: new)
            try await Self.touchCustomer(sql, app: app.id, user: new, now: now)
            try await sql.run(
                """
                UPDATE customers SET logged_in_ms = \(bind: now.epochMilliseconds) \
                WHERE app_id = \(bind: app.id) AND app_user_id = \(bind: new) AND logged_in_ms IS NULL
                """)
            if !AppUserID.same(current, new), Self.isAnonymous(current) {
                try await Self.merge(sql, app: app.id, from: current, into: new, now: now)
            }
            return !existed
        }
    }

    /// Merges the customer `old` into `user`: `old` and the ids it had absorbed become aliases
    /// of `user`; its purchases, grants and attributes move (an attribute both hold keeps the
    /// later value); `user` was first seen when the earlier of the two was, and its first id
    /// (`original_app_user_id`) is `old`'s when `old` was seen no later (an id never seen counts as
    /// seen now: the anonymous id a logIn starts from is older than the user it creates); `old`'s
    /// own row goes.
    static func merge(_ sql: any SQLExecutor, app: String, from old: String, into user: String, now: Date) async throws {
        let oldCustomer: SQLStatement = "app_id = \(bind: app) AND app_user_id = \(bind: old)"
        let (firstSeen, oldOriginal) =
            try await sql.first("SELECT first_seen_ms, original_app_user_id FROM customers WHERE \(oldCustomer)") { row in
                (try row.int64("first_seen_ms") as Int64?, try row.text("original_app_user_id"))
            } ?? (nil, nil)
        try await sql.run(
            """
            UPDATE customers SET original_app_user_id = \(bind: oldOriginal ?? old) \
            WHERE app_id = \(bind: app) AND app_user_id = \(bind: user) AND first_seen_ms >= \(bind: firstSeen ?? now.epochMilliseconds)
            """)
        try await sql.run(
            """
            INSERT INTO customer_aliases (app_id, app_user_id, alias, first_seen_ms) \
            VALUES (\(bind: app), \(bind: user), \(bind: old), \(bind: firstSeen ?? now.epochMilliseconds)) ON CONFLICT DO NOTHING
            """)
        for table in ["customer_aliases", "purchase_owners", "promotional_grants"] {
            try await sql.run("UPDATE \(raw: table) SET app_user_id = \(bind: user) WHERE \(oldCustomer)")
        }
        try await sql.run(
            """
            INSERT INTO subscriber_attributes (app_id, app_user_id, attribute_key, attribute_value, updated_at_ms) \
            SELECT app_id, \(bind: user), attribute_key, attribute_value, updated_at_ms FROM subscriber_attributes WHERE \(oldCustomer) \
            ON CONFLICT (app_id, app_user_id, attribute_key) DO UPDATE SET attribute_value = excluded.attribute_value, \
            updated_at_ms = excluded.updated_at_ms WHERE subscriber_attributes.updated_at_ms < excluded.updated_at_ms
            """)
        try await sql.run("DELETE FROM subscriber_attributes WHERE \(oldCustomer)")
        if let firstSeen {
            try await sql.run(
                """
                UPDATE customers SET first_seen_ms = \(bind: firstSeen) \
                WHERE app_id = \(bind: app) AND app_user_id = \(bind: user) AND first_seen_ms > \(bind: firstSeen)
                """)
        }
        try await sql.run("DELETE FROM customers WHERE \(oldCustomer)")
    }

    // MARK: Retention

    /// Removes customers of `app` last seen before `cutoff` who left nothing to keep: no
    /// purchase chain owned, no event naming them (every purchase makes one for its owner), no
    /// promotional grant (revoked or not), no attribute, no alias (no logIn merged anyone into
    /// them) and no logIn. Such a row is what a read of an id made up on a device leaves; one
    /// who comes back is recorded anew. At most `limit` rows a call; returns how many went.
    public func pruneCustomers(app: String, lastSeenBefore cutoff: Date, limit: Int = 1000) async throws -> Int {
        try await database.transaction { sql in
            try await sql.count(
                """
                DELETE FROM customers WHERE app_id = \(bind: app) AND app_user_id IN (SELECT c.app_user_id FROM customers c \
                WHERE c.app_id = \(bind: app) AND c.last_seen_ms < \(bind: cutoff.epochMilliseconds) AND c.logged_in_ms IS NULL \
                AND NOT EXISTS (SELECT 1 FROM purchase_owners o WHERE o.app_id = c.app_id AND o.app_user_id = c.app_user_id) \
                AND NOT EXISTS (SELECT 1 FROM events e WHERE e.app_id = c.app_id AND e.app_user_id = c.app_user_id) \
                AND NOT EXISTS (SELECT 1 FROM promotional_grants g WHERE g.app_id = c.app_id AND g.app_user_id = c.app_user_id) \
                AND NOT EXISTS (SELECT 1 FROM subscriber_attributes s WHERE s.app_id = c.app_id AND s.app_user_id = c.app_user_id) \
                AND NOT EXISTS (SELECT 1 FROM customer_aliases a WHERE a.app_id = c.app_id AND a.app_user_id = c.app_user_id) \
                LIMIT \(bind: limit)) RETURNING app_user_id
                """)
        }
    }
}
