import CountersignCore
import Foundation

/// One verified store transaction as the entitlement rules see it.
public struct PurchaseRecord: Sendable, Hashable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var kind: AppConfiguration.ProductKind
    /// `Production`, `Sandbox`, `TestStore`…
    public var environment: String
    public var purchaseDate: Date
    /// The first purchase date of its chain as far as the reader knows (its own by default): a
    /// reader that hands the rules only a chain's newest transaction puts the chain's first
    /// purchase here.
    public var originalPurchaseDate: Date?
    /// For subscriptions: the end of the paid period.
    public var expiresDate: Date?
    /// Refunded or revoked: access ends at this instant.
    public var revocationDate: Date?
    /// Replaced by an upgrade to another product: grants nothing from then on.
    public var isUpgraded: Bool
    /// RevenueCat's period type: `normal`, `trial` or `intro`.
    public var periodType = "normal"
    /// `PURCHASED`, or `FAMILY_SHARED` for a purchase shared by the family organizer.
    public var ownershipType = "PURCHASED"
    /// What the customer paid, from the signed transaction (nil for purchases recorded before
    /// the server kept it, or when the store did not say).
    public var price: PaidPrice?

    public init(
        transactionId: String, originalTransactionId: String, productId: String, kind: AppConfiguration.ProductKind,
        environment: String, purchaseDate: Date, expiresDate: Date? = nil
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.kind = kind
        self.environment = environment
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        originalPurchaseDate = purchaseDate
        revocationDate = nil
        isUpgraded = false
    }

    public var isSubscription: Bool { kind == .autoRenewable || kind == .nonRenewing }

    /// The order in which a chain's transactions supersede one another: purchase date, then
    /// expiry (the purchase date when there is none), then transaction id compared byte by byte.
    /// `lhs` comes before `rhs`. Storage sorts by the same keys in SQL (`ORDER BY … DESC`).
    public static func chainOrder(_ lhs: PurchaseRecord, _ rhs: PurchaseRecord) -> Bool {
        if lhs.purchaseDate != rhs.purchaseDate { return lhs.purchaseDate < rhs.purchaseDate }
        let left = lhs.expiresDate ?? lhs.purchaseDate
        let right = rhs.expiresDate ?? rhs.purchaseDate
        if left != right { return left < right }
        return lhs.transactionId.utf8.lexicographicallyPrecedes(rhs.transactionId.utf8)
    }
}

/// What App Store Server Notifications say about a subscription chain beyond its transactions.
public struct SubscriptionStatus: Sendable, Hashable {
    public var originalTransactionId: String
    /// Whether it will renew (false: the customer turned auto-renew off).
    public var willRenew: Bool
    /// Renewal failed and Apple keeps access open until this date (billing grace period).
    public var gracePeriodExpiresDate: Date?
    /// Renewal failed and Apple is retrying billing; without a grace period, access has ended.
    public var isInBillingRetry: Bool

    public init(originalTransactionId: String, willRenew: Bool = true, gracePeriodExpiresDate: Date? = nil, isInBillingRetry: Bool = false) {
        self.originalTransactionId = originalTransactionId
        self.willRenew = willRenew
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.isInBillingRetry = isInBillingRetry
    }
}

/// A price as the store charged it: Apple's `price` (thousandths of the currency unit) and
/// its ISO 4217 `currency`.
public struct PaidPrice: Sendable, Hashable {
    public var currency: String
    /// Thousandths of a unit: 4990 is 4.99.
    public var milliunits: Int64

    public init(currency: String, milliunits: Int64) {
        self.currency = currency
        self.milliunits = milliunits
    }
}

/// An entitlement granted by the app's backend with a secret key, never from the client.
public struct PromotionalGrant: Sendable, Hashable {
    public var grantId: String
    public var entitlement: String
    public var startsDate: Date
    /// Nil: lifetime.
    public var expiresDate: Date?
    public var revokedDate: Date?

    public init(grantId: String, entitlement: String, startsDate: Date, expiresDate: Date?, revokedDate: Date? = nil) {
        self.grantId = grantId
        self.entitlement = entitlement
        self.startsDate = startsDate
        self.expiresDate = expiresDate
        self.revokedDate = revokedDate
    }
}

/// Promotional durations, as RevenueCat names them.
public enum PromotionalDuration: String, CaseIterable, Sendable {
    case daily, threeDay = "three_day", weekly, twoWeek = "two_week", monthly, twoMonth = "two_month"
    case threeMonth = "three_month", sixMonth = "six_month", yearly, lifetime

    /// The end of a grant of this duration that starts at `start` (nil: never).
    public func end(from start: Date) -> Date? {
        let calendar = Calendar(identifier: .gregorian)
        let (component, value): (Calendar.Component, Int)
        switch self {
        case .daily: (component, value) = (.day, 1)
        case .threeDay: (component, value) = (.day, 3)
        case .weekly: (component, value) = (.day, 7)
        case .twoWeek: (component, value) = (.day, 14)
        case .monthly: (component, value) = (.month, 1)
        case .twoMonth: (component, value) = (.month, 2)
        case .threeMonth: (component, value) = (.month, 3)
        case .sixMonth: (component, value) = (.month, 6)
        case .yearly: (component, value) = (.year, 1)
        case .lifetime: return nil
        }
        return calendar.date(byAdding: component, value: value, to: start)
    }
}

extension PromotionalGrant {
    /// RevenueCat's product identifier of a promotional grant, `rc_promo_<entitlement>_<duration>`:
    /// the duration whose end from the grant's start is its expiry (to the second), `lifetime`
    /// without one, `custom` for a grant given an end time.
    public var productIdentifier: String {
        let duration: String
        if let expiresDate {
            duration =
                PromotionalDuration.allCases.first { candidate in
                    candidate.end(from: startsDate).map { abs($0.timeIntervalSince(expiresDate)) < 1 } ?? false
                }?.rawValue ?? "custom"
        } else {
            duration = PromotionalDuration.lifetime.rawValue
        }
        return "rc_promo_\(entitlement)_\(duration)"
    }
}
