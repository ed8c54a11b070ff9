import CountersignCore
import Foundation

/// Errors the SDK throws.
public enum PurchasesError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Enforced mode: an answer failed verification; nothing from it was used.
    case signatureVerificationFailed(path: String, statusCode: Int, reason: VerificationFailure)
    /// The server refused the request (`code` is its stable error code).
    case server(statusCode: Int, code: Int?, message: String)
    /// The server could not be reached or answered 5xx, and nothing cached or computed on the
    /// device could stand in.
    case offline(String)
    /// The answer was not the JSON the endpoint promises.
    case malformedAnswer(path: String)
    /// `fromCacheOnly` with nothing cached.
    case noCachedCustomerInfo
    /// The store did not complete the purchase (cancelled, pending, failed).
    case purchaseNotCompleted(String)
    /// The configuration cannot be used.
    case configuration(String)

    public var description: String {
        switch self {
        case .signatureVerificationFailed(let path, let status, let reason):
            "signature verification failed for \(path) (\(status)): \(reason)"
        case .server(let status, let code, let message):
            "server refused (\(status)\(code.map { ", code \($0)" } ?? "")): \(message)"
        case .offline(let detail): "server unavailable: \(detail)"
        case .malformedAnswer(let path): "malformed answer from \(path)"
        case .noCachedCustomerInfo: "no cached CustomerInfo"
        case .purchaseNotCompleted(let detail): "purchase not completed: \(detail)"
        case .configuration(let detail): "configuration: \(detail)"
        }
    }

    /// The verification failure behind this error, if any.
    public var verificationFailure: VerificationFailure? {
        if case .signatureVerificationFailed(_, _, let reason) = self { return reason }
        return nil
    }
}
