import Crypto
import Foundation

/// The public, root-signed half of an intermediate key: what travels in every `X-Signature`.
///
/// The root signs `expirationDays (UInt32, little-endian) ‖ publicKey (32 bytes)`; a client that
/// pins the root accepts the intermediate until the start of day `expirationDays` (UTC).
public struct IntermediateCertificate: Sendable, Hashable {
    /// The raw 32-byte Ed25519 public key of the intermediate.
    public let publicKey: Data
    /// Days since 1970-01-01 UTC at whose start the intermediate stops being valid.
    public let expirationDays: UInt32
    /// The root's 64-byte Ed25519 signature over ``signedBytes``.
    public let rootSignature: Data

    /// Creates a certificate from its parts, checking only their sizes.
    public init(publicKey: Data, expirationDays: UInt32, rootSignature: Data) throws(KeyFormatError) {
        guard publicKey.count == Ed25519Sizes.publicKey else {
            throw KeyFormatError("intermediate public key must be \(Ed25519Sizes.publicKey) bytes, got \(publicKey.count)")
        }
        guard rootSignature.count == Ed25519Sizes.signature else {
            throw KeyFormatError("root signature must be \(Ed25519Sizes.signature) bytes, got \(rootSignature.count)")
        }
        self.publicKey = Data(publicKey)
        self.expirationDays = expirationDays
        self.rootSignature = Data(rootSignature)
    }

    /// The bytes the root signs: the expiration (4 bytes, little-endian) then the public key.
    public var signedBytes: Data {
        Self.signedBytes(publicKey: publicKey, expirationDays: expirationDays)
    }

    package static func signedBytes(publicKey: Data, expirationDays: UInt32) -> Data {
        var bytes = Data(capacity: 4 + publicKey.count)
        withUnsafeBytes(of: expirationDays.littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(publicKey)
        return bytes
    }

    /// The instant the intermediate expires (start of day ``expirationDays``, UTC).
    public var expirationDate: Date {
        Date(timeIntervalSince1970: TimeInterval(expirationDays) * 86_400)
    }

    /// Whether `root` signed this certificate.
    public func isIssued(by root: Curve25519.Signing.PublicKey) -> Bool {
        root.isValidSignature(rootSignature, for: signedBytes)
    }

    /// Whether the intermediate is still valid at `date`, allowing `tolerance` seconds of clock skew.
    public func isValid(at date: Date, tolerance: TimeInterval = 0) -> Bool {
        date.timeIntervalSince(expirationDate) < tolerance
    }
}

/// Sizes fixed by Ed25519 and by the signature format.
enum Ed25519Sizes {
    static let publicKey = 32
    static let seed = 32
    static let signature = 64
}

/// A key or certificate whose bytes do not have the expected shape.
public struct KeyFormatError: Error, Hashable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
