import Foundation

/// What to buy, as RevenueCat's `PurchaseParams`: a package or a product, and optionally a
/// promotional offer the server signed.
///
/// ```swift
/// let params = PurchaseParams.Builder(package: package).with(promotionalOffer: offer).build()
/// let result = try await Purchases.shared.purchase(params)
/// ```
public struct PurchaseParams: Sendable {
    public let productIdentifier: String
    public let promotionalOffer: PromotionalOffer?

    public final class Builder: @unchecked Sendable {
        private let productIdentifier: String
        private var promotionalOffer: PromotionalOffer?

        public init(package: Offerings.Package) { productIdentifier = package.productIdentifier }
        public init(product: StoreProduct) { productIdentifier = product.productIdentifier }

        public func with(promotionalOffer: PromotionalOffer) -> Builder {
            self.promotionalOffer = promotionalOffer
            return self
        }

        public func build() -> PurchaseParams {
            PurchaseParams(productIdentifier: productIdentifier, promotionalOffer: promotionalOffer)
        }
    }
}
