import Logging
import NIOCore
import NIOPosix
import SQLiteKit
import SQLKit
import VaporCSQLite

/// sql-kit's `SQLDatabase` on a ``DirectSQLiteConnection``: the storage code builds its queries
/// with sql-kit as it does for PostgreSQL, and here they run synchronously on the calling thread
/// with their statements kept prepared. (sqlite-nio prepares every statement again and runs it
/// on a thread pool, two thread switches a statement: most of what a purchase cost.) Binds and
/// rows go through sqlite-kit's own encoder and decoder, so what is written and read back is
/// what sqlite-kit would write and read.
///
/// The caller serializes use of the connection (``Database`` holds its lock around every use).
struct DirectSQLiteDatabase: SQLDatabase {
    let connection: DirectSQLiteConnection
    let logger: Logger

    var eventLoop: any EventLoop { MultiThreadedEventLoopGroup.singleton.any() }
    var dialect: any SQLDialect { SQLiteDialect() }
    var queryLogLevel: Logger.Level? { nil }

    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> ()) -> EventLoopFuture<Void> {
        do {
            try run(query, onRow)
            return eventLoop.makeSucceededVoidFuture()
        } catch {
            return eventLoop.makeFailedFuture(error)
        }
    }

    func execute(sql query: any SQLExpression, _ onRow: @escaping @Sendable (any SQLRow) -> ()) async throws {
        try run(query, onRow)
    }

    /// Runs `query` now, on the calling thread.
    func run(_ query: any SQLExpression, _ onRow: @Sendable (any SQLRow) -> ()) throws {
        let (sql, binds) = serialize(query)
        let encoder = SQLiteDataEncoder()
        let values = try binds.map { bind -> StoredValue in
            switch try encoder.encode(bind) {
            case .integer(let number): .integer(Int64(number))
            case .float(let number): .real(number)
            case .text(let text): .text(text)
            case .blob(let buffer): .blob(Array(buffer.readableBytesView))
            case .null: .null
            }
        }
        try connection.query(sql, values) { view in onRow(DirectSQLiteRow(view)) }
    }
}

/// A result row copied out of its statement (sql-kit hands rows to closures that may keep them).
struct DirectSQLiteRow: SQLRow {
    let allColumns: [String]
    let values: [SQLiteData]

    init(_ view: SQLiteRowView) {
        let count = view.columnCount
        allColumns = (0..<count).map(view.name)
        values = (0..<count).map { column in
            switch view.type(column) {
            case SQLITE_INTEGER: .integer(SQLiteInt64(view.integer(column) ?? 0))
            case SQLITE_FLOAT: .float(view.real(column))
            case SQLITE_TEXT: .text(view.text(column) ?? "")
            case SQLITE_BLOB: .blob(ByteBuffer(bytes: view.blob(column)))
            default: .null
            }
        }
    }

    private func value(_ column: String) -> SQLiteData? {
        allColumns.firstIndex(of: column).map { values[$0] }
    }

    func contains(column: String) -> Bool {
        allColumns.contains(column)
    }

    func decodeNil(column: String) throws -> Bool {
        (value(column) ?? .null) == .null
    }

    func decode<D: Decodable>(column: String, as type: D.Type) throws -> D {
        guard let value = value(column) else {
            throw SQLiteFailure(code: SQLITE_ERROR, description: "no column \(column) in the row (it has \(allColumns.joined(separator: ", ")))")
        }
        return try SQLiteDataDecoder().decode(D.self, from: value)
    }
}
