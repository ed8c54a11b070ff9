import CountersignCore
import Foundation

/// RevenueCat's completion-handler calls, for code written against them: each runs the async
/// call and hands its outcome to `completion` on the main actor (the main thread), as RevenueCat
/// calls back, on every platform (a Linux program with an `async` main runs it).
extension Purchases {
    public func getCustomerInfo(
        fetchPolicy: CacheFetchPolicy = .cachedOrFetched,
        completion: @escaping @Sendable (CustomerInfo?, (any Error)?) -> Void
    ) {
        Task { @MainActor in
            let (value, error) = await Self.outcome { try await self.customerInfo(fetchPolicy: fetchPolicy) }
            completion(value, error)
        }
    }

    public func getOfferings(completion: @escaping @Sendable (Offerings?, (any Error)?) -> Void) {
        Task { @MainActor in
            let (value, error) = await Self.outcome { try await self.offerings() }
            completion(value, error)
        }
    }

    public func getProducts(_ productIdentifiers: [String], completion: @escaping @Sendable ([StoreProduct]) -> Void) {
        Task { @MainActor in completion(await self.products(productIdentifiers)) }
    }

    /// RevenueCat's `purchase(package:)` with a completion: `(transaction, customerInfo, error, userCancelled)`.
    public func purchase(
        package: Offerings.Package,
        completion: @escaping @Sendable (StoreTransaction?, CustomerInfo?, (any Error)?, Bool) -> Void
    ) {
        Task { @MainActor in Self.complete(await Self.outcome { try await self.purchase(package: package) }, completion) }
    }

    public func purchase(
        product: StoreProduct,
        completion: @escaping @Sendable (StoreTransaction?, CustomerInfo?, (any Error)?, Bool) -> Void
    ) {
        Task { @MainActor in Self.complete(await Self.outcome { try await self.purchase(product: product) }, completion) }
    }

    /// RevenueCat's `purchase(package:promotionalOffer:)` with a completion.
    public func purchase(
        package: Offerings.Package, promotionalOffer: PromotionalOffer,
        completion: @escaping @Sendable (StoreTransaction?, CustomerInfo?, (any Error)?, Bool) -> Void
    ) {
        Task { @MainActor in
            Self.complete(await Self.outcome { try await self.purchase(package: package, promotionalOffer: promotionalOffer) }, completion)
        }
    }

    /// RevenueCat's `getPromotionalOffer(forProductDiscount:product:)` with a completion.
    public func getPromotionalOffer(
        forProductDiscount discount: StoreProductDiscount, product: StoreProduct,
        completion: @escaping @Sendable (PromotionalOffer?, (any Error)?) -> Void
    ) {
        Task { @MainActor in
            let (value, error) = await Self.outcome { try await self.getPromotionalOffer(forProductDiscount: discount, product: product) }
            completion(value, error)
        }
    }

    public func restorePurchases(completion: (@Sendable (CustomerInfo?, (any Error)?) -> Void)? = nil) {
        Task { @MainActor in
            let (value, error) = await Self.outcome { try await self.restorePurchases() }
            completion?(value, error)
        }
    }

    public func syncPurchases(completion: (@Sendable (CustomerInfo?, (any Error)?) -> Void)?) {
        Task { @MainActor in
            let (value, error) = await Self.outcome { try await self.syncPurchases() }
            completion?(value, error)
        }
    }

    public func logIn(_ appUserID: String, completion: @escaping @Sendable (CustomerInfo?, Bool, (any Error)?) -> Void) {
        Task { @MainActor in
            do {
                let (info, created) = try await self.logIn(appUserID)
                completion(info, created, nil)
            } catch {
                completion(nil, false, error)
            }
        }
    }

    public func logOut(completion: (@Sendable (CustomerInfo?, (any Error)?) -> Void)?) {
        Task { @MainActor in
            let (value, error) = await Self.outcome { try await self.logOut() }
            completion?(value, error)
        }
    }

    public func checkTrialOrIntroDiscountEligibility(
        productIdentifiers: [String],
        completion: @escaping @Sendable ([String: IntroEligibility]) -> Void
    ) {
        Task { @MainActor in completion(await self.checkTrialOrIntroDiscountEligibility(productIdentifiers: productIdentifiers)) }
    }

    /// The store's products among `productIdentifiers` (unknown ones left out; none when the
    /// store cannot be reached), as RevenueCat's `products(_:)`.
    public func products(_ productIdentifiers: [String]) async -> [StoreProduct] {
        do {
            return try await configuration.store.products(productIdentifiers)
        } catch {
            SDKLog.log(.error, "the store's products are unavailable: \(error)")
            return []
        }
    }

    private static func complete(
        _ outcome: (PurchaseResult?, (any Error)?),
        _ completion: @Sendable (StoreTransaction?, CustomerInfo?, (any Error)?, Bool) -> Void
    ) {
        if let purchase = outcome.0 {
            completion(purchase.transaction, purchase.customerInfo, nil, purchase.userCancelled)
        } else {
            let error = outcome.1
            completion(nil, nil, error, error.map { ErrorCode.purchaseCancelledError ~= $0 } ?? false)
        }
    }

    /// An async call's outcome as RevenueCat's completions take it: `(value, nil)` or `(nil, error)`.
    private static func outcome<Value: Sendable>(_ body: @Sendable () async throws -> Value) async -> (Value?, (any Error)?) {
        do {
            return (try await body(), nil)
        } catch {
            return (nil, error)
        }
    }
}
