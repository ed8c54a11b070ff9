import Crypto
import Foundation

/// Where the signer's per-response salt comes from. Injected so tests can reproduce signatures.
public struct SaltSource: Sendable {
    private let make: @Sendable () -> Data

    public init(_ make: @escaping @Sendable () -> Data) {
        self.make = make
    }

    /// 16 bytes from the system's cryptographically secure generator, drawn in batches so a
    /// response does not pay for a call into the generator.
    public static let system: SaltSource = {
        let pool = RandomPool(batchSize: 4096)
        return SaltSource { pool.take(SignatureBlob.saltCount) }
    }()

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
        return Base64.encode(raw)
    }

    /// The signature blob for one answer, parsed back from ``signature(request:response:)``.
    public func blob(request: SignedRequestParts, response: SignedResponseParts) throws -> SignatureBlob {
        try SignatureBlob(base64: signature(request: request, response: response))
    }
}

/// Cryptographically secure random bytes, fetched from the generator a batch at a time.
private final class RandomPool: @unchecked Sendable {
    private let lock = NSLock()
    private let batchSize: Int
    private var buffer: [UInt8] = []
    private var offset = 0

    init(batchSize: Int) {
        self.batchSize = batchSize
    }

    func take(_ count: Int) -> Data {
        lock.withLock {
            if buffer.count - offset < count {
                buffer = SymmetricKey(size: SymmetricKeySize(bitCount: batchSize * 8)).withUnsafeBytes { Array($0) }
                offset = 0
            }
            defer {
                // Wipe what was handed out so the pool never holds a salt after use.
                for index in offset..<offset + count { buffer[index] = 0 }
                offset += count
            }
            return Data(buffer[offset..<offset + count])
        }
    }
}
