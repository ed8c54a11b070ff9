import CountersignCore
import CountersignServerCore
import Crypto
import Foundation
import SwiftASN1
@_spi(CMS) import X509

/// A deployment's own certificate authority for the **test store**: a root, an intermediate and
/// a signing leaf shaped like Apple's (same marker OIDs, our own names), so that the whole
/// purchase flow runs and is tested on Linux with no Apple account.
///
/// Data it signs claims the `TestStore` environment and verifies only against this deployment's
/// root, which a verifier trusts for `TestStore` alone; Apple's root never verifies it.
public struct TestStoreCA: Sendable {
    public let root: Certificate
    public let intermediate: Certificate
    public let leaf: Certificate
    private let rootKey: P256.Signing.PrivateKey
    private let intermediateKey: P256.Signing.PrivateKey
    private let leafKey: P256.Signing.PrivateKey

    /// The root as a trust anchor for the `TestStore` environment only.
    public var anchor: TrustAnchor { TrustAnchor(certificate: root, environments: [.testStore]) }

    /// Makes a new CA. `name` tells deployments apart in the certificates' subjects.
    public static func create(name: String, now: Date = Date()) throws -> TestStoreCA {
        let rootKey = P256.Signing.PrivateKey()
        let intermediateKey = P256.Signing.PrivateKey()
        let leafKey = P256.Signing.PrivateKey()
        let organization = "Countersign Test Store (\(name))"
        func distinguishedName(_ commonName: String) throws -> DistinguishedName {
            try DistinguishedName {
                CommonName(commonName)
                OrganizationName(organization)
            }
        }
        let rootName = try distinguishedName("Countersign Test Store Root CA")
        let intermediateName = try distinguishedName("Countersign Test Store Intermediate CA")
        /// A certificate valid from a day before `now` for `years`, signed by `issuerKey`.
        func issue(
            _ key: P256.Signing.PrivateKey, subject: DistinguishedName, issuer: DistinguishedName,
            issuerKey: P256.Signing.PrivateKey, years: Double, extensions: Certificate.Extensions
        ) throws -> Certificate {
            try Certificate(
                version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey),
                notValidBefore: now.addingTimeInterval(-86_400), notValidAfter: now.addingTimeInterval(years * 365 * 86_400),
                issuer: issuer, subject: subject, signatureAlgorithm: .ecdsaWithSHA256,
                extensions: extensions, issuerPrivateKey: .init(issuerKey)
            )
        }
        let root = try issue(
            rootKey, subject: rootName, issuer: rootName, issuerKey: rootKey, years: 20,
            extensions: .init {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 1))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: rootKey.publicKey)
            })
        let intermediate = try issue(
            intermediateKey, subject: intermediateName, issuer: rootName, issuerKey: rootKey, years: 15,
            extensions: .init {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: intermediateKey.publicKey)
                AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: rootKey.publicKey).keyIdentifier)
                Certificate.Extension(oid: AppleOIDPolicy.intermediateMarker, critical: false, value: [0x05, 0x00])
            })
        let leaf = try issue(
            leafKey, subject: try distinguishedName("Countersign Test Store Signing"), issuer: intermediateName,
            issuerKey: intermediateKey, years: 10,
            extensions: .init {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: intermediateKey.publicKey).keyIdentifier)
                Certificate.Extension(oid: AppleOIDPolicy.leafMarker, critical: false, value: [0x05, 0x00])
            })
        return TestStoreCA(root: root, intermediate: intermediate, leaf: leaf, rootKey: rootKey, intermediateKey: intermediateKey, leafKey: leafKey)
    }

    /// Signs any payload as App Store signed data: `{"alg":"ES256","x5c":[leaf, intermediate, root]}`.
    public func sign(_ payload: some Encodable) throws -> String {
        let chain = try [leaf, intermediate, root].map { certificate in
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            return Data(serializer.serializedBytes).base64EncodedString()
        }
        let header = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "x5c": chain], options: [.sortedKeys])
        let body = try AppStoreJSON.makeEncoder().encode(payload)
        let signingInput = header.base64URLEncodedString + "." + body.base64URLEncodedString
        let signature = try leafKey.signature(for: Data(signingInput.utf8))
        return signingInput + "." + signature.rawRepresentation.base64URLEncodedString
    }
}

extension TestStoreCA {
    /// A legacy PKCS#7 app receipt for `bundleId` listing `transactionIds` (each as an in-app
    /// record's field 1703), created at `creationDate`: CMS SignedData with the receipt attached,
    /// signed by the test store leaf (ECDSA P-256) with the intermediate included, as Apple
    /// includes its WWDR intermediate. Base64, as apps send it.
    public func mintAppReceipt(bundleId: String, transactionIds: [String], creationDate: Date) throws -> String {
        func der(_ value: some DERSerializable) throws -> [UInt8] {
            var serializer = DER.Serializer()
            try serializer.serialize(value)
            return serializer.serializedBytes
        }
        /// `SET OF SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`.
        func attributes(_ fields: [(Int, [UInt8])]) throws -> [UInt8] {
            var serializer = DER.Serializer()
            try serializer.appendConstructedNode(identifier: .set) { set in
                for (type, value) in fields {
                    try set.appendConstructedNode(identifier: .sequence) { sequence in
                        try sequence.serialize(type)
                        try sequence.serialize(1)
                        try sequence.serialize(ASN1OctetString(contentBytes: value[...]))
                    }
                }
            }
            return serializer.serializedBytes
        }
        let content = try attributes(
            [(2, try der(ASN1UTF8String(bundleId))), (12, try der(try ASN1IA5String(creationDate.formatted(.iso8601))))]
                + transactionIds.map { (17, try attributes([(1703, try der(ASN1UTF8String($0)))])) })
        let signed = try CMS.sign(
            content, additionalIntermediateCertificates: [intermediate], certificate: leaf,
            privateKey: .init(leafKey), detached: false)
        return Data(signed).base64EncodedString()
    }
}

extension SubjectKeyIdentifier {
    /// The SHA-1 of the public key, as RFC 5280 section 4.2.1.2 suggests.
    init(hash key: P256.Signing.PublicKey) {
        self.init(keyIdentifier: ArraySlice(Insecure.SHA1.hash(data: key.x963Representation)))
    }
}

// MARK: - Storage

extension TestStoreCA {
    static let fileNames = (root: "root.pem", intermediate: "intermediate.pem", leaf: "leaf.pem", keys: "keys.json")

    private struct Keys: Codable {
        var root: String
        var intermediate: String
        var leaf: String
    }

    /// Writes the certificates (PEM) and the private keys (`keys.json`, 0600) into `directory`.
    public func save(to directory: URL) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let names = Self.fileNames
        for (certificate, name) in [(root, names.root), (intermediate, names.intermediate), (leaf, names.leaf)] {
            try Data(certificate.serializeAsPEM().pemString.utf8).write(to: directory.appendingPathComponent(name), options: .atomic)
        }
        let keys = Keys(root: rootKey.pemRepresentation, intermediate: intermediateKey.pemRepresentation, leaf: leafKey.pemRepresentation)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try KeyFile.writePrivate(encoder.encode(keys), to: directory.appendingPathComponent(names.keys))
    }

    /// Loads a CA saved by ``save(to:)``.
    public static func load(from directory: URL) throws -> TestStoreCA {
        let names = fileNames
        func certificate(_ name: String) throws -> Certificate {
            try TrustAnchor.loadCertificate(from: directory.appendingPathComponent(name))
        }
        let keys = try JSONDecoder().decode(Keys.self, from: Data(contentsOf: directory.appendingPathComponent(names.keys)))
        let ca = TestStoreCA(
            root: try certificate(names.root),
            intermediate: try certificate(names.intermediate),
            leaf: try certificate(names.leaf),
            rootKey: try P256.Signing.PrivateKey(pemRepresentation: keys.root),
            intermediateKey: try P256.Signing.PrivateKey(pemRepresentation: keys.intermediate),
            leafKey: try P256.Signing.PrivateKey(pemRepresentation: keys.leaf)
        )
        guard ca.leaf.publicKey == Certificate.PublicKey(ca.leafKey.publicKey) else {
            throw SignedDataVerifier.ConfigurationError(description: "test store leaf key in \(directory.path) does not match leaf.pem")
        }
        return ca
    }

    /// Loads the CA in `directory`, creating and saving a new one if there is none.
    /// The test store CA of a server's data directory, made on first use.
    public static func loadOrCreate(for dataDirectory: DataDirectory, now: Date = Date()) throws -> TestStoreCA {
        try loadOrCreate(in: dataDirectory.testStore, name: dataDirectory.name, now: now)
    }

    public static func loadOrCreate(in directory: URL, name: String, now: Date = Date()) throws -> TestStoreCA {
        if FileManager.default.fileExists(atPath: directory.appendingPathComponent(fileNames.keys).path) {
            return try load(from: directory)
        }
        let ca = try create(name: name, now: now)
        try ca.save(to: directory)
        return ca
    }
}
