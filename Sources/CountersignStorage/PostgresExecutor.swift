import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation
import NIOConcurrencyHelpers
import PostgresNIO

/// Statements on one PostgreSQL connection (PostgresNIO's), with their values bound as
/// PostgreSQL's binary parameters: text as `text`, integers as `int8`.
struct PostgresExecutor: SQLExecutor {
    let connection: PostgresConnection
    /// Counts the statements sent (``Database/postgresRoundTrips``).
    let roundTrips: NIOLockedValueBox<Int>

    var dialect: Database.Dialect { .postgres }
    var combinesWrites: Bool { true }

    func query(_ statement: SQLStatement, _ row: (any StoredRow) throws -> Void) async throws {
        // PostgresNIO hands a statement to the connection's channel without a promise for the
        // write: on a channel already closed (PostgreSQL terminated the connection, as a restart
        // does, between two statements of one lease) no handler ever sees it, and the statement
        // waits for good. Seen once in about 3,000 purchases posted across a restart; a closed
        // connection is refused here instead, as the database being away.
        guard !connection.isClosed else {
            throw Database.Unavailable(description: "the PostgreSQL connection was closed (the server restarted or ended it)")
        }
        roundTrips.withLockedValue { $0 += 1 }
        if let prepared = statement.prepared {
            try await prepared.execute(statement, on: connection, row)
            return
        }
        var bindings = PostgresBindings(capacity: statement.values.count)
        for value in statement.values { value.append(to: &bindings) }
        let rows = try await connection.query(PostgresQuery(unsafeSQL: statement.text, binds: bindings), logger: connection.logger)
        for try await found in rows { try row(PostgresStoredRow(row: found.makeRandomAccess())) }
    }

    func runTogether(_ statements: [SQLStatement], prepared: (any PreparedSQL.Type)?) async throws {
        guard statements.count > 1 || prepared != nil else {
            for statement in statements { try await query(statement) { _ in } }
            return
        }
        let together = SQLStatement.together(statements)
        guard let prepared else { return try await query(together) { _ in } }
        assert(together.text == prepared.sql, "\(prepared.name) is not these statements together")
        try await query(prepared.statement(together.values)) { _ in }
    }

    /// A transaction-scoped advisory lock, released at commit.
    func lockForMigration() async throws {
        try await query("SELECT pg_advisory_xact_lock(727361)") { _ in }
    }
}

extension SQLValue {
    func append(to bindings: inout PostgresBindings) {
        switch self {
        case .text(let value): bindings.append(value)
        case .integer(let value): bindings.append(value)
        case .texts(let values): bindings.append(values)
        }
    }
}

/// A PostgresNIO row. `integer` reads PostgreSQL's `smallint`, `integer` and `bigint`.
struct PostgresStoredRow: StoredRow {
    let row: PostgresRandomAccessRow

    func text(_ position: Int32, _ name: String) throws -> String? { try row[Int(position)].decode(String?.self) }
    func integer(_ position: Int32, _ name: String) throws -> Int64? { try row[Int(position)].decode(Int64?.self) }

    func position(of name: String) -> Int32? {
        row.indices.first { row[$0].columnName == name }.map(Int32.init)
    }
}

extension Database {
    /// A pool's settings from a PostgreSQL URL: `postgres://` (or `postgresql://`) with user,
    /// password, host, port (5432), database (the path), and `sslmode` (or `tlsmode`):
    /// `disable`, `prefer` (the default) or `require` (`allow` reads as `prefer`, `verify-ca`
    /// and `verify-full` as `require`); or `postgres+uds://user:pass@localhost/SOCKET#database`
    /// for a Unix domain socket (its path as the URL's path, the database as its fragment).
    ///
    /// The connections run with PostgreSQL's JIT compilation off. It compiles a statement whose
    /// estimated cost passes `jit_above_cost` (100,000 by default) on every execution, about
    /// 15 ms each time, and nothing the server runs is long enough to gain from it
    /// (BENCHMARKS.md, decision 9).
    static func clientConfiguration(url text: String) throws -> PostgresClient.Configuration {
        guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(),
            ["postgres", "postgresql", "postgres+uds", "postgresql+uds"].contains(scheme)
        else {
            throw ConfigurationError("a PostgreSQL URL starts with postgres:// or postgres+uds://")
        }
        guard let user = url.user, !user.isEmpty else { throw ConfigurationError("the PostgreSQL URL needs a user") }
        var configuration: PostgresClient.Configuration
        if scheme.hasSuffix("+uds") {
            guard !url.path.isEmpty else { throw ConfigurationError("a postgres+uds:// URL needs the socket's path") }
            configuration = PostgresClient.Configuration(
                unixSocketPath: url.path, username: user, password: url.password, database: url.fragment.flatMap { $0.isEmpty ? nil : $0 }
            )
        } else {
            guard let host = url.host, !host.isEmpty else { throw ConfigurationError("the PostgreSQL URL needs a host") }
            let database = String(url.path.drop { $0 == "/" })
            let options = Dictionary((url.queryItems ?? []).map { ($0.name, $0.value ?? "") }) { _, last in last }
            let tls: PostgresClient.Configuration.TLS
            switch options["sslmode"] ?? options["tlsmode"] ?? "prefer" {
            case "disable": tls = .disable
            case "prefer", "allow": tls = .prefer(.makeClientConfiguration())
            case "require", "verify-ca", "verify-full": tls = .require(.makeClientConfiguration())
            case let mode: throw ConfigurationError("sslmode \(mode) is none of disable, prefer, require")
            }
            configuration = PostgresClient.Configuration(
                host: host, port: url.port ?? 5432, username: user, password: url.password,
                database: database.isEmpty ? nil : database, tls: tls
            )
        }
        configuration.options.additionalStartupParameters.append(("jit", "off"))
        return configuration
    }
}
