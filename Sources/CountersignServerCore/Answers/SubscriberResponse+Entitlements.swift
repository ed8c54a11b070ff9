import CountersignCore
import Foundation

extension SubscriberResponse.Price {
    package init(_ paid: PaidPrice) {
        // Correctly rounded: the nearest double to the decimal the lean writer writes.
        self.init(amount: Double(paid.milliunits) / 1000, currency: paid.currency)
    }
}

extension SubscriberResponse {
    /// The answer for one customer at `requestDate`, from the evaluated entitlements.
    public init(
        appUserId: String, firstSeen: Date, lastSeen: Date, entitlements: CustomerEntitlements, requestDate: Date
    ) {
        let format = WireDate.format
        let subscriber = Subscriber(
            entitlements: entitlements.entitlements.mapValues { grant in
                Entitlement(
                    expiresDate: grant.expiresDate.map(format),
                    gracePeriodExpiresDate: grant.gracePeriodExpiresDate.map(format),
                    productIdentifier: grant.productId,
                    purchaseDate: format(grant.purchaseDate)
                )
            },
            subscriptions: entitlements.subscriptions.mapValues { state in
                Subscription(
                    // A refund ends the subscription then (RevenueCat's clients judge
                    // `activeSubscriptions` by this date alone).
                    expiresDate: (state.revocationDate.map { revoked in min(revoked, state.expiresDate ?? revoked) } ?? state.expiresDate)
                        .map(format),
                    purchaseDate: format(state.purchaseDate),
                    originalPurchaseDate: format(state.originalPurchaseDate),
                    periodType: state.periodType,
                    store: state.isPromotional ? "promotional" : WireDate.store(of: state.environment),
                    isSandbox: state.environment != "Production",
                    unsubscribeDetectedAt: state.willRenew || !state.isActive || state.isPromotional ? nil : format(state.purchaseDate),
                    billingIssuesDetectedAt: state.isInBillingRetry ? format(state.expiresDate ?? state.purchaseDate) : nil,
                    gracePeriodExpiresDate: state.gracePeriodExpiresDate.map(format),
                    refundedAt: state.revocationDate.map(format),
                    ownershipType: state.ownershipType,
                    storeTransactionId: state.storeTransactionId,
                    displayName: state.displayName,
                    price: state.price.map(Price.init)
                )
            },
            nonSubscriptions: entitlements.nonSubscriptions.mapValues { purchases in
                purchases.map {
                    NonSubscription(
                        id: $0.transactionId, purchaseDate: format($0.purchaseDate),
                        store: WireDate.store(of: $0.environment), isSandbox: $0.environment != "Production",
                        price: $0.price.map(Price.init), originalPurchaseDate: format($0.purchaseDate))
                }
            },
            firstSeen: format(firstSeen),
            lastSeen: format(lastSeen),
            originalAppUserId: appUserId,
            // RevenueCat's: where the customer manages the active subscription; none without one.
            managementUrl: entitlements.subscriptions.values.contains { $0.isActive && !$0.isPromotional && $0.environment != "TestStore" }
                ? WireDate.appStoreSubscriptionsURL : nil
        )
        self.init(requestDate: format(requestDate), requestDateMs: requestDate.epochMilliseconds, subscriber: subscriber)
    }
}
