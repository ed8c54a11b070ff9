import CountersignServer
import CountersignStorage
import Foundation
import Logging

/// Gives each storage or server test an empty database of the kind asked for. Tests on the one
/// PostgreSQL test database take turns (they reset its schema), across suites and test targets.
public enum FreshDatabase {
    public static let logger: Logger = {
        var logger = Logger(label: "test.database")
        logger.logLevel = .warning
        return logger
    }()

    private static let postgresTurns = AsyncLock()

    /// Runs `body` with the location of an empty database; SQLite lives in a temporary directory
    /// that `body` also gets (the server's data directory).
    public static func with(_ kind: TestDatabaseKind, _ body: @Sendable (DatabaseLocation, URL) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("countersign-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        switch kind {
        case .sqlite:
            try await body(.embedded(in: directory), directory)
        case .postgres:
            let location = DatabaseLocation.postgres(url: TestDatabaseKind.postgresURL!)
            try await postgresTurns.withLock {
                let database = try await Database.open(location, logger: logger, now: Date())
                try await database.dropPublicSchema()
                try await database.close()
                try await body(location, directory)
            }
        }
    }
}
