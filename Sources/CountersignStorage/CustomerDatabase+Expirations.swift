import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// The server's own expiry check: the `EXPIRATION` of every owned subscription period, or
/// grace period, that ended, whether or not Apple's notification arrives.
extension CustomerDatabase {
    /// A subscription period, or grace period, that ended: its `EXPIRATION` to report.
    struct Expired {
        var app: String
        var owner: String
        var transaction: EventTransaction
        var reason: String
        var ends: Int64
    }

    /// Stores an `EXPIRATION` for every owned subscription whose latest period, or billing grace
    /// period, ended since the last check (at most `limit` a call; the rest next time), and
    /// returns how many. A chain renewed or refunded is not reported, nor one whose grace period
    /// runs on past its expiry until that ends; the event id is the one Apple's `EXPIRED` or
    /// `GRACE_PERIOD_EXPIRED` notification makes, so the two never both count. The first check
    /// of a database only notes the time: expiries before it are history, not news.
    public func recordExpirations(apps: [AppConfiguration], now: Date, limit: Int = 500) async throws -> Int {
        let time = now.epochMilliseconds
        return try await database.transaction { sql in
            let through = try await sql.first("SELECT through_ms FROM event_checks WHERE name = 'expirations'") { try $0.int64("through_ms") }
            guard let through else {
                // Two servers starting at once both note it; the first one's mark stands.
                try await sql.run("INSERT INTO event_checks (name, through_ms) VALUES ('expirations', \(bind: time)) ON CONFLICT (name) DO NOTHING")
                return 0
            }
            guard through < time else { return 0 }
            let rows = try await Self.expiries(after: through, upTo: time, limit: limit, on: sql)
            // Nothing expired: leave the mark where it is for up to a minute (the next look scans a
            // slightly longer window) rather than write it every second.
            if rows.isEmpty, time - through < 60_000 { return 0 }
            var reported = 0
            var last = through
            for row in rows {
                last = row.ends
                guard let app = apps.first(where: { $0.id == row.app }) else { continue }
                var subject = row.transaction
                try await Self.placeInChain(sql, &subject, app: app.id)
                var event = EventRules.expirationEvent(app: app, owner: row.owner, transaction: subject, now: now)
                event.expirationReason = row.reason
                try await Self.emit([event], on: sql, app: app, now: now)
                reported += 1
            }
            // A full batch may have left more at its last expiry: look again from just before it,
            // unless the whole batch had that expiry (then move past it rather than loop).
            let first = rows.first?.ends
            let next = rows.count < limit ? time : first == last ? last : last - 1
            try await sql.run("UPDATE event_checks SET through_ms = \(bind: next) WHERE name = 'expirations'")
            return reported
        }
    }

    /// The subscription periods and grace periods of owned, unrefunded chains that ended after
    /// `through` and no later than `time` (epoch ms), earliest first, at most `limit`.
    private static func expiries(after through: Int64, upTo time: Int64, limit: Int, on sql: any SQLExecutor) async throws
        -> ArraySlice<Expired>
    {
        func ended(_ row: any StoredRow) throws -> Expired {
            let reason = EventRules.expirationReason(
                inBillingRetry: try row.integer("in_billing_retry") ?? 0 != 0, autoRenewStatus: try row.integer("auto_renew_status"))
            return Expired(
                app: try row.string("app_id"), owner: try row.string("app_user_id"), transaction: try EventTransaction(stored: row),
                reason: reason, ends: try row.int64("ends_ms"))
        }
        var found: [Expired] = []
        for statement in expiryStatements(after: through, upTo: time, limit: limit) { found += try await sql.all(statement, ended) }
        return found.sorted { $0.ends < $1.ends }.prefix(limit)
    }

    /// The two reads of the expiry check: periods that ended (read by `purchases_by_expiry`),
    /// and grace periods that ended without a renewal (read by `subscription_states_by_grace` on
    /// PostgreSQL, migration 13, and by a scan of the renewal states on SQLite): both
    /// `EXPIRATION`s, at the period's or the grace period's end.
    static func expiryStatements(after through: Int64, upTo time: Int64, limit: Int) -> [SQLStatement] {
        let chains = """
            JOIN purchase_owners o ON o.app_id = p.app_id AND o.original_transaction_id = p.original_transaction_id \
            LEFT JOIN subscription_states s ON s.app_id = p.app_id AND s.original_transaction_id = p.original_transaction_id
            """
        let newest = """
            p.revocation_date_ms IS NULL AND o.app_user_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM purchases q \
            WHERE q.app_id = p.app_id AND q.original_transaction_id = p.original_transaction_id AND q.expires_date_ms > p.expires_date_ms)
            """
        let columns = "p.app_id, \(EventTransaction.storedColumns), o.app_user_id, s.auto_renew_status, s.in_billing_retry"
        return [
            """
            SELECT \(raw: columns), p.expires_date_ms AS ends_ms FROM purchases p \(raw: chains) \
            WHERE p.expires_date_ms > \(bind: through) AND p.expires_date_ms <= \(bind: time) \
            AND (s.grace_period_expires_ms IS NULL OR s.grace_period_expires_ms <= p.expires_date_ms) AND \(raw: newest) \
            ORDER BY p.expires_date_ms LIMIT \(bind: limit)
            """,
            // `CROSS JOIN` keeps the renewal states the outer loop on SQLite (to PostgreSQL it is
            // a join like any other): with no index on the grace period there, SQLite's planner
            // chose to scan every purchase, every second, and look each one's state up; at 100,000
            // customers that scan took a quarter of the server's core (BENCHMARKS.md, decision 21).
            """
            SELECT \(raw: columns), s.grace_period_expires_ms AS ends_ms FROM subscription_states g \
            CROSS JOIN purchases p \(raw: chains) \
            WHERE p.app_id = g.app_id AND p.original_transaction_id = g.original_transaction_id \
            AND g.grace_period_expires_ms > \(bind: through) AND g.grace_period_expires_ms <= \(bind: time) \
            AND g.grace_period_expires_ms > p.expires_date_ms AND \(raw: newest) \
            ORDER BY g.grace_period_expires_ms LIMIT \(bind: limit)
            """,
        ]
    }
}
