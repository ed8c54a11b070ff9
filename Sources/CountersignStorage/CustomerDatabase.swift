import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation
import NIOConcurrencyHelpers

/// Reads and writes customers and their purchases. Every write runs in one database
/// transaction; a caller answers "recorded" only after ``record(_:app:poster:now:)`` returns,
/// that is after the commit.
public struct CustomerDatabase: Sendable {
    public let database: Database
    /// PostgreSQL's CustomerInfo reads, batched on each event loop (nil on SQLite).
    let postgresReads: PerEventLoop<ReadBatcher<LeanRequest, LeanRead>>?

    /// Reads of one batch at most (the arrays of one execution of ``LeanPostgresBatch``).
    static let largestReadBatch = 32
    /// Batches of CustomerInfo reads at PostgreSQL at once from each event loop; further reads
    /// wait for one to come back and go together. Two keep most of what one would save and leave
    /// a second batch going while one waits on a long history; the loop's other connections stay
    /// free for purchases (BENCHMARKS.md, decision 8).
    static let readBatchesPerLoop = 2

    /// The largest batch of CustomerInfo reads sent to PostgreSQL so far (0 on SQLite).
    var largestReadBatchSent: Int { postgresReads?.all.map(\.value.largestBatch).max() ?? 0 }

    public init(database: Database) {
        self.database = database
        if database.batchesReads {
            postgresReads = PerEventLoop { _ in
                ReadBatcher(maxInFlight: Self.readBatchesPerLoop, maxBatch: Self.largestReadBatch) { requests in
                    try await Self.leanBatch(requests, database: database)
                }
            }
        } else {
            postgresReads = nil
        }
    }

    /// Whether a customer last seen at `lastSeen` (milliseconds) needs no new `last_seen` at `now`.
    static func isRecent(_ lastSeen: Int64, now: Date) -> Bool { Ownership.isRecent(lastSeen, now: now.epochMilliseconds) }

    /// The customer's entitlements at `now`, as the customer `user` names (an alias answers as
    /// the customer it was merged into: the answer's `original_app_user_id` says which). An id
    /// never seen is recorded as a customer now (RevenueCat records a customer at first sight):
    /// its `first_seen`, and so the answer's ETag, stay the same on every later read. What a flood
    /// of made-up ids costs is bounded by the rate limits and the retention
    /// (``pruneCustomers(app:lastSeenBefore:limit:)``).
    ///
    /// A known customer seen within the hour is answered with reads only, outside a transaction:
    /// each statement sees committed data, and this is the hot path of every app launch.
    ///
    /// `firstLaunch`: the request looks like an app's first launch (an anonymous id and no
    /// cached ETag), so the customer is most likely new. Where one statement commits alone
    /// (PostgreSQL), the visit and the read are then that one statement
    /// (``VisitPostgresCustomer``), one round trip; otherwise, and for any other request, the
    /// read comes first and the visit only when it found the customer unknown or stale.
    public func customerInfo(app: AppConfiguration, user: String, now: Date, firstLaunch: Bool = false) async throws -> SubscriberResponse {
        let visitsInOneStatement = database.commitsStatementsAlone
        var seen: (first: Int64, last: Int64)?
        if !(firstLaunch && visitsInOneStatement) {
            // Seen within the hour: last_seen needs no update, so no write and no transaction.
            let read = try await leanRead(app: app, user: user)
            if let known = Self.customerInfo(read, app: app, user: user, now: now, accepts: { Self.isRecent($0, now: now) }) {
                return known
            }
            seen = read.seen
        }
        if visitsInOneStatement {
            if let info = try await visit(app: app, user: user, now: now) { return info }
            seen = nil  // no row of its own: an alias, answered as its customer below
        }
        // Seen over an hour ago, never seen, or an alias (which has no row of its own: asked
        // only when the id has none).
        var customer = user
        if seen == nil, let owner = try await database.withConnection({ sql in try await Self.aliasOwner(sql, app: app.id, alias: user) }) {
            if let known = try await leanCustomerInfo(app: app, user: owner, now: now, accepts: { Self.isRecent($0, now: now) }) { return known }
            if visitsInOneStatement, let info = try await visit(app: app, user: owner, now: now) { return info }
            customer = owner
        }
        return try await database.transaction { [customer] sql in
            // Merged meanwhile (a logIn racing this read): the merged customer answers.
            var id = customer
            if !(try await Self.customerExists(sql, app: app.id, user: id)) { id = try await Self.customerId(sql, app: app.id, user: id) }
            let seen = try await Self.touchCustomer(sql, app: app.id, user: id, now: now)
            let read = try await Self.leanRead(sql, app: app, user: id)
            return SubscriberResponse(
                appUserId: read.originalId ?? id, firstSeen: seen.first, lastSeen: seen.last, entitlements: read.entitlements(app: app, at: now),
                requestDate: now, stripePortalURL: app.stripe?.customerPortalURL)
        }
    }

    /// A visit of `user` and its CustomerInfo after it, in one PostgreSQL statement
    /// (``VisitPostgresCustomer``); nil when the id has no row of its own (an alias).
    private func visit(app: AppConfiguration, user: String, now: Date) async throws -> SubscriberResponse? {
        let visited = try await database.withConnection { sql in
            var read = LeanRead()
            try await sql.query(VisitPostgresCustomer.statement(app: app.id, user: user, now: now)) { row in try read.add(row) }
            return read
        }
        return Self.customerInfo(visited, app: app, user: user, now: now) { _ in true }
    }

    /// The CustomerInfo of a known customer (or of the customer an alias names), with reads
    /// only; nil for an id never seen.
    public func existingCustomerInfo(app: AppConfiguration, user: String, now: Date) async throws -> SubscriberResponse? {
        let customer = try await customerId(app: app.id, user: user)
        return try await leanCustomerInfo(app: app, user: customer, now: now) { _ in true }
    }

    /// The entitlements `user` holds at `now` (none for an unknown customer), from CustomerInfo's
    /// own read (batched on PostgreSQL).
    public func activeEntitlementIds(app: AppConfiguration, user: String, now: Date) async throws -> Set<String> {
        let customer = try await customerId(app: app.id, user: user)
        return try await leanRead(app: app, user: customer).entitlements(app: app, at: now).activeEntitlementIds
    }

    /// The number of purchase rows of `app` with this transaction id (in any environment), for
    /// tests and the admin API.
    public func purchaseCount(app: String, transactionId: String) async throws -> Int {
        try await database.withConnection { sql in
            try await sql.first("SELECT COUNT(*) AS n FROM purchases WHERE app_id = \(bind: app) AND transaction_id = \(bind: transactionId)") {
                try $0.int("n")
            } ?? 0
        }
    }

    /// The rows of the lean statement for `user`, added up.
    func leanRead(app: AppConfiguration, user: String) async throws -> LeanRead {
        guard let postgresReads else {
            let statement = Self.leanReaderStatement(app: app, user: user)
            guard let reader = database.sqliteReader else { throw StoredRowError(description: "no lean reader for this database") }
            return try reader.read { sql in
                var read = LeanRead()
                try sql.query(statement, rows: { row in try read.add(row) })
                return read
            }
        }
        return try await postgresReads.current.read(LeanRequest(app: app.id, user: user))
    }

    /// The CustomerInfo of a known customer in one statement: on SQLite through
    /// the lean reader (prepared once, no thread hop), on PostgreSQL straight on a pooled
    /// PostgresNIO connection, together with the reads that wait for one (``ReadBatcher``). Nil
    /// for an unknown customer or when `accepts` refuses its `last_seen`.
    func leanCustomerInfo(app: AppConfiguration, user: String, now: Date, accepts: @escaping @Sendable (Int64) -> Bool) async throws
        -> SubscriberResponse?
    {
        Self.customerInfo(try await leanRead(app: app, user: user), app: app, user: user, now: now, accepts: accepts)
    }

    /// The CustomerInfo a lean read adds up to; nil for an unknown customer or when `accepts`
    /// refuses its `last_seen`.
    static func customerInfo(_ read: LeanRead, app: AppConfiguration, user: String, now: Date, accepts: (Int64) -> Bool) -> SubscriberResponse? {
        guard let seen = read.seen, accepts(seen.last) else { return nil }
        return SubscriberResponse(
            appUserId: read.originalId ?? user, firstSeen: Date(epochMilliseconds: seen.first), lastSeen: Date(epochMilliseconds: seen.last),
            entitlements: read.entitlements(app: app, at: now), requestDate: now, stripePortalURL: app.stripe?.customerPortalURL)
    }
}
