import CountersignAppStore
import CountersignCore
import CountersignServerCore
import Crypto
import Foundation

/// What happened to a customer's purchases, as RevenueCat's webhooks name it.
public enum WebhookEventType: String, CaseIterable, Sendable, Codable {
    case initialPurchase = "INITIAL_PURCHASE"
    case renewal = "RENEWAL"
    case cancellation = "CANCELLATION"
    case uncancellation = "UNCANCELLATION"
    case nonRenewingPurchase = "NON_RENEWING_PURCHASE"
    case expiration = "EXPIRATION"
    case billingIssue = "BILLING_ISSUE"
    case productChange = "PRODUCT_CHANGE"
    case transfer = "TRANSFER"
    case subscriptionExtended = "SUBSCRIPTION_EXTENDED"
    case refundReversed = "REFUND_REVERSED"
    case test = "TEST"

    /// When the server sends it (docs/webhooks.md is written from these).
    public var meaning: String {
        switch self {
        case .initialPurchase: "the first transaction of an auto-renewable subscription is recorded for a customer"
        case .renewal: "a later transaction of a subscription is recorded (a renewal, a resubscription, an upgrade's new transaction)"
        case .cancellation:
            "the latest period of a subscription, or a one-time purchase, is refunded or revoked (`cancel_reason` CUSTOMER_SUPPORT); "
                + "auto-renew is turned off (UNSUBSCRIBE); a renewal could not be charged (BILLING_ERROR)"
        case .uncancellation: "auto-renew is turned back on before the subscription expired"
        case .nonRenewingPurchase: "a consumable, non-consumable or non-renewing subscription is recorded"
        case .expiration:
            "a subscription's last period, or its grace period, ended without a renewal (`expiration_reason`), by Apple's notification "
                + "or the server's own check, once per period"
        case .billingIssue: "the App Store could not charge a renewal (`grace_period_expiration_at_ms` when a grace period runs)"
        case .productChange: "the customer chose another product to renew into (`new_product_id`)"
        case .transfer: "a purchase moved from one customer to another (`transferred_from`, `transferred_to`)"
        case .subscriptionExtended: "the App Store moved a subscription's expiry later (RENEWAL_EXTENDED, or a later-signed copy)"
        case .refundReversed: "the App Store took back a refund (REFUND_REVERSED): the transaction grants again"
        case .test: "sent from the admin API to check an endpoint"
        }
    }
}

/// One event: the fields of RevenueCat's webhook `event` object, under the same names and JSON
/// types. Its `id` is derived from the change it reports, so reporting the same change twice (a
/// retried request, two servers, a notification and the expiry check) stores it once.
///
/// `aliases`, `original_app_user_id` and `subscriber_attributes` are not stored with the event:
/// they describe the customer, and are added as the customer is when the event is delivered
/// (the storage adds them to the stored body).
public struct WebhookEvent: Sendable, Hashable {
    public var id: String
    public var type: WebhookEventType
    public var appId: String
    public var appUserId: String?
    public var productId: String?
    public var entitlementIds: [String]?
    public var periodType: String?
    public var purchasedAtMs: Int64?
    public var expirationAtMs: Int64?
    public var environment: String?
    public var store: String?
    public var transactionId: String?
    public var originalTransactionId: String?
    public var eventTimestampMs: Int64
    public var cancelReason: String?
    public var expirationReason: String?
    public var newProductId: String?
    public var transferredFrom: [String]?
    public var transferredTo: [String]?
    public var isFamilyShare: Bool = false
    public var countryCode: String?
    public var currency: String?
    /// The price in the purchased currency, in thousandths (Apple's milliunits); negative for
    /// a refund, zero for events that move no money.
    public var priceMilli: Int64?
    /// The same in US dollars, in thousandths; nil without a rate for the currency.
    public var priceUSDMilli: Int64?
    /// The store's commission in thousandths of the price (300: 30 %).
    public var commissionPermille: Int64 = 300
    public var offerCode: String?
    /// Made by an import (`countersign import`), not by the store's live traffic.
    public var imported = false
    /// Delivered to the app's webhooks (an import's events are not, unless it asks).
    public var delivered = true
    public var presentedOfferingId: String?
    /// The transaction's place in its chain, from 1 (the first purchase).
    public var renewalNumber: Int64?
    public var isTrialConversion: Bool?
    public var gracePeriodExpirationAtMs: Int64?

    /// The stable id of the event of `type` about `subject` (a transaction id, a chain and an
    /// expiry, a notification id): a UUID made of SHA-256 over the three.
    public static func id(app: String, type: WebhookEventType, subject: String) -> String {
        let digest = SHA256.hash(data: Data("countersign-event\u{0}\(app)\u{0}\(type.rawValue)\u{0}\(subject)".utf8))
        var bytes = Array(digest.prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x80  // version 8: custom
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            )
        ).uuidString
    }

    /// How an event's `price` relates to the transaction's.
    public enum Money: Sendable {
        /// A charge: the transaction's price.
        case charge
        /// A refund: the price, negative.
        case refund
        /// No money moved (a cancellation of auto-renew, an expiry…): 0.
        case none
    }

    /// An event about one transaction of `user`.
    public init(
        _ type: WebhookEventType, subject: String, app: AppConfiguration, user: String?, transaction: EventTransaction, now: Date,
        money: Money = .none
    ) {
        id = Self.id(app: app.id, type: type, subject: subject)
        self.type = type
        appId = app.id
        appUserId = user
        productId = transaction.productId
        entitlementIds = app.product(transaction.productId)?.entitlements
        periodType = transaction.periodType.uppercased()
        purchasedAtMs = transaction.purchasedAtMs
        expirationAtMs = transaction.expiresAtMs
        (environment, store) = Self.environmentAndStore(transaction.environment)
        transactionId = transaction.transactionId
        originalTransactionId = transaction.originalTransactionId
        eventTimestampMs = now.epochMilliseconds
        isFamilyShare = transaction.familyShared
        countryCode = Storefront.countryCode(transaction.storefront)
        currency = transaction.currency
        if let price = transaction.priceMilli {
            let signed: Int64 =
                switch money {
                case .charge: price
                case .refund: -price
                case .none: 0
                }
            priceMilli = signed
            if transaction.currency == "USD" {
                priceUSDMilli = signed
            } else if let currency = transaction.currency,
                let rate = app.usdPerUnit(currency, atMilliseconds: transaction.purchasedAtMs ?? now.epochMilliseconds)
            {
                priceUSDMilli = Int64(clamping: (Double(signed) * rate).rounded())
            }
        }
        let bought = transaction.purchasedAtMs ?? now.epochMilliseconds
        commissionPermille = Int64(clamping: (app.commission(atMilliseconds: bought) * 1000).rounded())
        offerCode = transaction.offerCode
        presentedOfferingId = transaction.presentedOfferingId
        renewalNumber = transaction.renewalNumber
    }

    /// The event of a transaction newly recorded for `user`: the first of an auto-renewable chain
    /// is its initial purchase, a later one a renewal, anything else a non-renewing purchase.
    public static func purchase(_ transaction: EventTransaction, kind: AppConfiguration.ProductKind, app: AppConfiguration, user: String, now: Date)
        -> WebhookEvent
    {
        let type: WebhookEventType =
            kind != .autoRenewable
            ? .nonRenewingPurchase
            : transaction.transactionId == transaction.originalTransactionId ? .initialPurchase : .renewal
        var event = WebhookEvent(type, subject: transaction.transactionId, app: app, user: user, transaction: transaction, now: now, money: .charge)
        if type == .renewal { event.isTrialConversion = transaction.previousPeriodType == "trial" }
        return event
    }

    /// A `TEST` event for `app` (a fresh id each time).
    public static func test(app: AppConfiguration, now: Date) -> WebhookEvent {
        WebhookEvent(id: UUID().uuidString, type: .test, appId: app.id, eventTimestampMs: now.epochMilliseconds)
    }

    private init(id: String, type: WebhookEventType, appId: String, eventTimestampMs: Int64) {
        self.id = id
        self.type = type
        self.appId = appId
        self.eventTimestampMs = eventTimestampMs
    }

    /// RevenueCat's `environment` (PRODUCTION or SANDBOX) and `store` (APP_STORE, or TEST_STORE
    /// for the built-in test store, whose purchases are sandbox purchases; STRIPE for web
    /// purchases, SANDBOX in Stripe's test mode).
    public static func environmentAndStore(_ environment: String) -> (String, String) {
        switch environment {
        case AppStoreEnvironment.production.rawValue: ("PRODUCTION", "APP_STORE")
        case AppStoreEnvironment.testStore.rawValue: ("SANDBOX", "TEST_STORE")
        case "Stripe": ("PRODUCTION", "STRIPE")
        case "StripeTest": ("SANDBOX", "STRIPE")
        default: ("SANDBOX", "APP_STORE")
        }
    }

    /// The stored body: `{"api_version":"1.0","event":{…}}`, keys sorted, without the three
    /// customer keys added at delivery. Every field RevenueCat documents for the event's type is
    /// present, null when unknown; a type's own fields (`cancel_reason`, `expiration_reason`,
    /// `new_product_id`, `is_trial_conversion`, `grace_period_expiration_at_ms`) only on that
    /// type. `experiments` is RevenueCat's list of the customer's experiment enrollments, empty
    /// here (no experiments run on this server), on every type, and `metadata` is null on a
    /// `REFUND_REVERSED`, as in RevenueCat's samples. A `TRANSFER` carries what RevenueCat's does:
    /// ids, time, store, environment and the two lists, no transaction. Written directly (every purchase makes one); the golden files
    /// in Tests/Fixtures/golden hold its bytes.
    public var body: String {
        if type == .transfer { return transferBody }
        var json = LeanJSONWriter(capacity: 1024)
        var first = true
        func optional(_ value: String?) { Self.optional(value, into: &json) }
        func optional(_ value: Int64?) { if let value { json.integer(value) } else { json.raw("null") } }
        func decimal(_ value: Int64?) {
            if let value { json.append(contentsOf: Array(Self.decimal(milli: value).utf8)) } else { json.raw("null") }
        }
        json.raw("{\"api_version\":\"1.0\",\"event\":{")
        json.member("app_id", first: &first); json.string(appId)
        json.member("app_user_id", first: &first); optional(appUserId)
        if type == .cancellation { json.member("cancel_reason", first: &first); optional(cancelReason) }
        json.member("commission_percentage", first: &first); decimal(type == .test ? nil : commissionPermille)
        json.member("country_code", first: &first); optional(countryCode)
        json.member("currency", first: &first); optional(currency)
        json.member("entitlement_id", first: &first); json.raw("null")
        json.member("entitlement_ids", first: &first)
        if let entitlementIds { Self.strings(entitlementIds, into: &json) } else { json.raw("null") }
        json.member("environment", first: &first); optional(environment)
        json.member("event_timestamp_ms", first: &first); json.integer(eventTimestampMs)
        json.member("experiments", first: &first); json.raw("[]")
        json.member("expiration_at_ms", first: &first); optional(expirationAtMs)
        if type == .expiration { json.member("expiration_reason", first: &first); optional(expirationReason) }
        if type == .billingIssue { json.member("grace_period_expiration_at_ms", first: &first); optional(gracePeriodExpirationAtMs) }
        json.member("id", first: &first); json.string(id)
        json.member("is_family_share", first: &first); json.bool(isFamilyShare)
        if type == .renewal { json.member("is_trial_conversion", first: &first); json.bool(isTrialConversion ?? false) }
        if type == .refundReversed { json.member("metadata", first: &first); json.raw("null") }
        if type == .productChange { json.member("new_product_id", first: &first); optional(newProductId) }
        json.member("offer_code", first: &first); optional(offerCode)
        json.member("original_transaction_id", first: &first); optional(originalTransactionId)
        json.member("period_type", first: &first); optional(periodType)
        json.member("presented_offering_id", first: &first); optional(presentedOfferingId)
        json.member("price", first: &first); decimal(priceUSDMilli)
        json.member("price_in_purchased_currency", first: &first); decimal(priceMilli)
        json.member("product_id", first: &first); optional(productId)
        json.member("purchased_at_ms", first: &first); optional(purchasedAtMs)
        json.member("renewal_number", first: &first); optional(renewalNumber)
        json.member("store", first: &first); optional(store)
        json.member("takehome_percentage", first: &first); decimal(type == .test ? nil : 1000 - commissionPermille)
        json.member("tax_percentage", first: &first); json.raw("null")
        json.member("transaction_id", first: &first); optional(transactionId)
        json.member("type", first: &first); json.string(type.rawValue)
        json.raw("}}")
        return String(decoding: json.bytes, as: UTF8.self)
    }

    /// A `TRANSFER`'s body: ids, time, store, environment and the two lists, no transaction.
    private var transferBody: String {
        var json = LeanJSONWriter(capacity: 512)
        var first = true
        json.raw("{\"api_version\":\"1.0\",\"event\":{")
        json.member("app_id", first: &first); json.string(appId)
        json.member("environment", first: &first); Self.optional(environment, into: &json)
        json.member("event_timestamp_ms", first: &first); json.integer(eventTimestampMs)
        json.member("experiments", first: &first); json.raw("[]")
        json.member("id", first: &first); json.string(id)
        json.member("store", first: &first); Self.optional(store, into: &json)
        json.member("transferred_from", first: &first); Self.strings(transferredFrom ?? [], into: &json)
        json.member("transferred_to", first: &first); Self.strings(transferredTo ?? [], into: &json)
        json.member("type", first: &first); json.string(type.rawValue)
        json.raw("}}")
        return String(decoding: json.bytes, as: UTF8.self)
    }

    private static func optional(_ value: String?, into json: inout LeanJSONWriter) {
        if let value { json.string(value) } else { json.raw("null") }
    }

    private static func strings(_ values: [String], into json: inout LeanJSONWriter) {
        json.byte(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { json.byte(UInt8(ascii: ",")) }
            json.string(value)
        }
        json.byte(UInt8(ascii: "]"))
    }

    /// A number of thousandths as a JSON decimal: 4990 is `4.99`, -25 is `-0.025`, 0 is `0`.
    public static func decimal(milli: Int64) -> String {
        let sign = milli < 0 ? "-" : ""
        let magnitude = milli.magnitude
        var fraction = String(magnitude % 1000)
        fraction = String(repeating: "0", count: 3 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return sign + String(magnitude / 1000) + (fraction.isEmpty ? "" : "." + fraction)
    }
}

/// The transaction fields an event reports, from a verified transaction or a stored row.
public struct EventTransaction: Sendable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var environment: String
    public var periodType: String
    public var purchasedAtMs: Int64?
    public var expiresAtMs: Int64?
    public var priceMilli: Int64?
    public var currency: String?
    public var storefront: String?
    public var offerCode: String?
    public var familyShared = false
    public var presentedOfferingId: String?
    /// The transaction's place in its chain (1: the first purchase); nil when not worked out.
    public var renewalNumber: Int64?
    /// The period type of the chain's transaction before this one (a renewal's
    /// `is_trial_conversion`).
    public var previousPeriodType: String?

    public init(
        transactionId: String, originalTransactionId: String, productId: String, environment: String, periodType: String,
        purchasedAtMs: Int64?, expiresAtMs: Int64?
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.environment = environment
        self.periodType = periodType
        self.purchasedAtMs = purchasedAtMs
        self.expiresAtMs = expiresAtMs
    }

    public init(_ transaction: VerifiedTransaction) {
        self.init(transaction.payload, transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId)
        presentedOfferingId = transaction.presentedOfferingId
        if transactionId == originalTransactionId { renewalNumber = 1 }
    }

    public init(_ payload: TransactionPayload, transactionId: String, originalTransactionId: String) {
        self.init(
            transactionId: transactionId, originalTransactionId: originalTransactionId,
            productId: payload.productId ?? "", environment: payload.environment?.rawValue ?? "", periodType: payload.periodType,
            purchasedAtMs: payload.purchaseDate.map(\.epochMilliseconds),
            expiresAtMs: payload.expiresDate.map(\.epochMilliseconds))
        priceMilli = payload.price
        currency = payload.currency
        storefront = payload.storefront
        // Apple's offer type 3 is an offer code; its identifier is the code's reference name.
        offerCode = payload.offerType == 3 ? payload.offerIdentifier : nil
        familyShared = payload.inAppOwnershipType == .familyShared
    }

    /// Takes the transaction's place in its chain, unless its place is known (the first
    /// transaction of a chain is first by its ids).
    public mutating func place(_ place: ChainPlace) {
        guard renewalNumber == nil else { return }
        renewalNumber = place.renewalNumber
        previousPeriodType = place.previousPeriodType
    }
}
