import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Logging
import NIOCore
import NIOPosix
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// The storage foundation, on SQLite and (when available) on a real PostgreSQL server.
@Suite("Database", .serialized)
struct DatabaseTests {
    static var logger: Logger { FreshDatabase.logger }

    static func withFreshDatabase(_ kind: TestDatabaseKind, _ body: @Sendable (DatabaseLocation) async throws -> Void) async throws {
        try await FreshDatabase.with(kind) { location, _ in try await body(location) }
    }

    static func insertPurchase(_ sql: any SQLExecutor, id: String) async throws {
        try await sql.run(
            """
            INSERT INTO purchases (transaction_id, app_id, original_transaction_id, product_id, product_type, environment, \
            signed_date_ms, signed_transaction, recorded_at_ms) \
            VALUES (\(bind: id), 'demo', \(bind: id), 'lifetime', 'nonConsumable', 'TestStore', 1, 'jws', 2)
            """)
    }

    static func purchaseCount(_ database: Database) async throws -> Int {
        try await database.withConnection { sql in try await sql.first("SELECT COUNT(*) AS n FROM purchases") { try $0.int("n") } ?? -1 }
    }

    @Test("migrations run once and are recorded; reopening does not run them again", arguments: TestDatabaseKind.available)
    func migrations(_ kind: TestDatabaseKind) async throws {
        try await Self.withFreshDatabase(kind) { location in
            let first = try await Database.open(location, logger: Self.logger, now: Date())
            #expect(try await Migrations.appliedVersions(on: first) == Migrations.all.map(\.version))
            try await first.close()
            let second = try await Database.open(location, logger: Self.logger, now: Date())
            #expect(try await Migrations.appliedVersions(on: second) == Migrations.all.map(\.version))
            try await second.close()
        }
    }

    /// Keeps the lines logged at warning or above.
    struct WarningCollector: LogHandler {
        let lines: Collected<String>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .warning

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            lines.add("\(event.level) \(event.message)")
        }
    }

    @Test(
        "opening a database warns of nothing: PostgreSQL's pools run before the migrations lease a connection", arguments: TestDatabaseKind.available)
    func quietOpen(_ kind: TestDatabaseKind) async throws {
        try await Self.withFreshDatabase(kind) { location in
            let warnings = Collected<String>()
            let logger = Logger(label: "test.quiet") { _ in WarningCollector(lines: warnings) }
            let database = try await Database.open(location, logger: logger, now: Date())
            try await database.close()
            #expect(warnings.all == [])
        }
    }

    @Test("migration 9 keeps every purchase row and keys them by app, environment and transaction id", arguments: TestDatabaseKind.available)
    func purchasesRekeyed(_ kind: TestDatabaseKind) async throws {
        try await Self.withFreshDatabase(kind) { location in
            let database = try await Database.open(location, logger: Self.logger, now: Date())
            for id in ["0", "1", "2"] { try await database.withConnection { try await Self.insertPurchase($0, id: id) } }
            // Its statements run again over a filled table (as over version 8's): nothing is lost.
            let nine = try #require(Migrations.all.first { $0.version == 9 })
            try await Migrations.run(
                on: database,
                migrations: [
                    Migrations.Migration(
                        version: 900, name: nine.name, statements: nine.statements, postgresStatements: nine.postgresStatements
                    )
                ], now: Date())
            #expect(try await Self.purchaseCount(database) == 3)
            // The same id in another app is another purchase; in the same app and environment it is refused.
            try await database.withConnection { sql in
                try await sql.run("UPDATE purchases SET app_id = 'other' WHERE transaction_id = '1'")
                try await Self.insertPurchase(sql, id: "1")
            }
            #expect(try await Self.purchaseCount(database) == 4)
            await #expect(throws: (any Error).self) { try await database.withConnection { try await Self.insertPurchase($0, id: "2") } }
            try await database.close()
        }
    }

    @Test(
        "PostgreSQL stores signed transactions out of line without trying to compress them",
        .enabled(if: TestDatabaseKind.available.contains(.postgres), "COUNTERSIGN_TEST_POSTGRES_URL is not set"))
    func signedTransactionsUncompressed() async throws {
        try await Self.withFreshDatabase(.postgres) { location in
            let database = try await Database.open(location, logger: Self.logger, now: Date())
            let storage = try await database.withConnection { sql in
                try await sql.all(
                    """
                    SELECT c.relname AS table_name, a.attstorage::text AS storage FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
                    WHERE a.attname = 'signed_transaction' AND c.relname IN ('purchases', 'test_store_feed') AND c.relkind = 'r' \
                    AND pg_table_is_visible(c.oid) ORDER BY c.relname
                    """
                ) { "\(try $0.string("table_name"))=\(try $0.string("storage"))" }
            }
            // 'e': external (out of line, uncompressed); 'x', PostgreSQL's default for text, compresses first.
            #expect(storage == ["purchases=e", "test_store_feed=e"])
            try await database.close()
        }
    }

    @Test("SQLite: the expiry check, run every second, reads by expiry and by renewal state, never every purchase")
    func expiryCheckPlans() async throws {
        try await Self.withFreshDatabase(.sqlite) { location in
            let database = try await Database.open(location, logger: Self.logger, now: Date())
            for statement in CustomerDatabase.expiryStatements(after: 1, upTo: 2, limit: 500) {
                let plan = try await database.withConnection { sql in
                    try await sql.all(SQLStatement("EXPLAIN QUERY PLAN " + statement.text, statement.values)) { try $0.string("detail") }
                }
                #expect(!plan.contains { $0.hasPrefix("SCAN p") || $0.hasPrefix("SCAN purchases") }, "\(plan)")
                #expect(plan.contains { $0.contains("purchases_by_expiry") } || plan.contains { $0.hasPrefix("SCAN g") }, "\(plan)")
            }
            try await database.close()
        }
    }

    @Test("the database refuses a second row with the same transaction id", arguments: TestDatabaseKind.available)
    func transactionIdIsUnique(_ kind: TestDatabaseKind) async throws {
        try await Self.withFreshDatabase(kind) { location in
            let database = try await Database.open(location, logger: Self.logger, now: Date())
            try await database.transaction { try await Self.insertPurchase($0, id: "1000") }
            await #expect(throws: (any Error).self) {
                try await database.transaction { try await Self.insertPurchase($0, id: "1000") }
            }
            #expect(try await Self.purchaseCount(database) == 1)
            try await database.close()
        }
    }

    @Test("a transaction that throws leaves nothing behind", arguments: TestDatabaseKind.available)
    func rollback(_ kind: TestDatabaseKind) async throws {
        struct Abort: Error {}
        try await Self.withFreshDatabase(kind) { location in
            let database = try await Database.open(location, logger: Self.logger, now: Date())
            await #expect(throws: Abort.self) {
                try await database.transaction { sql in
                    try await Self.insertPurchase(sql, id: "2000")
                    throw Abort()
                }
            }
            #expect(try await Self.purchaseCount(database) == 0)
            try await database.close()
        }
    }

    @Test("committed rows survive closing and reopening", arguments: TestDatabaseKind.available)
    func durability(_ kind: TestDatabaseKind) async throws {
        try await Self.withFreshDatabase(kind) { location in
            let database = try await Database.open(location, logger: Self.logger, now: Date())
            try await database.transaction { try await Self.insertPurchase($0, id: "3000") }
            try await database.close()
            let reopened = try await Database.open(location, logger: Self.logger, now: Date())
            #expect(try await Self.purchaseCount(reopened) == 1)
            try await reopened.close()
        }
    }

    @Test("50 concurrent transactions each commit exactly their own row", arguments: TestDatabaseKind.available)
    func concurrentTransactions(_ kind: TestDatabaseKind) async throws {
        try await Self.withFreshDatabase(kind) { location in
            let database = try await Database.open(location, logger: Self.logger, now: Date())
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<50 {
                    group.addTask { try await database.transaction { try await Self.insertPurchase($0, id: "4\(index)") } }
                }
                try await group.waitForAll()
            }
            #expect(try await Self.purchaseCount(database) == 50)
            try await database.close()
        }
    }

    @Test("concurrent transactions committed together: each failure rolls back its own writes only", arguments: TestDatabaseKind.available)
    func failuresAmongConcurrentTransactions(_ kind: TestDatabaseKind) async throws {
        struct Abort: Error {}
        try await Self.withFreshDatabase(kind) { location in
            let database = try await Database.open(location, logger: Self.logger, now: Date())
            try await database.transaction { try await Self.insertPurchase($0, id: "taken") }
            // On SQLite the writer takes whatever queued while it was busy as one batch: 90
            // at once make batches, with failures inside them.
            let outcomes = await withTaskGroup(of: (Int, String).self) { group in
                for index in 0..<90 {
                    group.addTask {
                        do {
                            let id = try await database.transaction { sql in
                                try await Self.insertPurchase(sql, id: "5\(index)")
                                if index % 3 == 0 { throw Abort() }
                                if index % 5 == 0 { try await Self.insertPurchase(sql, id: "taken") }
                                return "5\(index)"
                            }
                            return (index, id)
                        } catch is Abort {
                            return (index, "aborted")
                        } catch {
                            return (index, Database.isUniqueViolation(error) ? "duplicate" : "other: \(error)")
                        }
                    }
                }
                return await group.reduce(into: [Int: String]()) { $0[$1.0] = $1.1 }
            }
            for index in 0..<90 {
                let expected = index % 3 == 0 ? "aborted" : index % 5 == 0 ? "duplicate" : "5\(index)"
                #expect(outcomes[index] == expected, "transaction \(index)")
            }
            let stored = try await database.withConnection { sql in
                try await sql.all("SELECT transaction_id FROM purchases") { try $0.string("transaction_id") }
            }
            let committed = (0..<90).filter { $0 % 3 != 0 && $0 % 5 != 0 }.map { "5\($0)" }
            #expect(Set(stored) == Set(committed + ["taken"]))
            if kind == .sqlite {
                #expect(database.largestSQLiteBatch.withLockedValue { $0 } > 1, "no two transactions were committed together")
            }
            try await database.close()
        }
    }

    @Test("the SQLite writer: WAL, a commit on disk before it returns, foreign keys, savepoint journals in memory, checkpoints every 4000 pages")
    func sqliteWriterSettings() async throws {
        try await Self.withFreshDatabase(.sqlite) { location in
            let database = try await Database.open(location, logger: Self.logger, now: Date())
            let settings = try await database.withConnection { sql in
                var values: [String: String] = [:]
                for pragma in ["journal_mode", "synchronous", "foreign_keys", "temp_store", "wal_autocheckpoint"] {
                    values[pragma] = try await sql.first("PRAGMA \(raw: pragma)") { try $0.string(pragma) }
                }
                return values
            }
            // synchronous 2 is FULL; temp_store 2 is MEMORY.
            #expect(settings == ["journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "temp_store": "2", "wal_autocheckpoint": "4000"])
            try await database.close()
        }
    }

    @Test(
        "--database arguments",
        arguments: [
            ("postgres://u:secret@db:5432/cs", DatabaseLocation.postgres(url: "postgres://u:secret@db:5432/cs")),
            (
                "postgres+uds://u:secret@localhost/var/run/postgresql/.s.PGSQL.5432#cs",
                .postgres(url: "postgres+uds://u:secret@localhost/var/run/postgresql/.s.PGSQL.5432#cs")
            ),
            ("sqlite:///var/lib/cs.sqlite", .sqlite(path: "/var/lib/cs.sqlite")),
            ("data/cs.sqlite", .sqlite(path: "data/cs.sqlite")),
        ])
    func locations(_ argument: String, _ expected: DatabaseLocation) throws {
        #expect(try DatabaseLocation(argument: argument) == expected)
        #expect(!"\(expected)".contains("secret"))
    }

    @Test("a PostgreSQL URL names a TCP endpoint or a Unix domain socket")
    func postgresEndpoints() throws {
        let tcp = try Database.clientConfiguration(url: "postgres://u:secret@db:5433/cs?sslmode=disable")
        #expect(tcp.host == "db" && tcp.port == 5433 && tcp.unixSocketPath == nil)
        #expect(tcp.username == "u" && tcp.password == "secret" && tcp.database == "cs")
        let socket = try Database.clientConfiguration(url: "postgres+uds://u:secret@localhost/var/run/postgresql/.s.PGSQL.5432#cs")
        #expect(socket.unixSocketPath == "/var/run/postgresql/.s.PGSQL.5432" && socket.host == nil)
        #expect(socket.username == "u" && socket.password == "secret" && socket.database == "cs")
        #expect(
            "\(DatabaseLocation.postgres(url: "postgres+uds://u:secret@localhost/var/run/postgresql/.s.PGSQL.5432#cs"))"
                == "postgres+uds://u@localhost/var/run/postgresql/.s.PGSQL.5432#cs")
    }

    @Test("PostgreSQL pools: a request on an event loop gets that loop's pool; off the loops they are taken in turn")
    func poolPerEventLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let pools = PostgresPools(
            configuration: try Database.clientConfiguration(url: "postgres://u:p@db/cs"), group: group,
            totalConnections: 8, logger: Self.logger)
        let loops = Array(group.makeIterator())
        var seen: [ObjectIdentifier] = []
        for loop in loops {
            let first = try await loop.submit { ObjectIdentifier(pools.client) }.get()
            let again = try await loop.submit { ObjectIdentifier(pools.client) }.get()
            #expect(first == again)
            seen.append(first)
        }
        #expect(Set(seen).count == 2)
        let offLoop = [ObjectIdentifier(pools.client), ObjectIdentifier(pools.client)]
        #expect(Set(offLoop) == Set(seen))
        try await group.shutdownGracefully()
    }

    @Test("unknown database schemes are refused")
    func unknownScheme() {
        #expect(throws: ConfigurationError.self) { _ = try DatabaseLocation(argument: "mysql://x") }
        #expect(throws: ConfigurationError("--database sqlite:// needs a file path")) { _ = try DatabaseLocation(argument: "sqlite://") }
    }
}
