import CountersignCore
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import Testing

@testable import Countersign

/// Promotional offers signed by the server with the app's In-App Purchase key, checked with the
/// key's public half against the claims and fields Apple documents for both formats.
@Suite("Promotional offers")
struct PromotionalOfferTests {
    static let key = P256.Signing.PrivateKey()

    static func withKey(_ deployment: inout DeploymentConfiguration, _ directory: URL) throws {
        try key.pemRepresentation.write(to: directory.appendingPathComponent("SubscriptionKey_TEST123.p8"), atomically: true, encoding: .utf8)
        deployment.apps[0].inAppPurchaseKey = .init(
            keyId: "TEST123", issuerId: "57246542-96fe-1a63-e053-0824d011072a",
            privateKeyFile: "SubscriptionKey_TEST123.p8")
        deployment.apps[0].products[0].promotionalOffers = ["winback_half_price"]
    }

    static func decodeSegment(_ segment: Substring) throws -> [String: Any] {
        var text = segment.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        let data = try #require(Data(base64Encoded: text))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test("both signature formats verify with the key's public half and carry Apple's documented fields")
    func signed() async throws {
        try await SDKHarness.run(configure: Self.withKey) { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "lapsed-user", storage: "offers")
            let product = try #require(await purchases.products(["pro_monthly"]).first)
            let before = Date()
            let offer = try await purchases.promotionalOffer(offerIdentifier: "winback_half_price", product: product)
            let publicKey = Self.key.publicKey

            // The original format: ECDSA P-256 SHA-256 over the U+2063-joined fields.
            #expect(offer.appAccountToken == AppAccountToken.forAppUserID("lapsed-user"))
            #expect(offer.signedData.identifier == "winback_half_price")
            #expect(offer.signedData.keyIdentifier == "TEST123")
            let message = [
                "com.example.demo", "TEST123", "pro_monthly", "winback_half_price",
                offer.appAccountToken.uuidString.lowercased(), offer.signedData.nonce.uuidString.lowercased(),
                String(offer.signedData.timestamp),
            ].joined(separator: "\u{2063}")
            let der = try #require(Data(base64Encoded: offer.signedData.signature))
            #expect(publicKey.isValidSignature(try P256.Signing.ECDSASignature(derRepresentation: der), for: Data(message.utf8)))
            #expect(abs(Double(offer.signedData.timestamp) / 1000 - before.timeIntervalSince1970) < 60, "timestamp in milliseconds, now")
            // A changed field no longer verifies.
            let otherOffer = message.replacingOccurrences(of: "winback_half_price", with: "winback_free")
            #expect(!publicKey.isValidSignature(try P256.Signing.ECDSASignature(derRepresentation: der), for: Data(otherOffer.utf8)))

            // The JWS format.
            let parts = offer.compactJWS.split(separator: ".", omittingEmptySubsequences: false)
            #expect(parts.count == 3)
            let header = try Self.decodeSegment(parts[0])
            #expect(header["alg"] as? String == "ES256" && header["kid"] as? String == "TEST123" && header["typ"] as? String == "JWT")
            let claims = try Self.decodeSegment(parts[1])
            #expect(claims["iss"] as? String == "57246542-96fe-1a63-e053-0824d011072a")
            #expect(claims["aud"] as? String == "promotional-offer")
            #expect(claims["bid"] as? String == "com.example.demo")
            #expect(claims["productId"] as? String == "pro_monthly")
            #expect(claims["offerIdentifier"] as? String == "winback_half_price")
            #expect(UUID(uuidString: claims["nonce"] as? String ?? "") != nil)
            #expect(claims["exp"] == nil)
            #expect(abs((claims["iat"] as? Double ?? 0) - before.timeIntervalSince1970) < 60, "iat in seconds, now")
            let rawSignature = try #require(
                Data(
                    base64Encoded: {
                        var text = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
                        while text.count % 4 != 0 { text += "=" }
                        return text
                    }()))
            #expect(
                publicKey.isValidSignature(
                    try P256.Signing.ECDSASignature(rawRepresentation: rawSignature),
                    for: Data("\(parts[0]).\(parts[1])".utf8)))

            // An offer the product does not have, and a tampered answer, are refused.
            await #expect { _ = try await purchases.promotionalOffer(offerIdentifier: "free_forever", product: product) } throws: { error in
                (error as? PurchasesError).map { if case .server(422, 4207?, _) = $0 { true } else { false } } ?? false
            }
            harness.proxy.attack = .stripSignature
            await #expect { _ = try await purchases.promotionalOffer(offerIdentifier: "winback_half_price", product: product) } throws: { error in
                ErrorCode.signatureVerificationFailed ~= error
            }
        }
    }

    @Test("without an In-App Purchase key the server says so (422, 4207)")
    func noKey() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "someone", storage: "no-key")
            let product = try #require(await purchases.products(["pro_monthly"]).first)
            await #expect { _ = try await purchases.promotionalOffer(offerIdentifier: "any", product: product) } throws: { error in
                guard case .server(422, 4207?, let message)? = error as? PurchasesError else { return false }
                return message.contains("In-App Purchase key")
            }
        }
    }

    @Test(
        "a promotional offer is bought as RevenueCat buys one: eligiblePromotionalOffers, purchase(package:promotionalOffer:) and PurchaseParams; a forged or misused offer is refused"
    )
    func purchaseWithOffer() async throws {
        try await SDKHarness.run(configure: Self.withKey) { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "winback", storage: "winback")
            let product = try #require(await purchases.products(["pro_monthly"]).first)
            #expect(product.discounts.map(\.offerIdentifier) == ["winback_half_price"])
            #expect(product.discounts.first?.type == .promotional)
            let offers = await purchases.eligiblePromotionalOffers(forProduct: product)
            let offer = try #require(offers.first)
            #expect(offers.count == 1 && offer.signedData.identifier == "winback_half_price")

            let package = try #require(try await purchases.offerings().current?.monthly)
            let bought = try await purchases.purchase(package: package, promotionalOffer: offer)
            #expect(bought.customerInfo.entitlements["pro"]?.isActive == true)
            #expect(!bought.userCancelled)
            // The transaction carries the redeemed offer, as the App Store's does.
            let payload = try #require(bought.transaction?.jws.split(separator: ".").dropFirst().first)
            let claims = try Self.decodeSegment(payload)
            #expect(claims["offerType"] as? Int == 2 && claims["offerIdentifier"] as? String == "winback_half_price")

            // PurchaseParams, with a fresh offer (each signature is for one purchase attempt).
            let again = try #require(await purchases.eligiblePromotionalOffers(forProduct: product).first)
            let params = PurchaseParams.Builder(product: product).with(promotionalOffer: again).build()
            #expect(try await purchases.purchase(params).customerInfo.entitlements["pro"]?.isActive == true)

            // A forged signature: the test store refuses it as the App Store would.
            let forged = PromotionalOffer(
                productIdentifier: offer.productIdentifier,
                signedData: .init(
                    identifier: offer.signedData.identifier, keyIdentifier: offer.signedData.keyIdentifier, nonce: UUID(),
                    signature: offer.signedData.signature, timestamp: offer.signedData.timestamp),
                compactJWS: offer.compactJWS, appAccountToken: offer.appAccountToken)
            await #expect { _ = try await purchases.purchase(product: product, promotionalOffer: forged) } throws: { error in
                (error as? PurchasesError)?.errorCode == .invalidPromotionalOfferError
            }
            // An offer signed for another user is refused before the store is asked.
            let other = try harness.purchases(mode: .enforced, user: "someone-else", storage: "someone-else")
            await #expect { _ = try await other.purchase(product: product, promotionalOffer: again) } throws: { error in
                (error as? PurchasesError)?.errorCode == .invalidPromotionalOfferError
            }
        }
    }
}
