import CountersignAppStore
import Foundation

/// `JWSTransaction` answers: Get Transaction Info.
public struct TransactionInfoResponse: Codable, Sendable, Hashable {
    public var signedTransactionInfo: String

    public init(signedTransactionInfo: String) {
        self.signedTransactionInfo = signedTransactionInfo
    }
}

/// One page of Get Transaction History (v2).
public struct HistoryResponse: Codable, Sendable, Hashable {
    public var revision: String?
    public var hasMore: Bool
    public var bundleId: String?
    public var appAppleId: Int64?
    public var environment: AppStoreEnvironment?
    public var signedTransactions: [String]

    public init(revision: String?, hasMore: Bool, bundleId: String?, environment: AppStoreEnvironment?, signedTransactions: [String]) {
        self.revision = revision
        self.hasMore = hasMore
        self.bundleId = bundleId
        self.environment = environment
        self.signedTransactions = signedTransactions
    }
}

/// Get All Subscription Statuses.
public struct StatusResponse: Codable, Sendable, Hashable {
    public struct SubscriptionGroup: Codable, Sendable, Hashable {
        public var subscriptionGroupIdentifier: String?
        public var lastTransactions: [LastTransaction]

        public init(subscriptionGroupIdentifier: String?, lastTransactions: [LastTransaction]) {
            self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
            self.lastTransactions = lastTransactions
        }
    }

    public struct LastTransaction: Codable, Sendable, Hashable {
        /// 1 active, 2 expired, 3 billing retry, 4 billing grace period, 5 revoked.
        public var status: Int?
        public var originalTransactionId: String?
        public var signedTransactionInfo: String?
        public var signedRenewalInfo: String?

        public init(status: Int?, originalTransactionId: String?, signedTransactionInfo: String?, signedRenewalInfo: String?) {
            self.status = status
            self.originalTransactionId = originalTransactionId
            self.signedTransactionInfo = signedTransactionInfo
            self.signedRenewalInfo = signedRenewalInfo
        }
    }

    public var environment: AppStoreEnvironment?
    public var bundleId: String?
    public var appAppleId: Int64?
    public var data: [SubscriptionGroup]

    public init(environment: AppStoreEnvironment?, bundleId: String?, data: [SubscriptionGroup]) {
        self.environment = environment
        self.bundleId = bundleId
        self.data = data
    }
}

/// Apple's error body: `{"errorCode": 4040010, "errorMessage": "Transaction id not found."}`.
public struct APIErrorBody: Codable, Sendable, Hashable {
    public var errorCode: Int?
    public var errorMessage: String?

    public init(errorCode: Int?, errorMessage: String?) {
        self.errorCode = errorCode
        self.errorMessage = errorMessage
    }
}

/// The body of Send Consumption Information (Apple's `ConsumptionRequest`): what the app knows
/// of a purchase whose refund a customer asked for.
public struct ConsumptionRequest: Codable, Sendable, Hashable {
    /// Apple refuses any value but true: the customer consented to sharing this.
    public var customerConsented: Bool
    /// `DELIVERED`, `UNDELIVERED_QUALITY_ISSUE`, `UNDELIVERED_WRONG_ITEM`,
    /// `UNDELIVERED_SERVER_OUTAGE` or `UNDELIVERED_OTHER`.
    public var deliveryStatus: String
    public var sampleContentProvided: Bool
    /// Thousandths of a percent consumed (0...100000); never for auto-renewable subscriptions,
    /// whose consumption Apple works out itself.
    public var consumptionPercentage: Int?
    /// `DECLINE`, `GRANT_FULL` or `GRANT_PRORATED`; nil: no preference.
    public var refundPreference: String?

    public init(
        customerConsented: Bool, deliveryStatus: String, sampleContentProvided: Bool, consumptionPercentage: Int? = nil,
        refundPreference: String? = nil
    ) {
        self.customerConsented = customerConsented
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }
}
