import Foundation

/// The CustomerInfo answer of `GET /v1/subscribers/{app_user_id}`, shaped like RevenueCat's v1
/// subscriber response so migrating apps and tools recognise it. Dates are ISO 8601 (UTC,
/// whole seconds) except `request_date_ms`.
public struct SubscriberResponse: Codable, Sendable, Hashable {
    public var requestDate: String
    public var requestDateMs: Int64
    public var subscriber: Subscriber

    enum CodingKeys: String, CodingKey {
        case requestDate = "request_date"
        case requestDateMs = "request_date_ms"
        case subscriber
    }

    package init(requestDate: String, requestDateMs: Int64, subscriber: Subscriber) {
        self.requestDate = requestDate
        self.requestDateMs = requestDateMs
        self.subscriber = subscriber
    }

    public struct Subscriber: Codable, Sendable, Hashable {
        public var entitlements: [String: Entitlement]
        public var subscriptions: [String: Subscription]
        public var nonSubscriptions: [String: [NonSubscription]]
        public var firstSeen: String
        public var lastSeen: String
        public var originalAppUserId: String
        public var managementUrl: String?
        /// RevenueCat's `original_purchase_date` of the customer (read when present).
        public var originalPurchaseDate: String?
        /// The app version of the customer's first download, from an app receipt (RevenueCat's;
        /// the server does not know it and writes null).
        public var originalApplicationVersion: String? = nil
        /// The customer's attributes: in answers to the app's secret key only, as RevenueCat's.
        public var subscriberAttributes: [String: SubscriberAttributeValue]? = nil

        package init(
            entitlements: [String: Entitlement], subscriptions: [String: Subscription], nonSubscriptions: [String: [NonSubscription]],
            firstSeen: String, lastSeen: String, originalAppUserId: String, managementUrl: String?, originalPurchaseDate: String? = nil,
            originalApplicationVersion: String? = nil, subscriberAttributes: [String: SubscriberAttributeValue]? = nil
        ) {
            self.entitlements = entitlements
            self.subscriptions = subscriptions
            self.nonSubscriptions = nonSubscriptions
            self.firstSeen = firstSeen
            self.lastSeen = lastSeen
            self.originalAppUserId = originalAppUserId
            self.managementUrl = managementUrl
            self.originalPurchaseDate = originalPurchaseDate
            self.originalApplicationVersion = originalApplicationVersion
            self.subscriberAttributes = subscriberAttributes
        }

        enum CodingKeys: String, CodingKey {
            case entitlements, subscriptions
            case nonSubscriptions = "non_subscriptions"
            case firstSeen = "first_seen"
            case lastSeen = "last_seen"
            case originalAppUserId = "original_app_user_id"
            case managementUrl = "management_url"
            case originalPurchaseDate = "original_purchase_date"
            case originalApplicationVersion = "original_application_version"
            case otherPurchases = "other_purchases"
            case subscriberAttributes = "subscriber_attributes"
        }
    }

    public struct Entitlement: Codable, Sendable, Hashable {
        /// Nil: for life. Clients treat the entitlement as active while the signed request date
        /// is before this (or before the grace period's end).
        public var expiresDate: String?
        public var gracePeriodExpiresDate: String?
        public var productIdentifier: String
        public var purchaseDate: String

        package init(expiresDate: String?, gracePeriodExpiresDate: String?, productIdentifier: String, purchaseDate: String) {
            self.expiresDate = expiresDate
            self.gracePeriodExpiresDate = gracePeriodExpiresDate
            self.productIdentifier = productIdentifier
            self.purchaseDate = purchaseDate
        }

        enum CodingKeys: String, CodingKey {
            case expiresDate = "expires_date"
            case gracePeriodExpiresDate = "grace_period_expires_date"
            case productIdentifier = "product_identifier"
            case purchaseDate = "purchase_date"
        }
    }

    public struct Subscription: Codable, Sendable, Hashable {
        public var expiresDate: String?
        public var purchaseDate: String
        public var originalPurchaseDate: String
        public var periodType: String
        public var store: String
        public var isSandbox: Bool
        public var unsubscribeDetectedAt: String?
        public var billingIssuesDetectedAt: String?
        public var gracePeriodExpiresDate: String?
        public var refundedAt: String?
        /// `PURCHASED` or `FAMILY_SHARED` (read when present).
        public var ownershipType: String?
        /// The store's id of the newest transaction (read when present).
        public var storeTransactionId: String? = nil
        /// The product's display name, as the app's configuration gives it (read when present).
        public var displayName: String? = nil
        /// What the shown transaction cost (null when unknown, and for promotional grants).
        public var price: Price? = nil
        /// A Google Play base plan (RevenueCat's `product_plan_identifier`): read, never sent by
        /// this server; RevenueCat's clients know such a subscription as `productId:basePlan`.
        public var productPlanIdentifier: String? = nil

        package init(
            expiresDate: String?, purchaseDate: String, originalPurchaseDate: String, periodType: String, store: String, isSandbox: Bool,
            unsubscribeDetectedAt: String?, billingIssuesDetectedAt: String?, gracePeriodExpiresDate: String?, refundedAt: String?,
            ownershipType: String?, storeTransactionId: String? = nil, displayName: String? = nil, price: Price? = nil
        ) {
            self.expiresDate = expiresDate
            self.purchaseDate = purchaseDate
            self.originalPurchaseDate = originalPurchaseDate
            self.periodType = periodType
            self.store = store
            self.isSandbox = isSandbox
            self.unsubscribeDetectedAt = unsubscribeDetectedAt
            self.billingIssuesDetectedAt = billingIssuesDetectedAt
            self.gracePeriodExpiresDate = gracePeriodExpiresDate
            self.refundedAt = refundedAt
            self.ownershipType = ownershipType
            self.storeTransactionId = storeTransactionId
            self.displayName = displayName
            self.price = price
        }

        enum CodingKeys: String, CodingKey {
            case price
            case productPlanIdentifier = "product_plan_identifier"
            case ownershipType = "ownership_type"
            case storeTransactionId = "store_transaction_id"
            case autoResumeDate = "auto_resume_date"
            case displayName = "display_name"
            case expiresDate = "expires_date"
            case purchaseDate = "purchase_date"
            case originalPurchaseDate = "original_purchase_date"
            case periodType = "period_type"
            case store
            case isSandbox = "is_sandbox"
            case unsubscribeDetectedAt = "unsubscribe_detected_at"
            case billingIssuesDetectedAt = "billing_issues_detected_at"
            case gracePeriodExpiresDate = "grace_period_expires_date"
            case refundedAt = "refunded_at"
        }
    }

    public struct NonSubscription: Codable, Sendable, Hashable {
        public var id: String
        public var purchaseDate: String
        public var store: String
        public var isSandbox: Bool
        public var price: Price? = nil
        /// RevenueCat's; the server writes the purchase date (read when present).
        public var originalPurchaseDate: String? = nil

        package init(id: String, purchaseDate: String, store: String, isSandbox: Bool, price: Price? = nil, originalPurchaseDate: String? = nil) {
            self.id = id
            self.purchaseDate = purchaseDate
            self.store = store
            self.isSandbox = isSandbox
            self.price = price
            self.originalPurchaseDate = originalPurchaseDate
        }

        enum CodingKeys: String, CodingKey {
            case id, price
            case originalPurchaseDate = "original_purchase_date"
            case purchaseDate = "purchase_date"
            case store
            case isSandbox = "is_sandbox"
            case storeTransactionId = "store_transaction_id"
        }
    }
}

extension SubscriberResponse {
    /// RevenueCat's price of a purchase: `{"amount": 4.99, "currency": "USD"}`.
    public struct Price: Codable, Sendable, Hashable {
        public var amount: Double
        public var currency: String

        public init(amount: Double, currency: String) {
            self.amount = amount
            self.currency = currency
        }
    }
}

// Decoding is lenient where it is safe, as RevenueCat's SDK is: a verified answer is never
// refused for a missing optional field or an unknown one. Only what identifies the answer is
// required (`request_date_ms` or `request_date`, `subscriber`, its `original_app_user_id`, and
// each entitlement's `product_identifier`); missing dates read as "" (no date), missing maps as
// empty, a missing period type as `normal`, a missing store as "" (the SDK's `unknownStore`, as RevenueCat reads it).
extension KeyedDecodingContainer {
    fileprivate func lenient<T: Decodable>(_ type: T.Type, _ key: Key, default value: T) -> T {
        ((try? decodeIfPresent(type, forKey: key)) ?? nil) ?? value
    }

    fileprivate func lenient<T: Decodable>(_ type: T.Type, _ key: Key) -> T? {
        (try? decodeIfPresent(type, forKey: key)) ?? nil
    }
}

extension SubscriberResponse {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        subscriber = try container.decode(Subscriber.self, forKey: .subscriber)
        requestDate = container.lenient(String.self, .requestDate, default: "")
        if let milliseconds = container.lenient(Int64.self, .requestDateMs) {
            requestDateMs = milliseconds
        } else if let date = WireDate.parse(requestDate) {
            requestDateMs = date.epochMilliseconds
        } else {
            throw DecodingError.keyNotFound(CodingKeys.requestDateMs, .init(codingPath: [], debugDescription: "no request date"))
        }
    }
}

extension SubscriberResponse.Subscriber {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        originalAppUserId = try container.decode(String.self, forKey: .originalAppUserId)
        entitlements = container.lenient([String: SubscriberResponse.Entitlement].self, .entitlements, default: [:])
        subscriptions = container.lenient([String: SubscriberResponse.Subscription].self, .subscriptions, default: [:])
        nonSubscriptions = container.lenient([String: [SubscriberResponse.NonSubscription]].self, .nonSubscriptions, default: [:])
        firstSeen = container.lenient(String.self, .firstSeen, default: "")
        lastSeen = container.lenient(String.self, .lastSeen, default: "")
        managementUrl = container.lenient(String.self, .managementUrl)
        originalPurchaseDate = container.lenient(String.self, .originalPurchaseDate)
        subscriberAttributes = container.lenient([String: SubscriberAttributeValue].self, .subscriberAttributes)
        originalApplicationVersion = container.lenient(String.self, .originalApplicationVersion)
    }
}

extension SubscriberResponse.Entitlement {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        productIdentifier = try container.decode(String.self, forKey: .productIdentifier)
        expiresDate = container.lenient(String.self, .expiresDate)
        gracePeriodExpiresDate = container.lenient(String.self, .gracePeriodExpiresDate)
        purchaseDate = container.lenient(String.self, .purchaseDate, default: "")
    }
}

extension SubscriberResponse.Subscription {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        expiresDate = container.lenient(String.self, .expiresDate)
        purchaseDate = container.lenient(String.self, .purchaseDate, default: "")
        originalPurchaseDate = container.lenient(String.self, .originalPurchaseDate, default: "")
        periodType = container.lenient(String.self, .periodType, default: "normal")
        store = container.lenient(String.self, .store, default: "")
        isSandbox = container.lenient(Bool.self, .isSandbox, default: false)
        unsubscribeDetectedAt = container.lenient(String.self, .unsubscribeDetectedAt)
        billingIssuesDetectedAt = container.lenient(String.self, .billingIssuesDetectedAt)
        gracePeriodExpiresDate = container.lenient(String.self, .gracePeriodExpiresDate)
        refundedAt = container.lenient(String.self, .refundedAt)
        ownershipType = container.lenient(String.self, .ownershipType)
        storeTransactionId = container.lenient(String.self, .storeTransactionId)
        displayName = container.lenient(String.self, .displayName)
        price = container.lenient(SubscriberResponse.Price.self, .price)
        productPlanIdentifier = container.lenient(String.self, .productPlanIdentifier)
    }
}

extension SubscriberResponse.NonSubscription {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = container.lenient(String.self, .id, default: "")
        purchaseDate = container.lenient(String.self, .purchaseDate, default: "")
        store = container.lenient(String.self, .store, default: "")
        isSandbox = container.lenient(Bool.self, .isSandbox, default: false)
        price = container.lenient(SubscriberResponse.Price.self, .price)
        originalPurchaseDate = container.lenient(String.self, .originalPurchaseDate)
    }
}

// Encoding writes RevenueCat's nullable fields as `null` rather than leaving them out, as
// RevenueCat's answer does (and as the lean writer does, which tests hold byte-equal to this).
extension SubscriberResponse.Subscriber {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(entitlements, forKey: .entitlements)
        try container.encode(subscriptions, forKey: .subscriptions)
        try container.encode(nonSubscriptions, forKey: .nonSubscriptions)
        try container.encode(firstSeen, forKey: .firstSeen)
        try container.encode(lastSeen, forKey: .lastSeen)
        try container.encode(originalAppUserId, forKey: .originalAppUserId)
        try container.encode(managementUrl, forKey: .managementUrl)
        try container.encode(originalPurchaseDate, forKey: .originalPurchaseDate)
        try container.encode(originalApplicationVersion, forKey: .originalApplicationVersion)
        try container.encode([String: String](), forKey: .otherPurchases)
        try container.encodeIfPresent(subscriberAttributes, forKey: .subscriberAttributes)
    }
}

extension SubscriberResponse.Entitlement {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(expiresDate, forKey: .expiresDate)
        try container.encode(gracePeriodExpiresDate, forKey: .gracePeriodExpiresDate)
        try container.encode(productIdentifier, forKey: .productIdentifier)
        try container.encode(purchaseDate, forKey: .purchaseDate)
    }
}

extension SubscriberResponse.Subscription {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeNil(forKey: .autoResumeDate)
        try container.encode(billingIssuesDetectedAt, forKey: .billingIssuesDetectedAt)
        try container.encode(displayName, forKey: .displayName)
        try container.encode(expiresDate, forKey: .expiresDate)
        try container.encode(gracePeriodExpiresDate, forKey: .gracePeriodExpiresDate)
        try container.encode(isSandbox, forKey: .isSandbox)
        try container.encode(originalPurchaseDate, forKey: .originalPurchaseDate)
        try container.encode(ownershipType, forKey: .ownershipType)
        try container.encode(periodType, forKey: .periodType)
        try container.encode(price, forKey: .price)
        try container.encode(purchaseDate, forKey: .purchaseDate)
        try container.encode(refundedAt, forKey: .refundedAt)
        try container.encode(store, forKey: .store)
        try container.encode(storeTransactionId, forKey: .storeTransactionId)
        try container.encode(unsubscribeDetectedAt, forKey: .unsubscribeDetectedAt)
    }
}

extension SubscriberResponse.NonSubscription {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(isSandbox, forKey: .isSandbox)
        try container.encode(originalPurchaseDate, forKey: .originalPurchaseDate)
        try container.encode(price, forKey: .price)
        try container.encode(purchaseDate, forKey: .purchaseDate)
        try container.encode(store, forKey: .store)
        try container.encode(id, forKey: .storeTransactionId)
    }
}

/// Date and store spellings on the wire.
public enum WireDate {
    /// `2026-01-01T00:00:00Z`: UTC, whole seconds.
    ///
    /// Written by hand from the day count (Foundation's `.iso8601` style costs microseconds per
    /// date on Linux and a CustomerInfo has a dozen); years outside 1600...9999 go to Foundation
    /// (whose calendar is Julian before the Gregorian reform of 1582).
    /// A test holds the two equal over the whole range.
    public static func format(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        guard seconds.isFinite, abs(seconds) < 1e12 else { return foundationFormat(date) }
        let whole = Int64(seconds)
        let days = whole >= 0 ? whole / 86_400 : (whole - 86_399) / 86_400
        let secondOfDay = Int(whole - days * 86_400)
        let (year, month, day) = civilDate(daysSince1970: days)
        guard (1600...9999).contains(year) else { return foundationFormat(date) }
        var text = [UInt8](repeating: 0, count: 20)
        func put(_ value: Int, _ width: Int, at offset: Int) {
            var value = value
            for index in stride(from: offset + width - 1, through: offset, by: -1) {
                text[index] = UInt8(ascii: "0") + UInt8(value % 10)
                value /= 10
            }
        }
        put(Int(year), 4, at: 0)
        put(month, 2, at: 5)
        put(day, 2, at: 8)
        put(secondOfDay / 3600, 2, at: 11)
        put(secondOfDay / 60 % 60, 2, at: 14)
        put(secondOfDay % 60, 2, at: 17)
        for (offset, byte) in [(4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"), (19, "Z")] as [(Int, Unicode.Scalar)] {
            text[offset] = UInt8(ascii: byte)
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func foundationFormat(_ date: Date) -> String {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down)).formatted(.iso8601)
    }

    /// The proleptic Gregorian (year, month, day) of a day count from 1970-01-01, by counting
    /// 400-year eras of 146,097 days from 0000-03-01 (March first puts the leap day last).
    static func civilDate(daysSince1970: Int64) -> (year: Int64, month: Int, day: Int) {
        let shifted = daysSince1970 + 719_468  // days from 0000-03-01 to 1970-01-01
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * monthFromMarch + 2) / 5 + 1)
        let month = Int(monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9)
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// An ISO 8601 date and time, with or without fractional seconds (RevenueCat's answers use
    /// both).
    public static func parse(_ text: String) -> Date? {
        (try? Date(text, strategy: .iso8601)) ?? (try? Date(text, strategy: fractional))
    }

    private static let fractional = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// Where App Store customers manage their subscriptions (RevenueCat's `management_url`).
    public static let appStoreSubscriptionsURL = "https://apps.apple.com/account/subscriptions"

    package static func store(of environment: String) -> String {
        switch environment {
        case "TestStore": "test_store"
        case "Stripe", "StripeTest": "stripe"
        default: "app_store"
        }
    }

    /// Whether a purchase of `environment` is a test one: everything but the App Store's
    /// production and Stripe's live mode.
    package static func isSandbox(_ environment: String) -> Bool {
        environment != "Production" && environment != "Stripe"
    }
}
