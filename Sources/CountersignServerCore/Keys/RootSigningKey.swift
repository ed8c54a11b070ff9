import CountersignCore
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
