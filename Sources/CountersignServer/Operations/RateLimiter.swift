import Foundation

/// A token bucket per key (an app id): `burst` requests at once, refilled at `perSecond`.
/// Keys are the deployment's app ids, so the table stays as small as the configuration.
public final class RateLimiter: @unchecked Sendable {
    public let perSecond: Double
    public let burst: Double
    private let now: @Sendable () -> Date
    private let lock = NSLock()
    private var buckets: [String: (tokens: Double, updated: Date)] = [:]

    public init(perSecond: Double, burst: Double, now: @escaping @Sendable () -> Date = { Date() }) {
        self.perSecond = perSecond
        self.burst = burst
        self.now = now
    }

    /// Takes one token for `key`; false when its bucket is empty.
    public func allow(_ key: String) -> Bool {
        let date = now()
        return lock.withLock {
            var bucket = buckets[key] ?? (burst, date)
            bucket.tokens = min(burst, bucket.tokens + max(0, date.timeIntervalSince(bucket.updated)) * perSecond)
            bucket.updated = date
            let allowed = bucket.tokens >= 1
            if allowed { bucket.tokens -= 1 }
            buckets[key] = bucket
            return allowed
        }
    }
}
