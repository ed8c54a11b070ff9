#if canImport(StoreKit)
import Foundation
import StoreKit

/// The ``PurchaseStore`` of a shipping app: StoreKit 2. Written against StoreKit 2's documented API
/// (`Product.products(for:)`, `Product.purchase(options:)`, `Transaction.currentEntitlements`,
/// `Transaction.unfinished`, `Transaction.updates`, `Transaction.finish()`); it is not compiled on Linux, where the SDK
/// runs on ``TestStore``.
@available(iOS 17.0, macOS 14.0, tvOS 17.0, watchOS 10.0, *)
public final class StoreKitStore: PurchaseStore {
    public init() {}

    public func products(_ identifiers: [String]) async throws -> [StoreProduct] {
        try await Product.products(for: identifiers).map(Self.product)
    }

    public func transactionUpdates() -> AsyncStream<StoreTransaction> {
        AsyncStream { continuation in
            let task = Task {
                for await verification in Transaction.updates {
                    continuation.yield(Self.transaction(verification))
                }
                continuation.finish()
            }
            // Cancelled from a task of its own: cancelling a task from inside another task's
            // cancellation (which is where onTermination runs) can deadlock the runtime.
            continuation.onTermination = { _ in Task { task.cancel() } }
        }
    }

    static func product(_ product: Product) -> StoreProduct {
        let type: StoreProduct.ProductType =
            switch product.type {
            case .nonConsumable: .nonConsumable
            case .nonRenewable: .nonRenewableSubscription
            case .autoRenewable: .autoRenewableSubscription
            default: .consumable
            }
        let currency = product.priceFormatStyle.currencyCode
        let subscription = product.subscription
        var converted = StoreProduct(
            productIdentifier: product.id, localizedTitle: product.displayName, localizedDescription: product.description,
            price: product.price, localizedPriceString: product.displayPrice, currencyCode: currency, productType: type,
            subscriptionPeriod: subscription.map { period($0.subscriptionPeriod) },
            subscriptionGroupIdentifier: subscription?.subscriptionGroupID,
            introductoryDiscount: subscription?.introductoryOffer.map { discount($0, currency: currency, type: .introductory) }
        )
        converted.discounts = subscription?.promotionalOffers.map { discount($0, currency: currency, type: .promotional) } ?? []
        return converted
    }

    /// An offer of a subscription (`Product.SubscriptionOffer`) as RevenueCat's discount.
    static func discount(
        _ offer: Product.SubscriptionOffer, currency: String, type: StoreProductDiscount.DiscountType
    ) -> StoreProductDiscount {
        let mode: StoreProductDiscount.PaymentMode =
            switch offer.paymentMode {
            case .freeTrial: .freeTrial
            case .payUpFront: .payUpFront
            default: .payAsYouGo
            }
        return StoreProductDiscount(
            offerIdentifier: offer.id, currencyCode: currency, price: offer.price, paymentMode: mode,
            subscriptionPeriod: period(offer.period), numberOfPeriods: offer.periodCount, type: type)
    }

    static func period(_ period: Product.SubscriptionPeriod) -> SubscriptionPeriod {
        let unit: SubscriptionPeriod.Unit =
            switch period.unit {
            case .day: .day
            case .week: .week
            case .month: .month
            default: .year
            }
        return SubscriptionPeriod(value: period.value, unit: unit)
    }

    public func purchase(_ productId: String, appUserID: String, appAccountToken: UUID) async throws -> StoreTransaction {
        try await purchase(productId, options: [.appAccountToken(appAccountToken)])
    }

    /// With StoreKit's promotional offer purchase option (the original signature form).
    public func purchase(_ productId: String, appUserID: String, appAccountToken: UUID, promotionalOffer: PromotionalOffer) async throws
        -> StoreTransaction
    {
        let signed = promotionalOffer.signedData
        return try await purchase(
            productId,
            options: [
                .appAccountToken(appAccountToken),
                .promotionalOffer(
                    offerID: signed.identifier, keyID: signed.keyIdentifier, nonce: signed.nonce,
                    signature: Data(base64Encoded: signed.signature) ?? Data(),
                    timestamp: signed.timestamp),
            ])
    }

    private func purchase(_ productId: String, options: Set<Product.PurchaseOption>) async throws -> StoreTransaction {
        guard let product = try await Product.products(for: [productId]).first else {
            throw PurchasesError.purchaseNotCompleted("the App Store does not know product '\(productId)'")
        }
        let result: Product.PurchaseResult
        do {
            result = try await product.purchase(options: options)
        } catch {
            throw Self.failure(error, productId: productId)
        }
        switch result {
        case .success(let verification):
            return Self.transaction(verification)
        case .userCancelled:
            throw PurchasesError.purchaseCancelled(productId: productId)
        case .pending:
            // Ask to Buy or a payment confirmation: the transaction arrives later, unfinished.
            throw PurchasesError.paymentPending(productId: productId)
        @unknown default:
            throw PurchasesError.purchaseNotCompleted("unknown purchase result")
        }
    }

    /// StoreKit's error as the SDK's, with RevenueCat's code (``StoreFailure``); another error as it is.
    static func failure(_ error: any Error, productId: String) -> any Error {
        let failure: StoreFailure
        if let storeKit = error as? StoreKitError {
            switch storeKit {
            case .userCancelled: failure = .userCancelled
            case .networkError: failure = .networkError
            case .systemError: failure = .systemError
            case .notAvailableInStorefront: failure = .notAvailableInStorefront
            case .notEntitled: failure = .notEntitled
            case .unknown: failure = .unknown
            @unknown default: failure = .unsupported
            }
        } else if let purchase = error as? Product.PurchaseError {
            switch purchase {
            case .invalidQuantity: failure = .invalidQuantity
            case .productUnavailable: failure = .productUnavailable
            case .purchaseNotAllowed: failure = .purchaseNotAllowed
            case .ineligibleForOffer: failure = .ineligibleForOffer
            case .invalidOfferIdentifier: failure = .invalidOfferIdentifier
            case .invalidOfferPrice: failure = .invalidOfferPrice
            case .invalidOfferSignature: failure = .invalidOfferSignature
            case .missingOfferParameters: failure = .missingOfferParameters
            @unknown default: failure = .unsupported
            }
        } else {
            return error
        }
        return failure.error(productId: productId, detail: error.localizedDescription)
    }

    public func currentEntitlements() async throws -> [StoreTransaction] {
        var transactions: [StoreTransaction] = []
        for await verification in Transaction.currentEntitlements {
            transactions.append(Self.transaction(verification))
        }
        return transactions
    }

    public func unfinishedTransactions() async throws -> [StoreTransaction] {
        var transactions: [StoreTransaction] = []
        for await verification in Transaction.unfinished {
            transactions.append(Self.transaction(verification))
        }
        return transactions
    }

    public func finish(_ transaction: StoreTransaction) async throws {
        for await verification in Transaction.unfinished {
            let candidate = verification.unsafePayloadValue
            if String(candidate.id) == transaction.transactionId {
                await candidate.finish()
            }
        }
    }

    /// StoreKit's transaction with its signed form; `isVerified` is StoreKit's own on-device check.
    static func transaction(_ verification: StoreKit.VerificationResult<Transaction>) -> StoreTransaction {
        let isVerified: Bool
        switch verification {
        case .verified: isVerified = true
        case .unverified: isVerified = false
        }
        let payload = verification.unsafePayloadValue
        return StoreTransaction(
            transactionId: String(payload.id),
            originalTransactionId: String(payload.originalID),
            productId: payload.productID,
            jws: verification.jwsRepresentation,
            purchaseDate: payload.purchaseDate,
            expirationDate: payload.expirationDate,
            revocationDate: payload.revocationDate,
            isVerified: isVerified
        )
    }
}
#endif
