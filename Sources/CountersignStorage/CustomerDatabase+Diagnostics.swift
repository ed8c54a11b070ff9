import CountersignCore
import Foundation

/// Verification-failure telemetry from SDKs: counts by app, day (UTC), reason and mode.
extension CustomerDatabase {
    public struct FailureCount: Codable, Sendable, Hashable {
        public var day: String
        public var reason: String
        public var mode: String
        public var count: Int64

        public init(day: String, reason: String, mode: String, count: Int64) {
            self.day = day
            self.reason = reason
            self.mode = mode
            self.count = count
        }

        enum CodingKeys: String, CodingKey {
            case day, reason, mode, count = "failure_count"
        }
    }

    /// `2026-11-22`: the UTC day of `date`.
    public static func day(_ date: Date) -> String {
        String(WireDate.format(date).prefix(10))
    }

    /// Adds reported failures to the day's counts, all in one transaction.
    public func addVerificationFailures(app: String, counts: [(reason: String, mode: String, count: Int)], at now: Date) async throws {
        let day = Self.day(now)
        try await database.transaction { sql in
            for entry in counts {
                // Both dialects have the same upsert.
                try await sql.run(
                    """
                    INSERT INTO verification_failures (app_id, day, reason, mode, failure_count)
                    VALUES (\(bind: app), \(bind: day), \(bind: entry.reason), \(bind: entry.mode), \(bind: Int64(entry.count)))
                    ON CONFLICT (app_id, day, reason, mode)
                    DO UPDATE SET failure_count = verification_failures.failure_count + excluded.failure_count
                    """)
            }
        }
    }

    /// The counts of the last `days` days (today included), newest day first.
    public func verificationFailures(app: String, days: Int, now: Date) async throws -> [FailureCount] {
        let first = Self.day(now.addingTimeInterval(-Double(max(days - 1, 0)) * 86_400))
        return try await database.withConnection { sql in
            try await sql.all(
                """
                SELECT day, reason, mode, failure_count FROM verification_failures WHERE app_id = \(bind: app) AND day >= \(bind: first) \
                ORDER BY day DESC, reason, mode
                """
            ) { row in
                FailureCount(
                    day: try row.string("day"), reason: try row.string("reason"), mode: try row.string("mode"), count: try row.int64("failure_count"))
            }
        }
    }
}
