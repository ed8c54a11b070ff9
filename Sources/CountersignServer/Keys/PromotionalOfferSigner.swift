import CountersignAppStore
import CountersignCore
import CountersignServerCore
import Crypto
import Foundation

/// Signs App Store promotional offers with the app's In-App Purchase key, on the server, so the
/// key never ships in the app (a device holding it could give itself any offer).
///
/// Two formats, as Apple documents them:
/// - the original signature (StoreKit's `Product.PurchaseOption.promotionalOffer(offerID:keyID:nonce:signature:timestamp:)`,
///   SKPaymentDiscount): ECDSA P-256 with SHA-256, DER, base64, over
///   `bundleId ⁣ keyId ⁣ productId ⁣ offerId ⁣ appAccountToken ⁣ nonce ⁣ timestamp`, the parts joined by
///   U+2063 INVISIBLE SEPARATOR, the token and nonce lowercase UUIDs, the timestamp in milliseconds;
/// - the compact JWS of StoreKit's newer `promotionalOffer(_:compactJWS:)`: header `alg` ES256,
///   `kid`, `typ` JWT; payload `iss` (issuer id), `iat` (seconds), `aud` `promotional-offer`, `bid`,
///   `nonce`, `productId`, `offerIdentifier` and, when known, `transactionId`; no `exp`.
public struct PromotionalOfferSigner: Sendable {
    public let keyId: String
    public let issuerId: String
    public let bundleId: String
    let key: P256.Signing.PrivateKey

    public init(pem: String, keyId: String, issuerId: String, bundleId: String) throws {
        key = try P256.Signing.PrivateKey(pemRepresentation: pem)
        self.keyId = keyId
        self.issuerId = issuerId
        self.bundleId = bundleId
    }

    /// The app's signer, or nil when it has no In-App Purchase key configured.
    public static func load(for app: AppConfiguration, dataDirectory: URL) throws -> PromotionalOfferSigner? {
        guard let configured = app.inAppPurchaseKey, let (pem, url) = try keyPEM(for: app, dataDirectory: dataDirectory) else { return nil }
        do {
            return try PromotionalOfferSigner(pem: pem, keyId: configured.keyId, issuerId: configured.issuerId, bundleId: app.bundleId)
        } catch {
            throw ConfigurationError("app '\(app.id)': \(url.path) is not a P-256 private key in PEM (an App Store Connect .p8 file)")
        }
    }

    /// The PEM text of the app's In-App Purchase key and where it was read from; nil when the
    /// app has none configured.
    static func keyPEM(for app: AppConfiguration, dataDirectory: URL) throws -> (String, URL)? {
        guard let configured = app.inAppPurchaseKey else { return nil }
        let url =
            configured.privateKeyFile.hasPrefix("/")
            ? URL(fileURLWithPath: configured.privateKeyFile) : dataDirectory.appendingPathComponent(configured.privateKeyFile)
        guard let pem = try? String(contentsOf: url, encoding: .utf8) else {
            throw ConfigurationError("app '\(app.id)': cannot read the In-App Purchase key \(url.path)")
        }
        return (pem, url)
    }

    /// The bytes the original signature covers.
    public static func v1Payload(
        bundleId: String, keyId: String, productId: String, offerId: String, appAccountToken: String,
        nonce: String, timestamp: Int64
    ) -> Data {
        Data([bundleId, keyId, productId, offerId, appAccountToken, nonce, String(timestamp)].joined(separator: "\u{2063}").utf8)
    }

    /// The original signature: base64 of the DER ECDSA signature.
    public func signV1(productId: String, offerId: String, appAccountToken: UUID, nonce: UUID, timestamp: Int64) throws -> String {
        let payload = Self.v1Payload(
            bundleId: bundleId, keyId: keyId, productId: productId, offerId: offerId,
            appAccountToken: appAccountToken.uuidString.lowercased(), nonce: nonce.uuidString.lowercased(),
            timestamp: timestamp)
        return try key.signature(for: payload).derRepresentation.base64EncodedString()
    }

    /// Whether `signature` (base64 DER, as ``signV1(productId:offerId:appAccountToken:nonce:timestamp:)``
    /// makes it) signs the offer with this key: what the App Store checks at purchase.
    public func isValidV1(signature: String, productId: String, offerId: String, appAccountToken: UUID, nonce: UUID, timestamp: Int64) -> Bool {
        guard let der = Data(base64Encoded: signature), let parsed = try? P256.Signing.ECDSASignature(derRepresentation: der) else {
            return false
        }
        let payload = Self.v1Payload(
            bundleId: bundleId, keyId: keyId, productId: productId, offerId: offerId,
            appAccountToken: appAccountToken.uuidString.lowercased(), nonce: nonce.uuidString.lowercased(), timestamp: timestamp)
        return key.publicKey.isValidSignature(parsed, for: payload)
    }

    /// The compact JWS.
    public func signV2(productId: String, offerId: String, transactionId: String?, nonce: UUID, issuedAt: Date) throws -> String {
        func segment(_ object: [String: Any]) throws -> String {
            try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]).base64URLEncodedString
        }
        var claims: [String: Any] = [
            "iss": issuerId, "iat": Int64(issuedAt.timeIntervalSince1970), "aud": "promotional-offer", "bid": bundleId,
            "nonce": nonce.uuidString.lowercased(), "productId": productId, "offerIdentifier": offerId,
        ]
        if let transactionId { claims["transactionId"] = transactionId }
        let signingInput = try segment(["alg": "ES256", "kid": keyId, "typ": "JWT"]) + "." + segment(claims)
        let signature = try key.signature(for: Data(signingInput.utf8)).rawRepresentation
        return signingInput + "." + signature.base64URLEncodedString
    }
}
