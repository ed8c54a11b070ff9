import CountersignCore
import Foundation

/// Turns a customer's verified purchases, subscription statuses and promotional grants into
/// entitlements, evaluated at one instant (the request time). Pure: no I/O, no clock.
///
/// - Auto-renewable and non-renewing subscriptions: the latest transaction of each purchase
///   chain counts; active until its `expiresDate`, or until the grace period ends when Apple
///   grants one; billing retry without a grace period is not active.
/// - Non-consumables: active for life.
/// - Consumables: listed as non-subscriptions; they grant only what the configuration maps.
/// - Refunds and revocations end access at `revocationDate`; an upgraded transaction grants
///   nothing (the upgrade's own transaction does).
/// - Promotional grants: active from their start to their expiry (or for life), unless revoked.
///
/// When several sources grant one entitlement, an active one wins, and among those the one that
/// lasts longest (lifetime first).
public enum EntitlementRules {
    public static func evaluate(
        purchases: [PurchaseRecord],
        statuses: [SubscriptionStatus] = [],
        grants: [PromotionalGrant] = [],
        products: [AppConfiguration.Product],
        at now: Date
    ) -> CustomerEntitlements {
        let entitlementsByProduct = Dictionary(products.map { ($0.id, $0.entitlements) }, uniquingKeysWith: { first, _ in first })
        let statusByChain = Dictionary(statuses.map { ($0.originalTransactionId, $0) }, uniquingKeysWith: { _, last in last })
        var result = CustomerEntitlements()
        var candidates: [String: [EntitlementGrant]] = [:]

        // Subscriptions: the newest transaction of each chain, by purchase date (a renewal or an
        // upgrade is purchased after what it replaces, even when it ends sooner), then expiry,
        // then transaction id (bytewise, so every reader picks the same one); a transaction
        // marked upgraded never counts while the chain has another. Storage may hand over only
        // that transaction of a chain, with the chain's first purchase date as its
        // `originalPurchaseDate` (``PurchaseRecord/chainOrder(_:_:)`` is the order it sorts by).
        for head in purchases.withUnsafeBufferPointer(chainHeads) {
            let latest = purchases[head.latest]
            let chainId = latest.originalTransactionId
            let status = statusByChain[chainId]
            // A refund ends access at once, billing grace period or not.
            let grace =
                latest.revocationDate != nil ? nil : status?.gracePeriodExpiresDate.flatMap { $0 > (latest.expiresDate ?? .distantPast) ? $0 : nil }
            var end = latest.expiresDate.map { max($0, grace ?? $0) }
            if let revoked = latest.revocationDate { end = min(end ?? revoked, revoked) }
            let active = !latest.isUpgraded && (end.map { now < $0 } ?? false) && now >= latest.purchaseDate
            var subscription = SubscriptionState(
                productId: latest.productId,
                purchaseDate: latest.purchaseDate,
                originalPurchaseDate: head.firstPurchase,
                expiresDate: latest.expiresDate,
                gracePeriodExpiresDate: grace,
                revocationDate: latest.revocationDate,
                willRenew: active && latest.kind == .autoRenewable && (status?.willRenew ?? true) && latest.revocationDate == nil,
                isInBillingRetry: status?.isInBillingRetry ?? false,
                isActive: active,
                environment: latest.environment
            )
            subscription.periodType = latest.periodType
            subscription.ownershipType = latest.ownershipType
            subscription.storeTransactionId = latest.transactionId
            subscription.price = latest.price
            subscription.displayName = products.first { $0.id == latest.productId }?.displayName
            result.show(subscription)
            for entitlement in entitlementsByProduct[latest.productId] ?? [] {
                candidates[entitlement, default: []].append(
                    EntitlementGrant(
                        productId: latest.productId, purchaseDate: latest.purchaseDate, expiresDate: end,
                        gracePeriodExpiresDate: grace, isActive: active, willRenew: subscription.willRenew, source: .store(latest.environment)
                    ))
            }
        }

        // One-time purchases.
        for purchase in purchases where !purchase.isSubscription {
            let revoked = purchase.revocationDate.map { $0 <= now } ?? false
            result.nonSubscriptions[purchase.productId, default: []].append(
                NonSubscriptionPurchase(
                    transactionId: purchase.transactionId, purchaseDate: purchase.purchaseDate,
                    revocationDate: purchase.revocationDate, environment: purchase.environment, price: purchase.price
                ))
            guard purchase.kind == .nonConsumable || !(entitlementsByProduct[purchase.productId] ?? []).isEmpty else { continue }
            for entitlement in entitlementsByProduct[purchase.productId] ?? [] {
                candidates[entitlement, default: []].append(
                    EntitlementGrant(
                        productId: purchase.productId, purchaseDate: purchase.purchaseDate, expiresDate: purchase.revocationDate,
                        gracePeriodExpiresDate: nil, isActive: !revoked && now >= purchase.purchaseDate, willRenew: false,
                        source: .store(purchase.environment)
                    ))
            }
        }
        for productId in result.nonSubscriptions.keys {
            // By purchase date, then transaction id: the same order whatever order storage read them in.
            result.nonSubscriptions[productId]?.sort {
                $0.purchaseDate != $1.purchaseDate
                    ? $0.purchaseDate < $1.purchaseDate : $0.transactionId.utf8.lexicographicallyPrecedes($1.transactionId.utf8)
            }
        }

        // Promotional grants: an entitlement, and a subscription of store `promotional` under
        // RevenueCat's product identifier (`rc_promo_<entitlement>_<duration>`), as RevenueCat
        // lists them.
        for grant in grants {
            let end = [grant.expiresDate, grant.revokedDate].compactMap { $0 }.min()
            let active = now >= grant.startsDate && (end.map { now < $0 } ?? true)
            var subscription = SubscriptionState(
                productId: grant.productIdentifier, purchaseDate: grant.startsDate, originalPurchaseDate: grant.startsDate,
                expiresDate: end, gracePeriodExpiresDate: nil, revocationDate: nil, willRenew: false, isInBillingRetry: false,
                isActive: active, environment: "Production")
            subscription.isPromotional = true
            result.show(subscription)
            candidates[grant.entitlement, default: []].append(
                EntitlementGrant(
                    productId: grant.productIdentifier, purchaseDate: grant.startsDate, expiresDate: end,
                    gracePeriodExpiresDate: nil, isActive: active, willRenew: false, source: .promotional
                ))
        }

        for (entitlement, grants) in candidates {
            result.entitlements[entitlement] = grants.max(by: EntitlementGrant.isLessRelevant)
        }
        return result
    }

    /// Each subscription chain's current transaction (its position in `purchases`) and the
    /// chain's first purchase date. Chains hold positions, not copies, read through the buffer:
    /// a record is seven strings, and copying a three-year monthly history into groups and
    /// filters was most of ``evaluate(purchases:statuses:grants:products:at:)``.
    static func chainHeads(_ purchases: UnsafeBufferPointer<PurchaseRecord>) -> [(latest: Int, firstPurchase: Date)] {
        var chains: [String: [Int]] = [:]
        for index in purchases.indices where purchases[index].isSubscription {
            chains[purchases[index].originalTransactionId, default: []].append(index)
        }
        return chains.values.map { members in
            let hasCurrent = members.contains { !purchases[$0].isUpgraded }
            var latest: Int?
            var firstPurchase = Date.distantFuture
            for index in members {
                firstPurchase = min(
                    firstPurchase, purchases[index].purchaseDate, purchases[index].originalPurchaseDate ?? purchases[index].purchaseDate)
                if hasCurrent && purchases[index].isUpgraded { continue }
                if let best = latest, !PurchaseRecord.chainOrder(purchases[best], purchases[index]) { continue }
                latest = index
            }
            // Some member counts: every one when none is current, else the current ones.
            return (latest!, firstPurchase)
        }
    }
}

/// The outcome of ``EntitlementRules/evaluate(purchases:statuses:grants:products:at:)``.
public struct CustomerEntitlements: Sendable, Hashable {
    public var entitlements: [String: EntitlementGrant] = [:]
    public var subscriptions: [String: SubscriptionState] = [:]
    public var nonSubscriptions: [String: [NonSubscriptionPurchase]] = [:]

    public init() {}

    public var activeEntitlementIds: Set<String> {
        Set(entitlements.filter(\.value.isActive).keys)
    }

    /// Lists `subscription` under its product unless one listed there is more relevant (one
    /// product may have several chains, e.g. after a lapse, or several grants).
    mutating func show(_ subscription: SubscriptionState) {
        if let existing = subscriptions[subscription.productId], !subscription.isMoreRelevant(than: existing) { return }
        subscriptions[subscription.productId] = subscription
    }
}

/// Why a customer has (or had) an entitlement.
public struct EntitlementGrant: Sendable, Hashable {
    public enum Source: Sendable, Hashable {
        case store(String)
        case promotional
    }

    public var productId: String
    public var purchaseDate: Date
    /// Nil: for life.
    public var expiresDate: Date?
    public var gracePeriodExpiresDate: Date?
    public var isActive: Bool
    public var willRenew: Bool
    public var source: Source

    /// Active beats inactive; then the later end (for life beats any date); then the later purchase.
    static func isLessRelevant(_ lhs: EntitlementGrant, _ rhs: EntitlementGrant) -> Bool {
        if lhs.isActive != rhs.isActive { return !lhs.isActive }
        let left = lhs.expiresDate ?? .distantFuture
        let right = rhs.expiresDate ?? .distantFuture
        if left != right { return left < right }
        return lhs.purchaseDate < rhs.purchaseDate
    }
}

/// A subscription product's state for the customer.
public struct SubscriptionState: Sendable, Hashable {
    public var productId: String
    public var purchaseDate: Date
    public var originalPurchaseDate: Date
    public var expiresDate: Date?
    public var gracePeriodExpiresDate: Date?
    public var revocationDate: Date?
    public var willRenew: Bool
    public var isInBillingRetry: Bool
    public var isActive: Bool
    public var environment: String
    public var periodType = "normal"
    public var ownershipType = "PURCHASED"
    /// The store's id of the transaction shown (the chain's newest).
    public var storeTransactionId: String?
    /// The product's display name in the app's configuration.
    public var displayName: String?
    /// What the shown transaction cost.
    public var price: PaidPrice?
    /// A promotional grant shown as RevenueCat shows one (store `promotional`).
    public var isPromotional = false

    /// Active first, then the later expiry.
    func isMoreRelevant(than other: SubscriptionState) -> Bool {
        if isActive != other.isActive { return isActive }
        return (expiresDate ?? .distantPast) > (other.expiresDate ?? .distantPast)
    }
}

/// A one-time purchase (consumable or non-consumable).
public struct NonSubscriptionPurchase: Sendable, Hashable {
    public var transactionId: String
    public var purchaseDate: Date
    public var revocationDate: Date?
    public var environment: String
    public var price: PaidPrice?
}
