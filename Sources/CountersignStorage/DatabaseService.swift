import ServiceLifecycle

/// The database as a service of the server's `ServiceGroup`: open while the group runs, closed
/// once it shuts down. Hummingbird stops the HTTP server first (services stop in reverse order
/// and the server is the last one added), so no request is left using the database it closes.
public struct DatabaseService: Service {
    let database: Database

    public init(database: Database) {
        self.database = database
    }

    public func run() async throws {
        // Graceful shutdown or cancellation: either way the database is closed.
        try? await gracefulShutdown()
        try await database.close()
    }
}
