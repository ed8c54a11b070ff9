// The SQLite library sqlite-nio compiles in (its symbols prefixed `sqlite_nio_`), used directly:
// one copy of SQLite in the process, since two copies do not see each other's POSIX locks on
// the same file.
import VaporCSQLite
import CountersignSQLiteSettings

/// A failure of SQLite itself, with its extended result code.
struct SQLiteFailure: Error, CustomStringConvertible {
    var code: Int32
    var description: String

    /// A UNIQUE or PRIMARY KEY constraint refused the write (SQLITE_CONSTRAINT_UNIQUE and
    /// SQLITE_CONSTRAINT_PRIMARYKEY, C macros Swift does not import).
    var isUniqueViolation: Bool {
        code == SQLITE_CONSTRAINT | (8 << 8) || code == SQLITE_CONSTRAINT | (6 << 8)
    }
}

/// One connection of the embedded SQLite with its prepared statements, used by one caller at a
/// time (its owner serializes): read-only for ``SQLiteReader``, read-write for the writer.
final class DirectSQLiteConnection: @unchecked Sendable {
    /// Statements kept per connection; past this, a statement is prepared for one use (the
    /// server's statements are far fewer: this only bounds what dynamic SQL could do).
    static let statementCacheLimit = 512

    private var handle: OpaquePointer?
    private var statements: [String: OpaquePointer] = [:]
    /// Statements written with numbered parameters (`$1`, `$2`, …), by that text; prepared with
    /// SQLite's own spelling of a numbered parameter, `?1`, `?2`, …
    private var numberedStatements: [String: OpaquePointer] = [:]

    init(path: String, readOnly: Bool) throws {
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        guard sqlite_nio_sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK else {
            let message = handle.map { String(cString: sqlite_nio_sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite_nio_sqlite3_close(handle)
            throw SQLiteFailure(code: SQLITE_CANTOPEN, description: "cannot open \(path)\(readOnly ? " for reading" : ""): \(message)")
        }
        sqlite_nio_sqlite3_busy_timeout(handle, 5000)
        // Kept statements keep their plans: without this SQLite prepares a statement again
        // whenever its planner has compared a bound value with another term (a join whose two
        // sides name the same parameter, for one), and a statement prepared on every use costs
        // what keeping it saves. The server's statements all read and write by key.
        guard countersign_sqlite_enable_qpsg(UnsafeMutableRawPointer(handle)) == 1 else {
            let failure = failure("cannot turn on the query planner stability guarantee")
            close()
            throw failure
        }
    }

    deinit { close() }

    func close() {
        for statement in statements.values { sqlite_nio_sqlite3_finalize(statement) }
        for statement in numberedStatements.values { sqlite_nio_sqlite3_finalize(statement) }
        statements.removeAll()
        numberedStatements.removeAll()
        sqlite_nio_sqlite3_close(handle)
        handle = nil
    }

    func reprepares() -> [String: Int] {
        statements.merging(numberedStatements) { kept, _ in kept }
            .mapValues { Int(sqlite_nio_sqlite3_stmt_status($0, SQLITE_STMTSTATUS_REPREPARE, 0)) }
    }

    private func failure(_ what: String) -> SQLiteFailure {
        SQLiteFailure(code: sqlite_nio_sqlite3_extended_errcode(handle), description: "\(what): \(String(cString: sqlite_nio_sqlite3_errmsg(handle)))")
    }

    /// Runs one statement (prepared once and kept) with `binds`, calling `row` for each result row.
    func query(_ sql: String, _ binds: [StoredValue], row: (SQLiteRowView) throws -> Void) throws {
        try run(sql, kept: \.statements, prepare: { sql }, binds, row: row)
    }

    /// Runs a statement written with numbered parameters, `$n` standing for `binds[n - 1]`
    /// (``NumberedStatement``'s text, as PostgreSQL reads it): kept by that text, so the text is
    /// rewritten for SQLite once, when first prepared.
    func query(numbered sql: String, _ binds: [StoredValue], row: (SQLiteRowView) throws -> Void) throws {
        try run(sql, kept: \.numberedStatements, prepare: { NumberedStatement.sqliteText(sql) }, binds, row: row)
    }

    private func run(_ key: String, kept cache: ReferenceWritableKeyPath<DirectSQLiteConnection, [String: OpaquePointer]>,
                     prepare text: () -> String, _ binds: [StoredValue], row: (SQLiteRowView) throws -> Void) throws {
        guard handle != nil else { throw SQLiteFailure(code: SQLITE_MISUSE, description: "the database connection is closed") }
        let statement: OpaquePointer
        let kept: Bool
        if let cached = self[keyPath: cache][key] {
            statement = cached
            kept = true
        } else {
            var prepared: OpaquePointer?
            kept = statements.count + numberedStatements.count < Self.statementCacheLimit
            let flags = kept ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
            guard sqlite_nio_sqlite3_prepare_v3(handle, text(), -1, flags, &prepared, nil) == SQLITE_OK, let prepared else {
                throw failure("cannot prepare a statement")
            }
            if kept { self[keyPath: cache][key] = prepared }
            statement = prepared
        }
        defer {
            if kept {
                sqlite_nio_sqlite3_reset(statement)
                sqlite_nio_sqlite3_clear_bindings(statement)
            } else {
                sqlite_nio_sqlite3_finalize(statement)
            }
        }
        for (index, value) in binds.enumerated() {
            let position = Int32(index + 1)
            // SQLITE_TRANSIENT: SQLite copies text and blobs before the bind returns.
            let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
            let result: Int32
            switch value {
            case .text(let text):
                result = sqlite_nio_sqlite3_bind_text(statement, position, text, -1, transient)
            case .integer(let number):
                result = sqlite_nio_sqlite3_bind_int64(statement, position, number)
            case .real(let number):
                result = sqlite_nio_sqlite3_bind_double(statement, position, number)
            case .blob(let bytes):
                result = bytes.withUnsafeBytes { sqlite_nio_sqlite3_bind_blob(statement, position, $0.baseAddress, Int32($0.count), transient) }
            case .null:
                result = sqlite_nio_sqlite3_bind_null(statement, position)
            }
            guard result == SQLITE_OK else { throw failure("cannot bind a value") }
        }
        let view = SQLiteRowView(statement: statement)
        while true {
            switch sqlite_nio_sqlite3_step(statement) {
            case SQLITE_ROW: try row(view)
            case SQLITE_DONE: return
            default: throw failure("a statement failed")
            }
        }
    }
}

/// A value bound to a statement.
enum StoredValue {
    case text(String)
    case integer(Int64)
    case real(Double)
    case blob([UInt8])
    case null
}

/// The current row of a statement, by column index (the order of the SELECT list).
struct SQLiteRowView {
    let statement: OpaquePointer

    var columnCount: Int32 { sqlite_nio_sqlite3_column_count(statement) }

    func name(_ column: Int32) -> String {
        sqlite_nio_sqlite3_column_name(statement, column).map { String(cString: $0) } ?? ""
    }

    func real(_ column: Int32) -> Double {
        sqlite_nio_sqlite3_column_double(statement, column)
    }

    func blob(_ column: Int32) -> [UInt8] {
        let count = Int(sqlite_nio_sqlite3_column_bytes(statement, column))
        guard count > 0, let bytes = sqlite_nio_sqlite3_column_blob(statement, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: bytes, count: count))
    }

    func type(_ column: Int32) -> Int32 {
        sqlite_nio_sqlite3_column_type(statement, column)
    }

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
