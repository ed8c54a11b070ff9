import CountersignCore
import Foundation

/// Whether the customer may have a product's introductory offer (RevenueCat's `IntroEligibility`).
public struct IntroEligibility: Sendable, Hashable {
    public let status: IntroEligibilityStatus

    public init(status: IntroEligibilityStatus) {
        self.status = status
    }
}

extension Purchases {
    /// Each product's introductory offer eligibility, answered by the server from the customer's
    /// history in each subscription group (one introductory offer per group, as App Store
    /// gives), in a signed answer. Products the server does not know, and every product when the
    /// answer cannot be had or fails verification (enforced mode) or does not answer exactly the
    /// products asked for, are `unknown`.
    /// One product's eligibility, as RevenueCat's `checkTrialOrIntroDiscountEligibility(product:)`.
    public func checkTrialOrIntroDiscountEligibility(product: StoreProduct) async -> IntroEligibilityStatus {
        await checkTrialOrIntroDiscountEligibility(productIdentifiers: [product.productIdentifier])[product.productIdentifier]?.status ?? .unknown
    }

    public func checkTrialOrIntroDiscountEligibility(productIdentifiers: [String]) async -> [String: IntroEligibility] {
        let unknown = Dictionary(productIdentifiers.map { ($0, IntroEligibility(status: .unknown)) }, uniquingKeysWith: { first, _ in first })
        guard !productIdentifiers.isEmpty,
            let body = try? JSONEncoder().encode(IntroEligibilityRequest(productIdentifiers: Array(unknown.keys).sorted()))
        else { return unknown }
        let path = "/v1/subscribers/\(appUserID.pathSegmentEncoded)/intro_eligibility"
        do {
            let answer = try await backend.perform(.post(path, json: body))
            guard answer.verification != .failed,
                let decoded = try? JSONDecoder().decode(IntroEligibilityAnswer.self, from: answer.body),
                Set(decoded.eligibility.keys) == Set(unknown.keys)
            else {
                SDKLog.log(.warn, "introductory offer eligibility unknown: the answer did not verify or did not answer the products asked")
                return unknown
            }
            return decoded.eligibility.mapValues(IntroEligibility.init(status:))
        } catch {
            SDKLog.log(.warn, "introductory offer eligibility unknown: \(error)")
            return unknown
        }
    }
}

/// A promotional offer the server signed, ready for StoreKit (RevenueCat's `PromotionalOffer`).
public struct PromotionalOffer: Sendable, Hashable {
    /// The signed values, as StoreKit's original promotional offer purchase option (and
    /// `SKPaymentDiscount`) take them.
    public struct SignedData: Sendable, Hashable {
        public let identifier: String
        public let keyIdentifier: String
        public let nonce: UUID
        public let signature: String
        public let timestamp: Int
    }

    public let productIdentifier: String
    public let signedData: SignedData
    /// The same offer as a compact JWS, for StoreKit's `promotionalOffer(_:compactJWS:)`.
    public let compactJWS: String
    /// The app account token the signature binds; purchase with this token.
    public let appAccountToken: UUID
}

extension Purchases {
    /// Asks the server to sign a promotional offer of `product` for the current user with the
    /// app's In-App Purchase key (which never ships in the app), as RevenueCat's
    /// `promotionalOffer(forProductDiscount:product:)` does. Throws when the answer does not
    /// verify (enforced mode), does not answer this offer, or the server has no key.
    public func promotionalOffer(forProductDiscount discount: StoreProductDiscount, product: StoreProduct) async throws -> PromotionalOffer {
        guard let identifier = discount.offerIdentifier, discount.type == .promotional else {
            throw PurchasesError.configuration("only a promotional discount with an offer identifier can be signed")
        }
        return try await promotionalOffer(offerIdentifier: identifier, product: product)
    }

    /// The product's promotional offers the server signs for the current user, as RevenueCat's
    /// `eligiblePromotionalOffers(forProduct:)` (an offer the server will not sign is left out).
    public func eligiblePromotionalOffers(forProduct product: StoreProduct) async -> [PromotionalOffer] {
        var offers: [PromotionalOffer] = []
        for discount in product.discounts where discount.type == .promotional {
            do {
                offers.append(try await promotionalOffer(forProductDiscount: discount, product: product))
            } catch {
                SDKLog.log(.info, "promotional offer \(discount.offerIdentifier ?? "?") of \(product.productIdentifier) not offered: \(error)")
            }
        }
        return offers
    }

    /// RevenueCat's name for ``promotionalOffer(forProductDiscount:product:)``.
    public func getPromotionalOffer(forProductDiscount discount: StoreProductDiscount, product: StoreProduct) async throws -> PromotionalOffer {
        try await promotionalOffer(forProductDiscount: discount, product: product)
    }

    /// Asks the server to sign the promotional offer `offerIdentifier` of `product`.
    public func promotionalOffer(offerIdentifier: String, product: StoreProduct) async throws -> PromotionalOffer {
        let path = "/v1/subscribers/\(appUserID.pathSegmentEncoded)/promotional_offer"
        let answer = try await backend.perform(
            .post(path, [("product_identifier", product.productIdentifier), ("offer_identifier", offerIdentifier)]))
        guard let signed = try? JSONDecoder().decode(PromotionalOfferAnswer.self, from: answer.body),
            signed.productIdentifier == product.productIdentifier, signed.offerIdentifier == offerIdentifier,
            let nonce = UUID(uuidString: signed.nonce), let token = UUID(uuidString: signed.appAccountToken)
        else { throw PurchasesError.malformedAnswer(path: "/v1/subscribers/{id}/promotional_offer") }
        return PromotionalOffer(
            productIdentifier: signed.productIdentifier,
            signedData: .init(
                identifier: signed.offerIdentifier, keyIdentifier: signed.keyIdentifier, nonce: nonce,
                signature: signed.signature, timestamp: Int(signed.timestamp)),
            compactJWS: signed.jws, appAccountToken: token
        )
    }
}
