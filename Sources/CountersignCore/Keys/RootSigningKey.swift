import Crypto
import Foundation

/// The long-lived root key. Its private half stays offline; its public half is pinned in apps.
public struct RootSigningKey: Sendable {
    public let privateKey: Curve25519.Signing.PrivateKey

    /// Generates a new random root key.
    public init() {
        privateKey = Curve25519.Signing.PrivateKey()
    }

    /// Loads a root key from its 32-byte seed.
    public init(seed: Data) throws(KeyFormatError) {
        privateKey = try Curve25519.Signing.PrivateKey.fromSeed(seed, name: "root")
    }

    public var publicKey: Curve25519.Signing.PublicKey { privateKey.publicKey }

    /// Issues an intermediate key that expires at the start of day `expirationDays` (UTC).
    ///
    /// - Parameter intermediateKey: the intermediate's private key; a fresh one by default.
    public func issueIntermediate(
        _ intermediateKey: Curve25519.Signing.PrivateKey = .init(),
        expirationDays: UInt32
    ) throws -> IntermediateSigningKey {
        let publicKey = intermediateKey.publicKey.rawRepresentation
        let signed = IntermediateCertificate.signedBytes(publicKey: publicKey, expirationDays: expirationDays)
        let certificate = try IntermediateCertificate(
            publicKey: publicKey,
            expirationDays: expirationDays,
            rootSignature: privateKey.signature(for: signed)
        )
        return try IntermediateSigningKey(privateKey: intermediateKey, certificate: certificate)
    }

    /// Issues an intermediate valid for at least `days` days from `now`.
    ///
    /// The expiration is rounded up to the next UTC day boundary, because the wire format counts
    /// whole days.
    public func issueIntermediate(validForDays days: Int, now: Date = Date()) throws -> IntermediateSigningKey {
        try issueIntermediate(expirationDays: Self.expirationDays(validForDays: days, from: now))
    }

    /// The first whole day number at least `days` days after `now`.
    public static func expirationDays(validForDays days: Int, from now: Date) -> UInt32 {
        precondition(days > 0, "an intermediate must be valid for at least one day")
        let end = now.timeIntervalSince1970 + TimeInterval(days) * 86_400
        return UInt32((end / 86_400).rounded(.up))
    }
}

/// An intermediate key that the server signs responses with, and its root-signed certificate.
public struct IntermediateSigningKey: Sendable {
    public let privateKey: Curve25519.Signing.PrivateKey
    public let certificate: IntermediateCertificate

    /// Pairs a private key with its certificate, checking that they belong together.
    public init(privateKey: Curve25519.Signing.PrivateKey, certificate: IntermediateCertificate) throws(KeyFormatError) {
        guard privateKey.publicKey.rawRepresentation == certificate.publicKey else {
            throw KeyFormatError("intermediate private key does not match its public key")
        }
        self.privateKey = privateKey
        self.certificate = certificate
    }
}

extension Curve25519.Signing.PrivateKey {
    static func fromSeed(_ seed: Data, name: String) throws(KeyFormatError) -> Self {
        guard seed.count == Ed25519Sizes.seed else {
            throw KeyFormatError("\(name) private key must be a \(Ed25519Sizes.seed)-byte seed, got \(seed.count) bytes")
        }
        do {
            return try Self(rawRepresentation: seed)
        } catch {
            throw KeyFormatError("\(name) private key is not a valid Ed25519 seed")
        }
    }
}

extension Curve25519.Signing.PublicKey {
    /// Parses a raw 32-byte Ed25519 public key given in standard base64.
    public init(base64: String, name: String = "public key") throws(KeyFormatError) {
        let trimmed = base64.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let raw = Data(base64Encoded: trimmed) else {
            throw KeyFormatError("\(name) is not valid base64")
        }
        guard raw.count == Ed25519Sizes.publicKey else {
            throw KeyFormatError("\(name) must be \(Ed25519Sizes.publicKey) bytes, got \(raw.count)")
        }
        do {
            try self.init(rawRepresentation: raw)
        } catch {
            throw KeyFormatError("\(name) is not a valid Ed25519 public key")
        }
    }
}
