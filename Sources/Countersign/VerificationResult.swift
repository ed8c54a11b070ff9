import CountersignCore

/// How far the SDK vouches for data (RevenueCat's four names).
public enum VerificationResult: String, Sendable, Codable, Hashable {
    /// Verification is disabled (or the data was obtained while it was).
    case notRequested
    /// The server's signature over this exact answer, for this request, verified.
    case verified
    /// Verification failed: the data may be tampered with (see the failure reason).
    case failed
    /// Computed on the device from the store's verified transactions and the cached, signed
    /// product→entitlement mapping, while the server was unreachable.
    case verifiedOnDevice

    /// True for `verified` and `verifiedOnDevice`.
    public var isVerified: Bool { self == .verified || self == .verifiedOnDevice }
}

/// The "entitlement gate": what an app does with an entitlement, given how it was verified.
public enum EntitlementGate: Sendable, Hashable {
    /// Grant access.
    case grant
    /// Grant for now, and fetch again soon (the device could not check, e.g. a skewed clock).
    case grantAndRecheck
    /// Deny: the answer was tampered with.
    case deny

    /// Deny on tampering, grant and re-check when the device cannot verify, grant when verified
    /// or not requested.
    public static func decide(verification: VerificationResult, failure: VerificationFailure?) -> EntitlementGate {
        switch verification {
        case .verified, .verifiedOnDevice, .notRequested: return .grant
        case .failed: return failure?.category == .cannotVerify ? .grantAndRecheck : .deny
        }
    }
}
