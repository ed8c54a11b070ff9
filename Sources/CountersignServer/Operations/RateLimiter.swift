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

    public init(perSecond: Double, burst: Double, maximumKeys: Int = 10_000, now: @escaping @Sendable () -> Date) {
        self.perSecond = perSecond
        self.burst = burst
        self.maximumKeys = maximumKeys
        self.now = now
    }

    public convenience init(_ rate: RateLimitSettings.Rate, now: @escaping @Sendable () -> Date) {
        self.init(perSecond: rate.perSecond, burst: rate.burst, now: now)
    }

    /// Takes one token for `key`; false when its bucket is empty.
    public func allow(_ key: String) -> Bool {
        admit(key) == nil
    }

    /// Takes one token for `key`: nil when there was one, otherwise the whole seconds until
    /// there is (what `Retry-After` says).
    public func admit(_ key: String) -> Int? {
        let tokens = take(key, consume: true)
        guard tokens < 1 else { return nil }
        return Int(Int64(clamping: ((1 - tokens) / perSecond).rounded(.up), to: 1...86_400))
    }

    /// Whether `key` has a token left, taking none (a sign-in spends one only when it fails).
    public func hasToken(_ key: String) -> Bool {
        take(key, consume: false) >= 1
    }

    /// The tokens `key` had before this call (one fewer are left when one was taken).
    private func take(_ key: String, consume: Bool) -> Double {
        let date = now()
        return lock.withLock {
            var bucket = buckets[key] ?? (burst, date)
            bucket.tokens = min(burst, bucket.tokens + max(0, date.timeIntervalSince(bucket.updated)) * perSecond)
            bucket.updated = date
            let available = bucket.tokens
            if available >= 1 && consume { bucket.tokens -= 1 }
            if buckets.count >= maximumKeys && buckets[key] == nil {
                buckets = buckets.filter { _, old in old.tokens + date.timeIntervalSince(old.updated) * perSecond < burst }
            }
            buckets[key] = bucket
            return available
        }
    }
}

/// How often clients may call the server: each limit a sustained rate and a burst, answered
/// with 429 and `Retry-After` beyond it. ``ServerConfiguration/rateLimits`` is nil (no limits)
/// for embedders and tests; `countersign serve` starts with ``standard``.
public struct RateLimitSettings: Sendable, Hashable {
    public struct Rate: Sendable, Hashable {
        public var perSecond: Double
        public var burst: Double

        public init(perSecond: Double, burst: Double) {
            self.perSecond = perSecond
            self.burst = burst
        }
    }

    /// The public routes, per client address (behind a proxy that is the proxy's address).
    public var publicPerClient: Rate
    /// The public routes, per app, whatever the address.
    public var publicPerApp: Rate
    /// Legacy receipts that reach the App Store Server API, per app (Apple limits the app too).
    public var storeLookupsPerApp: Rate
    /// Tamper telemetry reports, per client address.
    public var telemetryPerClient: Rate

    public init(publicPerClient: Rate, publicPerApp: Rate, storeLookupsPerApp: Rate, telemetryPerClient: Rate) {
        self.publicPerClient = publicPerClient
        self.publicPerApp = publicPerApp
        self.storeLookupsPerApp = storeLookupsPerApp
        self.telemetryPerClient = telemetryPerClient
    }

    /// A device makes a few requests a minute; thousands of devices behind one address (a
    /// carrier's NAT) still pass. An app's whole traffic is bounded far above what one server
    /// answers honestly (about 2,000 purchases or 10,000 reads a second on two cores).
    public static let standard = RateLimitSettings(
        publicPerClient: Rate(perSecond: 100, burst: 1_000),
        publicPerApp: Rate(perSecond: 5_000, burst: 20_000),
        storeLookupsPerApp: Rate(perSecond: 2, burst: 20),
        telemetryPerClient: Rate(perSecond: 0.2, burst: 20)
    )
}
