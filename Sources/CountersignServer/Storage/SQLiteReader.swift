import CountersignCore
import Foundation
import NIOConcurrencyHelpers
// The SQLite library sqlite-nio compiles in (its symbols prefixed `sqlite_nio_`): the readers
// must use the very library the writer uses, since two copies of SQLite in one process do not
// see each other's POSIX locks on the same file.
import VaporCSQLite

/// Read-only connections to the embedded database for the hottest path, CustomerInfo.
///
/// sql-kit over sqlite-nio costs a request three times what it needs: every query's SQL text is
/// serialized again from a builder tree, every statement is prepared again, and each one hops to
/// a thread pool and back. Here statements are prepared once per connection and kept, and a
/// read runs synchronously on the calling thread: reads of cached pages take microseconds, less
/// than the hop they replace. Writes stay on the one sqlite-nio connection (WAL: readers never
/// block it, nor it them); a read begun after a write committed sees it.
final class SQLiteReader: Sendable {
    private let connections: [NIOLockedValueBox<ReadConnection>]
    private let next = NIOLockedValueBox(0)

    /// Opens `count` read-only connections to the database at `path` (already created and migrated).
    init(path: String, count: Int) throws {
        connections = try (0..<max(1, count)).map { _ in NIOLockedValueBox(try ReadConnection(path: path)) }
    }

    /// Runs `body` on the next connection in turn (waiting for it if busy). A single statement
    /// is a consistent read by itself; several need `BEGIN` and `COMMIT` around them.
    func read<T>(_ body: (ReadConnection) throws -> T) throws -> T {
        let start = next.withLockedValue { value in
            defer { value = (value + 1) % connections.count }
            return value
        }
        return try connections[start].withLockedValue { connection in try body(connection) }
    }

    func close() {
        for connection in connections { connection.withLockedValue { $0.close() } }
    }

    /// For each statement kept (by its SQL text), how many times SQLite had to prepare it again,
    /// over all connections: a reprepare on every use would cost what the cache saves (tests
    /// check there is none).
    func reprepares() -> [String: Int] {
        connections.reduce(into: [:]) { total, box in
            total.merge(box.withLockedValue { $0.reprepares() }, uniquingKeysWith: +)
        }
    }
}

struct SQLiteReadError: Error, CustomStringConvertible {
    var description: String
}

/// One read-only connection with its prepared statements, used under its box's lock only.
final class ReadConnection: @unchecked Sendable {
    private var handle: OpaquePointer?
    private var statements: [String: OpaquePointer] = [:]

    init(path: String) throws {
        let flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX
        guard sqlite_nio_sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK else {
            let message = handle.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite_nio_sqlite3_close(handle)
            throw SQLiteReadError(description: "cannot open \(path) for reading: \(message)")
        }
        sqlite_nio_sqlite3_busy_timeout(handle, 5000)
    }

    deinit { close() }

    func close() {
        for statement in statements.values { sqlite_nio_sqlite3_finalize(statement) }
        statements.removeAll()
        sqlite_nio_sqlite3_close(handle)
        handle = nil
    }

    func reprepares() -> [String: Int] {
        statements.mapValues { Int(sqlite_nio_sqlite3_stmt_status($0, SQLITE_STMTSTATUS_REPREPARE, 0)) }
    }

    private func failure(_ what: String) -> SQLiteReadError {
        SQLiteReadError(description: "\(what): \(String(cString: sqlite_nio_sqlite3_errmsg(handle)))")
    }

    /// Runs a statement (prepared once and kept) with text and integer binds, calling `row` for
    /// each result row.
    func query(_ sql: String, _ binds: [StoredValue], row: (SQLiteRowView) throws -> Void) throws {
        let statement: OpaquePointer
        if let cached = statements[sql] {
            statement = cached
        } else {
            var prepared: OpaquePointer?
            guard sqlite_nio_sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &prepared, nil) == SQLITE_OK,
                  let prepared
            else { throw failure("cannot prepare a read") }
            statements[sql] = prepared
            statement = prepared
        }
        defer {
            sqlite_nio_sqlite3_reset(statement)
            sqlite_nio_sqlite3_clear_bindings(statement)
        }
        for (index, value) in binds.enumerated() {
            let position = Int32(index + 1)
            let result: Int32
            switch value {
            case .text(let text):
                // SQLITE_TRANSIENT: SQLite copies the text before this call returns.
                result = sqlite_nio_sqlite3_bind_text(statement, position, text, -1, unsafeBitCast(-1, to: sqlite3_destructor_type.self))
            case .integer(let number):
                result = sqlite_nio_sqlite3_bind_int64(statement, position, number)
            }
            guard result == SQLITE_OK else { throw failure("cannot bind a value") }
        }
        let view = SQLiteRowView(statement: statement)
        while true {
            switch sqlite_nio_sqlite3_step(statement) {
            case SQLITE_ROW: try row(view)
            case SQLITE_DONE: return
            default: throw failure("a read failed")
            }
        }
    }
}

/// A bound value of the lean readers.
enum StoredValue {
    case text(String)
    case integer(Int64)
}

/// The current row of a statement, by column index (the order of the SELECT list).
struct SQLiteRowView {
    let statement: OpaquePointer

    func isNull(_ column: Int32) -> Bool {
        sqlite_nio_sqlite3_column_type(statement, column) == SQLITE_NULL
    }

    func integer(_ column: Int32) -> Int64? {
        isNull(column) ? nil : sqlite_nio_sqlite3_column_int64(statement, column)
    }

    func text(_ column: Int32) -> String? {
        guard !isNull(column), let bytes = sqlite_nio_sqlite3_column_text(statement, column) else { return nil }
        let count = Int(sqlite_nio_sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }
}
