// The system's SQLite (Debian's libsqlite3-dev, the SDK's on Apple platforms), through this
// package's system-library module: one copy of SQLite in the process, since two copies do not
// see each other's POSIX locks on the same file.
import CSQLite
import Foundation

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
final class SQLiteConnection: @unchecked Sendable {
    /// Statements kept per connection; past this, a statement is prepared for one use (the
    /// server's statements are far fewer: this only bounds what dynamic SQL could do).
    static let statementCacheLimit = 512

    private var handle: OpaquePointer?
    /// Kept statements by their text as written (``SQLStatement``'s numbered parameters), each
    /// prepared with SQLite's own spelling of a numbered parameter, `?1`, `?2`, …
    private var statements: [String: OpaquePointer] = [:]

    /// The process-wide settings (``countersign_sqlite_configure``), made once before the
    /// first connection opens; refused (and left as they are) if something else used SQLite first.
    private static let configured: Int32 = countersign_sqlite_configure()

    init(path: String, readOnly: Bool) throws {
        _ = Self.configured
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        guard sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close(handle)
            throw SQLiteFailure(code: SQLITE_CANTOPEN, description: "cannot open \(path)\(readOnly ? " for reading" : ""): \(message)")
        }
        sqlite3_busy_timeout(handle, 5000)
        // Kept statements keep their plans: without this SQLite prepares a statement again
        // whenever its planner has compared a bound value with another term (a join whose two
        // sides name the same parameter, for one), and a statement prepared on every use costs
        // what keeping it saves. The server's statements all read and write by key.
        guard countersign_sqlite_enable_qpsg(handle) == 1 else {
            let failure = failure("cannot turn on the query planner stability guarantee")
            close()
            throw failure
        }
    }

    deinit { close() }

    func close() {
        for statement in statements.values { sqlite3_finalize(statement) }
        statements.removeAll()
        sqlite3_close(handle)
        handle = nil
    }

    func reprepares() -> [String: Int] {
        statements.mapValues { Int(sqlite3_stmt_status($0, SQLITE_STMTSTATUS_REPREPARE, 0)) }
    }

    private func failure(_ what: String) -> SQLiteFailure {
        SQLiteFailure(code: sqlite3_extended_errcode(handle), description: "\(what): \(String(cString: sqlite3_errmsg(handle)))")
    }

    /// Runs a statement written with numbered parameters, `$n` standing for `binds[n - 1]`
    /// (``SQLStatement``'s text, as PostgreSQL reads it), calling `row` for each result row. Kept
    /// prepared by that text, so the text is rewritten for SQLite once, when first prepared.
    func query(_ sql: String, _ binds: [SQLValue], row: (SQLiteRowView) throws -> Void) throws {
        guard handle != nil else { throw SQLiteFailure(code: SQLITE_MISUSE, description: "the database connection is closed") }
        let statement: OpaquePointer
        let kept: Bool
        if let cached = statements[sql] {
            statement = cached
            kept = true
        } else {
            var prepared: OpaquePointer?
            kept = statements.count < Self.statementCacheLimit
            let flags = kept ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
            guard sqlite3_prepare_v3(handle, SQLStatement.sqliteText(sql), -1, flags, &prepared, nil) == SQLITE_OK, let prepared else {
                throw failure("cannot prepare a statement")
            }
            if kept { statements[sql] = prepared }
            statement = prepared
        }
        defer {
            if kept {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
            } else {
                sqlite3_finalize(statement)
            }
        }
        for (index, value) in binds.enumerated() {
            let position = Int32(index + 1)
            // SQLITE_TRANSIENT: SQLite copies text and blobs before the bind returns.
            let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
            let result: Int32
            switch value {
            case .text(let text?):
                result = sqlite3_bind_text(statement, position, text, -1, transient)
            case .integer(let number?):
                result = sqlite3_bind_int64(statement, position, number)
            case .text(nil), .integer(nil):
                result = sqlite3_bind_null(statement, position)
            case .texts:
                throw SQLiteFailure(code: SQLITE_MISMATCH, description: "SQLite has no arrays to bind")
            }
            guard result == SQLITE_OK else { throw failure("cannot bind a value") }
        }
        let view = SQLiteRowView(statement: statement)
        while true {
            switch sqlite3_step(statement) {
            case SQLITE_ROW: try row(view)
            case SQLITE_DONE: return
            default: throw failure("a statement failed")
            }
        }
    }
}

/// The current row of a statement: read in place, by column index (the order of the SELECT
/// list) or name. SQLite converts as its `sqlite3_column_*` functions do.
struct SQLiteRowView: StoredRow {
    let statement: OpaquePointer

    private func isNull(_ column: Int32) -> Bool {
        sqlite3_column_type(statement, column) == SQLITE_NULL
    }

    func integer(_ column: Int32, _ name: String = "") -> Int64? {
        isNull(column) ? nil : sqlite3_column_int64(statement, column)
    }

    func text(_ column: Int32, _ name: String = "") -> String? {
        guard !isNull(column), let bytes = sqlite3_column_text(statement, column) else { return nil }
        let count = Int(sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    func position(of name: String) -> Int32? {
        (0..<sqlite3_column_count(statement)).first { column in
            sqlite3_column_name(statement, column).map { strcmp($0, name) == 0 } ?? false
        }
    }
}

/// Statements on the embedded database's connection, run on the calling thread. The caller
/// serializes use of the connection (``Database`` holds its lock around every use).
struct SQLiteExecutor: SQLExecutor {
    let connection: SQLiteConnection

    var dialect: Database.Dialect { .sqlite }
    var combinesWrites: Bool { false }

    func query(_ statement: SQLStatement, _ row: (any StoredRow) throws -> Void) throws {
        try connection.query(statement.text, statement.values) { try row($0) }
    }

    /// The same with the row's concrete type, for the in-process readers' hot path: each column
    /// read is a direct call, not one through an existential.
    func query(_ statement: SQLStatement, rows row: (SQLiteRowView) throws -> Void) throws {
        try connection.query(statement.text, statement.values, row: row)
    }

    func runTogether(_ statements: [SQLStatement], prepared: (any PreparedSQL.Type)?) throws {
        for statement in statements { try query(statement) { _ in } }
    }

    /// The one writer connection already serializes every transaction.
    func lockForMigration() {}
}
