import Foundation

/// One stored transaction as the charts read it: what storage holds for it, its chain's renewal
/// state, and when its owner was first seen. Charts are functions of these records, recomputed on
/// every request, so a notification that arrives late or out of order changes the answer exactly
/// as the records change.
public struct ChartTransaction: Sendable, Hashable {
    /// The product kinds as the configuration names them (`autoRenewable`, `nonRenewing`,
    /// `nonConsumable`, `consumable`).
    public enum Kind: String, Sendable, Hashable {
        case autoRenewable, nonRenewing, nonConsumable, consumable
    }

    public var transactionId: String
    /// The subscription (or purchase) this transaction belongs to: one subscription however often
    /// it renews.
    public var originalTransactionId: String
    public var productId: String
    public var kind: Kind
    /// `Production`, `Sandbox`, `Xcode` or `TestStore`.
    public var environment: String
    public var purchaseMs: Int64
    public var expiresMs: Int64?
    /// A refund (or Apple's revocation of an upgraded transaction): the access ends then.
    public var revokedMs: Int64?
    /// How much of the price a refund gave back, in thousandths of a percent (Apple's
    /// `revocationPercentage`: 100000 is all of it); nil with a refund: all of it.
    public var revocationPercentage: Int64?
    /// Whether Apple upgraded it away (its revocation is not a refund).
    public var isUpgraded: Bool
    /// `normal`, `trial` or `intro`, as CustomerInfo spells them.
    public var periodType: String
    /// Access shared by a family member: not a paid subscription.
    public var isFamilyShared: Bool
    /// The price paid in thousandths of `currency`; nil when unknown.
    public var priceMilliunits: Int64?
    public var currency: String?
    /// The chain's grace period end, when the store reported one.
    public var gracePeriodEndMs: Int64?
    /// The chain's auto-renew status; nil when the store never said (Apple's default is on).
    public var willRenew: Bool?
    /// When the purchase chain's owner was first seen; nil when no customer owns it.
    public var ownerFirstSeenMs: Int64?
    /// The owner's app user id (the trial conversion chart counts customers, not chains).
    public var owner: String?
    /// Where it was bought: ISO 3166-1 alpha-2 (`US`); nil when unknown.
    public var country: String?

    public init(
        transactionId: String, originalTransactionId: String, productId: String, kind: Kind, environment: String, purchaseMs: Int64,
        expiresMs: Int64? = nil, revokedMs: Int64? = nil, isUpgraded: Bool = false, periodType: String = "normal",
        isFamilyShared: Bool = false, priceMilliunits: Int64? = nil, currency: String? = nil, gracePeriodEndMs: Int64? = nil,
        willRenew: Bool? = nil, ownerFirstSeenMs: Int64? = nil, owner: String? = nil, revocationPercentage: Int64? = nil, country: String? = nil
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.kind = kind
        self.environment = environment
        self.purchaseMs = purchaseMs
        self.expiresMs = expiresMs
        self.revokedMs = revokedMs
        self.isUpgraded = isUpgraded
        self.periodType = periodType
        self.isFamilyShared = isFamilyShared
        self.priceMilliunits = priceMilliunits
        self.currency = currency
        self.gracePeriodEndMs = gracePeriodEndMs
        self.willRenew = willRenew
        self.ownerFirstSeenMs = ownerFirstSeenMs
        self.owner = owner
        self.revocationPercentage = revocationPercentage
        self.country = country
    }

    public var isTrial: Bool { periodType == "trial" }
    /// Refunded: revoked and not upgraded away.
    public var isRefunded: Bool { revokedMs != nil && !isUpgraded }
    /// The share of the price it kept, from 0 (refunded in full) to 1 (not refunded).
    public var keptShare: Double {
        guard isRefunded else { return 1 }
        guard let percentage = revocationPercentage, (0..<100_000).contains(percentage) else { return 0 }
        return Double(100_000 - percentage) / 100_000
    }
    /// A paid transaction: not a free trial, not family shared (RevenueCat counts neither).
    public var isPaid: Bool { !isTrial && !isFamilyShared }
}

/// What a chart needs besides the records: money settings and product periods from the app's
/// configuration, and the time of the request.
public struct ChartSettings: Sendable {
    /// US dollars per unit of each currency, by the instant each table applies from, oldest
    /// first (the configuration's dated tables): a day takes the last table from on or before it
    /// (the oldest for days before any). A currency not in a day's table is reported as missing,
    /// never guessed. US dollars need no entry.
    public var rateTables: [(fromMs: Int64, usdPerUnit: [String: Double])]
    /// The store's commission as a fraction of the price (0.3 when unset), before the first of
    /// ``commissionChanges``.
    public var commission: Double
    /// The commission from an instant on (milliseconds since 1970), in order: the Small Business
    /// Program joined or left.
    public var commissionChanges: [(fromMs: Int64, commission: Double)] = []
    /// Each configured product's subscription period (ISO 8601, `P1M`); a product not listed is
    /// measured from its transaction's purchase and expiry dates.
    public var productPeriods: [String: String]
    public var nowMs: Int64

    public init(usdPerUnit: [String: Double], commission: Double, productPeriods: [String: String], nowMs: Int64) {
        rateTables = [(.min, usdPerUnit)]
        self.commission = commission
        self.productPeriods = productPeriods
        self.nowMs = nowMs
    }

    /// US dollars per unit of `currency` on `day` (days since 1970); nil when that day's table has
    /// no rate for it.
    func rate(_ currency: String, onDay day: Int64) -> Double? {
        guard currency != "USD" else { return 1 }
        let instant = ChartDay(daysSince1970: day).startMs
        return (rateTables.last { $0.fromMs <= instant } ?? rateTables.first)?.usdPerUnit[currency]
    }

    /// `milliunits` of `currency` times `factor` in millionths of a US dollar at `day`'s rate,
    /// rounded to the nearest (held at Int64's limits); nil when the currency has no rate that day.
    func usdMicros(_ milliunits: Int64, _ currency: String, onDay day: Int64, times factor: Double = 1) -> Int64? {
        guard let rate = rate(currency, onDay: day) else { return nil }
        let micros = (Double(milliunits) * 1000 * rate * factor).rounded()
        guard micros.isFinite else { return nil }
        return micros >= 9.2e18 ? .max : micros <= -9.2e18 ? .min : Int64(micros)
    }

    /// What is left of `micros` of a purchase made at `purchaseMs` after the store's commission
    /// then, rounded to the nearest micro-dollar.
    func proceeds(_ micros: Int64, at purchaseMs: Int64) -> Int64 {
        let rate = commissionChanges.last(where: { $0.fromMs <= purchaseMs })?.commission ?? commission
        let proceeds = (Double(micros) * (1 - rate)).rounded()
        return proceeds >= 9.2e18 ? .max : proceeds <= -9.2e18 ? .min : Int64(proceeds)
    }
}

/// Which records a chart reads: each filter left nil takes every value.
public struct ChartFilter: Sendable, Hashable {
    public var product: String?
    public var environment: String?
    /// `app_store`, `test_store` or `stripe`.
    public var store: String?
    /// ISO 3166-1 alpha-2 (`US`).
    public var country: String?

    public init(product: String? = nil, environment: String? = nil, store: String? = nil, country: String? = nil) {
        self.product = product
        self.environment = environment
        self.store = store
        self.country = country
    }

    public func admits(_ key: ChartKey) -> Bool {
        (product.map { $0 == key.product } ?? true) && (environment.map { $0 == key.environment } ?? true)
            && (store.map { $0 == key.store } ?? true) && (country.map { $0 == key.country } ?? true)
    }
}
