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
        var message = [UInt8]()
        message.reserveCapacity(
            salt.count + request.authValue.utf8.count + (request.nonce?.count ?? 0) + request.path.utf8.count
                + (request.postParamsHash?.utf8.count ?? 0) + (request.headersHash?.utf8.count ?? 0)
                + response.requestTime.utf8.count + (response.etag?.utf8.count ?? 0) + response.body.count
        )
        message.append(contentsOf: salt)
        message.append(contentsOf: request.authValue.utf8)
        if let nonce = request.nonce { message.append(contentsOf: nonce) }
        message.append(contentsOf: request.path.utf8)
        if let hash = request.postParamsHash { message.append(contentsOf: hash.utf8) }
        if let hash = request.headersHash { message.append(contentsOf: hash.utf8) }
        message.append(contentsOf: response.requestTime.utf8)
        if let etag = response.etag { message.append(contentsOf: etag.utf8) }
        message.append(contentsOf: response.body)
        return message
    }
}
