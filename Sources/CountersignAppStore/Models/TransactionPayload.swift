import Foundation

/// A StoreKit 2 transaction (`JWSTransactionDecodedPayload`).
///
/// Every field is optional, as in Apple's model: the server insists on the ones it needs
/// (transaction id, original transaction id, product id) when it records a purchase.
public struct TransactionPayload: AppStoreSignedPayload, Hashable {
    public var transactionId: String?
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var bundleId: String?
    public var productId: String?
    public var subscriptionGroupIdentifier: String?
    public var purchaseDate: Date?
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var quantity: Int?
    public var type: ProductType?
    /// The UUID the app passed to the purchase, binding it to one of the app's accounts.
    public var appAccountToken: String?
    public var inAppOwnershipType: OwnershipType?
    public var signedDate: Date?
    public var revocationReason: Int?
    public var revocationDate: Date?
    /// `REFUND_FULL`, `REFUND_PRORATED` or `FAMILY_REVOKE` (Apple's `revocationType`).
    public var revocationType: String?
    /// How much of the price was refunded, in thousandths of a percent: 100000 is all of it
    /// (Apple's `revocationPercentage`).
    public var revocationPercentage: Int64?
    public var isUpgraded: Bool?
    public var offerType: Int?
    public var offerIdentifier: String?
    /// `FREE_TRIAL`, `PAY_AS_YOU_GO` or `PAY_UP_FRONT` for a discounted period.
    public var offerDiscountType: String?
    public var environment: AppStoreEnvironment?
    public var storefront: String?
    public var storefrontId: String?
    public var transactionReason: TransactionReason?
    public var currency: String?
    public var price: Int64?
    public var appTransactionId: String?

    public init(
        transactionId: String, originalTransactionId: String, bundleId: String, productId: String,
        purchaseDate: Date, type: ProductType, environment: AppStoreEnvironment, signedDate: Date
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.bundleId = bundleId
        self.productId = productId
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = purchaseDate
        self.type = type
        self.environment = environment
        self.signedDate = signedDate
        quantity = 1
        inAppOwnershipType = .purchased
        transactionReason = .purchase
    }

    public var claimedEnvironment: AppStoreEnvironment? { environment }
    public var claimedBundleId: String? { bundleId }
    public var claimedAppAppleId: Int64? { nil }

    /// RevenueCat's period type of the period this transaction pays for: `trial` for a free
    /// introductory or offer-code period, `intro` for a discounted introductory one, else `normal`.
    public var periodType: String {
        guard offerType == 1 || offerType == 3, let discount = offerDiscountType else { return "normal" }
        if discount == "FREE_TRIAL" { return "trial" }
        return offerType == 1 ? "intro" : "normal"
    }
}

/// A subscription's renewal information (`JWSRenewalInfoDecodedPayload`).
public struct RenewalInfoPayload: AppStoreSignedPayload, Hashable {
    public var originalTransactionId: String?
    public var autoRenewProductId: String?
    public var productId: String?
    public var autoRenewStatus: Int?
    public var expirationIntent: Int?
    public var isInBillingRetryPeriod: Bool?
    public var priceIncreaseStatus: Int?
    public var gracePeriodExpiresDate: Date?
    public var offerType: Int?
    public var offerIdentifier: String?
    public var signedDate: Date?
    public var environment: AppStoreEnvironment?
    public var recentSubscriptionStartDate: Date?
    public var renewalDate: Date?
    public var appAccountToken: String?
    public var appTransactionId: String?

    public init(originalTransactionId: String, productId: String, environment: AppStoreEnvironment, signedDate: Date) {
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        autoRenewProductId = productId
        autoRenewStatus = 1
        self.environment = environment
        self.signedDate = signedDate
    }

    public var claimedEnvironment: AppStoreEnvironment? { environment }
    public var claimedBundleId: String? { nil }
    public var claimedAppAppleId: Int64? { nil }
    public static var carriesBundleId: Bool { false }
}

/// The app's own purchase record (`AppTransaction`).
public struct AppTransactionPayload: AppStoreSignedPayload, Hashable {
    public var receiptType: AppStoreEnvironment?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var applicationVersion: String?
    public var versionExternalIdentifier: Int64?
    public var receiptCreationDate: Date?
    public var originalPurchaseDate: Date?
    public var originalApplicationVersion: String?
    public var deviceVerification: String?
    public var deviceVerificationNonce: String?
    public var preorderDate: Date?
    public var appTransactionId: String?
    public var originalPlatform: String?

    public var claimedEnvironment: AppStoreEnvironment? { receiptType }
    public var claimedBundleId: String? { bundleId }
    public static var carriesAppAppleId: Bool { true }
    public var claimedAppAppleId: Int64? { appAppleId }
}
