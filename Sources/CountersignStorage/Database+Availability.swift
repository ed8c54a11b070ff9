import NIOConcurrencyHelpers
import PostgresNIO

/// When the database is away: a bounded wait for a PostgreSQL connection, and which errors mean
/// "try again" (answered 503 with `Retry-After`) rather than "the request is wrong".
extension Database {
    /// How long a caller waits for a PostgreSQL connection before it is told the database is
    /// unavailable (``Unavailable``): PostgresNIO's pool waits without end while the server is
    /// away (restarting, failing over), and a request that hangs is worse than a prompt 503 with
    /// `Retry-After`, which the SDK retries.
    public static let connectionWait: Duration = .seconds(5)

    /// The database could not be reached in time, or dropped the connection (PostgreSQL
    /// restarting, shutting down, out of connections): the same request may be tried again.
    public struct Unavailable: Error, CustomStringConvertible {
        public var description: String
    }

    fileprivate enum LeaseState { case waiting, leased, gaveUp }

    /// `body` on a connection of `client`'s, leased within `wait` (else ``Unavailable``). Once
    /// leased, `body` runs to its end whatever the time: only the wait is bounded, never a query.
    static func leasing<T: Sendable>(
        from client: PostgresClient, within wait: Duration, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let lease = NIOLockedValueBox(LeaseState.waiting)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await client.withConnection { connection in
                    let leased = lease.withLockedValue { state in
                        if state == .waiting { state = .leased }
                        return state == .leased
                    }
                    guard leased else { throw CancellationError() }
                    return try await body(connection)
                }
            }
            group.addTask {
                try? await Task.sleep(for: wait)
                let gaveUp = lease.withLockedValue { state in
                    if state == .waiting { state = .gaveUp }
                    return state == .gaveUp
                }
                if gaveUp { throw Unavailable(description: "no PostgreSQL connection within \(wait)") }
                return nil
            }
            while let next = try await group.next() {
                if let result = next {
                    group.cancelAll()
                    return result
                }
            }
            throw Unavailable(description: "the PostgreSQL lease ended without a result")
        }
    }

    /// Whether `error` says the database is away for now rather than that the request is wrong:
    /// no connection in time (``Unavailable``), a connection lost or refused, or PostgreSQL's
    /// SQLSTATE classes 08 (connection exception), 57 (operator intervention: shutting down,
    /// starting up, terminated by an administrator) and 53 (insufficient resources: too many
    /// connections). The server answers those 503 with `Retry-After`.
    public static func isUnavailable(_ error: any Error) -> Bool {
        if error is Unavailable { return true }
        guard let postgres = error as? PSQLError else { return false }
        switch postgres.code {
        case .serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown, .poolClosed:
            return true
        case .server:
            guard let state = postgres.serverInfo?[.sqlState] else { return false }
            return state.hasPrefix("08") || state.hasPrefix("57") || state.hasPrefix("53")
        default:
            return false
        }
    }
}
