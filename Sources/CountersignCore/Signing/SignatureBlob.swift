import Foundation

/// The 180-byte value carried, base64-encoded, in the `X-Signature` response header.
///
/// | offset | size | part |
/// |---|---|---|
/// | 0 | 32 | intermediate public key |
/// | 32 | 4 | intermediate expiration (UInt32 LE, days since 1970-01-01) |
/// | 36 | 64 | root signature over expiration ‖ intermediate public key |
/// | 100 | 16 | salt |
/// | 116 | 64 | intermediate signature over the signed message |
public struct SignatureBlob: Sendable, Hashable {
    public static let byteCount = 180
    /// The exact length of the header value: 180 bytes encode to 240 base64 characters, no padding.
    public static let base64Count = 240
    public static let saltCount = 16
    static let certificateCount = 100

    public var intermediate: IntermediateCertificate
    public var salt: Data
    public var signature: Data

    public init(intermediate: IntermediateCertificate, salt: Data, signature: Data) {
        precondition(salt.count == Self.saltCount, "salt must be \(Self.saltCount) bytes")
        precondition(signature.count == Ed25519Sizes.signature, "signature must be 64 bytes")
        self.intermediate = intermediate
        self.salt = salt
        self.signature = signature
    }

    /// Parses the raw 180 bytes.
    public init(rawRepresentation raw: Data) throws(SignatureBlobError) {
        guard raw.count == Self.byteCount else { throw .wrongSize(raw.count) }
        let bytes = [UInt8](raw)
        let expiration = UInt32(bytes[32]) | UInt32(bytes[33]) << 8 | UInt32(bytes[34]) << 16 | UInt32(bytes[35]) << 24
        // Sizes are fixed by the slices, so the throwing initializer cannot fail here.
        intermediate = try! IntermediateCertificate(
            publicKey: Data(bytes[0..<32]), expirationDays: expiration, rootSignature: Data(bytes[36..<100])
        )
        salt = Data(bytes[100..<116])
        signature = Data(bytes[116..<180])
    }

    /// Parses an `X-Signature` header value: exactly 240 characters of standard base64.
    public init(base64 value: String) throws(SignatureBlobError) {
        guard value.utf8.count == Self.base64Count else { throw .wrongLength(value.utf8.count) }
        guard let raw = Data(base64Encoded: value) else { throw .notBase64 }
        try self.init(rawRepresentation: raw)
    }

    /// The first 100 bytes: the intermediate certificate as the blob carries it.
    var certificateBytes: Data { Self.certificateBytes(of: intermediate) }

    static func certificateBytes(of certificate: IntermediateCertificate) -> Data {
        var bytes = Data(capacity: certificateCount)
        bytes.append(certificate.publicKey)
        withUnsafeBytes(of: certificate.expirationDays.littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(certificate.rootSignature)
        return bytes
    }

    public var rawRepresentation: Data {
        var bytes = certificateBytes
        bytes.append(salt)
        bytes.append(signature)
        return bytes
    }

    /// The `X-Signature` header value.
    public var base64: String { rawRepresentation.base64EncodedString() }
}

/// Why an `X-Signature` value could not be parsed.
public enum SignatureBlobError: Error, Hashable, CustomStringConvertible {
    case wrongLength(Int)
    case notBase64
    case wrongSize(Int)

    public var description: String {
        switch self {
        case .wrongLength(let count): "signature must be \(SignatureBlob.base64Count) base64 characters, got \(count)"
        case .notBase64: "signature is not valid base64"
        case .wrongSize(let count): "signature must decode to \(SignatureBlob.byteCount) bytes, got \(count)"
        }
    }
}
