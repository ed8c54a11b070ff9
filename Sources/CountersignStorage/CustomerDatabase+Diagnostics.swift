import CountersignCore
import CountersignLedger
import Foundation

/// Verification-failure telemetry from SDKs: counts by app, day (UTC), reason and mode.
extension CustomerDatabase {
    public struct FailureCount: Codable, Sendable, Hashable {
        public var day: String
        public var reason: String
        public var mode: String
        /// The reporting SDK's version and the app's (empty: not reported, or before they were kept).
        public var sdkVersion: String
        public var appVersion: String
        public var count: Int64

        public init(day: String, reason: String, mode: String, sdkVersion: String = "", appVersion: String = "", count: Int64) {
            self.day = day
            self.reason = reason
            self.mode = mode
            self.sdkVersion = sdkVersion
            self.appVersion = appVersion
            self.count = count
        }

        enum CodingKeys: String, CodingKey {
            case day, reason, mode, sdkVersion = "sdk_version", appVersion = "app_version", count = "failure_count"
        }
    }

    /// One reported count, as the telemetry endpoint checked it.
    public struct ReportedFailure: Sendable, Hashable {
        public var reason: String
        public var mode: String
        public var sdkVersion: String
        public var appVersion: String
        public var count: Int

        public init(reason: String, mode: String, sdkVersion: String = "", appVersion: String = "", count: Int) {
            self.reason = reason
            self.mode = mode
            self.sdkVersion = sdkVersion
            self.appVersion = appVersion
            self.count = count
        }
    }

    /// `2026-11-22`: the UTC day of `date`.
    public static func day(_ date: Date) -> String {
        String(WireDate.format(date).prefix(10))
    }

    /// Adds reported failures to the day's counts, all in one transaction.
    public func addVerificationFailures(app: String, counts: [ReportedFailure], at now: Date) async throws {
        let day = Self.day(now)
        try await database.transaction { sql in
            for entry in counts {
                // Both databases have the same upsert.
                try await sql.run(
                    """
                    INSERT INTO verification_failures (app_id, day, reason, mode, sdk_version, app_version, failure_count)
                    VALUES (\(bind: app), \(bind: day), \(bind: entry.reason), \(bind: entry.mode), \(bind: entry.sdkVersion), \
                    \(bind: entry.appVersion), \(bind: Int64(entry.count)))
                    ON CONFLICT (app_id, day, reason, mode, sdk_version, app_version)
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
                SELECT day, reason, mode, sdk_version, app_version, failure_count FROM verification_failures \
                WHERE app_id = \(bind: app) AND day >= \(bind: first) ORDER BY day DESC, reason, mode, sdk_version, app_version
                """
            ) { row in
                FailureCount(
                    day: try row.string("day"), reason: try row.string("reason"), mode: try row.string("mode"),
                    sdkVersion: try row.string("sdk_version"), appVersion: try row.string("app_version"), count: try row.int64("failure_count"))
            }
        }
    }
}

extension CustomerDatabase {
    /// Up to `limit` ids of the app's customers seen since `date` (its own ids, as the SDK of a
    /// customer who logged in holds it): what a verification policy's coverage is counted over.
    /// The ids come in key order, which has nothing to do with a rollout's hash, so a share
    /// counted over the first `limit` is the share over all of them, give or take sampling.
    public func customerIds(app: String, seenSince date: Date, limit: Int) async throws -> [String] {
        try await database.withConnection { sql in
            try await sql.all(
                """
                SELECT app_user_id FROM customers WHERE app_id = \(bind: app) AND last_seen_ms >= \(bind: date.epochMilliseconds) \
                LIMIT \(bind: Int64(limit))
                """
            ) { row in try row.string("app_user_id") }
        }
    }
}
