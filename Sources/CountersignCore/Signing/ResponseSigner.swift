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
        var generator = SystemRandomNumberGenerator()
        var salt = Data(count: SignatureBlob.saltCount)
        salt.withUnsafeMutableBytes { buffer in
            // Two 64-bit draws fill the 16 bytes.
            buffer.storeBytes(of: generator.next(), toByteOffset: 0, as: UInt64.self)
            buffer.storeBytes(of: generator.next(), toByteOffset: 8, as: UInt64.self)
        }
        return salt
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

    public init(key: IntermediateSigningKey, saltSource: SaltSource = .system) {
        self.key = key
        self.saltSource = saltSource
    }

    /// The `X-Signature` header value for one answer.
    public func signature(request: SignedRequestParts, response: SignedResponseParts) throws -> String {
        try blob(request: request, response: response).base64
    }

    /// The signature blob for one answer.
    public func blob(request: SignedRequestParts, response: SignedResponseParts) throws -> SignatureBlob {
        let salt = saltSource.next()
        let message = SignedMessage.bytes(salt: salt, request: request, response: response)
        return SignatureBlob(intermediate: key.certificate, salt: salt, signature: try key.privateKey.signature(for: message))
    }
}
