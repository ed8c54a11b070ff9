import Crypto
import Foundation
import SwiftASN1
import X509

@testable import CountersignAppStore

/// A certificate authority made inside a test, to forge signed data with any defect.
struct ThrowawayCA {
    let rootKey = P256.Signing.PrivateKey()
    let intermediateKey = P256.Signing.PrivateKey()
    let leafKey = P256.Signing.PrivateKey()
    let root: Certificate
    let intermediate: Certificate
    let leaf: Certificate

    /// - Parameters:
    ///   - rootName: the root's common name (an attacker would pick Apple's).
    ///   - leafHasOID: whether the leaf carries Apple's receipt-signing OID.
    init(rootName: String = "Throwaway Root", leafHasOID: Bool = true, now: Date = Date()) throws {
        let rootKeyIdentifier = SubjectKeyIdentifier(hash: rootKey.publicKey)
        let intermediateKeyIdentifier = SubjectKeyIdentifier(hash: intermediateKey.publicKey)
        let rootDN = try DistinguishedName {
            CommonName(rootName); OrganizationName("Apple Inc.")
        }
        let intermediateDN = try DistinguishedName { CommonName("Throwaway Intermediate") }
        let leafDN = try DistinguishedName { CommonName("Throwaway Leaf") }
        let start = now.addingTimeInterval(-86_400)
        let end = now.addingTimeInterval(365 * 86_400)
        root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey), notValidBefore: start, notValidAfter: end,
            issuer: rootDN, subject: rootDN, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true))
                rootKeyIdentifier
            },
            issuerPrivateKey: .init(rootKey)
        )
        intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey), notValidBefore: start, notValidAfter: end,
            issuer: rootDN, subject: intermediateDN, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true))
                intermediateKeyIdentifier
                AuthorityKeyIdentifier(keyIdentifier: rootKeyIdentifier.keyIdentifier)
                Certificate.Extension(oid: AppleOIDPolicy.intermediateMarker, critical: false, value: [0x05, 0x00])
            },
            issuerPrivateKey: .init(rootKey)
        )
        var leafExtensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true))
            AuthorityKeyIdentifier(keyIdentifier: intermediateKeyIdentifier.keyIdentifier)
        }
        if leafHasOID {
            try leafExtensions.append(Certificate.Extension(oid: AppleOIDPolicy.leafMarker, critical: false, value: [0x05, 0x00]))
        }
        leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: start, notValidAfter: end,
            issuer: intermediateDN, subject: leafDN, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: leafExtensions, issuerPrivateKey: .init(intermediateKey)
        )
    }

    static func base64DER(_ certificate: Certificate) -> String {
        var serializer = DER.Serializer()
        try! serializer.serialize(certificate)
        return Data(serializer.serializedBytes).base64EncodedString()
    }

    var chain: [Certificate] { [leaf, intermediate, root] }

    /// A JWS over exactly these header and payload segments (already encoded, so they may be
    /// padded or odd), signed by the leaf.
    func token(headerSegment: String, payloadSegment: String) throws -> String {
        let input = headerSegment + "." + payloadSegment
        return input + "." + (try leafKey.signature(for: Data(input.utf8))).rawRepresentation.base64URLEncodedString
    }

    /// A JWS with this header (plus `alg` ES256 and the chain unless given) and payload JSON.
    func token(header: [String: Any], payloadJSON: String) throws -> String {
        var fields: [String: Any] = ["alg": "ES256", "x5c": chain.map(Self.base64DER)]
        fields.merge(header) { _, new in new }
        let headerJSON = try JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])
        return try token(headerSegment: headerJSON.base64URLEncodedString, payloadSegment: Data(payloadJSON.utf8).base64URLEncodedString)
    }

    /// A JWS with any header and chain; `transformSignature` tampers with the raw signature.
    func token(
        payload: some Encodable,
        alg: String = "ES256",
        x5c: [Certificate]? = nil,
        transformSignature: (P256.Signing.ECDSASignature) -> Data = { $0.rawRepresentation }
    ) throws -> String {
        let header = try JSONSerialization.data(
            withJSONObject: ["alg": alg, "x5c": (x5c ?? chain).map(Self.base64DER)], options: [.sortedKeys]
        )
        let body = try AppStoreJSON.makeEncoder().encode(payload)
        let input = header.base64URLEncodedString + "." + body.base64URLEncodedString
        let signature = try leafKey.signature(for: Data(input.utf8))
        return input + "." + transformSignature(signature).base64URLEncodedString
    }

    /// A verifier pinning this CA's root for Sandbox and Production.
    func verifier(bundleId: String = "com.example.demo", now: Date = Date()) throws -> SignedDataVerifier {
        var configuration = SignedDataVerifier.Configuration(
            anchors: [TrustAnchor(certificate: root, environments: [.sandbox, .production])],
            bundleId: bundleId, environments: [.sandbox]
        )
        configuration.now = { now }
        return try SignedDataVerifier(configuration: configuration)
    }

    static func sandboxTransaction(signedDate: Date = Date()) -> TransactionPayload {
        TransactionPayload(
            transactionId: "1000000000000001", originalTransactionId: "1000000000000001", bundleId: "com.example.demo",
            productId: "pro_monthly", purchaseDate: signedDate, type: .autoRenewable, environment: .sandbox, signedDate: signedDate
        )
    }
}
