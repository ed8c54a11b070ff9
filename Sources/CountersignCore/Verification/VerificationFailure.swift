/// Why a signed answer was not verified. Raw values are stable: they appear in CLI output,
/// telemetry and error payloads.
public enum VerificationFailure: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// A 2xx/304 answer of a signature-required endpoint had no `X-Signature`.
    case missingSignature
    /// `X-Signature` was not 240 base64 characters decoding to 180 bytes.
    case malformedSignature
    /// The intermediate key was not signed by any pinned root (or its expiration was changed).
    case untrustedRoot
    /// The intermediate key expired before the answer's own request time: the server would never
    /// sign like that, so the answer is replayed or forged.
    case intermediateExpired
    /// The device clock is past the intermediate's expiry although the answer's signed request
    /// time is inside its validity: most likely a skewed device clock.
    case deviceClockOutsideValidity
    /// The intermediate's signature does not cover the message rebuilt from what was sent and
    /// received (body, path, nonce, API key, request time, ETag or hash headers differ).
    case payloadMismatch
    case missingRequestTime
    /// `X-Request-Time` is not 1–16 ASCII digits without a leading zero.
    case malformedRequestTime
    /// `X-ETag` does not have the server's fixed shape (16 lowercase hexadecimal characters).
    case malformedETag
    /// A 304 answer had no `X-ETag`, so nothing vouches for the cached body.
    case missingETag
    /// The body is not the JSON the endpoint promises (or a 304 carried a body).
    case malformedBody
    /// The nonce the client sent is not 12 bytes (a client bug, never accepted).
    case malformedNonce
    /// The answer verified but is a CustomerInfo for another user than the one the SDK asked
    /// for (or logged in as): a signed answer moved from one request to another.
    case appUserMismatch
    /// The client asked for the verification policy and the answer carries none: stripped.
    case missingPolicy
    /// `X-Verification-Policy` is not in its one spelling.
    case malformedPolicy

    public var description: String { rawValue }

    /// The two groups an app can act on differently.
    public enum Category: String, Sendable {
        /// The answer was altered, stripped, replayed or forged: deny.
        case tampering
        /// The answer may be honest but cannot be checked on this device now: grant, re-check later.
        case cannotVerify
    }

    public var category: Category {
        self == .deviceClockOutsideValidity ? .cannotVerify : .tampering
    }
}

/// The result of checking one signed answer.
public enum VerificationOutcome: Sendable, Hashable, CustomStringConvertible {
    case verified
    case failed(VerificationFailure)

    public var isVerified: Bool { self == .verified }

    public var description: String {
        switch self {
        case .verified: "verified"
        case .failed(let reason): "failed: \(reason)"
        }
    }
}
