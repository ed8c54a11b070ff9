import CountersignCore
import Foundation

/// Why App Store signed data (a JWS with an `x5c` chain) was refused.
///
/// ``status`` is the `VerificationStatus` Apple's App Store Server Library gives for the same
/// input (a differential suite holds the two together), so logs and dashboards compare across
/// implementations; ``reason`` says which check failed, ``detail`` what exactly. Equality is on
/// the status.
public struct SignedDataError: Error, Hashable, CustomStringConvertible, Sendable {
    /// Apple's `VerificationStatus` names.
    public enum Status: String, Sendable, Hashable, CaseIterable {
        /// Malformed JWS, header or payload; wrong `alg`; untrusted chain; missing Apple OIDs;
        /// a certificate not valid at the signed date; a bad signature or JWT claim.
        case verificationFailure = "VERIFICATION_FAILURE"
        /// `bundleId` or (for Production) `appAppleId` is not this app's.
        case invalidAppIdentifier = "INVALID_APP_IDENTIFIER"
        /// One of the first two `x5c` entries is not a base64 DER certificate.
        case invalidCertificate = "INVALID_CERTIFICATE"
        /// `x5c` does not hold exactly three entries.
        case invalidChainLength = "INVALID_CHAIN_LENGTH"
        /// The environment is not the one this app accepts, or not one the chain's root may sign.
        case invalidEnvironment = "INVALID_ENVIRONMENT"
    }

    /// Which of our checks refused it: finer than the status, stable for logs and metrics. The
    /// reasons marked "stricter than Apple" refuse data Apple's library may accept, on purpose.
    public enum Reason: String, Sendable, Hashable {
        case malformedJWS = "malformed-jws"
        /// Stricter than Apple: a JWS segment with `=` padding.
        case paddedBase64URL = "padded-base64url"
        /// Stricter than Apple: a JSON object naming a key twice (header or payload).
        case duplicateKey = "duplicate-key"
        /// Stricter than Apple: JSON text that is not plain UTF-8 (a byte-order mark, UTF-16,
        /// invalid bytes, lone surrogate escapes).
        case textEncoding = "text-encoding"
        case malformedHeader = "malformed-header"
        /// A `crit`, `b64` or `kid` header field this verifier does not accept.
        case unsupportedHeader = "unsupported-header"
        case algorithm
        case missingChain = "missing-chain"
        case chainLength = "chain-length"
        case certificateEncoding = "certificate-encoding"
        case untrustedChain = "untrusted-chain"
        case signature
        case signedDate = "signed-date"
        /// Stricter than Apple: a signed date more than five minutes ahead of the clock.
        case futureSignedDate = "future-signed-date"
        /// `exp`, `nbf`, `iat`, `aud`, `sub` or `jti` refused, as a JWT library would.
        case jwtClaims = "jwt-claims"
        case malformedPayload = "malformed-payload"
        /// Stricter than Apple: a field with a JSON type other than Apple documents (Apple's
        /// model layer converts, so a number sent as a string passes there).
        case fieldType = "field-type"
        case bundleId = "bundle-id"
        case appAppleId = "app-apple-id"
        case environment
        case xcodeCertificate = "xcode-certificate"
    }

    public let status: Status
    public let reason: Reason
    public let detail: String

    public init(_ status: Status, _ reason: Reason, _ detail: String) {
        self.status = status
        self.reason = reason
        self.detail = detail
    }

    /// A value to compare a thrown error against (equality is on the status).
    public static func status(_ status: Status) -> SignedDataError {
        SignedDataError(status, .malformedJWS, "")
    }

    static func failure(_ reason: Reason, _ detail: String) -> SignedDataError {
        SignedDataError(.verificationFailure, reason, detail)
    }

    /// JSON that is not one object, with the reason that names why: a repeated key, text that is
    /// not plain UTF-8, or anything else malformed.
    static func malformedJSON(_ data: Data, _ problem: JSONSyntax.Problem, part: String) -> SignedDataError {
        if case .duplicateKey = problem { return .failure(.duplicateKey, "\(part): \(problem)") }
        let bytes = [UInt8](data)
        let loneSurrogate = String(decoding: bytes, as: UTF8.self).range(of: #"\\u[dD][89a-fA-F][0-9a-fA-F]{2}"#, options: .regularExpression) != nil
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) || bytes.contains(0) || String(validating: bytes, as: UTF8.self) == nil || loneSurrogate {
            return .failure(.textEncoding, "\(part) is not plain UTF-8 JSON text")
        }
        return .failure(part == "header" ? .malformedHeader : .malformedPayload, "\(part) is not one JSON object (\(problem))")
    }

    /// `STATUS (reason): detail`, the form the CLI prints and the server logs.
    public var description: String { "\(status.rawValue) (\(reason.rawValue)): \(detail)" }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.status == rhs.status }
    public func hash(into hasher: inout Hasher) { hasher.combine(status) }
}
