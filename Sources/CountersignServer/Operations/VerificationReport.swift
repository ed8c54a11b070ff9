import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation

/// What an operator reads before turning enforcement on: the failures clients reported, by day,
/// reason, mode, SDK version and app version, and how many of the app's customers its
/// verification policy covers. The dashboard's verification page and
/// `GET /v1/admin/diagnostics/verification_failures` show the same numbers.
struct VerificationReport: Encodable {
    var appId: String
    var days: Int
    var counts: [CustomerDatabase.FailureCount]
    /// Totals by SDK version and app version over the days, split by kind.
    var byVersion: [VersionTotal]
    /// The app's policy and its coverage; nil when it states none.
    var policy: PolicyCoverage?

    struct VersionTotal: Encodable {
        var sdkVersion: String
        var appVersion: String
        var tampering: Int64
        var cannotVerify: Int64

        enum CodingKeys: String, CodingKey {
            case sdkVersion = "sdk_version", appVersion = "app_version", tampering, cannotVerify = "cannot_verify"
        }
    }

    struct PolicyCoverage: Encodable {
        var mode: String
        var rolloutPercent: Double
        var minimumSDKVersion: String
        var lifetimeHours: Double
        /// Customers seen in the last `days` days that were counted (at most ``sampleLimit``).
        var customersCounted: Int
        /// Of those, the ones whose id falls in the rollout.
        var customersCovered: Int
        var coveredPercent: Double

        enum CodingKeys: String, CodingKey {
            case mode, rolloutPercent = "rollout_percent", minimumSDKVersion = "minimum_sdk_version", lifetimeHours = "lifetime_hours"
            case customersCounted = "customers_counted", customersCovered = "customers_covered", coveredPercent = "covered_percent"
        }
    }

    enum CodingKeys: String, CodingKey {
        case appId = "app_id", days, counts, byVersion = "by_version", policy
    }

    /// Coverage is counted over at most this many customers (a share over 100,000 ids is within
    /// half a percentage point of the share over all of them).
    static let sampleLimit = 100_000

    static func make(app: AppConfiguration, store: CustomerDatabase, days: Int, now: Date) async throws -> VerificationReport {
        let counts = try await store.verificationFailures(app: app.id, days: days, now: now)
        var totals: [String: VersionTotal] = [:]
        for entry in counts {
            let key = entry.sdkVersion + "\u{0}" + entry.appVersion
            var total = totals[key] ?? VersionTotal(sdkVersion: entry.sdkVersion, appVersion: entry.appVersion, tampering: 0, cannotVerify: 0)
            if VerificationFailure(rawValue: entry.reason)?.category == .cannotVerify {
                total.cannotVerify += entry.count
            } else {
                total.tampering += entry.count
            }
            totals[key] = total
        }
        var policy: PolicyCoverage?
        if let settings = app.verificationPolicy {
            let stated = settings.policy(app: app.id, at: now)
            let ids = try await store.customerIds(app: app.id, seenSince: now.addingTimeInterval(-Double(days) * 86_400), limit: sampleLimit)
            let covered = ids.filter { VerificationPolicy.bucket(seed: stated.seed, appUserID: $0) < stated.rolloutBasisPoints }.count
            policy = PolicyCoverage(
                mode: settings.mode.rawValue, rolloutPercent: Double(stated.rolloutBasisPoints) / 100,
                minimumSDKVersion: stated.minimumSDKVersion.description,
                lifetimeHours: settings.lifetimeHours ?? AppConfiguration.VerificationPolicySettings.defaultLifetimeHours,
                customersCounted: ids.count, customersCovered: covered,
                coveredPercent: ids.isEmpty ? 0 : (Double(covered) * 10_000 / Double(ids.count)).rounded() / 100)
        }
        return VerificationReport(
            appId: app.id, days: days, counts: counts,
            byVersion: totals.values.sorted { ($0.tampering + $0.cannotVerify, $1.sdkVersion) > ($1.tampering + $1.cannotVerify, $0.sdkVersion) },
            policy: policy)
    }
}
