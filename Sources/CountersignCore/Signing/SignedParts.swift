import Foundation

/// The request side of a signed exchange: what the client sent and the server echoes into the
/// signature. A verifier always uses the values it sent itself, never values read from the answer.
public struct SignedRequestParts: Sendable, Hashable {
    /// The bearer value of `Authorization: Bearer <key>`; empty for unauthenticated endpoints.
    public var authValue: String
    /// The 12 raw bytes behind `X-Nonce`, or nil when the endpoint takes no nonce.
    public var nonce: Data?
    /// The request path exactly as sent: percent-escaped, without the query.
    public var path: String
    /// The literal `X-Post-Params-Hash` header value, if the request had one.
    public var postParamsHash: String?
    /// The literal `X-Headers-Hash` header value, if the request had one.
    public var headersHash: String?
    /// Whether the request asked for the verification policy (`X-Accept-Verification-Policy: 1`):
    /// then the answer must carry one, inside the signature.
    public var acceptsPolicy: Bool

    public static let nonceCount = 12

    public init(
        authValue: String = "", nonce: Data? = nil, path: String, postParamsHash: String? = nil, headersHash: String? = nil,
        acceptsPolicy: Bool = false
    ) {
        self.authValue = authValue
        self.nonce = nonce
        self.path = path
        self.postParamsHash = postParamsHash
        self.headersHash = headersHash
        self.acceptsPolicy = acceptsPolicy
    }

    /// A fresh random 12-byte nonce.
    public static func makeNonce() -> Data {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<nonceCount).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }

    /// The nonce an `X-Nonce` header value carries: 12 bytes in exactly 16 base64 characters, its
    /// one spelling (Foundation's decoder also takes padding after them, which Apple's refuses);
    /// nil for anything else.
    public static func nonce(header value: String) -> Data? {
        guard value.utf8.count == 16, let raw = Data(base64Encoded: value), raw.count == nonceCount else { return nil }
        return raw
    }
}

/// The response side of a signed exchange, as the server produced it.
public struct SignedResponseParts: Sendable, Hashable {
    /// The `X-Request-Time` header value: decimal milliseconds since 1970.
    public var requestTime: String
    /// The `X-ETag` header value, if the answer has one.
    public var etag: String?
    /// The `X-Verification-Policy` header value, when the client asked for one.
    public var policy: String?
    /// The exact (uncompressed) response bytes; empty for a 304.
    public var body: Data

    public init(requestTime: String, etag: String? = nil, policy: String? = nil, body: Data) {
        self.requestTime = requestTime
        self.etag = etag
        self.policy = policy
        self.body = body
    }
}

/// The message an intermediate key signs:
/// `salt ‖ authValue ‖ nonce ‖ path ‖ postParamsHash ‖ headersHash ‖ requestTime ‖ etag ‖ policy ‖ body`.
///
/// There are no separators and absent parts add no bytes, exactly as RevenueCat's format; the
/// verifier's strict parsing of the answer's parts makes up for the missing length prefixes.
/// `policy` is Countersign's own part, present only when the client asked for a verification
/// policy (`X-Accept-Verification-Policy`): the `X-Verification-Policy` value followed by a line
/// feed, a byte no header value holds, so it cannot trade bytes with the body after it. An
/// answer to a request that did not ask is RevenueCat's message byte for byte.
public enum SignedMessage {
    public static func bytes(salt: Data, request: SignedRequestParts, response: SignedResponseParts) -> [UInt8] {
        var authValue = request.authValue
        var path = request.path
        var postParamsHash = request.postParamsHash
        var headersHash = request.headersHash
        var requestTime = response.requestTime
        var etag = response.etag
        var policy = response.policy
        let count =
            salt.count + authValue.utf8.count + (request.nonce?.count ?? 0) + path.utf8.count
            + (postParamsHash?.utf8.count ?? 0) + (headersHash?.utf8.count ?? 0)
            + requestTime.utf8.count + (etag?.utf8.count ?? 0) + (policy.map { $0.utf8.count + 1 } ?? 0) + response.body.count
        // Copied part by part into one buffer: the signer builds this for every answer.
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var offset = 0
            func copy(_ bytes: some ContiguousBytes) {
                bytes.withUnsafeBytes { source in
                    UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(buffer)[offset..<offset + source.count])
                        .copyMemory(from: source)
                    offset += source.count
                }
            }
            func copy(_ string: inout String) {
                string.withUTF8 { copy(UnsafeRawBufferPointer($0)) }
            }
            copy(salt)
            copy(&authValue)
            if let nonce = request.nonce { copy(nonce) }
            copy(&path)
            if postParamsHash != nil { copy(&postParamsHash!) }
            if headersHash != nil { copy(&headersHash!) }
            copy(&requestTime)
            if etag != nil { copy(&etag!) }
            if policy != nil {
                copy(&policy!)
                copy([UInt8(ascii: "\n")])
            }
            copy(response.body)
            initialized = offset
        }
    }
}
