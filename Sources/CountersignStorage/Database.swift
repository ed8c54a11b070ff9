import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO
import ServiceLifecycle

/// The server's database: SQLite or PostgreSQL behind one executor (``SQLExecutor``) and one
/// statement type (``SQLStatement``), with the few dialect differences kept in the statements
/// and in ``Migrations``.
///
/// SQLite runs on one read-write connection in WAL mode with `synchronous=FULL`, so a committed
/// purchase survives a crash; every use is serialized, which also keeps a transaction's
/// statements together. Its statements run on the caller's thread, prepared once
/// (``SQLiteConnection``); only a commit, which waits on the disk, goes to NIO's thread
/// pool, and transactions queued meanwhile commit with it (group commit). PostgreSQL uses
/// PostgresNIO's `PostgresClient` (its own pool, prepared statements kept per connection); a
/// transaction holds one connection throughout.
public final class Database: Sendable {
    public enum Dialect: String, Sendable {
        case sqlite
        case postgres
    }

    public let location: DatabaseLocation
    public var dialect: Dialect {
        switch backend {
        case .sqlite: .sqlite
        case .postgres: .postgres
        }
    }

    /// A single write statement commits alone and atomically, and is worth running outside a
    /// transaction: on PostgreSQL `BEGIN` and `COMMIT` are round trips of their own; SQLite's one
    /// writer commits a transaction as cheaply (and group-commits queued ones).
    public var commitsStatementsAlone: Bool { dialect == .postgres }

    /// A purchase's answer is best read on the writer, inside the purchase's transaction:
    /// SQLite's read-only connections drop their page cache whenever the database changed, and
    /// the writer's holds the pages the purchase just wrote.
    var readsAnswersOnWriter: Bool { dialect == .sqlite }

    /// CustomerInfo reads are batched into one statement per round trip (PostgreSQL,
    /// ``ReadBatcher``); SQLite reads them on the caller's thread (``sqliteReader``).
    var batchesReads: Bool { dialect == .postgres }

    private enum Backend: Sendable {
        case sqlite(SQLiteConnection, AsyncLock)
        /// The pools and the task running them (cancelled to close them).
        case postgres(PostgresPools, Task<Void, Never>)
    }

    private let backend: Backend
    /// Read-only connections for the CustomerInfo path (SQLite only; see ``SQLiteReader``).
    let sqliteReader: SQLiteReader?
    /// A read-only connection of its own for reports (SQLite only; see ``report(_:)``).
    private let sqliteReports: SQLiteReader?
    /// SQLite transactions waiting for the writer (see ``commitTogether(_:on:)``).
    private let sqliteQueue = NIOLockedValueBox<[WaitingTransaction]>([])
    /// The most transactions committed together so far (for tests and benchmarks).
    let largestSQLiteBatch = NIOLockedValueBox(0)
    /// Statements sent to PostgreSQL so far, `BEGIN` and `COMMIT` included: each is a round
    /// trip (for tests that hold a path to its count).
    let postgresRoundTrips = NIOLockedValueBox(0)

    /// How often each statement the SQLite writer keeps was prepared again since it was first
    /// prepared (SQLite does so when it judges a bound value may change the plan): a statement
    /// prepared on every use costs what keeping it saves. Nil on PostgreSQL; for tests.
    func sqliteWriterReprepares() async -> [String: Int]? {
        guard case .sqlite(let connection, let lock) = backend else { return nil }
        return await lock.withLock { connection.reprepares() }
    }

    private init(location: DatabaseLocation, backend: Backend, sqliteReader: SQLiteReader? = nil, sqliteReports: SQLiteReader? = nil) {
        self.location = location
        self.backend = backend
        self.sqliteReader = sqliteReader
        self.sqliteReports = sqliteReports
    }

    /// PostgreSQL connections an instance keeps unless told otherwise (`serve --database-connections`).
    public static let defaultPostgresConnections = 16

    /// Opens the database and brings its schema up to date at `now` (the caller's clock).
    /// `postgresConnections` is the instance's PostgreSQL connection budget (unused on SQLite).
    public static func open(
        _ location: DatabaseLocation, logger: Logger, postgresConnections: Int = defaultPostgresConnections, now: Date
    ) async throws -> Database {
        let database: Database
        switch location {
        case .sqlite(let path):
            try restrictToOwner(sqlitePath: path)
            let connection = try SQLiteConnection(path: path, readOnly: false)
            // WAL: readers do not block the writer; FULL: a commit is on disk before it returns.
            // temp_store=MEMORY keeps the savepoints' sub-journal of a group commit in memory:
            // SQLite spills it to a temporary file past 64 KiB (BENCHMARKS.md, decision 4). The sub-journal only serves a
            // rollback to a savepoint of the open transaction, never recovery after a crash.
            // wal_autocheckpoint=4000 (a WAL of about 16 MB, where SQLite's default is 1000
            // pages): a checkpoint copies each page changed since the last one into the database
            // file once, so the pages every purchase touches (the ends of the tables, the upper
            // levels of their indexes) are copied a quarter as often (BENCHMARKS.md, decision 4).
            // secure_delete=OFF: the system's SQLite (Debian's) is built to zero every freed page,
            // writes a purchase does not need (a deleted row's bytes are the operator's own data).
            for pragma in [
                "PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON", "PRAGMA temp_store=MEMORY",
                "PRAGMA wal_autocheckpoint=4000", "PRAGMA secure_delete=OFF",
            ] {
                try connection.query(pragma, []) { _ in }
            }
            let reader = try SQLiteReader(path: path, count: System.coreCount)
            database = Database(
                location: location, backend: .sqlite(connection, AsyncLock()), sqliteReader: reader,
                sqliteReports: try SQLiteReader(path: path, count: 1))
        case .postgres(let url):
            let pools = PostgresPools(configuration: try clientConfiguration(url: url), totalConnections: postgresConnections, logger: logger)
            database = Database(location: location, backend: .postgres(pools, pools.start()))
        }
        do {
            try await Migrations.run(on: database, now: now)
        } catch {
            try? await database.close()
            throw error
        }
        return database
    }

    /// The database holds every customer's purchases: its file is created readable by the owner
    /// only (0600), and an existing one (with its WAL and shared-memory files) is tightened to
    /// that. SQLite gives the WAL and shared-memory files it creates the main file's permissions.
    static func restrictToOwner(sqlitePath path: String) throws {
        let descriptor = Foundation.open(path, O_CREAT | O_RDWR, 0o600)
        guard descriptor >= 0 else { throw ConfigurationError("cannot create the database file \(path) (errno \(errno))") }
        #if canImport(Glibc)
        Glibc.close(descriptor)
        #else
        Darwin.close(descriptor)
        #endif
        for file in [path, path + "-wal", path + "-shm"] where FileManager.default.fileExists(atPath: file) {
            guard chmod(file, 0o600) == 0 else { throw ConfigurationError("cannot restrict \(file) to its owner (errno \(errno))") }
        }
    }

    /// Runs `body` outside a transaction (each statement commits on its own).
    func withConnection<T: Sendable>(_ body: @Sendable (any SQLExecutor) async throws -> T) async throws -> T {
        switch backend {
        case .sqlite(let connection, let lock):
            return try await lock.withLock { try await body(SQLiteExecutor(connection: connection)) }
        case .postgres(let pools, _):
            // The task group that bounds the wait runs `body` in a child task: it does not
            // outlive this call, which the group's scope guarantees.
            let roundTrips = postgresRoundTrips
            return try await withoutActuallyEscaping(body) { body in
                try await Self.leasing(from: pools.client, within: Self.connectionWait) { connection in
                    try await body(PostgresExecutor(connection: connection, roundTrips: roundTrips))
                }
            }
        }
    }

    /// Runs a read-only report (the dashboard's counts, which read a range that grows with the
    /// app) where it holds up nothing else: each row is added into `initial` by `add`. On SQLite
    /// it runs on a read-only connection of its own on NIO's thread pool: a count of a second
    /// holds neither the writer (purchases) nor the CustomerInfo readers nor a thread of the
    /// cooperative pool. On PostgreSQL, on a pooled connection like any read.
    func report<T: Sendable>(
        _ statement: SQLStatement, into initial: T,
        _ add: @escaping @Sendable (inout T, any StoredRow) throws -> Void
    ) async throws -> T {
        guard let sqliteReports else {
            return try await withConnection { sql in
                var result = initial
                try await sql.query(statement) { try add(&result, $0) }
                return result
            }
        }
        return try await NIOThreadPool.singleton.runIfActive {
            try sqliteReports.read { sql in
                var result = initial
                try sql.query(statement, rows: { try add(&result, $0) })
                return result
            }
        }
    }

    /// Runs `body` in one transaction: committed when it returns, rolled back when it throws.
    /// Whatever the caller answers after this returns is backed by committed data.
    func transaction<T: Sendable>(_ body: @escaping @Sendable (any SQLExecutor) async throws -> T) async throws -> T {
        if case .sqlite(let connection, let lock) = backend {
            let result = NIOLockedValueBox<T?>(nil)
            let waiting = WaitingTransaction { sql in
                let value = try await body(sql)
                result.withLockedValue { $0 = value }
            }
            sqliteQueue.withLockedValue { $0.append(waiting) }
            try await lock.withLock {
                // Whoever holds the writer commits everything queued by then, its own included
                // unless an earlier holder already did.
                let batch = sqliteQueue.withLockedValue { queue in
                    defer { queue.removeAll() }
                    return queue
                }
                if !batch.isEmpty {
                    largestSQLiteBatch.withLockedValue { $0 = max($0, batch.count) }
                    await Self.commitTogether(batch, on: connection)
                }
            }
            switch waiting.outcome.withLockedValue({ $0 }) {
            case .failure(let error): throw error
            case .success: if let value = result.withLockedValue({ $0 }) { return value }
            case nil: break
            }
            throw TransactionLost()
        }
        return try await withConnection { sql in
            try await sql.run("BEGIN")
            do {
                let result = try await body(sql)
                try await sql.run("COMMIT")
                return result
            } catch {
                try? await sql.run("ROLLBACK")
                throw error
            }
        }
    }

    /// A queued transaction that ended without an outcome: a bug, never expected.
    struct TransactionLost: Error, CustomStringConvertible {
        var description: String { "a queued SQLite transaction ended without an outcome" }
    }

    /// An SQLite transaction queued for the writer: its body, and how it ended once its batch
    /// is committed or rolled back.
    private final class WaitingTransaction: Sendable {
        let body: @Sendable (any SQLExecutor) async throws -> Void
        let outcome = NIOLockedValueBox<Result<Void, any Error>?>(nil)

        init(_ body: @escaping @Sendable (any SQLExecutor) async throws -> Void) {
            self.body = body
        }
    }

    /// Group commit. A commit waits for the disk (`fsync` of the WAL), which is most of what a
    /// small write costs, so the transactions that queued while the writer was busy run in one
    /// SQLite transaction, each inside a savepoint: one that throws is rolled back alone and
    /// gets its error; the others are committed together, and none hears of success before that
    /// commit is on disk. A failed commit fails them all (nothing of the batch was stored).
    private static func commitTogether(_ batch: [WaitingTransaction], on connection: SQLiteConnection) async {
        let sql = SQLiteExecutor(connection: connection)
        func run(_ statement: String) throws { try connection.query(statement, []) { _ in } }
        var done: [WaitingTransaction] = []
        do {
            // IMMEDIATE takes SQLite's write lock at once, so two writers never deadlock upgrading.
            try run("BEGIN IMMEDIATE")
            for waiting in batch {
                if batch.count > 1 { try run("SAVEPOINT waiting") }
                do {
                    try await waiting.body(sql)
                    if batch.count > 1 { try run("RELEASE waiting") }
                    done.append(waiting)
                } catch {
                    guard batch.count > 1 else { throw error }
                    try run("ROLLBACK TO waiting")
                    try run("RELEASE waiting")
                    waiting.outcome.withLockedValue { $0 = .failure(error) }
                }
            }
            // Off the cooperative threads: this is the call that waits for the disk.
            try await NIOThreadPool.singleton.runIfActive { try connection.query("COMMIT", []) { _ in } }
            for waiting in done { waiting.outcome.withLockedValue { $0 = .success(()) } }
        } catch {
            try? run("ROLLBACK")
            // Those rolled back alone keep their own error; every other one fails with this.
            for waiting in batch {
                waiting.outcome.withLockedValue { outcome in if outcome == nil { outcome = .failure(error) } }
            }
        }
    }

    /// Runs `body` in a transaction, again (up to `attempts` times) when it loses a race on a
    /// unique key: two servers recording one purchase at once both insert it; the loser's retry
    /// sees the winner's committed row and answers "already recorded".
    func transactionRetryingUniqueViolations<T: Sendable>(
        attempts: Int = 3, _ body: @escaping @Sendable (any SQLExecutor) async throws -> T
    ) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await transaction(body)
            } catch  where attempt < attempts && Self.isUniqueViolation(error) {
                attempt += 1
            }
        }
    }

    /// Whether `error` is a unique or primary key violation (SQLSTATE 23505 on PostgreSQL).
    static func isUniqueViolation(_ error: any Error) -> Bool {
        if let postgres = error as? PSQLError { return postgres.serverInfo?[.sqlState] == "23505" }
        if let sqlite = error as? SQLiteFailure { return sqlite.isUniqueViolation }
        return false
    }

    /// Drops everything in a PostgreSQL database's `public` schema: the test suites' fresh start.
    public func dropPublicSchema() async throws {
        guard dialect == .postgres else { throw ConfigurationError("only a PostgreSQL database is emptied by dropping its schema") }
        try await withConnection { sql in
            try await sql.run("DROP SCHEMA public CASCADE")
            try await sql.run("CREATE SCHEMA public")
        }
    }

    public func close() async throws {
        switch backend {
        case .sqlite(let connection, let lock):
            sqliteReader?.close()
            sqliteReports?.close()
            await lock.withLock { connection.close() }
        case .postgres(_, let running):
            running.cancel()
            // The pools end once every connection is closed. A statement PostgresNIO lost (see
            // PostgresExecutor) keeps its connection leased for good, and with it the process's
            // exit: the close waits 10 seconds at most, then the process goes on without it.
            let ended = NIOLockedValueBox(false)
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeOnce = { @Sendable in
                    if ended.withLockedValue({ done in
                        defer { done = true }; return !done
                    }) {
                        continuation.resume()
                    }
                }
                Task {
                    await running.value
                    resumeOnce()
                }
                Task {
                    try? await Task.sleep(for: .seconds(10))
                    resumeOnce()
                }
            }
        }
    }
}
