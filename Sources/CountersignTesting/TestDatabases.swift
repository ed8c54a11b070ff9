import Foundation

/// The databases storage tests run on: SQLite always; PostgreSQL when
/// `COUNTERSIGN_TEST_POSTGRES_URL` names a server (`.ci/run` starts one). Tests on PostgreSQL
/// reset its `public` schema, so point the variable at a throwaway database.
public enum TestDatabaseKind: String, Sendable, CaseIterable, CustomStringConvertible {
    case sqlite
    case postgres

    public static let postgresURL = ProcessInfo.processInfo.environment["COUNTERSIGN_TEST_POSTGRES_URL"]

    /// The kinds available here; prints why PostgreSQL is skipped when it is.
    public static let available: [TestDatabaseKind] = {
        if postgresURL == nil {
            print("skipping PostgreSQL storage tests: COUNTERSIGN_TEST_POSTGRES_URL is not set (.ci/run sets it)")
            return [.sqlite]
        }
        return [.sqlite, .postgres]
    }()

    public var description: String { rawValue }
}
