import CountersignCore
import CountersignLedger
import Foundation
import NIOConcurrencyHelpers

/// Read-only connections to the embedded database for the hottest path, CustomerInfo.
///
/// Statements are prepared once per connection and kept, and a read runs synchronously on the
/// calling thread: reads of cached pages take microseconds, less than a hop to a thread pool
/// and back would cost. Writes go through the one read-write connection of ``Database``
/// (WAL: readers never block it, nor it them); a read begun after a write committed sees it.
final class SQLiteReader: Sendable {
    private let connections: [NIOLockedValueBox<SQLiteConnection>]
    private let next = NIOLockedValueBox(0)

    /// Opens `count` read-only connections to the database at `path` (already created and migrated).
    init(path: String, count: Int) throws {
        connections = try (0..<max(1, count)).map { _ in NIOLockedValueBox(try SQLiteConnection(path: path, readOnly: true)) }
    }

    /// Runs `body` with the executor of the next connection in turn (waiting for it if busy),
    /// synchronously. A single statement is a consistent read by itself; several need `BEGIN`
    /// and `COMMIT` around them.
    func read<T>(_ body: (SQLiteExecutor) throws -> T) throws -> T {
        let start = next.withLockedValue { value in
            defer { value = (value + 1) % connections.count }
            return value
        }
        return try connections[start].withLockedValue { connection in try body(SQLiteExecutor(connection: connection)) }
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
