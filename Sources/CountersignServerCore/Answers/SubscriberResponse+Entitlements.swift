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
    /// `stripePortalURL` is where a customer manages a Stripe subscription (the app's
    /// `stripe.customerPortalURL`).
    public init(
        appUserId: String, firstSeen: Date, lastSeen: Date, entitlements: CustomerEntitlements, requestDate: Date, stripePortalURL: String? = nil
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
                    isSandbox: WireDate.isSandbox(state.environment),
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
                        store: WireDate.store(of: $0.environment), isSandbox: WireDate.isSandbox($0.environment),
                        price: $0.price.map(Price.init), originalPurchaseDate: format($0.purchaseDate))
                }
            },
            firstSeen: format(firstSeen),
            lastSeen: format(lastSeen),
            originalAppUserId: appUserId,
            // RevenueCat's: where the customer manages the active subscription; none without one.
            managementUrl: Self.managementURL(entitlements, stripePortalURL: stripePortalURL)
        )
        self.init(requestDate: format(requestDate), requestDateMs: requestDate.epochMilliseconds, subscriber: subscriber)
    }

    /// RevenueCat's `management_url`: where the customer manages the active subscription (the
    /// App Store's page, or the Stripe customer portal); none without one.
    static func managementURL(_ entitlements: CustomerEntitlements, stripePortalURL: String?) -> String? {
        let active = entitlements.subscriptions.values.filter { $0.isActive && !$0.isPromotional }
        if active.contains(where: { WireDate.store(of: $0.environment) == "app_store" }) { return WireDate.appStoreSubscriptionsURL }
        return active.contains(where: { WireDate.store(of: $0.environment) == "stripe" }) ? stripePortalURL : nil
    }
}
