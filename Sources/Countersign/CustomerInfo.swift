import CountersignCore
import Foundation

/// Where an entitlement was bought. RevenueCat names this type `Store`; here that name is the
/// SDK's store protocol (StoreKit or the test store), so the enum is `EntitlementStore`.
public enum EntitlementStore: String, Sendable, Hashable {
    case appStore = "app_store"
    case testStore = "test_store"
    case promotional
    case unknownStore

    init(wire: String) { self = Self(rawValue: wire) ?? .unknownStore }
}

/// How a subscription period was priced, as RevenueCat's `PeriodType`.
public enum PeriodType: String, Sendable, Hashable {
    case normal, intro, trial, prepaid

    init(wire: String) { self = Self(rawValue: wire) ?? .normal }
}

/// Whether the customer bought the product or has it through Family Sharing.
public enum PurchaseOwnershipType: String, Sendable, Hashable {
    case purchased = "PURCHASED"
    case familyShared = "FAMILY_SHARED"
    case unknown = "UNKNOWN"
}

/// One entitlement of a customer.
public struct EntitlementInfo: Sendable, Hashable {
    public let identifier: String
    /// Active at the later of the answer's signed request date and the device clock (so turning
    /// the device clock back does not extend access).
    public let isActive: Bool
    public let willRenew: Bool
    public let periodType: PeriodType
    /// A product id, or `promotional:<grant id>` for a promotional grant.
    public let productIdentifier: String
    /// Nil: for life.
    public let expirationDate: Date?
    public let latestPurchaseDate: Date?
    public let verification: VerificationResult
    public var store: EntitlementStore = .appStore
    public var isSandbox = false
    public var ownershipType = PurchaseOwnershipType.purchased
    public var originalPurchaseDate: Date?
    public var unsubscribeDetectedAt: Date?
    public var billingIssueDetectedAt: Date?
}

/// A purchase that is not a subscription (consumable, non-consumable, non-renewing).
public struct NonSubscriptionTransaction: Sendable, Hashable {
    public let productIdentifier: String
    public let transactionIdentifier: String
    public let purchaseDate: Date?
    public let store: EntitlementStore
    public let isSandbox: Bool
}

/// A customer's entitlements, with how they were verified.
public struct EntitlementInfos: Sendable, Hashable {
    public let all: [String: EntitlementInfo]
    public let verification: VerificationResult

    public var active: [String: EntitlementInfo] { all.filter { $0.value.isActive } }

    public subscript(identifier: String) -> EntitlementInfo? { all[identifier] }
}

/// What the server (or, offline, the device) says the customer may use.
public struct CustomerInfo: Sendable, Hashable {
    public let entitlements: EntitlementInfos
    /// Product ids of active subscriptions.
    public let activeSubscriptions: Set<String>
    public let allPurchasedProductIdentifiers: Set<String>
    /// The server's request date in the answer (the device's clock for on-device results).
    public let requestDate: Date
    public let originalAppUserId: String
    /// When the server first saw the customer (RevenueCat's `firstSeen`, not optional: an answer
    /// without it, or one computed on the device, says the request date).
    public let firstSeen: Date
    /// Why verification failed, when `entitlements.verification == .failed`.
    public let verificationFailure: VerificationFailure?
    /// The exact answer body it was read from (empty for on-device results).
    public let rawData: Data
    /// Where the customer manages their subscriptions, when the server gives one.
    public var managementURL: URL?
    /// The customer's first purchase, when the server gives it.
    public var originalPurchaseDate: Date?
    /// The app version the customer first downloaded, when the server gives it (RevenueCat's
    /// reads it from the app receipt; Countersign's server sends null).
    public var originalApplicationVersion: String?
    /// Purchases that are not subscriptions, oldest first.
    public var nonSubscriptions: [NonSubscriptionTransaction] = []
    /// When each subscription product ends (nil: no end known).
    var subscriptionExpirations: [String: Date] = [:]

    /// The latest expiration of any subscription, as in RevenueCat.
    public var latestExpirationDate: Date? { subscriptionExpirations.values.max() }

    /// When the subscription product ends; nil for a product that is not a subscription or has
    /// no end.
    public func expirationDate(forProductIdentifier productIdentifier: String) -> Date? {
        subscriptionExpirations[productIdentifier]
    }

    /// When the entitlement ends; nil for an unknown entitlement or one for life.
    public func expirationDate(forEntitlement identifier: String) -> Date? {
        entitlements[identifier]?.expirationDate
    }

    /// Reads a CustomerInfo answer (`GET /v1/subscribers/{id}`, `POST /v1/receipts`, identify).
    public init(answer body: Data, verification: VerificationResult, failure: VerificationFailure?, now: Date) throws {
        let response = try JSONDecoder().decode(SubscriberResponse.self, from: body)
        let requestDate = Date(timeIntervalSince1970: TimeInterval(response.requestDateMs) / 1000)
        let reference = max(requestDate, now)
        let subscriber = response.subscriber
        var all: [String: EntitlementInfo] = [:]
        for (identifier, entitlement) in subscriber.entitlements {
            let expires = entitlement.expiresDate.flatMap(WireDate.parse)
            let grace = entitlement.gracePeriodExpiresDate.flatMap(WireDate.parse)
            let end = [expires, grace].compactMap { $0 }.max()
            let subscription = subscriber.subscriptions[entitlement.productIdentifier]
            let isActive = entitlement.expiresDate == nil || (end.map { $0 > reference } ?? false)
            var info = EntitlementInfo(
                identifier: identifier,
                isActive: isActive,
                willRenew: isActive
                    && subscription.map { $0.unsubscribeDetectedAt == nil && $0.billingIssuesDetectedAt == nil && $0.refundedAt == nil } ?? false,
                periodType: subscription.map { PeriodType(wire: $0.periodType) } ?? .normal,
                productIdentifier: entitlement.productIdentifier,
                expirationDate: expires,
                latestPurchaseDate: WireDate.parse(entitlement.purchaseDate),
                verification: verification
            )
            let purchase = subscriber.nonSubscriptions[entitlement.productIdentifier]?.last
            // RevenueCat's `rc_promo_…` names a promotional grant (older servers wrote `promotional:…`).
            if entitlement.productIdentifier.hasPrefix("rc_promo_") || entitlement.productIdentifier.hasPrefix("promotional:") {
                info.store = .promotional
            } else if let wire = subscription?.store ?? purchase?.store {
                info.store = EntitlementStore(wire: wire)
            }
            info.isSandbox = subscription?.isSandbox ?? purchase?.isSandbox ?? false
            info.ownershipType = subscription?.ownershipType.map { PurchaseOwnershipType(rawValue: $0) ?? .unknown } ?? .purchased
            info.originalPurchaseDate =
                subscription.flatMap { WireDate.parse($0.originalPurchaseDate) } ?? purchase.flatMap { WireDate.parse($0.purchaseDate) }
            info.unsubscribeDetectedAt = subscription?.unsubscribeDetectedAt.flatMap(WireDate.parse)
            info.billingIssueDetectedAt = subscription?.billingIssuesDetectedAt.flatMap(WireDate.parse)
            all[identifier] = info
        }
        self.entitlements = EntitlementInfos(all: all, verification: verification)
        activeSubscriptions = Set(
            subscriber.subscriptions.filter { _, subscription in
                (subscription.expiresDate.flatMap(WireDate.parse).map { $0 > reference } ?? false) && subscription.refundedAt == nil
            }.keys)
        allPurchasedProductIdentifiers = Set(subscriber.subscriptions.keys).union(subscriber.nonSubscriptions.keys)
        self.requestDate = requestDate
        originalAppUserId = subscriber.originalAppUserId
        firstSeen = WireDate.parse(subscriber.firstSeen) ?? requestDate
        verificationFailure = verification == .failed ? failure : nil
        rawData = body
        managementURL = subscriber.managementUrl.flatMap(URL.init(string:))
        originalPurchaseDate = subscriber.originalPurchaseDate.flatMap(WireDate.parse)
        originalApplicationVersion = subscriber.originalApplicationVersion
        nonSubscriptions = subscriber.nonSubscriptions.flatMap { productId, purchases in
            purchases.map { purchase in
                NonSubscriptionTransaction(
                    productIdentifier: productId, transactionIdentifier: purchase.id, purchaseDate: WireDate.parse(purchase.purchaseDate),
                    store: EntitlementStore(wire: purchase.store), isSandbox: purchase.isSandbox
                )
            }
        }.sorted { ($0.purchaseDate ?? .distantPast, $0.transactionIdentifier) < ($1.purchaseDate ?? .distantPast, $1.transactionIdentifier) }
        subscriptionExpirations = subscriber.subscriptions.compactMapValues { $0.expiresDate.flatMap(WireDate.parse) }
    }

    /// An on-device CustomerInfo (offline entitlements): `verifiedOnDevice`, or `notRequested`
    /// when verification is disabled.
    init(
        onDevice entitlements: [String: EntitlementInfo], verification: VerificationResult, activeSubscriptions: Set<String>,
        purchased: Set<String>, appUserID: String, now: Date
    ) {
        self.entitlements = EntitlementInfos(all: entitlements, verification: verification)
        self.activeSubscriptions = activeSubscriptions
        allPurchasedProductIdentifiers = purchased
        requestDate = now
        originalAppUserId = appUserID
        firstSeen = now
        verificationFailure = nil
        rawData = Data()
    }
}
