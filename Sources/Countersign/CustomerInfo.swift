import CountersignCore
import Foundation

/// One entitlement of a customer.
public struct EntitlementInfo: Sendable, Hashable {
    public let identifier: String
    /// Active at the later of the answer's signed request date and the device clock (so turning
    /// the device clock back does not extend access).
    public let isActive: Bool
    public let willRenew: Bool
    /// `normal`, `trial` or `intro` for subscriptions; `normal` otherwise.
    public let periodType: String
    /// A product id, or `promotional:<grant id>` for a promotional grant.
    public let productIdentifier: String
    /// Nil: for life.
    public let expirationDate: Date?
    public let latestPurchaseDate: Date?
    public let verification: VerificationResult
}

/// A customer's entitlements, with how they were verified.
public struct EntitlementInfos: Sendable, Hashable {
    public let all: [String: EntitlementInfo]
    public let verification: VerificationResult

    public var active: [String: EntitlementInfo] { all.filter { $0.value.isActive } }

    public subscript(identifier: String) -> EntitlementInfo? { all[identifier] }
}

/// What the server (or, offline, the device) says the customer may use.
public struct CustomerInfo: Sendable, Hashable {
    public let entitlements: EntitlementInfos
    /// Product ids of active subscriptions.
    public let activeSubscriptions: Set<String>
    public let allPurchasedProductIdentifiers: Set<String>
    /// The server's request date in the answer (the device's clock for on-device results).
    public let requestDate: Date
    public let originalAppUserId: String
    public let firstSeen: Date?
    /// Why verification failed, when `entitlements.verification == .failed`.
    public let verificationFailure: VerificationFailure?
    /// The exact answer body it was read from (empty for on-device results).
    public let rawData: Data

    /// Reads a CustomerInfo answer (`GET /v1/subscribers/{id}`, `POST /v1/receipts`, identify).
    public init(answer body: Data, verification: VerificationResult, failure: VerificationFailure?, now: Date) throws {
        let response = try JSONDecoder().decode(SubscriberResponse.self, from: body)
        let requestDate = Date(timeIntervalSince1970: TimeInterval(response.requestDateMs) / 1000)
        let reference = max(requestDate, now)
        let subscriber = response.subscriber
        var all: [String: EntitlementInfo] = [:]
        for (identifier, entitlement) in subscriber.entitlements {
            let expires = entitlement.expiresDate.flatMap(WireDate.parse)
            let grace = entitlement.gracePeriodExpiresDate.flatMap(WireDate.parse)
            let end = [expires, grace].compactMap { $0 }.max()
            let subscription = subscriber.subscriptions[entitlement.productIdentifier]
            let isActive = entitlement.expiresDate == nil || (end.map { $0 > reference } ?? false)
            all[identifier] = EntitlementInfo(
                identifier: identifier,
                isActive: isActive,
                willRenew: isActive && subscription.map { $0.unsubscribeDetectedAt == nil && $0.billingIssuesDetectedAt == nil && $0.refundedAt == nil } ?? false,
                periodType: subscription?.periodType ?? "normal",
                productIdentifier: entitlement.productIdentifier,
                expirationDate: expires,
                latestPurchaseDate: WireDate.parse(entitlement.purchaseDate),
                verification: verification
            )
        }
        self.entitlements = EntitlementInfos(all: all, verification: verification)
        activeSubscriptions = Set(subscriber.subscriptions.filter { _, subscription in
            (subscription.expiresDate.flatMap(WireDate.parse).map { $0 > reference } ?? false) && subscription.refundedAt == nil
        }.keys)
        allPurchasedProductIdentifiers = Set(subscriber.subscriptions.keys).union(subscriber.nonSubscriptions.keys)
        self.requestDate = requestDate
        originalAppUserId = subscriber.originalAppUserId
        firstSeen = WireDate.parse(subscriber.firstSeen)
        verificationFailure = verification == .failed ? failure : nil
        rawData = body
    }

    /// An on-device CustomerInfo (offline entitlements): `verifiedOnDevice`, or `notRequested`
    /// when verification is disabled.
    init(onDevice entitlements: [String: EntitlementInfo], verification: VerificationResult, activeSubscriptions: Set<String>,
         purchased: Set<String>, appUserID: String, now: Date) {
        self.entitlements = EntitlementInfos(all: entitlements, verification: verification)
        self.activeSubscriptions = activeSubscriptions
        allPurchasedProductIdentifiers = purchased
        requestDate = now
        originalAppUserId = appUserID
        firstSeen = nil
        verificationFailure = nil
        rawData = Data()
    }
}
