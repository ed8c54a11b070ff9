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
    /// The store did not complete the purchase (it failed).
    case purchaseNotCompleted(String)
    /// The customer cancelled the purchase; nothing was bought, posted or granted.
    case purchaseCancelled(productId: String)
    /// The purchase waits for approval (Ask to Buy) or a payment confirmation; nothing is
    /// granted now, and the transaction arrives later through the store.
    case paymentPending(productId: String)
    /// The configuration cannot be used.
    case configuration(String)
    /// A purchase of this product is already under way (RevenueCat's
    /// `operationAlreadyInProgressForProductError`): the second is refused before the store is asked.
    case operationAlreadyInProgress(productId: String)
    /// The store refused or failed, with the code RevenueCat gives the store's error
    /// (``StoreFailure/errorCode``).
    case store(StoreFailure, detail: String)

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
        case .purchaseCancelled(let productId): "purchase of \(productId) cancelled by the customer"
        case .paymentPending(let productId): "purchase of \(productId) is pending approval or payment"
        case .configuration(let detail): "configuration: \(detail)"
        case .operationAlreadyInProgress(let productId): "a purchase of \(productId) is already in progress"
        case .store(let failure, let detail): "the store failed (\(failure)): \(detail)"
        }
    }

    /// The verification failure behind this error, if any.
    public var verificationFailure: VerificationFailure? {
        if case .signatureVerificationFailed(_, _, let reason) = self { return reason }
        return nil
    }
}

/// Stable codes for every error the SDK throws, named and numbered as RevenueCat's `ErrorCode`
/// where one fits (`noCachedCustomerInfo` is ours). Match them as in RevenueCat's documentation:
/// `catch ErrorCode.receiptAlreadyInUseError { ... }`, or `switch error.errorCode`.
///
/// RevenueCat's is an enum that Apple platforms bridge from `NSError`; a Swift enum in a
/// `catch` clause matches only errors of exactly its own type, on Linux too. This is a struct
/// with a constant per code, as Foundation's `CocoaError` is, so `catch ErrorCode.x` is matched
/// by ``~=(_:_:)`` against any ``PurchasesError`` carrying that code.
public struct ErrorCode: RawRepresentable, Error, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int
    /// RevenueCat's name of the code.
    public let name: String

    private init(_ rawValue: Int, _ name: String) {
        self.rawValue = rawValue
        self.name = name
    }

    public init?(rawValue: Int) {
        guard let code = Self.allCases.first(where: { $0.rawValue == rawValue }) else { return nil }
        self = code
    }

    public var description: String { name }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.rawValue == rhs.rawValue }
    public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }

    public static let unknownError = Self(0, "unknownError")
    public static let purchaseCancelledError = Self(1, "purchaseCancelledError")
    public static let storeProblemError = Self(2, "storeProblemError")
    public static let purchaseNotAllowedError = Self(3, "purchaseNotAllowedError")
    public static let purchaseInvalidError = Self(4, "purchaseInvalidError")
    public static let productNotAvailableForPurchaseError = Self(5, "productNotAvailableForPurchaseError")
    public static let productAlreadyPurchasedError = Self(6, "productAlreadyPurchasedError")
    public static let receiptAlreadyInUseError = Self(7, "receiptAlreadyInUseError")
    public static let invalidReceiptError = Self(8, "invalidReceiptError")
    public static let missingReceiptFileError = Self(9, "missingReceiptFileError")
    public static let networkError = Self(10, "networkError")
    public static let invalidCredentialsError = Self(11, "invalidCredentialsError")
    public static let unexpectedBackendResponseError = Self(12, "unexpectedBackendResponseError")
    public static let invalidAppUserIdError = Self(14, "invalidAppUserIdError")
    public static let operationAlreadyInProgressForProductError = Self(15, "operationAlreadyInProgressForProductError")
    public static let unknownBackendError = Self(16, "unknownBackendError")
    public static let ineligibleError = Self(18, "ineligibleError")
    public static let paymentPendingError = Self(20, "paymentPendingError")
    public static let invalidSubscriberAttributesError = Self(21, "invalidSubscriberAttributesError")
    public static let configurationError = Self(23, "configurationError")
    public static let invalidPromotionalOfferError = Self(34, "invalidPromotionalOfferError")
    public static let offlineConnectionError = Self(35, "offlineConnectionError")
    public static let signatureVerificationFailed = Self(37, "signatureVerificationFailed")
    public static let invalidWebPurchaseToken = Self(39, "invalidWebPurchaseToken")
    public static let purchaseBelongsToOtherUser = Self(40, "purchaseBelongsToOtherUser")
    public static let expiredWebPurchaseToken = Self(41, "expiredWebPurchaseToken")
    /// `fromCacheOnly` with nothing cached (RevenueCat has no cache-only policy).
    public static let noCachedCustomerInfo = Self(1001, "noCachedCustomerInfo")

    public static let allCases: [ErrorCode] = [
        .unknownError, .purchaseCancelledError, .storeProblemError, .purchaseNotAllowedError, .purchaseInvalidError,
        .productNotAvailableForPurchaseError, .productAlreadyPurchasedError, .receiptAlreadyInUseError, .invalidReceiptError,
        .missingReceiptFileError, .networkError, .invalidCredentialsError, .unexpectedBackendResponseError, .invalidAppUserIdError,
        .operationAlreadyInProgressForProductError, .unknownBackendError, .ineligibleError, .paymentPendingError,
        .invalidSubscriberAttributesError, .configurationError, .invalidPromotionalOfferError,
        .offlineConnectionError, .signatureVerificationFailed, .invalidWebPurchaseToken, .purchaseBelongsToOtherUser,
        .expiredWebPurchaseToken, .noCachedCustomerInfo,
    ]
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
        case .purchaseCancelled: return .purchaseCancelledError
        case .paymentPending: return .paymentPendingError
        case .configuration: return .configurationError
        case .operationAlreadyInProgress: return .operationAlreadyInProgressForProductError
        case .store(let failure, _): return failure.errorCode
        case .server(let status, let code, _):
            switch code.flatMap(APIErrorCode.init(rawValue:)) {
            case .purchaseOwnedByAnotherUser?, .purchaseBoundToAnotherUser?: return .receiptAlreadyInUseError
            case .invalidStoreSignature?, .wrongApp?, .wrongEnvironment?, .legacyReceiptsDisabled?: return .invalidReceiptError
            case .unknownProduct?, .testStoreNotEnabled?: return .productNotAvailableForPurchaseError
            case .missingAPIKey?, .invalidAPIKey?, .wrongKeyKind?: return .invalidCredentialsError
            case .invalidAppUserId?, .reservedAppUserId?: return .invalidAppUserIdError
            case .invalidSubscriberAttributes?: return .invalidSubscriberAttributesError
            case .invalidWebRedemptionToken?: return .invalidWebPurchaseToken
            case .purchaseBelongsToOtherUser?: return .purchaseBelongsToOtherUser
            case .expiredWebRedemptionToken?: return .expiredWebPurchaseToken
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

/// The ways StoreKit 2 fails a purchase (its `StoreKitError` and `Product.PurchaseError`
/// cases), named so the table from them to RevenueCat's codes is the same on every platform.
public enum StoreFailure: String, Sendable, Hashable {
    // StoreKitError
    case userCancelled, networkError, systemError, notAvailableInStorefront, notEntitled, unknown, unsupported
    // Product.PurchaseError
    case invalidQuantity, productUnavailable, purchaseNotAllowed, ineligibleForOffer
    case invalidOfferIdentifier, invalidOfferPrice, invalidOfferSignature, missingOfferParameters

    /// RevenueCat's code for the failure (its `StoreKitError+Extensions.swift`).
    public var errorCode: ErrorCode {
        switch self {
        case .userCancelled: .purchaseCancelledError
        case .networkError: .networkError
        case .systemError, .notEntitled, .unknown, .invalidQuantity: .storeProblemError
        case .notAvailableInStorefront, .productUnavailable: .productNotAvailableForPurchaseError
        case .unsupported: .unknownError
        case .purchaseNotAllowed: .purchaseNotAllowedError
        case .ineligibleForOffer: .ineligibleError
        case .invalidOfferIdentifier, .invalidOfferPrice, .invalidOfferSignature, .missingOfferParameters: .invalidPromotionalOfferError
        }
    }

    /// The SDK's error for the failure: a cancel is ``PurchasesError/purchaseCancelled(productId:)``
    /// (so `userCancelled` is true in a completion), anything else ``PurchasesError/store(_:detail:)``.
    public func error(productId: String, detail: String) -> PurchasesError {
        self == .userCancelled ? .purchaseCancelled(productId: productId) : .store(self, detail: detail)
    }
}
