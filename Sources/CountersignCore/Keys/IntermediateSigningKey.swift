import Crypto
import Foundation

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
    package static func fromSeed(_ seed: Data, name: String) throws(KeyFormatError) -> Self {
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
