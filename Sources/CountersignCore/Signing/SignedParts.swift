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

    public static let nonceCount = 12

    public init(authValue: String = "", nonce: Data? = nil, path: String, postParamsHash: String? = nil, headersHash: String? = nil) {
        self.authValue = authValue
        self.nonce = nonce
        self.path = path
        self.postParamsHash = postParamsHash
        self.headersHash = headersHash
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
    /// The exact (uncompressed) response bytes; empty for a 304.
    public var body: Data

    public init(requestTime: String, etag: String? = nil, body: Data) {
        self.requestTime = requestTime
        self.etag = etag
        self.body = body
    }
}

/// The message an intermediate key signs:
/// `salt ‖ authValue ‖ nonce ‖ path ‖ postParamsHash ‖ headersHash ‖ requestTime ‖ etag ‖ body`.
///
/// There are no separators and absent parts add no bytes, exactly as RevenueCat's format; the
/// verifier's strict parsing of the answer's parts makes up for the missing length prefixes.
public enum SignedMessage {
    public static func bytes(salt: Data, request: SignedRequestParts, response: SignedResponseParts) -> [UInt8] {
        var authValue = request.authValue
        var path = request.path
        var postParamsHash = request.postParamsHash
        var headersHash = request.headersHash
        var requestTime = response.requestTime
        var etag = response.etag
        let count =
            salt.count + authValue.utf8.count + (request.nonce?.count ?? 0) + path.utf8.count
            + (postParamsHash?.utf8.count ?? 0) + (headersHash?.utf8.count ?? 0)
            + requestTime.utf8.count + (etag?.utf8.count ?? 0) + response.body.count
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
            copy(response.body)
            initialized = offset
        }
    }
}
