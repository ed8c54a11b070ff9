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

    public var notificationType: NotificationType
    public var subtype: NotificationSubtype?
    public var notificationUUID: String
    public var data: NotificationData?
    public var summary: Summary?
    public var externalPurchaseToken: ExternalPurchaseToken?
    public var version: String?
    public var signedDate: Date?

    public init(notificationType: NotificationType, subtype: NotificationSubtype? = nil, notificationUUID: String, data: NotificationData, signedDate: Date) {
        self.notificationType = notificationType
        self.subtype = subtype
        self.notificationUUID = notificationUUID
        self.data = data
        self.signedDate = signedDate
        version = "2.0"
    }

    public var validationDate: Date? { signedDate }

    public var claimedEnvironment: AppStoreEnvironment? {
        data?.environment ?? summary?.environment ?? externalPurchaseToken.map { token in
            // Apple marks sandbox external purchase tokens by their id prefix.
            token.externalPurchaseId?.hasPrefix("SANDBOX") == true ? .sandbox : .production
        }
    }

    public var claimedBundleId: String? { data?.bundleId ?? summary?.bundleId ?? externalPurchaseToken?.bundleId }
    public static var carriesAppAppleId: Bool { true }
    public var claimedAppAppleId: Int64? { data?.appAppleId ?? summary?.appAppleId ?? externalPurchaseToken?.appAppleId }
}
