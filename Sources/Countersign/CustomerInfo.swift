import CountersignCore
import Foundation

/// Where a purchase was made, as RevenueCat's `Store` (its cases and numbers). The SDK's
/// store of purchases (StoreKit or the test store) is ``PurchaseStore``.
public enum Store: Int, Sendable, Hashable, CaseIterable {
    case appStore = 0
    case macAppStore = 1
    case playStore = 2
    case stripe = 3
    case promotional = 4
    case unknownStore = 5
    case amazon = 6
    case rcBilling = 7
    case external = 8
    case paddle = 9
    case testStore = 10
    case galaxy = 11

    /// The wire's name of the store (RevenueCat's `store` values); anything else, or none, is
    /// `unknownStore`, as RevenueCat reads it.
    init(wire: String?) {
        self =
            switch wire {
            case "app_store": .appStore
            case "mac_app_store": .macAppStore
            case "play_store": .playStore
            case "stripe": .stripe
            case "promotional": .promotional
            case "amazon": .amazon
            case "rc_billing": .rcBilling
            case "external": .external
            case "paddle": .paddle
            case "test_store": .testStore
            case "galaxy": .galaxy
            default: .unknownStore
            }
    }
}

/// The name this SDK gave RevenueCat's `Store` before it took RevenueCat's name.
public typealias EntitlementStore = Store

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
    /// Active while the entitlement's end is ahead of the answer's signed request date (for three
    /// days after it; then of the device clock), as RevenueCat judges it: turning the device
    /// clock back does not extend access, and a cached answer keeps working through an outage.
    public let isActive: Bool
    public let willRenew: Bool
    public let periodType: PeriodType
    /// A product id, or `rc_promo_<entitlement>_<duration>` for a promotional grant.
    public let productIdentifier: String
    /// The purchase's end (the subscription's `expires_date`); nil for life.
    public let expirationDate: Date?
    public let latestPurchaseDate: Date?
    public let verification: VerificationResult
    public var store: Store = .appStore
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
    public let store: Store
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
    /// When each subscription product ends (nil: no end).
    var subscriptionExpirations: [String: Date?] = [:]
    /// The id the answer was for, when the request named an id of the customer other than its
    /// first (the answer's top-level `app_user_id`, inside the signature); nil otherwise.
    var requestedAppUserID: String?

    /// Whether this is the answer for a request about `user`: the customer's first id, or the
    /// other id of theirs the request named (an id logIn merged answers as the customer).
    func answers(for user: String) -> Bool {
        AppUserID.same(originalAppUserId, user) || requestedAppUserID.map { AppUserID.same($0, user) } ?? false
    }

    /// The latest expiration of any subscription, as in RevenueCat.
    public var latestExpirationDate: Date? { subscriptionExpirations.values.compactMap { $0 }.max() }

    /// When the subscription product ends; nil for a product that is not a subscription or has
    /// no end.
    public func expirationDate(forProductIdentifier productIdentifier: String) -> Date? {
        subscriptionExpirations[productIdentifier] ?? nil
    }

    /// When the entitlement ends; nil for an unknown entitlement or one for life.
    public func expirationDate(forEntitlement identifier: String) -> Date? {
        entitlements[identifier]?.expirationDate
    }

    /// How long after its request date a CustomerInfo is judged at that date (RevenueCat's
    /// `requestDateGracePeriod`): a cached answer keeps working through a short outage even when
    /// the device clock is past an expiry, but not forever.
    static let requestDateGracePeriod: TimeInterval = 3 * 86_400

    /// Whether `expiration` is still ahead, judged as RevenueCat judges it
    /// (`CustomerInfo.isDateActive(expirationDate:for:)`): no date is for life; the reference is
    /// the request date while it is at most ``requestDateGracePeriod`` old, the device clock after.
    static func isDateActive(_ expiration: Date?, requestDate: Date, now: Date) -> Bool {
        guard let expiration else { return true }
        let reference = now.timeIntervalSince(requestDate) <= requestDateGracePeriod ? requestDate : now
        return expiration >= reference
    }

    /// Reads a CustomerInfo answer (`GET /v1/subscribers/{id}`, `POST /v1/receipts`, identify),
    /// with RevenueCat's rules (its `CustomerInfo`, `EntitlementInfos` and `EntitlementInfo`):
    /// an entitlement is listed only when its product is among the subscriptions or one-time
    /// purchases, and takes the purchase's expiry, store, period, sandbox flag, ownership and
    /// dates; it is active while its own `expires_date` is ahead (``isDateActive(_:requestDate:now:)``);
    /// it renews unless promotional, for life, unsubscribed, in billing trouble or prepaid.
    public init(answer body: Data, verification: VerificationResult, failure: VerificationFailure?, now: Date) throws {
        let response = try JSONDecoder().decode(SubscriberResponse.self, from: body)
        requestedAppUserID = try Self.checkedRequestedID(in: body)
        let requestDate = Date(timeIntervalSince1970: TimeInterval(response.requestDateMs) / 1000)
        let subscriber = response.subscriber
        func active(_ date: Date?) -> Bool { Self.isDateActive(date, requestDate: requestDate, now: now) }
        let purchases = Purchase.all(of: subscriber)
        var all: [String: EntitlementInfo] = [:]
        for (identifier, entitlement) in subscriber.entitlements {
            guard let purchase = purchases[entitlement.productIdentifier] else { continue }
            let expires = entitlement.expiresDate.flatMap(WireDate.parse)
            let grace = entitlement.gracePeriodExpiresDate.flatMap(WireDate.parse)
            var info = EntitlementInfo(
                identifier: identifier,
                isActive: entitlement.expiresDate == nil || active([expires, grace].compactMap { $0 }.max() ?? .distantPast),
                willRenew:
                    !(purchase.store == .promotional || purchase.expiresDate == nil || purchase.unsubscribeDetectedAt != nil
                    || purchase.billingIssueDetectedAt != nil || purchase.periodType == .prepaid),
                periodType: purchase.periodType,
                productIdentifier: entitlement.productIdentifier,
                expirationDate: purchase.expiresDate,
                latestPurchaseDate: WireDate.parse(entitlement.purchaseDate),
                verification: verification
            )
            info.store = purchase.store
            info.isSandbox = purchase.isSandbox
            info.ownershipType = purchase.ownershipType
            info.originalPurchaseDate = purchase.originalPurchaseDate
            info.unsubscribeDetectedAt = purchase.unsubscribeDetectedAt
            info.billingIssueDetectedAt = purchase.billingIssueDetectedAt
            all[identifier] = info
        }
        self.entitlements = EntitlementInfos(all: all, verification: verification)
        // A Play Store subscription is known by `productId:basePlan`, as RevenueCat's clients
        // know it (`CustomerInfo+ActiveDates`); entitlements still name the product alone.
        subscriptionExpirations = Dictionary(
            subscriber.subscriptions.map { (Self.productKey($0.key, $0.value), $0.value.expiresDate.flatMap(WireDate.parse)) },
            uniquingKeysWith: { first, _ in first })
        activeSubscriptions = Set(subscriptionExpirations.filter { active($0.value) }.keys)
        allPurchasedProductIdentifiers = Set(subscriptionExpirations.keys).union(subscriber.nonSubscriptions.keys)
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
                    store: Store(wire: purchase.store), isSandbox: purchase.isSandbox
                )
            }
        }.sorted { ($0.purchaseDate ?? .distantPast, $0.transactionIdentifier) < ($1.purchaseDate ?? .distantPast, $1.transactionIdentifier) }
    }

    /// The id RevenueCat's clients know a subscription by: `productId:basePlan` when the answer
    /// names a base plan, else the product id.
    static func productKey(_ productId: String, _ subscription: SubscriberResponse.Subscription) -> String {
        subscription.productPlanIdentifier.map { "\(productId):\($0)" } ?? productId
    }

    /// The answer's top-level `app_user_id` (``requestedAppUserID``), read once the subscriber is
    /// checked: refuses a subscriber whose values RevenueCat's `CustomerInfo` refuses to decode, by the
    /// types of its `CustomerInfoResponse` (RevenueCat's `CustomerInfoWithInvalidSubscription.json`,
    /// `CustomerInfoInvalidDataDecodingTests.testDecodingCustomerInfoWithInvalidSubscriptionFailsToDecode`):
    /// a date of a subscription, a one-time purchase or an entitlement that is there and is not an
    /// ISO 8601 date, an id, name or `is_sandbox` of the wrong JSON type, a `price` without a
    /// string `currency` and a number `amount`, an entitlement without `product_identifier`, or
    /// the three maps not objects of objects (arrays, for one-time purchases). A missing
    /// `purchase_date` or `is_sandbox` is no reason: RevenueCat's decoder of 2022, when that test
    /// was written, read both as optional, its `BasicCustomerInfoTests` decodes subscriptions
    /// without `purchase_date`, and this SDK reads an answer with only what identifies it
    /// (`RealWorldCorrectnessTests.lenientDecoding`). Fields RevenueCat reads leniently (period
    /// type, store, ownership) stay lenient.
    static func checkedRequestedID(in body: Data) throws -> String? {
        struct InvalidPurchase: Error {}
        guard case .object(let answer) = try JSONValue.parse(body), case .object(let subscriber)? = answer["subscriber"] else { return nil }
        /// An object's fields, checked: `required` keys present and not null; dates, strings and
        /// booleans of the right kind when present and not null.
        func check(_ entry: JSONValue, required: Set<String> = [], dates: [String], strings: [String], booleans: [String] = []) throws {
            guard case .object(let fields) = entry else { throw InvalidPurchase() }
            func present(_ key: String) -> JSONValue? {
                if case .null? = fields[key] { return nil }
                return fields[key]
            }
            for key in required where present(key) == nil { throw InvalidPurchase() }
            for key in dates {
                guard let value = present(key) else { continue }
                guard case .string(let text) = value, WireDate.parse(text) != nil else { throw InvalidPurchase() }
            }
            for key in strings {
                guard let value = present(key) else { continue }
                guard case .string = value else { throw InvalidPurchase() }
            }
            for key in booleans {
                guard let value = present(key) else { continue }
                guard case .bool = value else { throw InvalidPurchase() }
            }
            if let price = present("price") {
                guard case .object(let price) = price, case .string? = price["currency"], case .number? = price["amount"] else {
                    throw InvalidPurchase()
                }
            }
        }
        func map(_ key: String) throws -> [String: JSONValue] {
            switch subscriber[key] {
            case nil, .null?: return [:]
            case .object(let map)?: return map
            default: throw InvalidPurchase()
            }
        }
        for entry in try map("subscriptions").values {
            try check(
                entry,
                dates: [
                    "purchase_date", "original_purchase_date", "expires_date", "unsubscribe_detected_at", "billing_issues_detected_at",
                    "grace_period_expires_date", "refunded_at", "auto_resume_date",
                ],
                strings: ["product_plan_identifier", "store_transaction_id", "display_name"])
        }
        for list in try map("non_subscriptions").values {
            guard case .array(let purchases) = list else { throw InvalidPurchase() }
            for entry in purchases {
                try check(
                    entry, dates: ["purchase_date", "original_purchase_date"],
                    strings: ["id", "store_transaction_id", "display_name"], booleans: ["is_sandbox"])
            }
        }
        for entry in try map("entitlements").values {
            try check(entry, required: ["product_identifier"], dates: ["expires_date", "purchase_date"], strings: ["product_identifier"])
        }
        if case .string(let id)? = answer["app_user_id"] { return id }
        return nil
    }

    /// A subscription or the latest one-time purchase of a product, as RevenueCat merges them
    /// (`allPurchasesByProductId`): an entitlement takes its details from here.
    struct Purchase {
        var store: Store
        var periodType: PeriodType
        var isSandbox: Bool
        var ownershipType: PurchaseOwnershipType
        var expiresDate: Date?
        var originalPurchaseDate: Date?
        var unsubscribeDetectedAt: Date?
        var billingIssueDetectedAt: Date?

        /// The subscriptions, and for each one-time product its latest purchase (the latest
        /// outside the sandbox when there is one), which wins over a subscription of the same id.
        static func all(of subscriber: SubscriberResponse.Subscriber) -> [String: Purchase] {
            var purchases = subscriber.subscriptions.mapValues { subscription in
                Purchase(
                    store: Store(wire: subscription.store), periodType: PeriodType(wire: subscription.periodType),
                    isSandbox: subscription.isSandbox,
                    ownershipType: subscription.ownershipType.map { PurchaseOwnershipType(rawValue: $0) ?? .unknown } ?? .purchased,
                    expiresDate: subscription.expiresDate.flatMap(WireDate.parse),
                    originalPurchaseDate: WireDate.parse(subscription.originalPurchaseDate),
                    unsubscribeDetectedAt: subscription.unsubscribeDetectedAt.flatMap(WireDate.parse),
                    billingIssueDetectedAt: subscription.billingIssuesDetectedAt.flatMap(WireDate.parse))
            }
            for (productId, transactions) in subscriber.nonSubscriptions {
                guard let latest = transactions.last(where: { !$0.isSandbox }) ?? transactions.last else { continue }
                purchases[productId] = Purchase(
                    store: Store(wire: latest.store), periodType: .normal, isSandbox: latest.isSandbox, ownershipType: .purchased,
                    originalPurchaseDate: latest.originalPurchaseDate.flatMap(WireDate.parse))
            }
            return purchases
        }
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
