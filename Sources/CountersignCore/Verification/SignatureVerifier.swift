import Crypto
import Foundation

/// An answer as the client received it: the parts the signature covers plus the signature itself.
public struct ReceivedResponse: Sendable, Hashable {
    public var statusCode: Int
    /// The `X-Signature` header value, if any.
    public var signature: String?
    /// The `X-Request-Time` header value, if any.
    public var requestTime: String?
    /// The `X-ETag` header value, if any.
    public var etag: String?
    /// The `X-Verification-Policy` header value, if any.
    public var policy: String?
    /// The exact, uncompressed body bytes.
    public var body: Data

    public init(statusCode: Int, signature: String?, requestTime: String?, etag: String?, policy: String? = nil, body: Data) {
        self.statusCode = statusCode
        self.signature = signature
        self.requestTime = requestTime
        self.etag = etag
        self.policy = policy
        self.body = body
    }
}

/// The shape an answer's `X-ETag` must have.
public enum ETagFormat: Sendable, Hashable {
    /// Exactly 16 lowercase hexadecimal characters: what Countersign's server (and RevenueCat's)
    /// sends. A fixed length stops digits moving between the request time and the ETag.
    case fixedHex16
    /// Any value. Only for checking third-party captures (RevenueCat's own test vectors use
    /// `test-etag`); it gives up the protection described at ``fixedHex16``.
    case unchecked
}

/// What the body of an answer must parse as.
public enum BodyFormat: Sendable, Hashable {
    /// A JSON object: every Countersign endpoint answers with one.
    case jsonObject
    /// Any JSON value (RevenueCat's `/v1/health` answers `""`). A bare JSON number would let
    /// leading digits move into the request time, so prefer ``jsonObject``.
    case json
    /// No check: only for bodies that are not JSON at all.
    case unchecked
}

/// Checks signed answers on the client against pinned root keys.
///
/// Intermediates whose root signature has already been checked are cached, so a verification
/// costs one Ed25519 check of the message in the common case. The check order is: signature
/// present and well formed, the answer's own parts strictly shaped, intermediate issued by a
/// pinned root, message signature, the signed request time within the intermediate's life
/// (`intermediateExpired` otherwise), the verified-time floor within it (`intermediateExpired`),
/// then the device clock within it (`deviceClockOutsideValidity`). A verified answer's request
/// time therefore never lies past its intermediate's expiry, and neither does a floor raised to it.
public final class SignatureVerifier: Sendable {
    public struct Configuration: Sendable {
        /// The pinned root public keys; several allow root rotation without a broken app.
        public var rootKeys: [Curve25519.Signing.PublicKey]
        /// Seconds the device clock may run ahead of an intermediate's expiry. Default 0.
        public var clockSkewTolerance: TimeInterval = 0
        /// The ETag shape to insist on. Default ``ETagFormat/fixedHex16``.
        public var etagFormat: ETagFormat = .fixedHex16
        /// The device clock.
        public var now: @Sendable () -> Date = { Date() }
        /// The latest time the client knows to have passed because a verified answer was signed
        /// then (nil: none yet). An intermediate expired before it is `intermediateExpired`
        /// whatever the device clock says, so setting the clock back revives nothing.
        public var verifiedTimeFloor: @Sendable () -> Date? = { nil }

        public init(rootKeys: [Curve25519.Signing.PublicKey]) {
            self.rootKeys = rootKeys
        }

        /// Pins roots given as base64 of their 32 raw bytes (as `keys/root.pub` holds them).
        public init(rootKeysBase64: [String]) throws(KeyFormatError) {
            guard !rootKeysBase64.isEmpty else { throw KeyFormatError("pin at least one root public key") }
            rootKeys = try rootKeysBase64.map { key throws(KeyFormatError) in
                try Curve25519.Signing.PublicKey(base64: key, name: "root public key")
            }
        }
    }

    public let configuration: Configuration
    /// Intermediates already checked against a pinned root, by their 100 certificate bytes.
    private let trustedIntermediates = BoundedCache<Data, Curve25519.Signing.PublicKey>(capacity: 32)

    public init(configuration: Configuration) {
        precondition(!configuration.rootKeys.isEmpty, "a verifier needs at least one pinned root key")
        self.configuration = configuration
    }

    public convenience init(rootKeys: [Curve25519.Signing.PublicKey], now: @escaping @Sendable () -> Date = { Date() }) {
        var configuration = Configuration(rootKeys: rootKeys)
        configuration.now = now
        self.init(configuration: configuration)
    }

    /// Verifies one answer against the request parts the client itself sent.
    public func verify(
        request: SignedRequestParts,
        response: ReceivedResponse,
        bodyFormat: BodyFormat = .jsonObject
    ) -> VerificationOutcome {
        guard let header = response.signature else { return .failed(.missingSignature) }
        guard let blob = try? SignatureBlob(base64: header) else { return .failed(.malformedSignature) }
        if let nonce = request.nonce, nonce.count != SignedRequestParts.nonceCount { return .failed(.malformedNonce) }

        guard let requestTime = response.requestTime else { return .failed(.missingRequestTime) }
        guard let requestTimeMilliseconds = Self.parseRequestTime(requestTime) else { return .failed(.malformedRequestTime) }

        if response.statusCode == 304 {
            guard let etag = response.etag else { return .failed(.missingETag) }
            guard isWellFormed(etag: etag) else { return .failed(.malformedETag) }
            guard response.body.isEmpty else { return .failed(.malformedBody) }
        } else {
            if let etag = response.etag, !isWellFormed(etag: etag) { return .failed(.malformedETag) }
            guard Self.body(response.body, matches: bodyFormat) else { return .failed(.malformedBody) }
        }

        // A policy counts only when asked for; then it must be there, in its one spelling.
        var policy: String?
        if request.acceptsPolicy {
            guard let value = response.policy else { return .failed(.missingPolicy) }
            guard VerificationPolicy.Statement(header: value) != nil else { return .failed(.malformedPolicy) }
            policy = value
        }

        guard let intermediateKey = trustedKey(for: blob) else { return .failed(.untrustedRoot) }

        let message = SignedMessage.bytes(
            salt: blob.salt,
            request: request,
            response: SignedResponseParts(requestTime: requestTime, etag: response.etag, policy: policy, body: response.body)
        )
        guard intermediateKey.isValidSignature(blob.signature, for: message) else { return .failed(.payloadMismatch) }

        let certificate = blob.intermediate
        // The request time is authenticated now. An answer signed outside its intermediate's life
        // is one the server could never have made: a stolen intermediate used past its expiry
        // (and so a verified time that no genuine answer could ever follow).
        let signedAt = Date(timeIntervalSince1970: TimeInterval(requestTimeMilliseconds) / 1000)
        guard certificate.isValid(at: signedAt) else { return .failed(.intermediateExpired) }
        if let floor = configuration.verifiedTimeFloor(), !certificate.isValid(at: floor) {
            return .failed(.intermediateExpired)
        }
        if !certificate.isValid(at: configuration.now(), tolerance: configuration.clockSkewTolerance) {
            // Signed within the intermediate's life, so the device clock is what is off.
            return .failed(.deviceClockOutsideValidity)
        }
        return .verified
    }

    /// Checks only the intermediate part of a signature: issued by a pinned root and unexpired.
    public func verifyIntermediate(of blob: SignatureBlob) -> VerificationOutcome {
        guard trustedKey(for: blob) != nil else { return .failed(.untrustedRoot) }
        guard blob.intermediate.isValid(at: configuration.now(), tolerance: configuration.clockSkewTolerance) else {
            return .failed(.intermediateExpired)
        }
        return .verified
    }

    private func trustedKey(for blob: SignatureBlob) -> Curve25519.Signing.PublicKey? {
        let cacheKey = blob.certificateBytes
        if let key = trustedIntermediates[cacheKey] { return key }
        let certificate = blob.intermediate
        guard configuration.rootKeys.contains(where: certificate.isIssued(by:)),
            let key = try? Curve25519.Signing.PublicKey(rawRepresentation: certificate.publicKey)
        else { return nil }
        trustedIntermediates[cacheKey] = key
        return key
    }

    private func isWellFormed(etag: String) -> Bool {
        switch configuration.etagFormat {
        case .unchecked: true
        case .fixedHex16: WireHeader.isWellFormedETag(etag)
        }
    }

    /// Parses `X-Request-Time`: 1–16 ASCII digits, the first not zero. Returns milliseconds.
    public static func parseRequestTime(_ value: String) -> UInt64? {
        let digits = Array(value.utf8)
        guard (1...16).contains(digits.count), digits[0] != 0x30,
            digits.allSatisfy({ (0x30...0x39).contains($0) })
        else { return nil }
        return digits.reduce(0) { $0 * 10 + UInt64($1 - 0x30) }
    }

    static func body(_ body: Data, matches format: BodyFormat) -> Bool {
        switch format {
        case .unchecked: true
        case .json: JSONSyntax.isValid(body, topLevel: .anyValue)
        case .jsonObject: JSONSyntax.isValid(body, topLevel: .object)
        }
    }
}
