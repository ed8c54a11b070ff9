import CountersignAppStore
import CountersignCore
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
    case test = "TEST"

    /// When the server sends it (docs/webhooks.md is written from these).
    public var meaning: String {
        switch self {
        case .initialPurchase: "the first transaction of an auto-renewable subscription is recorded for a customer"
        case .renewal: "a later transaction of a subscription is recorded (a renewal, a resubscription, an upgrade's new transaction)"
        case .cancellation: "a refund or revocation of a transaction (`cancel_reason` CUSTOMER_SUPPORT), or auto-renew turned off (UNSUBSCRIBE)"
        case .uncancellation: "auto-renew turned back on, or a refund reversed"
        case .nonRenewingPurchase: "a consumable, non-consumable or non-renewing subscription is recorded"
        case .expiration:
            "a subscription's last period ended without a renewal (`expiration_reason`), by Apple's EXPIRED notification or the server's own check, once per period"
        case .billingIssue: "the App Store could not charge a renewal (billing retry began)"
        case .productChange: "the customer chose another product to renew into (`new_product_id`)"
        case .transfer: "a purchase moved from one customer to another (`transferred_from`, `transferred_to`)"
        case .subscriptionExtended: "Apple extended the renewal date (RENEWAL_EXTENDED)"
        case .test: "sent from the admin API to check an endpoint"
        }
    }
}

/// One event: the fields of RevenueCat's webhook `event` object that the server knows, under
/// the same names. Its `id` is derived from the change it reports, so reporting the same change
/// twice (a retried request, two servers, a notification and the expiry check) stores it once.
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

    /// The stable id of the event of `type` about `subject` (a transaction id, a chain and an
    /// expiry, a notification id): a UUID made of SHA-256 over the three.
    static func id(app: String, type: WebhookEventType, subject: String) -> String {
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

    /// An event about one transaction of `user`.
    init(_ type: WebhookEventType, subject: String, app: AppConfiguration, user: String?, transaction: EventTransaction, now: Date) {
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
    }

    /// The event of a transaction newly recorded for `user`: the first of an auto-renewable chain
    /// is its initial purchase, a later one a renewal, anything else a non-renewing purchase.
    static func purchase(_ transaction: VerifiedTransaction, app: AppConfiguration, user: String, now: Date) -> WebhookEvent {
        let type: WebhookEventType =
            transaction.kind != .autoRenewable
            ? .nonRenewingPurchase
            : transaction.transactionId == transaction.originalTransactionId ? .initialPurchase : .renewal
        return WebhookEvent(type, subject: transaction.transactionId, app: app, user: user, transaction: EventTransaction(transaction), now: now)
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
    /// for the built-in test store, whose purchases are sandbox purchases).
    static func environmentAndStore(_ environment: String) -> (String, String) {
        switch environment {
        case AppStoreEnvironment.production.rawValue: ("PRODUCTION", "APP_STORE")
        case AppStoreEnvironment.testStore.rawValue: ("SANDBOX", "TEST_STORE")
        default: ("SANDBOX", "APP_STORE")
        }
    }

    /// The delivery body: `{"api_version":"1.0","event":{…}}`, keys sorted. The event's own
    /// fields are always present (null when unknown); a type's extra fields only on that type.
    /// Written directly (every purchase makes one); tests hold it byte-equal to
    /// ``encodedBody``, the `Encodable` form.
    public var body: String {
        var json = LeanJSONWriter(capacity: 768)
        var first = true
        func optional(_ value: String?) { if let value { json.string(value) } else { json.raw("null") } }
        func optional(_ value: Int64?) { if let value { json.integer(value) } else { json.raw("null") } }
        func strings(_ values: [String]) {
            json.byte(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { json.byte(UInt8(ascii: ",")) }
                json.string(value)
            }
            json.byte(UInt8(ascii: "]"))
        }
        json.raw("{\"api_version\":\"1.0\",\"event\":{")
        json.member("aliases", first: &first); strings(appUserId.map { [$0] } ?? [])
        json.member("app_id", first: &first); json.string(appId)
        json.member("app_user_id", first: &first); optional(appUserId)
        if type == .cancellation { json.member("cancel_reason", first: &first); optional(cancelReason) }
        json.member("entitlement_ids", first: &first)
        if let entitlementIds { strings(entitlementIds) } else { json.raw("null") }
        json.member("environment", first: &first); optional(environment)
        json.member("event_timestamp_ms", first: &first); json.integer(eventTimestampMs)
        json.member("expiration_at_ms", first: &first); optional(expirationAtMs)
        if type == .expiration { json.member("expiration_reason", first: &first); optional(expirationReason) }
        json.member("id", first: &first); json.string(id)
        if type == .productChange { json.member("new_product_id", first: &first); optional(newProductId) }
        json.member("original_app_user_id", first: &first); optional(appUserId)
        json.member("original_transaction_id", first: &first); optional(originalTransactionId)
        json.member("period_type", first: &first); optional(periodType)
        json.member("product_id", first: &first); optional(productId)
        json.member("purchased_at_ms", first: &first); optional(purchasedAtMs)
        json.member("store", first: &first); optional(store)
        json.member("transaction_id", first: &first); optional(transactionId)
        if type == .transfer {
            json.member("transferred_from", first: &first); strings(transferredFrom ?? [])
            json.member("transferred_to", first: &first); strings(transferredTo ?? [])
        }
        json.member("type", first: &first); json.string(type.rawValue)
        json.raw("}}")
        return String(decoding: json.bytes, as: UTF8.self)
    }

    /// The body through `JSONEncoder` (sorted keys, unescaped slashes): what ``body`` must equal.
    var encodedBody: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(Envelope(event: self))) ?? Data(), as: UTF8.self)
    }

    private struct Envelope: Encodable {
        let event: WebhookEvent

        enum CodingKeys: String, CodingKey {
            case apiVersion = "api_version", event
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode("1.0", forKey: .apiVersion)
            try container.encode(event, forKey: .event)
        }
    }
}

extension WebhookEvent: Encodable {
    enum CodingKeys: String, CodingKey {
        case id, type, appId = "app_id", appUserId = "app_user_id", originalAppUserId = "original_app_user_id", aliases
        case productId = "product_id", entitlementIds = "entitlement_ids", periodType = "period_type"
        case purchasedAtMs = "purchased_at_ms", expirationAtMs = "expiration_at_ms", environment, store
        case transactionId = "transaction_id", originalTransactionId = "original_transaction_id", eventTimestampMs = "event_timestamp_ms"
        case cancelReason = "cancel_reason", expirationReason = "expiration_reason", newProductId = "new_product_id"
        case transferredFrom = "transferred_from", transferredTo = "transferred_to"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(type.rawValue, forKey: .type)
        try container.encode(appId, forKey: .appId)
        try container.encode(appUserId, forKey: .appUserId)
        try container.encode(appUserId, forKey: .originalAppUserId)
        try container.encode(appUserId.map { [$0] } ?? [], forKey: .aliases)
        try container.encode(productId, forKey: .productId)
        try container.encode(entitlementIds, forKey: .entitlementIds)
        try container.encode(periodType, forKey: .periodType)
        try container.encode(purchasedAtMs, forKey: .purchasedAtMs)
        try container.encode(expirationAtMs, forKey: .expirationAtMs)
        try container.encode(environment, forKey: .environment)
        try container.encode(store, forKey: .store)
        try container.encode(transactionId, forKey: .transactionId)
        try container.encode(originalTransactionId, forKey: .originalTransactionId)
        try container.encode(eventTimestampMs, forKey: .eventTimestampMs)
        switch type {
        case .cancellation: try container.encode(cancelReason, forKey: .cancelReason)
        case .expiration: try container.encode(expirationReason, forKey: .expirationReason)
        case .productChange: try container.encode(newProductId, forKey: .newProductId)
        case .transfer:
            try container.encode(transferredFrom ?? [], forKey: .transferredFrom)
            try container.encode(transferredTo ?? [], forKey: .transferredTo)
        default: break
        }
    }
}

/// The transaction fields an event reports, from a verified transaction or a stored row.
struct EventTransaction: Sendable {
    var transactionId: String
    var originalTransactionId: String
    var productId: String
    var environment: String
    var periodType: String
    var purchasedAtMs: Int64?
    var expiresAtMs: Int64?

    init(
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

    init(_ transaction: VerifiedTransaction) {
        let payload = transaction.payload
        self.init(
            transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId,
            productId: transaction.productId, environment: payload.environment?.rawValue ?? "", periodType: payload.periodType,
            purchasedAtMs: payload.purchaseDate.map(\.epochMilliseconds),
            expiresAtMs: payload.expiresDate.map(\.epochMilliseconds))
    }
}
