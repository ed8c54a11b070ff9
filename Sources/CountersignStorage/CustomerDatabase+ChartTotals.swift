import CountersignCharts
import Foundation

/// The revenue charts' kept sums. Each write to what a chart reads (a transaction, a renewal
/// state, an owner, a customer) marks its subscription or customer, by trigger (migration 24;
/// an owner's change marks the customer it left too). ``refreshChartTotals(limit:now:)`` takes
/// marks and, for each customer they touch (and each subscription no customer owns), recomputes
/// its events from its records, and moves the daily sums by the difference from the events kept
/// for it (`chart_units`, one text value a customer). A chart then reads a few rows a day
/// (``chartTotals(app:filter:throughDay:nowMs:)``) instead of every transaction, and is still a
/// function of the records: the same numbers as ``ChartTotals/init(events:filter:throughDay:nowMs:)``
/// over every event, which the tests and `scripts/chart-check.py` hold it to.
extension CustomerDatabase {
    /// What one refresh takes at most: the writer is held for this many customers' records.
    public static let chartMarksPerRefresh = 256
    /// How far before the refresh's `now` an event is still kept apart as upcoming: servers'
    /// clocks may differ by this much.
    static let upcomingMargin: Int64 = 3_600_000

    /// Moves the sums for up to `limit` marks, in one transaction (two servers take turns);
    /// returns how many marks it took: 0 when the sums are up to date.
    @discardableResult
    public func refreshChartTotals(limit: Int = chartMarksPerRefresh, now: Date = Date()) async throws -> Int {
        // Most calls find nothing to do: a read, not a write transaction, says so.
        let none = try await database.report("SELECT 1 FROM chart_marks LIMIT 1", into: true) { none, _ in none = false }
        guard !none else { return 0 }
        return try await database.transaction { sql in
            try await sql.run("UPDATE chart_refresh SET passes = passes + 1 WHERE id = 1")
            let marks = try await sql.all(
                """
                DELETE FROM chart_marks WHERE (app_id, kind, id) IN (SELECT app_id, kind, id FROM chart_marks LIMIT \(bind: limit)) \
                RETURNING app_id, kind, id
                """
            ) { row in (app: try row.string("app_id"), kind: try row.string("kind"), id: try row.string("id")) }
            for (app, marked) in Dictionary(grouping: marks, by: \.app) {
                let chains = marked.filter { $0.kind == "chain" }.map(\.id)
                var units = Set(marked.filter { $0.kind == "customer" }.map { Unit.customer($0.id) })
                units.formUnion(chains.map(Unit.chain))
                try await units.formUnion(Self.owners(ofChains: chains, app: app, sql).map(Unit.customer))
                try await Self.recomputeChartUnits(Array(units), app: app, upcomingFromMs: now.epochMilliseconds - Self.upcomingMargin, sql)
            }
            return marks.count
        }
    }

    /// Brings the sums up to date with every mark made so far.
    public func refreshChartTotalsFully(now: Date = Date()) async throws {
        while try await refreshChartTotals(now: now) > 0 {}
    }

    /// Whose events a subscription's are: its owner's, or its own when no customer owns it.
    enum Unit: Hashable {
        case customer(String)
        case chain(String)

        var text: String {
            switch self {
            case .customer(let id): "customer:" + id
            case .chain(let id): "chain:" + id
            }
        }
    }

    /// The customers that own `chains` now.
    private static func owners(ofChains chains: [String], app: String, _ sql: any SQLExecutor) async throws -> [String] {
        guard !chains.isEmpty else { return [] }
        return try await sql.all(
            """
            SELECT app_user_id FROM purchase_owners \
            WHERE app_id = \(bind: app) AND original_transaction_id IN (\(binds: chains)) AND app_user_id IS NOT NULL
            """
        ) { row in try row.string("app_user_id") }
    }

    /// Recomputes the events of `units` from their records, keeps them, and moves the sums by
    /// the difference from those kept before. Events at or after `upcomingFromMs` (and trials
    /// still pending then) are also kept apart by time, for the reads of today and of pending
    /// trials.
    private static func recomputeChartUnits(_ units: [Unit], app: String, upcomingFromMs: Int64, _ sql: any SQLExecutor) async throws {
        guard !units.isEmpty else { return }
        let fresh = try await chartEvents(of: units, app: app, sql)
        let texts = units.map(\.text)
        var kept: [String: String] = [:]
        try await sql.query("SELECT unit, events FROM chart_units WHERE app_id = \(bind: app) AND unit IN (\(binds: texts))") { row in
            kept[try row.string("unit")] = try row.string("events")
        }
        var change: [ChartKey: ChartMetrics] = [:]
        var changed: [(unit: String, text: String, events: [ChartEvent])] = []
        for unit in units {
            let events = fresh[unit] ?? []
            let text = ChartEventText.encode(events)
            guard text != kept[unit.text] ?? "" else { continue }
            for event in try ChartEventText.decode(kept[unit.text] ?? "") { change[event.key, default: ChartMetrics()] -= event.metrics }
            for event in events { change[event.key, default: ChartMetrics()] += event.metrics }
            changed.append((unit.text, text, events))
        }
        guard !changed.isEmpty else { return }
        let names = changed.map(\.unit)
        try await sql.run("DELETE FROM chart_upcoming WHERE app_id = \(bind: app) AND unit IN (\(binds: names))")
        try await sql.run("DELETE FROM chart_units WHERE app_id = \(bind: app) AND unit IN (\(binds: names))")
        let stored = changed.filter { !$0.text.isEmpty }.map { [SQLValue.text(app), .text($0.unit), .text($0.text)] }
        for chunk in chunks(stored, of: 128) {
            try await sql.run("INSERT INTO chart_units (app_id, unit, events) VALUES \(SQLStatement.rows(chunk))")
        }
        var upcoming: [[SQLValue]] = []
        for (unit, _, events) in changed {
            for (ordinal, event) in events.enumerated()
            where event.atMs >= upcomingFromMs || (event.pendingUntilMs ?? .min) >= upcomingFromMs {
                upcoming.append(
                    [.text(app), .text(unit), .integer(Int64(ordinal)), .integer(event.atMs)] + keyValues(event.key)
                        + event.metrics.values.map { .integer($0) } + [.integer(event.pendingFromMs), .integer(event.pendingUntilMs)])
            }
        }
        for chunk in chunks(upcoming, of: 64) {
            try await sql.run(
                """
                INSERT INTO chart_upcoming (app_id, unit, ordinal, at_ms, \(raw: keyColumns), \(raw: metricColumns.joined(separator: ", ")), \
                pending_from_ms, pending_until_ms) VALUES \(SQLStatement.rows(chunk))
                """)
        }
        try await addToChartTotals(change.filter { !$0.value.isZero }, app: app, sql)
    }

    /// The events of each of `units`, from their records now.
    private static func chartEvents(of units: [Unit], app: String, _ sql: any SQLExecutor) async throws -> [Unit: [ChartEvent]] {
        var customers: [String] = []
        var chains: [String] = []
        for unit in units {
            switch unit {
            case .customer(let id): customers.append(id)
            case .chain(let id): chains.append(id)
            }
        }
        var transactions: [Unit: [ChartTransaction]] = [:]
        var firstSeen: [String: Int64] = [:]
        if !customers.isEmpty {
            let owned: SQLStatement = """
                p.original_transaction_id IN (SELECT original_transaction_id FROM purchase_owners \
                WHERE app_id = \(bind: app) AND app_user_id IN (\(binds: customers)))
                """
            for transaction in try await readChartTransactions(app: app, owned, sql) {
                if let owner = transaction.owner { transactions[.customer(owner), default: []].append(transaction) }
            }
            try await sql.query(
                "SELECT app_user_id, first_seen_ms FROM customers WHERE app_id = \(bind: app) AND app_user_id IN (\(binds: customers))"
            ) {
                row in firstSeen[try row.string("app_user_id")] = try row.int64("first_seen_ms")
            }
        }
        if !chains.isEmpty {
            for transaction in try await readChartTransactions(
                app: app, "p.original_transaction_id IN (\(binds: chains)) AND o.app_user_id IS NULL", sql)
            {
                transactions[.chain(transaction.originalTransactionId), default: []].append(transaction)
            }
        }
        var events: [Unit: [ChartEvent]] = [:]
        for unit in units {
            switch unit {
            case .customer(let id):
                events[unit] =
                    ChartEvent.of(transactions[unit] ?? [], firstSeenMs: firstSeen[id]) + (firstSeen[id].map { [.customer(firstSeenMs: $0)] } ?? [])
            case .chain:
                events[unit] = ChartEvent.of(transactions[unit] ?? [], firstSeenMs: nil)
            }
        }
        return events
    }

    private static func chunks<T>(_ values: [T], of size: Int) -> [ArraySlice<T>] {
        stride(from: 0, to: values.count, by: size).map { values[$0..<min($0 + size, values.count)] }
    }

    private static let keyColumns = "day, product_id, environment, country, currency, bucket"
    private static let metricColumns = ChartMetrics.Field.allCases.map(\.column)

    private static func keyValues(_ key: ChartKey) -> [SQLValue] {
        [.integer(key.day), .text(key.product), .text(key.environment), .text(key.country), .text(key.currency), .integer(Int64(key.bucket))]
    }

    /// Adds `change` to the daily sums. A sum is a 64-bit integer on both databases: a price
    /// counts as money only up to a billion units (``ChartEvent``), so a day's sum passes
    /// Int64's limit only after nine million such purchases in one day, product and country.
    private static func addToChartTotals(_ change: [ChartKey: ChartMetrics], app: String, _ sql: any SQLExecutor) async throws {
        let sums = metricColumns.map { "\($0) = chart_totals.\($0) + excluded.\($0)" }.joined(separator: ", ")
        for chunk in chunks(Array(change), of: 64) {
            let rows: [[SQLValue]] = chunk.map { key, metrics in [.text(app)] + keyValues(key) + metrics.values.map { .integer($0) } }
            try await sql.run(
                """
                INSERT INTO chart_totals (app_id, \(raw: keyColumns), \(raw: metricColumns.joined(separator: ", "))) VALUES \(SQLStatement.rows(rows)) \
                ON CONFLICT (app_id, \(raw: keyColumns)) DO UPDATE SET \(raw: sums)
                """)
        }
    }

    /// The SQL that keeps the rows `filter` admits (each starts with ` AND `).
    private static func conditions(_ filter: ChartFilter) -> SQLStatement {
        var conditions: SQLStatement = ""
        if let product = filter.product { conditions = conditions + " AND product_id = \(bind: product)" }
        if let environment = filter.environment { conditions = conditions + " AND environment = \(bind: environment)" }
        if let store = filter.store {
            let environments = ChartKey.environments(of: store)
            conditions =
                conditions
                + (environments.isEmpty
                    ? " AND environment NOT IN (\(binds: ["TestStore", "Stripe", "StripeTest"]))" : " AND environment IN (\(binds: environments))")
        }
        if let country = filter.country { conditions = conditions + " AND country = \(bind: country)" }
        return conditions
    }

    /// What a chart of `app` reads for the days `fromDay...throughDay`, at `nowMs`, from the kept
    /// sums (bring them up to date first: ``refreshChartTotalsFully(now:)``): the days before
    /// `fromDay` summed into one row per product, currency and length (a snapshot's starting
    /// point), each day of the range, and today's events after now taken back out; later days
    /// are never read. Every sum is made by the database, and a row read by position.
    public func chartTotals(app: String, filter: ChartFilter, fromDay: Int64, throughDay: Int64, nowMs: Int64) async throws -> ChartTotals {
        let lastDay = min(throughDay, ChartDay(milliseconds: nowMs).daysSince1970)
        let conditions = Self.conditions(filter)
        // PostgreSQL sums BIGINTs as NUMERIC: back to BIGINT, which every sum fits.
        let sums: SQLStatement = "\(raw: Self.metricColumns.map { "CAST(SUM(\($0)) AS BIGINT)" }.joined(separator: ", "))"
        func read(_ statement: SQLStatement, sign: Int64 = 1, day fixed: Int64? = nil) async throws -> [ChartTotals.Row] {
            try await database.report(statement, into: [ChartTotals.Row]()) { rows, row in
                let offset: Int32 = fixed == nil ? 1 : 0
                var metrics = ChartMetrics()
                for field in ChartMetrics.Field.allCases {
                    metrics[field] = sign &* (try row.integer(offset + 3 + Int32(field.rawValue), field.column) ?? 0)
                }
                rows.append(
                    ChartTotals.Row(
                        day: try fixed ?? row.integer(0, "day") ?? 0, product: try row.text(offset, "product_id") ?? "",
                        currency: try row.text(offset + 1, "currency") ?? "", bucket: Int(clamping: try row.integer(offset + 2, "bucket") ?? -1),
                        metrics: metrics))
            }
        }
        let before = try await read(
            """
            SELECT product_id, currency, bucket, \(sums) FROM chart_totals WHERE app_id = \(bind: app) AND day < \(bind: fromDay) \
            AND product_id <> ''\(conditions) GROUP BY product_id, currency, bucket
            """, day: fromDay - 1)
        let during = try await read(
            """
            SELECT day, product_id, currency, bucket, \(sums) FROM chart_totals WHERE app_id = \(bind: app) AND day >= \(bind: fromDay) \
            AND day <= \(bind: lastDay) AND product_id <> ''\(conditions) GROUP BY day, product_id, currency, bucket
            """)
        // Today's events after now, taken back out (a customer's first sight has no product).
        let later = try await read(
            """
            SELECT day, product_id, currency, bucket, \(sums) FROM chart_upcoming WHERE app_id = \(bind: app) AND at_ms > \(bind: nowMs) \
            AND at_ms < \(bind: ChartDay(daysSince1970: lastDay + 1).startMs) AND day >= \(bind: fromDay) AND day <= \(bind: lastDay) \
            AND (product_id = '' OR (1 = 1\(conditions))) GROUP BY day, product_id, currency, bucket
            """, sign: -1)
        var customers = try await database.report(
            """
            SELECT day, CAST(SUM(new_customers) AS BIGINT) FROM chart_totals WHERE app_id = \(bind: app) AND day >= \(bind: fromDay) \
            AND day <= \(bind: lastDay) AND product_id = '' GROUP BY day
            """, into: [Int64: Int64]()
        ) { days, row in days[try row.integer(0, "day") ?? 0] = try row.integer(1, "customers") ?? 0 }
        for row in later where row.product.isEmpty { customers[row.day, default: 0] &+= row.metrics[.newCustomers] }
        let pending = try await database.report(
            """
            SELECT day, COUNT(*) FROM chart_upcoming WHERE app_id = \(bind: app) AND pending_until_ms > \(bind: nowMs) \
            AND pending_from_ms <= \(bind: nowMs) AND at_ms <= \(bind: nowMs) AND day >= \(bind: fromDay) AND day <= \(bind: lastDay)\(conditions) \
            GROUP BY day
            """, into: [Int64: Int64]()
        ) { days, row in days[try row.integer(0, "day") ?? 0] = try row.integer(1, "pending") ?? 0 }
        return ChartTotals(rows: before + during + later.filter { !$0.product.isEmpty }, pendingByDay: pending, newCustomersByDay: customers)
    }
}

extension SQLStatement {
    /// `($1, $2), ($3, $4)`: rows of values for `INSERT … VALUES`.
    static func rows(_ rows: some Collection<[SQLValue]>) -> SQLStatement {
        var text = ""
        var values: [SQLValue] = []
        for (index, row) in rows.enumerated() {
            text += index == 0 ? "(" : ", ("
            for (position, value) in row.enumerated() {
                values.append(value)
                text += position == 0 ? "$\(values.count)" : ", $\(values.count)"
            }
            text += ")"
        }
        return SQLStatement(text, values)
    }
}
