import Foundation
import CountersignCore

extension TestStoreCA {
    /// What to put in a minted test-store transaction.
    public struct Purchase: Sendable {
        public var productId: String
        public var type: ProductType
        public var bundleId: String
        public var appAccountToken: UUID?
        public var purchaseDate: Date
        /// For subscriptions; defaults to one month after the purchase.
        public var expiresDate: Date?
        /// Reuse to mint a renewal of an earlier purchase.
        public var originalTransactionId: String?
        public var environment: AppStoreEnvironment = .testStore
        /// An introductory offer (`offerType` 1) of this kind: `FREE_TRIAL`, `PAY_AS_YOU_GO`,
        /// `PAY_UP_FRONT`; nil for a full-price period.
        public var introductoryOffer: String?
        /// `FAMILY_SHARED`: the family organizer's purchase, shared with this account.
        public var ownershipType: OwnershipType = .purchased

        public init(productId: String, type: ProductType, bundleId: String, appAccountToken: UUID? = nil, purchaseDate: Date = Date()) {
            self.productId = productId
            self.type = type
            self.bundleId = bundleId
            self.appAccountToken = appAccountToken
            self.purchaseDate = purchaseDate
        }
    }

    /// Mints a signed transaction for `purchase`; returns the JWS and the payload it carries.
    public func mintTransaction(_ purchase: Purchase, signedDate: Date? = nil) throws -> (jws: String, payload: TransactionPayload) {
        let transactionId = Self.makeTransactionId()
        var payload = TransactionPayload(
            transactionId: transactionId,
            originalTransactionId: purchase.originalTransactionId ?? transactionId,
            bundleId: purchase.bundleId,
            productId: purchase.productId,
            purchaseDate: purchase.purchaseDate,
            type: purchase.type,
            environment: purchase.environment,
            signedDate: signedDate ?? purchase.purchaseDate
        )
        payload.appAccountToken = purchase.appAccountToken?.uuidString.lowercased()
        payload.inAppOwnershipType = purchase.ownershipType
        if let offer = purchase.introductoryOffer {
            payload.offerType = 1
            payload.offerDiscountType = offer
        }
        payload.storefront = "USA"
        payload.currency = "USD"
        if purchase.type == .autoRenewable || purchase.type == .nonRenewing {
            payload.expiresDate = purchase.expiresDate
                ?? Calendar(identifier: .gregorian).date(byAdding: .month, value: 1, to: purchase.purchaseDate)
            payload.webOrderLineItemId = Self.makeTransactionId()
            payload.transactionReason = purchase.originalTransactionId == nil ? .purchase : .renewal
        }
        return (try sign(payload), payload)
    }

    /// A 16-digit numeric id, shaped like Apple's transaction ids.
    static func makeTransactionId() -> String {
        String(UInt64.random(in: 1_000_000_000_000_000...9_999_999_999_999_999))
    }
}

extension TestStoreCA {
    /// Mints a transaction of one of `app`'s configured products: what the server's
    /// `POST /v1/test_store/purchases` and `countersign store purchase` both do.
    ///
    /// - Returns: nil when the app sells no product `productId`.
    public func mintPurchase(
        of productId: String, for app: AppConfiguration, appAccountToken: UUID?,
        environment: AppStoreEnvironment = .testStore, purchaseDate: Date = Date()
    ) throws -> (jws: String, payload: TransactionPayload)? {
        guard let product = app.product(productId) else { return nil }
        var purchase = Purchase(
            productId: product.id, type: product.type.appStoreType, bundleId: app.bundleId,
            appAccountToken: appAccountToken, purchaseDate: purchaseDate
        )
        purchase.environment = environment
        return try mintTransaction(purchase)
    }
}

extension AppConfiguration.ProductKind {
    /// The App Store product type of a configured product kind.
    public var appStoreType: ProductType {
        switch self {
        case .autoRenewable: .autoRenewable
        case .nonRenewing: .nonRenewing
        case .nonConsumable: .nonConsumable
        case .consumable: .consumable
        }
    }
}
