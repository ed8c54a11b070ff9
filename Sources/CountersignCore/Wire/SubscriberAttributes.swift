import Foundation

/// Subscriber attributes, as RevenueCat's: string values under string keys, sent in batches as
/// `{"attributes": {"key": {"value": "…" or null, "updated_at_ms": N}}}` to
/// `POST /v1/subscribers/{app_user_id}/attributes`. One set of rules for the SDK and the server.
public enum SubscriberAttributeRules {
    /// The reserved keys RevenueCat's SDKs and REST API set (`setEmail`, `setDisplayName`,
    /// `setPhoneNumber`, the attribution and integration ids, the campaign fields), as
    /// purchases-ios and purchases-android name them; any other key starting with `$` is refused.
    public static let reservedKeys: Set<String> = [
        "$email", "$displayName", "$phoneNumber", "$apnsTokens", "$fcmTokens", "$idfa", "$idfv", "$gpsAdId", "$attConsentStatus", "$ip",
        "$deviceVersion", "$adjustId", "$appsflyerId", "$appstackId", "$fbAnonId", "$mparticleId", "$onesignalId", "$onesignalUserId",
        "$airshipChannelId", "$clevertapId", "$kochavaDeviceId", "$airbridgeDeviceId", "$mixpanelDistinctId", "$firebaseAppInstanceId",
        "$tenjinId", "$posthogUserId", "$amplitudeUserId", "$amplitudeDeviceId", "$solarEngineDistinctId", "$solarEngineAccountId",
        "$solarEngineVisitorId", "$brazeAliasName", "$brazeAliasLabel", "$iterableUserId", "$iterableCampaignId", "$iterableTemplateId",
        "$customerioId", "$appleRefundHandlingPreference", "$mediaSource", "$campaign", "$adGroup", "$ad", "$keyword", "$creative",
    ]
    public static let maximumKeyLength = 40
    public static let maximumValueLength = 500
    public static let maximumBatch = 100

    /// Keys only an app's backend sets, with its secret key: `$appleRefundHandlingPreference`
    /// decides what the server asks Apple to do with the customer's refund requests
    /// (docs/webhooks.md, consumption answers), which no customer may choose for themselves.
    public static let secretKeyOnlyKeys: Set<String> = ["$appleRefundHandlingPreference"]

    /// What is wrong with an attribute, or nil when it may be stored; `secretKey`: the request
    /// carries the app's secret key (a backend's), which alone sets ``secretKeyOnlyKeys``.
    public static func problem(key: String, value: String?, secretKey: Bool = false) -> String? {
        if !secretKey, secretKeyOnlyKeys.contains(key) {
            return "attribute '\(key)' is set with the app's secret key only (by the app's backend)"
        }
        if key.isEmpty || key.unicodeScalars.count > maximumKeyLength {
            return "attribute key '\(key.prefix(60))' must be 1 to \(maximumKeyLength) characters"
        }
        // Control characters (U+0000–U+001F, U+007F–U+009F) and the space: exactly what the
        // OpenAPI document's pattern for keys excludes, so the two agree on every key.
        if key.unicodeScalars.contains(where: { $0.value <= 0x20 || (0x7F...0x9F).contains($0.value) }) {
            return "attribute key '\(key.prefix(60))' must not hold spaces or control characters"
        }
        if key.hasPrefix("$") && !reservedKeys.contains(key) {
            return "attribute key '\(key.prefix(60))' is reserved (keys starting with $ are RevenueCat's reserved attributes only)"
        }
        if let value, value.unicodeScalars.count > maximumValueLength {
            return "the value of attribute '\(key.prefix(60))' is longer than \(maximumValueLength) characters"
        }
        // PostgreSQL's text cannot hold U+0000, and C strings end at it: no reader would see the value sent.
        if let value, value.unicodeScalars.contains("\u{0}") {
            return "the value of attribute '\(key.prefix(60))' must not hold U+0000"
        }
        return nil
    }
}

/// One attribute as sent.
public struct SubscriberAttributeValue: Codable, Sendable, Hashable {
    public var value: String?
    public var updatedAtMs: Int64

    public init(value: String?, updatedAtMs: Int64) {
        self.value = value
        self.updatedAtMs = updatedAtMs
    }

    enum CodingKeys: String, CodingKey {
        case value, updatedAtMs = "updated_at_ms"
    }

    /// `value` must be present, a string or `null` (which deletes): a missing key is refused
    /// rather than read as a deletion, so no two readers of a body differ on what it asks.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard container.contains(.value) else {
            throw DecodingError.keyNotFound(
                CodingKeys.value, .init(codingPath: container.codingPath, debugDescription: "value is required (null deletes)"))
        }
        value = try container.decode(String?.self, forKey: .value)
        updatedAtMs = try container.decode(Int64.self, forKey: .updatedAtMs)
    }

    /// Encodes a nil value as `null` (it deletes the attribute), not as a missing key.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(value, forKey: .value)
        try container.encode(updatedAtMs, forKey: .updatedAtMs)
    }
}

/// The body of `POST /v1/subscribers/{app_user_id}/attributes`.
public struct SubscriberAttributesBody: Codable, Sendable, Hashable {
    public var attributes: [String: SubscriberAttributeValue]

    public init(attributes: [String: SubscriberAttributeValue]) {
        self.attributes = attributes
    }
}
