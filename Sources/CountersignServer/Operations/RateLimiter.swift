import Foundation

/// A token bucket per key (an app id, a client address): `burst` requests at once, refilled at
/// `perSecond`. Past `maximumKeys` keys, buckets that have refilled are forgotten (a full bucket
/// is what a new key gets anyway), so many addresses cannot grow the table without bound.
public final class RateLimiter: @unchecked Sendable {
    public let perSecond: Double
    public let burst: Double
    private let now: @Sendable () -> Date
    private let lock = NSLock()
    private let maximumKeys: Int
    private var buckets: [String: (tokens: Double, updated: Date)] = [:]

    public init(perSecond: Double, burst: Double, maximumKeys: Int = 10_000, now: @escaping @Sendable () -> Date = { Date() }) {
        self.perSecond = perSecond
        self.burst = burst
        self.maximumKeys = maximumKeys
        self.now = now
    }

    /// Takes one token for `key`; false when its bucket is empty.
    public func allow(_ key: String) -> Bool {
        take(key, consume: true)
    }

    /// Whether `key` has a token left, taking none (a sign-in spends one only when it fails).
    public func hasToken(_ key: String) -> Bool {
        take(key, consume: false)
    }

    private func take(_ key: String, consume: Bool) -> Bool {
        let date = now()
        return lock.withLock {
            var bucket = buckets[key] ?? (burst, date)
            bucket.tokens = min(burst, bucket.tokens + max(0, date.timeIntervalSince(bucket.updated)) * perSecond)
            bucket.updated = date
            let allowed = bucket.tokens >= 1
            if allowed && consume { bucket.tokens -= 1 }
            if buckets.count >= maximumKeys && buckets[key] == nil {
                buckets = buckets.filter { _, old in old.tokens + date.timeIntervalSince(old.updated) * perSecond < burst }
            }
            buckets[key] = bucket
            return allowed
        }
    }
}
