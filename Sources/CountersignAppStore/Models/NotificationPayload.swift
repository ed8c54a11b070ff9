import Foundation

/// An App Store Server Notification V2 (`ResponseBodyV2DecodedPayload`).
public struct NotificationPayload: AppStoreSignedPayload, Hashable {
    /// The notification's subject: the app, and the nested signed transaction and renewal info.
    public struct NotificationData: Codable, Hashable, Sendable {
        public var appAppleId: Int64?
        public var bundleId: String?
        public var bundleVersion: String?
        public var environment: AppStoreEnvironment?
        /// A nested JWS, verified on its own.
        public var signedTransactionInfo: String?
        /// A nested JWS, verified on its own.
        public var signedRenewalInfo: String?
        public var status: Int?
        public var consumptionRequestReason: String?

        public init(bundleId: String, environment: AppStoreEnvironment, appAppleId: Int64? = nil) {
            self.bundleId = bundleId
            self.environment = environment
            self.appAppleId = appAppleId
        }
    }

    /// Present for `RENEWAL_EXTENSION` summaries instead of `data`.
    public struct Summary: Codable, Hashable, Sendable {
        public var requestIdentifier: String?
        public var environment: AppStoreEnvironment?
        public var appAppleId: Int64?
        public var bundleId: String?
        public var productId: String?
        public var storefrontCountryCodes: [String]?
        public var failedCount: Int64?
        public var succeededCount: Int64?
    }

    /// Present for external purchase token notifications instead of `data`.
    public struct ExternalPurchaseToken: Codable, Hashable, Sendable {
        public var externalPurchaseId: String?
        public var tokenCreationDate: Date?
        public var appAppleId: Int64?
        public var bundleId: String?
    }

    /// Present for notifications about the app's own data (for example `RESCIND_CONSENT`).
    public struct AppData: Codable, Hashable, Sendable {
        public var appAppleId: Int64?
        public var bundleId: String?
        public var environment: AppStoreEnvironment?
        public var signedAppData: String?
    }

    public var notificationType: NotificationType
    public var subtype: NotificationSubtype?
    public var notificationUUID: String
    public var data: NotificationData?
    public var summary: Summary?
    public var externalPurchaseToken: ExternalPurchaseToken?
    public var appData: AppData?
    public var version: String?
    public var signedDate: Date?

    public init(
        notificationType: NotificationType, subtype: NotificationSubtype? = nil, notificationUUID: String, data: NotificationData, signedDate: Date
    ) {
        self.notificationType = notificationType
        self.subtype = subtype
        self.notificationUUID = notificationUUID
        self.data = data
        self.signedDate = signedDate
        version = "2.0"
    }

    /// What the notification is about, from the first of `data`, `summary`,
    /// `externalPurchaseToken` and `appData` that is present, taken whole (as Apple's library
    /// does: fields are never borrowed from a second section).
    private var subject: (bundleId: String?, appAppleId: Int64?, environment: AppStoreEnvironment?) {
        if let data { return (data.bundleId, data.appAppleId, data.environment) }
        if let summary { return (summary.bundleId, summary.appAppleId, summary.environment) }
        if let token = externalPurchaseToken {
            // Apple marks sandbox external purchase tokens by their id prefix.
            return (token.bundleId, token.appAppleId, token.externalPurchaseId?.hasPrefix("SANDBOX") == true ? .sandbox : .production)
        }
        if let appData { return (appData.bundleId, appData.appAppleId, appData.environment) }
        return (nil, nil, nil)
    }

    public var claimedEnvironment: AppStoreEnvironment? { subject.environment }
    public var claimedBundleId: String? { subject.bundleId }
    public static var carriesAppAppleId: Bool { true }
    public var claimedAppAppleId: Int64? { subject.appAppleId }
}
