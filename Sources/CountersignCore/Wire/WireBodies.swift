import Foundation

// Request and answer bodies of the API besides CustomerInfo, defined once for the server, the
// SDK and the CLI.

/// `POST /v1/subscribers/identify` answers the new user's CustomerInfo plus whether the user
/// was created by this call.
public struct IdentifyResult: Codable, Sendable, Hashable {
    public var created: Bool

    public init(created: Bool) {
        self.created = created
    }
}

/// The answer of `POST /v1/test_store/purchases`: a transaction signed by the test store, to
/// post to `/v1/receipts`.
public struct TestPurchaseAnswer: Codable, Sendable, Hashable {
    public var signedTransaction: String
    public var transactionId: String
    public var productId: String

    public init(signedTransaction: String, transactionId: String, productId: String) {
        self.signedTransaction = signedTransaction
        self.transactionId = transactionId
        self.productId = productId
    }

    enum CodingKeys: String, CodingKey {
        case signedTransaction = "signed_transaction", transactionId = "transaction_id", productId = "product_id"
    }
}

/// The body of `POST /v1/diagnostics/verification_failures`: what the SDK reports of the
/// signature verification failures it saw, counted.
public struct VerificationFailureReport: Codable, Sendable, Hashable {
    public struct Failure: Codable, Sendable, Hashable {
        public var reason: String
        public var path: String
        public var mode: String
        public var sdkVersion: String?
        public var appUserId: String?
        public var count: Int?

        public init(reason: String, path: String, mode: String, sdkVersion: String? = nil, appUserId: String? = nil, count: Int? = nil) {
            self.reason = reason
            self.path = path
            self.mode = mode
            self.sdkVersion = sdkVersion
            self.appUserId = appUserId
            self.count = count
        }

        enum CodingKeys: String, CodingKey {
            case reason, path, mode, sdkVersion = "sdk_version", appUserId = "app_user_id", count
        }
    }

    public var failures: [Failure]

    public init(failures: [Failure]) {
        self.failures = failures
    }
}
