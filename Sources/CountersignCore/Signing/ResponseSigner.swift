import Crypto
import Foundation

/// Where the signer's per-response salt comes from. Injected so tests can reproduce signatures.
public struct SaltSource: Sendable {
    private let make: @Sendable () -> Data

    public init(_ make: @escaping @Sendable () -> Data) {
        self.make = make
    }

    /// 16 bytes from the system's cryptographically secure generator.
    public static let system = SaltSource {
        // BoringSSL's user-space CSPRNG: one call, no system call per response.
        SymmetricKey(size: .bits128).withUnsafeBytes { Data($0) }
    }

    /// Always the same salt: for tests and known-answer vectors only.
    public static func fixed(_ salt: Data) -> SaltSource {
        precondition(salt.count == SignatureBlob.saltCount, "salt must be \(SignatureBlob.saltCount) bytes")
        return SaltSource { salt }
    }

    func next() -> Data {
        let salt = make()
        precondition(salt.count == SignatureBlob.saltCount, "salt source returned \(salt.count) bytes")
        return salt
    }
}

/// Signs responses on the server with an intermediate key.
public struct ResponseSigner: Sendable {
    public let key: IntermediateSigningKey
    public let saltSource: SaltSource
    /// The blob's first 100 bytes, the same for every answer this key signs.
    private let certificateBytes: [UInt8]

    public init(key: IntermediateSigningKey, saltSource: SaltSource = .system) {
        self.key = key
        self.saltSource = saltSource
        certificateBytes = [UInt8](SignatureBlob.certificateBytes(of: key.certificate))
    }

    /// The `X-Signature` header value for one answer.
    public func signature(request: SignedRequestParts, response: SignedResponseParts) throws -> String {
        let salt = saltSource.next()
        let message = SignedMessage.bytes(salt: salt, request: request, response: response)
        var raw = certificateBytes
        raw.reserveCapacity(SignatureBlob.byteCount)
        raw.append(contentsOf: salt)
        raw.append(contentsOf: try key.privateKey.signature(for: message))
        return Data(raw).base64EncodedString()
    }

    /// The signature blob for one answer, parsed back from ``signature(request:response:)``.
    public func blob(request: SignedRequestParts, response: SignedResponseParts) throws -> SignatureBlob {
        try SignatureBlob(base64: signature(request: request, response: response))
    }
}
