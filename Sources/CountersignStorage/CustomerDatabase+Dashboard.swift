import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// What the dashboard reads and keeps: sign-in sessions, customer search, the daily counts and
/// the count of active customers. Every query reads by an index (docs/dashboard.md lists them).
extension CustomerDatabase {
    // MARK: Sessions

    /// A signed-in dashboard session: the apps whose secret keys it was given (each with a
    /// fingerprint of the key it was opened with), the one shown, and the token every form carries.
    public struct DashboardSession: Sendable, Hashable {
        public struct Grant: Codable, Sendable, Hashable {
            public var app: String
            /// A fingerprint of the secret key the app was signed in with (the dashboard's `SecretToken.fingerprint(ofKey:)`).
            public var key: String

            public init(app: String, key: String) {
                self.app = app
                self.key = key
            }
        }

        public var grants: [Grant]
        public var currentApp: String
        public var csrfToken: String
        public var expires: Date

        public var apps: [String] { grants.map(\.app) }

        public init(grants: [Grant], currentApp: String, csrfToken: String, expires: Date) {
            self.grants = grants
            self.currentApp = currentApp
            self.csrfToken = csrfToken
            self.expires = expires
        }
    }

    /// Stores a new session under the SHA-256 of its token; sessions past their expiry go at the
    /// same time (a sign-in is rare enough to pay for the sweep).
    public func createDashboardSession(tokenHash: String, _ session: DashboardSession, now: Date) async throws {
        let grants = String(decoding: try JSONEncoder().encode(session.grants), as: UTF8.self)
        try await database.transaction { sql in
            try await sql.run("DELETE FROM dashboard_sessions WHERE expires_ms <= \(bind: now.epochMilliseconds)")
            try await sql.run(
                """
                INSERT INTO dashboard_sessions (session_hash, app_ids, current_app, csrf_token, created_ms, expires_ms) \
                VALUES (\(bind: tokenHash), \(bind: grants), \(bind: session.currentApp), \(bind: session.csrfToken), \
                \(bind: now.epochMilliseconds), \(bind: session.expires.epochMilliseconds))
                """)
        }
    }

    /// The session of a token's hash; nil when unknown, expired, or stored before sessions held
    /// key fingerprints (a plain list of app ids: signed out).
    public func dashboardSession(tokenHash: String, now: Date) async throws -> DashboardSession? {
        try await database.withConnection { sql in
            try await sql.first(
                """
                SELECT app_ids, current_app, csrf_token, expires_ms FROM dashboard_sessions \
                WHERE session_hash = \(bind: tokenHash) AND expires_ms > \(bind: now.epochMilliseconds)
                """
            ) { row -> DashboardSession? in
                guard let grants = try? JSONDecoder().decode([DashboardSession.Grant].self, from: Data(try row.string("app_ids").utf8)) else {
                    return nil
                }
                return DashboardSession(
                    grants: grants, currentApp: try row.string("current_app"), csrfToken: try row.string("csrf_token"),
                    expires: Date(epochMilliseconds: try row.int64("expires_ms")))
            } ?? nil
        }
    }

    /// Ends every session's hold on `app`: the app leaves each session that has it, and a
    /// session left with no app is deleted. Returns how many sessions held it.
    @discardableResult
    public func endDashboardSessions(app: String) async throws -> Int {
        try await database.transaction { sql in
            var ended = 0
            let sessions = try await sql.all("SELECT session_hash, app_ids, current_app FROM dashboard_sessions") { row in
                (hash: try row.string("session_hash"), grants: try row.string("app_ids"), current: try row.string("current_app"))
            }
            for session in sessions {
                let grants = (try? JSONDecoder().decode([DashboardSession.Grant].self, from: Data(session.grants.utf8))) ?? []
                guard grants.contains(where: { $0.app == app }) else { continue }
                ended += 1
                let left = grants.filter { $0.app != app }
                if let first = left.first {
                    try await sql.run(
                        """
                        UPDATE dashboard_sessions SET app_ids = \(bind: String(decoding: try JSONEncoder().encode(left), as: UTF8.self)), \
                        current_app = \(bind: session.current == app ? first.app : session.current) WHERE session_hash = \(bind: session.hash)
                        """)
                } else {
                    try await sql.run("DELETE FROM dashboard_sessions WHERE session_hash = \(bind: session.hash)")
                }
            }
            return ended
        }
    }

    /// Shows another of the session's apps.
    public func switchDashboardApp(tokenHash: String, to app: String) async throws {
        try await database.withConnection { sql in
            try await sql.run("UPDATE dashboard_sessions SET current_app = \(bind: app) WHERE session_hash = \(bind: tokenHash)")
        }
    }

    public func deleteDashboardSession(tokenHash: String) async throws {
        try await database.withConnection { sql in
            try await sql.run("DELETE FROM dashboard_sessions WHERE session_hash = \(bind: tokenHash)")
        }
    }

    // MARK: Customers

    public func customerExists(app: String, user: String) async throws -> Bool {
        try await database.withConnection { sql in
            try await Self.customerExists(sql, app: app, user: try await Self.customerId(sql, app: app, user: user))
        }
    }

    /// The app user ids a search finds: the customer of that app user id, and the owner of the
    /// purchase whose transaction id or original transaction id it is (each an indexed lookup;
    /// ids are matched exactly, and an app user id also by prefix, at most `limit`).
    public func searchCustomers(app: String, query: String, limit: Int = 50) async throws -> [(appUserId: String, matched: String)] {
        try await database.withConnection { sql in
            var found: [(String, String)] = []
            func add(_ user: String?, _ matched: String) {
                guard let user, !found.contains(where: { AppUserID.same($0.0, user) }) else { return }
                found.append((user, matched))
            }
            // A prefix as a range over the primary key: every id that starts with `query` sorts
            // at or after it and before `query` followed by the highest code point. PostgreSQL
            // compares under the column's collation, so the prefix is checked again here.
            let users = try await sql.all(
                """
                SELECT app_user_id FROM customers WHERE app_id = \(bind: app) AND app_user_id >= \(bind: query) \
                AND app_user_id < \(bind: query + "\u{10FFFF}") ORDER BY app_user_id LIMIT \(bind: limit)
                """
            ) { try $0.string("app_user_id") }
            for user in users where user.utf8.starts(with: query.utf8) {
                add(user, AppUserID.same(user, query) ? "app user id" : "app user id prefix")
            }
            let byTransaction = try await sql.first(
                """
                SELECT o.app_user_id FROM purchases p JOIN purchase_owners o \
                ON o.original_transaction_id = p.original_transaction_id AND o.app_id = p.app_id \
                WHERE p.transaction_id = \(bind: query) AND p.app_id = \(bind: app)
                """
            ) { try $0.text("app_user_id") }
            if let owner = try await Self.aliasOwner(sql, app: app, alias: query) { add(owner, "alias") }
            if let byTransaction { add(byTransaction, "transaction id") }
            let byChain = try await sql.first(
                """
                SELECT app_user_id FROM purchase_owners WHERE app_id = \(bind: app) AND original_transaction_id = \(bind: query)
                """
            ) { try $0.text("app_user_id") }
            if let byChain { add(byChain, "original transaction id") }
            return found.map { (appUserId: $0.0, matched: $0.1) }
        }
    }

    // MARK: Counts

    /// Purchases, renewals, refunds and expirations of one UTC day.
    public struct DailyActivity: Sendable, Hashable {
        public var purchases = 0
        public var renewals = 0
        public var refunds = 0
        public var expirations = 0

        public init() {}
    }

    /// The app's events of the last `days` UTC days (today included) counted by day (days since
    /// 1970) and kind, read through `events_by_time`. A refund is a CANCELLATION whose
    /// `cancel_reason` is CUSTOMER_SUPPORT (auto-renew turned off is the other kind).
    public func dailyActivity(app: String, days: Int, now: Date) async throws -> [Int64: DailyActivity] {
        let today = now.epochMilliseconds / 86_400_000
        let since = (today - Int64(days - 1)) * 86_400_000
        let refund = "%\"cancel_reason\":\"CUSTOMER_SUPPORT\"%"
        let statement: SQLStatement = """
            SELECT created_at_ms / 86400000 AS day, event_type, \
            SUM(CASE WHEN event_type = 'CANCELLATION' AND body LIKE \(bind: refund) THEN 1 ELSE 0 END) AS refunds, COUNT(*) AS total \
            FROM events WHERE app_id = \(bind: app) AND created_at_ms >= \(bind: since) \
            AND event_type IN ('INITIAL_PURCHASE', 'NON_RENEWING_PURCHASE', 'RENEWAL', 'CANCELLATION', 'EXPIRATION') \
            GROUP BY created_at_ms / 86400000, event_type
            """
        return try await database.report(statement, into: [:]) { result, row in
            let day = try row.int64("day")
            let total = try row.int("total")
            switch try row.string("event_type") {
            case "INITIAL_PURCHASE", "NON_RENEWING_PURCHASE": result[day, default: .init()].purchases += total
            case "RENEWAL": result[day, default: .init()].renewals += total
            case "EXPIRATION": result[day, default: .init()].expirations += total
            default: result[day, default: .init()].refunds += Int(try row.integer("refunds") ?? 0)
            }
        }
    }

    /// How many customers own an unexpired, unrefunded purchase or an open promotional grant of
    /// each entitlement now. Subscriptions are found through `purchases_by_expiry` (their
    /// latest period ends after now), purchases for life among those without an expiry. Grace
    /// periods and billing retry are not counted: this is the dashboard's headcount, the
    /// entitlement rules decide access.
    public func activeCustomers(app: AppConfiguration, now: Date) async throws -> [(entitlement: String, customers: Int)] {
        let time = now.epochMilliseconds
        let entitlements = Set(app.products.flatMap(\.entitlements)).sorted()
        let queries = entitlements.map { entitlement -> SQLStatement in
            let products = app.products.filter { $0.entitlements.contains(entitlement) }
            let lifetime = products.filter { $0.type == .nonConsumable }.map(\.id)
            let expiring = products.filter { $0.type != .nonConsumable && $0.type != .consumable }.map(\.id)
            // One branch per kind, so each reads `purchases_by_expiry` by a range (an OR of
            // the two would have the planner scan every owner instead). CROSS JOIN keeps
            // SQLite's loop on purchases (its planner may otherwise start from the owners);
            // PostgreSQL plans it as any inner join.
            var branches: [SQLStatement] = []
            let owned: SQLStatement =
                "SELECT o.app_user_id FROM purchases p CROSS JOIN purchase_owners o WHERE o.app_id = p.app_id AND o.original_transaction_id = p.original_transaction_id AND "
            if !expiring.isEmpty {
                branches.append(
                    owned
                        + "p.expires_date_ms > \(bind: time) AND p.app_id = \(bind: app.id) AND p.product_id IN (\(binds: expiring)) AND p.revocation_date_ms IS NULL AND o.app_user_id IS NOT NULL"
                )
            }
            if !lifetime.isEmpty {
                branches.append(
                    owned
                        + "p.expires_date_ms IS NULL AND p.app_id = \(bind: app.id) AND p.product_id IN (\(binds: lifetime)) AND p.revocation_date_ms IS NULL AND o.app_user_id IS NOT NULL"
                )
            }
            branches.append(
                """
                SELECT app_user_id FROM promotional_grants WHERE app_id = \(bind: app.id) AND entitlement = \(bind: entitlement) \
                AND revoked_ms IS NULL AND starts_ms <= \(bind: time) AND (expires_ms IS NULL OR expires_ms > \(bind: time))
                """)
            var union = branches[0]
            for branch in branches.dropFirst() { union = union + " UNION " + branch }
            return "SELECT COUNT(*) AS customers FROM (" + union + ") AS active"
        }
        var counts: [(entitlement: String, customers: Int)] = []
        for (entitlement, query) in zip(entitlements, queries) {
            counts.append((entitlement, try await database.report(query, into: 0) { count, row in count = try row.int("customers") }))
        }
        return counts
    }
}
