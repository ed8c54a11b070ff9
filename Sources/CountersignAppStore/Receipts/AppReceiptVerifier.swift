import Crypto
import Foundation
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// What a verified legacy app receipt says: the app it was issued to, when, and the in-app
/// transactions it lists.
public struct AppReceipt: Sendable, Hashable {
    public var bundleId: String
    public var creationDate: Date
    /// Field 1703 of each in-app record, in the receipt's order.
    public var transactionIds: [String]

    public init(bundleId: String, creationDate: Date, transactionIds: [String]) {
        self.bundleId = bundleId
        self.creationDate = creationDate
        self.transactionIds = transactionIds
    }
}

/// Verifies a legacy PKCS#7 app receipt before anything in it is believed.
///
/// A receipt is CMS `SignedData` with the receipt attributes as attached content. It counts
/// only when: it has exactly one signer, found among its certificates; the signature (RSA
/// PKCS#1 v1.5 with SHA-1 or SHA-256, as Apple signs, or ECDSA P-256 with SHA-256, as the test
/// store signs) verifies over the content, or over the signed attributes whose message digest is
/// the content's; the signer chains to a pinned root through an intermediate, with Apple's marker
/// OIDs on both (``AppleOIDPolicy``), valid at the receipt's own creation date (field 12, signed
/// with the rest; Apple's receipt-signing leaves expire long before the receipts they signed);
/// that date is no more than five minutes ahead of the clock; and the bundle id (field 2) is the
/// app's. The older per-transaction "purchase-info" receipts (iOS 6) are refused: their signature
/// is a format of its own that no supported app sends.
public struct AppReceiptVerifier: Sendable {
    public struct Failure: Error, CustomStringConvertible, Hashable {
        public enum Kind: Sendable, Hashable {
            /// Not a receipt that can be read.
            case malformed
            /// Readable, but not signed by the App Store (signature, chain, time).
            case untrusted
            /// Signed, for another app.
            case wrongApp
        }

        public let kind: Kind
        public let description: String

        init(_ kind: Kind, _ description: String) {
            self.kind = kind
            self.description = description
        }
    }

    public let anchors: [Certificate]
    public let bundleId: String
    public var futureTolerance: TimeInterval = 300
    public var now: @Sendable () -> Date = { Date() }

    public init(anchors: [Certificate], bundleId: String) {
        self.anchors = anchors
        self.bundleId = bundleId
    }

    /// The receipt anchors that go with a signed-data verifier's: Apple's RSA root wherever
    /// Apple Root CA - G3 is pinned (receipts are signed under the older root), and every other
    /// pinned root (a test store's, a test's) as it is.
    public static func anchors(for signedData: [TrustAnchor]) -> [Certificate] {
        var anchors: [Certificate] = []
        for anchor in signedData {
            anchors.append(anchor.certificate == AppleRootCertificates.rootCAG3 ? AppleRootCertificates.appleIncRoot : anchor.certificate)
        }
        return anchors
    }

    /// Verifies a base64 receipt (line breaks allowed, as Apple's older SDKs wrap it).
    public func verify(base64 text: String) async throws(Failure) -> AppReceipt {
        let (signed, receipt) = try Self.contents(base64: text)
        let current = now()
        if receipt.creationDate.timeIntervalSince(current) > futureTolerance {
            throw Failure(.untrusted, "receipt creation date is \(receipt.creationDate.timeIntervalSince(current).rounded()) s in the future")
        }
        try await verifySignature(signed, at: receipt.creationDate)
        guard receipt.bundleId == bundleId else {
            throw Failure(.wrongApp, "receipt is for bundle id '\(receipt.bundleId.prefix(100))', not '\(bundleId)'")
        }
        return receipt
    }

    /// What a receipt claims, read and **not verified**: for tools and the fuzzer only; a
    /// server believes nothing but ``verify(base64:)``'s answer.
    public static func unverifiedContents(base64 text: String) throws(Failure) -> AppReceipt {
        try contents(base64: text).receipt
    }

    static func contents(base64 text: String) throws(Failure) -> (signed: SignedData, receipt: AppReceipt) {
        let compact = text.filter { !$0.isWhitespace }
        guard let data = Data(base64Encoded: compact), !data.isEmpty else { throw Failure(.malformed, "receipt is not base64") }
        guard data.first == 0x30 else {
            throw Failure(.malformed, "receipt is not a PKCS#7 app receipt (transaction receipts of iOS 6 and earlier are not accepted)")
        }
        let signed = try signedData([UInt8](data))
        return (signed, try receipt(in: signed.content))
    }

    // MARK: CMS

    struct SignedData {
        var content: [UInt8]
        var certificates: [Certificate]
        /// The one signer; nil when there is none or more than one (refused when verifying).
        var signer: Signer?
        var signerCount: Int
    }

    struct Signer {
        var issuer: DistinguishedName
        var serialNumber: Certificate.SerialNumber
        var digestAlgorithm: ASN1ObjectIdentifier
        var signedAttributes: (der: [UInt8], messageDigest: [UInt8])?
        var signatureAlgorithm: ASN1ObjectIdentifier
        var signature: [UInt8]
    }

    static let signedDataType: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 7, 2]
    static let dataType: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 7, 1]
    static let messageDigestAttribute: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 9, 4]
    static let contentTypeAttribute: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 9, 3]
    static let sha1: ASN1ObjectIdentifier = [1, 3, 14, 3, 2, 26]
    static let sha256: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 1]
    static let rsaEncryption: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 1, 1]
    static let sha1WithRSA: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 1, 5]
    static let sha256WithRSA: ASN1ObjectIdentifier = [1, 2, 840, 113_549, 1, 1, 11]
    static let ecdsaWithSHA256: ASN1ObjectIdentifier = [1, 2, 840, 10_045, 4, 3, 2]

    /// `ContentInfo { signedData, [0] SignedData { version, digestAlgorithms, encapContentInfo,
    /// [0] certificates, [1] crls, signerInfos } }`, with exactly one `SignerInfo`.
    static func signedData(_ bytes: [UInt8]) throws(Failure) -> SignedData {
        let contentInfo = try parse(bytes[...], "PKCS#7 receipt")
        let info = children(contentInfo)
        guard info.count == 2, try oid(info[0]) == signedDataType, let signedData = children(info[1]).first,
            info[1].identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)
        else { throw Failure(.malformed, "PKCS#7 receipt is not CMS SignedData") }
        var fields = children(signedData)[...]
        guard fields.count >= 4 else { throw Failure(.malformed, "PKCS#7 receipt has no signed content") }
        fields = fields.dropFirst(2)  // version, digestAlgorithms
        let encapsulated = children(fields.removeFirst())
        guard encapsulated.count == 2, try oid(encapsulated[0]) == dataType, let content = children(encapsulated[1]).first else {
            throw Failure(.malformed, "PKCS#7 receipt has no signed content")
        }
        var certificates: [Certificate] = []
        var signerInfos: [ASN1Node] = []
        for field in fields {
            switch field.identifier {
            case ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific):
                for node in children(field) {
                    guard let certificate = try? Certificate(derEncoded: Array(node.encodedBytes)) else {
                        throw Failure(.malformed, "PKCS#7 receipt holds a certificate that cannot be read")
                    }
                    certificates.append(certificate)
                }
            case ASN1Identifier(tagWithNumber: 1, tagClass: .contextSpecific):
                continue  // CRLs: not used
            case .set:
                signerInfos = children(field)
            default:
                throw Failure(.malformed, "PKCS#7 receipt has an unexpected field")
            }
        }
        let signer = signerInfos.count == 1 ? try Self.signer(signerInfos[0]) : nil
        return SignedData(content: octets(content), certificates: certificates, signer: signer, signerCount: signerInfos.count)
    }

    /// `SignerInfo { version, issuerAndSerialNumber, digestAlgorithm, [0] signedAttrs?,
    /// signatureAlgorithm, signature, [1] unsignedAttrs? }`.
    private static func signer(_ node: ASN1Node) throws(Failure) -> Signer {
        var signer = children(node)[...]
        guard signer.count >= 5 else { throw Failure(.malformed, "PKCS#7 receipt's signer is incomplete") }
        signer = signer.dropFirst()
        let identifier = children(signer.removeFirst())
        guard identifier.count == 2, identifier[1].identifier == .integer, case .primitive(let serial) = identifier[1].content,
            let issuer = try? DistinguishedName(derEncoded: Array(identifier[0].encodedBytes))
        else { throw Failure(.malformed, "PKCS#7 receipt's signer is not named by issuer and serial number") }
        let digestAlgorithm = try algorithm(signer.removeFirst())
        var signedAttributes: (der: [UInt8], messageDigest: [UInt8])?
        if signer.first?.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
            signedAttributes = try Self.signedAttributes(signer.removeFirst())
        }
        guard signer.count >= 2 else { throw Failure(.malformed, "PKCS#7 receipt's signer is incomplete") }
        let signatureAlgorithm = try algorithm(signer.removeFirst())
        let signature = signer.removeFirst()
        guard signature.identifier == .octetString else { throw Failure(.malformed, "PKCS#7 receipt's signature is not an OCTET STRING") }
        return Signer(
            issuer: issuer, serialNumber: Certificate.SerialNumber(bytes: serial), digestAlgorithm: digestAlgorithm,
            signedAttributes: signedAttributes, signatureAlgorithm: signatureAlgorithm, signature: octets(signature))
    }

    /// The DER the signature covers (the attributes re-tagged as a SET, RFC 5652 section 5.4) and
    /// the message digest they carry; the content type, when present, must be data.
    private static func signedAttributes(_ node: ASN1Node) throws(Failure) -> (der: [UInt8], messageDigest: [UInt8]) {
        var digest: [UInt8]?
        for attribute in children(node) {
            let parts = children(attribute)
            guard parts.count == 2, let value = children(parts[1]).first, children(parts[1]).count == 1 else {
                throw Failure(.malformed, "PKCS#7 receipt has a malformed signed attribute")
            }
            switch try oid(parts[0]) {
            case messageDigestAttribute:
                guard digest == nil, value.identifier == .octetString else {
                    throw Failure(.malformed, "PKCS#7 receipt's message digest is malformed")
                }
                digest = octets(value)
            case contentTypeAttribute:
                guard try oid(value) == dataType else { throw Failure(.malformed, "PKCS#7 receipt's signed content type is not data") }
            default:
                continue
            }
        }
        guard let digest else { throw Failure(.malformed, "PKCS#7 receipt's signed attributes have no message digest") }
        var der = Array(node.encodedBytes)
        der[0] = 0x31
        return (der, digest)
    }

    /// Checks the signature and the signer's chain at `time`.
    private func verifySignature(_ signed: SignedData, at time: Date) async throws(Failure) {
        guard let signer = signed.signer else {
            throw Failure(.untrusted, "PKCS#7 receipt must have exactly one signer, not \(signed.signerCount)")
        }
        guard let leaf = signed.certificates.first(where: { $0.serialNumber == signer.serialNumber && $0.issuer == signer.issuer }) else {
            throw Failure(.untrusted, "PKCS#7 receipt does not include its signer's certificate")
        }
        let algorithm: Certificate.SignatureAlgorithm
        let digest: [UInt8]
        switch (signer.digestAlgorithm, signer.signatureAlgorithm) {
        case (Self.sha256, Self.rsaEncryption), (Self.sha256, Self.sha256WithRSA):
            algorithm = .sha256WithRSAEncryption
            digest = Array(SHA256.hash(data: signed.content))
        case (Self.sha1, Self.rsaEncryption), (Self.sha1, Self.sha1WithRSA):
            algorithm = .sha1WithRSAEncryption
            digest = Array(Insecure.SHA1.hash(data: signed.content))
        case (Self.sha256, Self.ecdsaWithSHA256):
            algorithm = .ecdsaWithSHA256
            digest = Array(SHA256.hash(data: signed.content))
        default:
            throw Failure(.untrusted, "PKCS#7 receipt is signed with an algorithm receipts do not use")
        }
        var covered = signed.content
        if let attributes = signer.signedAttributes {
            guard attributes.messageDigest == digest else { throw Failure(.untrusted, "PKCS#7 receipt's message digest does not match its content") }
            covered = attributes.der
        }
        guard leaf.publicKey.isValidSignature(signer.signature, for: covered, signatureAlgorithm: algorithm) else {
            throw Failure(.untrusted, "PKCS#7 receipt's signature does not verify with its signer's certificate")
        }
        var verifier = Verifier(rootCertificates: CertificateStore(anchors)) {
            RFC5280Policy(fixedExpiryValidationTime: time)
            AppleOIDPolicy(requiresKeyIdentifiers: false)
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore(signed.certificates.filter { $0 != leaf }))
        guard case .validCertificate = result else {
            var reason = "its signer does not chain to a pinned App Store root"
            if case .couldNotValidate(let failures) = result, let first = failures.first { reason += " (\(first.policyFailureReason))" }
            throw Failure(.untrusted, "PKCS#7 receipt is not signed by the App Store: \(reason)")
        }
    }

    // MARK: Receipt fields

    /// Bundle id (2), creation date (12) and in-app transaction ids (17 → 1703); each of the
    /// first two exactly once.
    static func receipt(in content: [UInt8]) throws(Failure) -> AppReceipt {
        var bundleId: String?
        var created: Date?
        var ids: [String] = []
        for (type, value) in try attributes(in: content) {
            switch type {
            case 2:
                guard bundleId == nil else { throw Failure(.malformed, "receipt names its bundle id twice") }
                bundleId = try string(value, "bundle id")
            case 12:
                guard created == nil else { throw Failure(.malformed, "receipt gives its creation date twice") }
                let text = try string(value, "creation date")
                guard let date = ISO8601DateFormatter().date(from: text) else {
                    throw Failure(.malformed, "receipt creation date '\(text.prefix(40))' is not a date")
                }
                created = date
            case 17:
                for (innerType, innerValue) in try attributes(in: value) where innerType == 1703 {
                    let id = try string(innerValue, "in-app transaction id")
                    // An empty id would be a lookup for nothing at the App Store Server API.
                    guard !id.isEmpty else { throw Failure(.malformed, "in-app transaction id is empty") }
                    ids.append(id)
                }
            default:
                continue
            }
        }
        guard let bundleId, let created else { throw Failure(.malformed, "receipt lacks its bundle id or creation date") }
        return AppReceipt(bundleId: bundleId, creationDate: created, transactionIds: ids)
    }

    /// The `(type, value)` pairs of a receipt attribute set: `SET OF SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`.
    static func attributes(in bytes: [UInt8]) throws(Failure) -> [(Int, [UInt8])] {
        var pairs: [(Int, [UInt8])] = []
        for attribute in children(try parse(bytes[...], "receipt attribute set")) {
            let fields = children(attribute)
            guard fields.count == 3, fields[0].identifier == .integer, case .primitive(let type) = fields[0].content, type.count <= 4,
                fields[2].identifier == .octetString
            else { throw Failure(.malformed, "receipt attribute is not { type, version, value }") }
            pairs.append((type.reduce(0) { $0 << 8 | Int($1) }, octets(fields[2])))
        }
        return pairs
    }

    /// A UTF8String or IA5String inside an attribute's value.
    private static func string(_ value: [UInt8], _ what: String) throws(Failure) -> String {
        let node = try parse(value[...], what)
        guard node.identifier == .utf8String || node.identifier == .ia5String,
            let text = String(validating: octets(node), as: UTF8.self)
        else { throw Failure(.malformed, "receipt \(what) is not a string") }
        return text
    }

    private static func parse(_ bytes: ArraySlice<UInt8>, _ what: String) throws(Failure) -> ASN1Node {
        do {
            return try BER.parse(bytes)
        } catch {
            throw Failure(.malformed, "\(what) is not BER: \(error)")
        }
    }

    private static func algorithm(_ node: ASN1Node) throws(Failure) -> ASN1ObjectIdentifier {
        guard let first = children(node).first else { throw Failure(.malformed, "PKCS#7 receipt has a malformed algorithm identifier") }
        return try oid(first)
    }

    private static func oid(_ node: ASN1Node) throws(Failure) -> ASN1ObjectIdentifier {
        do {
            return try ASN1ObjectIdentifier(berEncoded: node)
        } catch {
            throw Failure(.malformed, "PKCS#7 receipt has a malformed object identifier")
        }
    }

    static func children(_ node: ASN1Node) -> [ASN1Node] {
        guard case .constructed(let nodes) = node.content else { return [] }
        return Array(nodes)
    }

    /// The bytes of a string, joining the pieces of a constructed (BER) one.
    static func octets(_ node: ASN1Node) -> [UInt8] {
        switch node.content {
        case .primitive(let bytes): Array(bytes)
        case .constructed(let pieces): pieces.flatMap(octets)
        }
    }
}
