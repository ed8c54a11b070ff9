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

/// Stable codes for every error the SDK throws, named and numbered as RevenueCat's `ErrorCode`
/// where one fits (`signatureVerificationFailed` and `noCachedCustomerInfo` are ours). Match
/// them as in RevenueCat: `catch ErrorCode.receiptAlreadyInUseError { ... }`.
public enum ErrorCode: Int, Error, Sendable, CaseIterable {
    case unknownError = 0
    case purchaseCancelledError = 1
    case storeProblemError = 2
    case purchaseNotAllowedError = 3
    case purchaseInvalidError = 4
    case productNotAvailableForPurchaseError = 5
    case productAlreadyPurchasedError = 6
    case receiptAlreadyInUseError = 7
    case invalidReceiptError = 8
    case missingReceiptFileError = 9
    case networkError = 10
    case invalidCredentialsError = 11
    case unexpectedBackendResponseError = 12
    case invalidAppUserIdError = 14
    case operationAlreadyInProgressForProductError = 15
    case unknownBackendError = 16
    case paymentPendingError = 20
    case configurationError = 23
    case offlineConnectionError = 35
    case signatureVerificationFailed = 37
    /// `fromCacheOnly` with nothing cached (RevenueCat has no such policy).
    case noCachedCustomerInfo = 1001
}

extension PurchasesError {
    /// The stable code of this error. Server refusals map by the server's own code: a purchase
    /// owned by or bound to another user is `receiptAlreadyInUseError`, store data the server
    /// refused is `invalidReceiptError`, a refused API key `invalidCredentialsError`, a refused
    /// app user id `invalidAppUserIdError`, an unknown product `productNotAvailableForPurchaseError`.
    public var errorCode: ErrorCode {
        switch self {
        case .signatureVerificationFailed: return .signatureVerificationFailed
        case .offline: return .offlineConnectionError
        case .malformedAnswer: return .unexpectedBackendResponseError
        case .noCachedCustomerInfo: return .noCachedCustomerInfo
        case .purchaseNotCompleted: return .storeProblemError
        case .configuration: return .configurationError
        case .server(let status, let code, _):
            switch code.flatMap(APIErrorCode.init(rawValue:)) {
            case .purchaseOwnedByAnotherUser?, .purchaseBoundToAnotherUser?: return .receiptAlreadyInUseError
            case .invalidStoreSignature?, .wrongApp?, .wrongEnvironment?: return .invalidReceiptError
            case .unknownProduct?, .testStoreNotEnabled?: return .productNotAvailableForPurchaseError
            case .missingAPIKey?, .invalidAPIKey?, .wrongKeyKind?: return .invalidCredentialsError
            case .invalidAppUserId?, .reservedAppUserId?: return .invalidAppUserIdError
            case .some: return .unknownBackendError
            case nil: return status >= 500 ? .unknownBackendError : .unexpectedBackendResponseError
            }
        }
    }
}

/// `catch ErrorCode.x` matches any SDK error whose ``PurchasesError/errorCode`` is `x`.
public func ~= (pattern: ErrorCode, error: any Error) -> Bool {
    if let code = error as? ErrorCode { return code == pattern }
    return (error as? PurchasesError)?.errorCode == pattern
}
