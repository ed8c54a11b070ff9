import Foundation

/// Open string enumerations: values Apple adds later decode as themselves instead of failing,
/// so a new notification type never makes the server drop a purchase.
public protocol OpenStringValue: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible,
    ExpressibleByStringLiteral
where RawValue == String {
    init(rawValue: String)
}

extension OpenStringValue {
    public init(stringLiteral value: String) { self.init(rawValue: value) }
    public var description: String { rawValue }
}

/// Where signed data comes from. `TestStore` is Countersign's own test store.
public struct AppStoreEnvironment: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let production: Self = "Production"
    public static let sandbox: Self = "Sandbox"
    public static let xcode: Self = "Xcode"
    public static let localTesting: Self = "LocalTesting"
    /// Signed by a deployment's own test store CA, never by Apple.
    public static let testStore: Self = "TestStore"
}

/// The kind of in-app product a transaction is for.
public struct ProductType: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let autoRenewable: Self = "Auto-Renewable Subscription"
    public static let nonConsumable: Self = "Non-Consumable"
    public static let consumable: Self = "Consumable"
    public static let nonRenewing: Self = "Non-Renewing Subscription"
}

/// `PURCHASE` or `RENEWAL`.
public struct TransactionReason: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let purchase: Self = "PURCHASE"
    public static let renewal: Self = "RENEWAL"
}

/// `PURCHASED` or `FAMILY_SHARED`.
public struct OwnershipType: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let purchased: Self = "PURCHASED"
    public static let familyShared: Self = "FAMILY_SHARED"
}

/// App Store Server Notifications V2 `notificationType`.
public struct NotificationType: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let subscribed: Self = "SUBSCRIBED"
    public static let didRenew: Self = "DID_RENEW"
    public static let didFailToRenew: Self = "DID_FAIL_TO_RENEW"
    public static let didChangeRenewalPref: Self = "DID_CHANGE_RENEWAL_PREF"
    public static let didChangeRenewalStatus: Self = "DID_CHANGE_RENEWAL_STATUS"
    public static let expired: Self = "EXPIRED"
    public static let gracePeriodExpired: Self = "GRACE_PERIOD_EXPIRED"
    public static let offerRedeemed: Self = "OFFER_REDEEMED"
    public static let refund: Self = "REFUND"
    public static let refundDeclined: Self = "REFUND_DECLINED"
    public static let refundReversed: Self = "REFUND_REVERSED"
    public static let revoke: Self = "REVOKE"
    public static let consumptionRequest: Self = "CONSUMPTION_REQUEST"
    public static let renewalExtended: Self = "RENEWAL_EXTENDED"
    public static let renewalExtension: Self = "RENEWAL_EXTENSION"
    public static let priceIncrease: Self = "PRICE_INCREASE"
    public static let oneTimeCharge: Self = "ONE_TIME_CHARGE"
    public static let externalPurchaseToken: Self = "EXTERNAL_PURCHASE_TOKEN"
    public static let metadataUpdate: Self = "METADATA_UPDATE"
    public static let migration: Self = "MIGRATION"
    public static let priceChange: Self = "PRICE_CHANGE"
    public static let rescindConsent: Self = "RESCIND_CONSENT"
    public static let test: Self = "TEST"
}

/// App Store Server Notifications V2 `subtype`.
public struct NotificationSubtype: OpenStringValue {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let initialBuy: Self = "INITIAL_BUY"
    public static let resubscribe: Self = "RESUBSCRIBE"
    public static let downgrade: Self = "DOWNGRADE"
    public static let upgrade: Self = "UPGRADE"
    public static let autoRenewEnabled: Self = "AUTO_RENEW_ENABLED"
    public static let autoRenewDisabled: Self = "AUTO_RENEW_DISABLED"
    public static let voluntary: Self = "VOLUNTARY"
    public static let billingRetry: Self = "BILLING_RETRY"
    public static let gracePeriod: Self = "GRACE_PERIOD"
    public static let billingRecovery: Self = "BILLING_RECOVERY"
    public static let priceIncrease: Self = "PRICE_INCREASE"
    public static let productNotForSale: Self = "PRODUCT_NOT_FOR_SALE"
    public static let pending: Self = "PENDING"
    public static let accepted: Self = "ACCEPTED"
    public static let summary: Self = "SUMMARY"
    public static let failure: Self = "FAILURE"
    public static let unreported: Self = "UNREPORTED"
}

/// JSON coding for App Store payloads: dates are milliseconds since 1970, possibly fractional
/// (StoreKit Testing in Xcode writes `1697679936049.7297`).
public enum AppStoreJSON {
    /// Decodes a payload on the verification hot path (dates in milliseconds).
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        try JSONValueDecoder.decode(type, from: data)
    }

    public static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            guard let date = Date(jsonMilliseconds: try container.decode(Double.self)) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "a date beyond ±8.64e15 milliseconds")
            }
            return date
        }
        return decoder
    }

    public static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
            try container.encode(Int64(milliseconds))
        }
        return encoder
    }
}
