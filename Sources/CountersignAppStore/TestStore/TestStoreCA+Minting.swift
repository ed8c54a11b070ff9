import CountersignCore
import CountersignServerCore
import Foundation

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
        /// The transaction's id (a fresh one when nil).
        public var transactionId: String?
        public var environment: AppStoreEnvironment = .testStore
        /// An introductory offer (`offerType` 1) of this kind: `FREE_TRIAL`, `PAY_AS_YOU_GO`,
        /// `PAY_UP_FRONT`; nil for a full-price period.
        public var introductoryOffer: String?
        /// `FAMILY_SHARED`: the family organizer's purchase, shared with this account.
        public var ownershipType: OwnershipType = .purchased
        /// A promotional offer (`offerType` 2) redeemed, by its identifier.
        public var promotionalOffer: String?
        /// The price in milliunits of `currency` (Apple's `price`); nil leaves it out.
        public var price: Int64?
        public var currency = "USD"
        /// The storefront (ISO 3166-1 alpha-3, as Apple writes it).
        public var storefront = "USA"
        /// A refund: when, and how much of the price it gave back (thousandths of a percent;
        /// nil or 100000 is a full refund, anything less a prorated one).
        public var revocationDate: Date?
        public var revocationPercentage: Int64?

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
        let transactionId = purchase.transactionId ?? Self.makeTransactionId()
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
        } else if let offer = purchase.promotionalOffer {
            payload.offerType = 2
            payload.offerIdentifier = offer
        }
        payload.storefront = purchase.storefront
        if let revoked = purchase.revocationDate {
            payload.revocationDate = revoked
            payload.revocationReason = 0
            let share = purchase.revocationPercentage ?? 100_000
            payload.revocationType = share >= 100_000 ? "REFUND_FULL" : "REFUND_PRORATED"
            payload.revocationPercentage = share
        }
        payload.currency = purchase.currency
        payload.price = purchase.price
        if purchase.type == .autoRenewable || purchase.type == .nonRenewing {
            payload.expiresDate =
                purchase.expiresDate
                ?? Calendar(identifier: .gregorian).date(byAdding: .month, value: 1, to: purchase.purchaseDate)
            payload.webOrderLineItemId = Self.makeTransactionId()
            payload.transactionReason = purchase.originalTransactionId == nil ? .purchase : .renewal
        }
        return (try sign(payload), payload)
    }

    /// A signing date later than `earlier`'s (the server keeps the copy of a transaction signed
    /// last), even on a clock that stands still.
    static func signedAfter(_ earlier: TransactionPayload, now: Date) -> Date {
        max(now, (earlier.signedDate ?? now).addingTimeInterval(1))
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
        environment: AppStoreEnvironment = .testStore, purchaseDate: Date = Date(), withIntroductoryOffer: Bool = false,
        promotionalOffer: String? = nil
    ) throws -> (jws: String, payload: TransactionPayload)? {
        guard let product = app.product(productId) else { return nil }
        var purchase = Purchase(
            productId: product.id, type: product.type.appStoreType, bundleId: app.bundleId,
            appAccountToken: appAccountToken, purchaseDate: purchaseDate
        )
        purchase.environment = environment
        purchase.price = product.price.flatMap(Self.milliunits)
        purchase.currency = product.currency ?? "USD"
        if let period = product.subscriptionPeriod.flatMap(StorePeriod.init(iso8601:)) {
            purchase.expiresDate = period.end(from: purchaseDate)
        }
        // The catalogue gives no offer prices: a promotional offer is charged the product's.
        purchase.promotionalOffer = promotionalOffer
        if withIntroductoryOffer, let offer = product.introductoryOffer, let period = StorePeriod(iso8601: offer.period) {
            purchase.introductoryOffer = offer.paymentMode.offerDiscountType
            let periods = offer.paymentMode == .payAsYouGo ? offer.periodCount ?? 1 : 1
            purchase.expiresDate = period.end(from: purchaseDate, times: periods)
            purchase.price = offer.paymentMode == .freeTrial ? 0 : offer.price.flatMap(Self.milliunits)
        }
        return try mintTransaction(purchase)
    }

    /// A configured price (`9.99`) in milliunits (9990), as Apple's `price` carries it.
    static func milliunits(_ price: String) -> Int64? {
        guard let decimal = Decimal(string: price, locale: Locale(identifier: "en_US_POSIX")) else { return nil }
        return Int64(truncating: (decimal * 1000) as NSDecimalNumber)
    }

    /// A renewal of `latest`, the newest transaction of a subscription: a period at full price
    /// starting now (a test store renews when it is told to, not at the end of the period, as
    /// StoreKit Testing's accelerated renewals do), so the renewal's expiry is always later.
    public func mintRenewal(of latest: TransactionPayload, period: StorePeriod, now: Date) throws -> (jws: String, payload: TransactionPayload) {
        var payload = latest
        // Strictly after the transaction it renews, even on a clock that stands still (tests).
        let start = max(now, (latest.purchaseDate ?? now).addingTimeInterval(1))
        payload.transactionId = Self.makeTransactionId()
        payload.webOrderLineItemId = Self.makeTransactionId()
        payload.purchaseDate = start
        payload.expiresDate = period.end(from: start)
        payload.signedDate = Self.signedAfter(latest, now: start)
        payload.offerType = nil
        payload.offerDiscountType = nil
        payload.offerIdentifier = nil
        payload.transactionReason = .renewal
        payload.revocationDate = nil
        payload.revocationReason = nil
        return (try sign(payload), payload)
    }

    /// The same transaction refunded at `now` (`revocationReason` 0: refunded for another reason).
    public func mintRefund(of transaction: TransactionPayload, percentage: Int64? = nil, now: Date) throws -> (
        jws: String, payload: TransactionPayload
    ) {
        var payload = transaction
        payload.revocationDate = now
        payload.revocationReason = 0
        // Apple's prorated refund names the share it gave back, in thousandths of a percent.
        payload.revocationType = percentage == nil ? "REFUND_FULL" : "REFUND_PRORATED"
        payload.revocationPercentage = percentage
        payload.signedDate = Self.signedAfter(transaction, now: now)
        return (try sign(payload), payload)
    }

    /// What a family member's account receives when the organizer shares `transaction`: a
    /// transaction of its own, `FAMILY_SHARED`, without the organizer's app account token.
    public func mintFamilyShare(of transaction: TransactionPayload, now: Date) throws -> (jws: String, payload: TransactionPayload) {
        var payload = transaction
        let id = Self.makeTransactionId()
        payload.transactionId = id
        payload.originalTransactionId = id
        payload.appAccountToken = nil
        payload.inAppOwnershipType = .familyShared
        payload.signedDate = Self.signedAfter(transaction, now: now)
        return (try sign(payload), payload)
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
