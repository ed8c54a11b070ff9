/// Names of the headers of the signed exchange, defined once for the server, the SDK, the proxy
/// and the captured-traffic reader (HTTP header names are case-insensitive; these are the
/// spellings we send).
public enum WireHeader {
    /// Base64 of the 180-byte signature blob (answers).
    public static let signature = "X-Signature"
    /// Milliseconds since 1970 at which the server signed (answers).
    public static let requestTime = "X-Request-Time"
    /// The ETag of a cacheable answer, and the one a client sends back to ask for a 304.
    public static let etag = "X-ETag"
    /// Base64 of 12 random bytes, fresh per request.
    public static let nonce = "X-Nonce"
    /// `k1,k2:sha256:<hex>` over the named body fields.
    public static let postParamsHash = "X-Post-Params-Hash"
    /// `X-Is-Sandbox:sha256:<hex>` over the sandbox header.
    public static let headersHash = "X-Headers-Hash"
    /// `true` when the app runs against a sandbox store.
    public static let isSandbox = "X-Is-Sandbox"
    /// A request id, echoed in the answer and the server's log lines.
    public static let requestId = "X-Request-Id"
    /// `1` on a request whose answer should state the app's verification policy (sent by the SDK
    /// in a verifying mode).
    public static let acceptPolicy = "X-Accept-Verification-Policy"
    /// The verification policy of the answer (``VerificationPolicy/Statement``), signed.
    public static let policy = "X-Verification-Policy"

    /// Whether an ETag has the form the server sends: 16 lowercase hex digits (the first 8 bytes
    /// of SHA-256 of the body).
    public static func isWellFormedETag(_ value: String) -> Bool {
        isLowercaseHex16(value)
    }

    /// Exactly 16 lowercase hexadecimal characters: an ETag's shape, and a policy seed's.
    public static func isLowercaseHex16(_ value: some StringProtocol) -> Bool {
        value.utf8.count == 16 && value.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
}
