import PostgresNIO

/// A value bound to a statement: text or an integer, either possibly NULL (the schema has no
/// other column types: times are milliseconds, flags are 0 or 1), or, on PostgreSQL only, an
/// array of text (`text[]`, the batched CustomerInfo read's).
enum SQLValue: Sendable, Hashable {
    case text(String?)
    case integer(Int64?)
    case texts([String])
}

/// SQL text written with PostgreSQL's numbered parameters (`$1`, `$2`, … each as often as
/// needed) and their values: the one statement type of both databases. SQLite reads the text with
/// each `$n` spelled `?n` (``sqliteText(_:)``); PostgreSQL as it is. The text holds no other `$`
/// followed by a digit.
///
/// Written as a string literal, `\(bind: value)` appends the next parameter with its value,
/// `\(binds: values)` a comma-separated list of them, `\(fragment)` another statement with its
/// parameters numbered on, and `\(raw: text)` text as it is (never a value from a request).
struct SQLStatement: Sendable, ExpressibleByStringInterpolation {
    private(set) var text: String
    private(set) var values: [SQLValue]
    /// The PostgreSQL prepared statement this one runs as (its name and text are the type's).
    private(set) var prepared: (any PreparedSQL.Type)?

    init(_ text: String, _ values: [SQLValue] = [], prepared: (any PreparedSQL.Type)? = nil) {
        self.text = text
        self.values = values
        self.prepared = prepared
    }

    init(stringLiteral text: String) {
        self.init(text)
    }

    init(stringInterpolation: Interpolation) {
        self.init(stringInterpolation.text, stringInterpolation.values)
    }

    struct Interpolation: StringInterpolationProtocol {
        var text = ""
        var values: [SQLValue] = []

        init(literalCapacity: Int, interpolationCount: Int) {
            text.reserveCapacity(literalCapacity + 4 * interpolationCount)
        }

        mutating func appendLiteral(_ literal: String) { text += literal }

        mutating func appendInterpolation(bind value: SQLValue) {
            values.append(value)
            text += "$\(values.count)"
        }

        mutating func appendInterpolation(bind value: String?) { appendInterpolation(bind: .text(value)) }
        mutating func appendInterpolation(bind value: Int64?) { appendInterpolation(bind: .integer(value)) }
        mutating func appendInterpolation(bind value: Int?) { appendInterpolation(bind: .integer(value.map(Int64.init))) }

        mutating func appendInterpolation(binds values: [String]) {
            for (index, value) in values.enumerated() {
                if index > 0 { text += ", " }
                appendInterpolation(bind: .text(value))
            }
        }

        mutating func appendInterpolation(_ fragment: SQLStatement) {
            let offset = values.count
            text += SQLStatement.respelled(fragment.text) { "$\($0 + offset)" }
            values += fragment.values
        }

        mutating func appendInterpolation(raw text: String) { self.text += text }
    }

    /// `self` followed by `other`, its parameters numbered on.
    static func + (statement: SQLStatement, other: SQLStatement) -> SQLStatement {
        "\(statement)\(other)"
    }

    /// The text cut at its parameters: each piece of literal text and the parameter after it.
    static func pieces(_ text: String) -> [(literal: Substring, parameter: Int?)] {
        // Over the UTF-8 view: `$` and digits are ASCII, so their positions are valid String
        // indices, and no grapheme breaking is done (this runs for every statement prepared).
        let utf8 = text.utf8
        var pieces: [(Substring, Int?)] = []
        var start = utf8.startIndex
        var cursor = utf8.startIndex
        while let dollar = utf8[cursor...].firstIndex(of: UInt8(ascii: "$")) {
            var end = utf8.index(after: dollar)
            var number = 0
            while end < utf8.endIndex, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(utf8[end]) {
                if number < 1_000_000 { number = number * 10 + Int(utf8[end] - UInt8(ascii: "0")) }  // no overflow
                end = utf8.index(after: end)
            }
            cursor = end
            guard end > utf8.index(after: dollar) else { continue }
            pieces.append((text[start..<dollar], number))
            start = end
        }
        pieces.append((text[start...], nil))
        return pieces
    }

    /// The text with SQLite's spelling of each numbered parameter (`?n` for `$n`). SQLite reads
    /// `$1` as a *named* parameter, numbered in the order names first appear, which is not `1`
    /// when `$2` comes first.
    static func sqliteText(_ text: String) -> String {
        respelled(text) { "?\($0)" }
    }

    /// `text` with each parameter `$n` written as `spell(n)`, the rest as it is.
    static func respelled(_ text: String, _ spell: (Int) -> String) -> String {
        var rewritten = ""
        for piece in pieces(text) {
            rewritten += piece.literal
            if let number = piece.parameter { rewritten += spell(number) }
        }
        return rewritten
    }

    /// PostgreSQL: `statements` as one, each but the last a data-modifying `WITH` clause, their
    /// parameters numbered on (a statement's values are its `$1…$n`, each number used). One
    /// statement is atomic and one round trip.
    static func together(_ statements: [SQLStatement]) -> SQLStatement {
        var clauses: [String] = []
        var values: [SQLValue] = []
        var offset = 0
        for statement in statements {
            var highest = 0
            clauses.append(
                respelled(statement.text) { number in
                    highest = max(highest, number)
                    return "$\(number + offset)"
                })
            values += statement.values
            offset += highest
        }
        guard let last = clauses.popLast() else { return SQLStatement("", []) }
        guard !clauses.isEmpty else { return SQLStatement(last, values) }
        let with = clauses.enumerated().map { "w\($0.offset) AS (\($0.element))" }.joined(separator: ", ")
        return SQLStatement("WITH \(with) \(last)", values)
    }
}

/// A result row, read by position (the order of the SELECT list) or by column name. Rows are
/// read inside the executor's callback and never kept.
protocol StoredRow {
    func text(_ position: Int32, _ name: String) throws -> String?
    func integer(_ position: Int32, _ name: String) throws -> Int64?
    /// The position of the column `name`; nil when the row has none.
    func position(of name: String) -> Int32?
}

struct StoredRowError: Error, CustomStringConvertible {
    var description: String
}

extension StoredRow {
    private func required(_ name: String) throws -> Int32 {
        guard let position = position(of: name) else { throw StoredRowError(description: "the row has no column \(name)") }
        return position
    }

    /// The text of column `name`, nil for NULL.
    func text(_ name: String) throws -> String? { try text(required(name), name) }
    /// The integer of column `name`, nil for NULL.
    func integer(_ name: String) throws -> Int64? { try integer(required(name), name) }

    /// The text of column `name`, which may not be NULL.
    func string(_ name: String) throws -> String {
        guard let value = try text(name) else { throw StoredRowError(description: "\(name) is NULL") }
        return value
    }

    /// The integer of column `name`, which may not be NULL.
    func int64(_ name: String) throws -> Int64 {
        guard let value = try integer(name) else { throw StoredRowError(description: "\(name) is NULL") }
        return value
    }

    func int(_ name: String) throws -> Int { Int(try int64(name)) }
}

/// Where statements run: a connection of either database, inside or outside a transaction
/// (``Database/withConnection(_:)``, ``Database/transaction(_:)``).
protocol SQLExecutor: Sendable {
    var dialect: Database.Dialect { get }
    /// Whether ``runTogether(_:prepared:)`` sends its statements as one (and runs `prepared`).
    var combinesWrites: Bool { get }
    /// Runs `statement`, calling `row` with each result row.
    func query(_ statement: SQLStatement, _ row: (any StoredRow) throws -> Void) async throws
    /// Runs the writes `statements` in order, their rows unread: on PostgreSQL as one statement
    /// (``SQLStatement/together(_:)``: atomic and one round trip), run as `prepared` when given
    /// (whose text must be theirs together); on SQLite one after the other, on the caller's
    /// transaction.
    func runTogether(_ statements: [SQLStatement], prepared: (any PreparedSQL.Type)?) async throws
    /// Keeps a second server from migrating at the same time until the transaction ends.
    func lockForMigration() async throws
}

extension SQLExecutor {
    /// Runs a statement whose rows, if any, are not read.
    func run(_ statement: SQLStatement) async throws {
        try await query(statement) { _ in }
    }

    /// Every row, each made into a `T`.
    func all<T>(_ statement: SQLStatement, _ make: (any StoredRow) throws -> T) async throws -> [T] {
        var found: [T] = []
        try await query(statement) { found.append(try make($0)) }
        return found
    }

    /// The first row made into a `T`; nil when there is none.
    func first<T>(_ statement: SQLStatement, _ make: (any StoredRow) throws -> T) async throws -> T? {
        var found: T?
        try await query(statement) { row in if found == nil { found = try make(row) } }
        return found
    }

    /// How many rows the statement answered (a `RETURNING` list, say).
    func count(_ statement: SQLStatement) async throws -> Int {
        var count = 0
        try await query(statement) { _ in count += 1 }
        return count
    }
}

/// A statement PostgreSQL prepares once per connection under a constant name (``name``;
/// PostgresNIO's default, the type's name, is built anew on every execution), then only binds
/// and executes. On SQLite every statement is kept prepared anyway.
protocol PreparedSQL {
    static var name: String { get }
    static var sql: String { get }
}

extension PreparedSQL {
    /// The statement with these values, to run prepared on PostgreSQL.
    static func statement(_ values: [SQLValue]) -> SQLStatement {
        SQLStatement(sql, values, prepared: Self.self)
    }

    /// Runs `statement` as this prepared statement on a PostgreSQL connection.
    static func execute(_ statement: SQLStatement, on connection: PostgresConnection, _ row: (any StoredRow) throws -> Void) async throws {
        for try await found in try await connection.execute(Prepared<Self>(values: statement.values), logger: connection.logger) {
            try row(PostgresStoredRow(row: found.makeRandomAccess()))
        }
    }
}

/// PostgresNIO's side of a ``PreparedSQL``.
private struct Prepared<Statement: PreparedSQL>: PostgresPreparedStatement {
    static var name: String { Statement.name }
    static var sql: String { Statement.sql }
    typealias Row = PostgresRow

    let values: [SQLValue]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: values.count)
        for value in values { value.append(to: &bindings) }
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}
