import CountersignCore
import CountersignServerCore
import Foundation
import Testing

@Suite("Entitlement rules")
struct EntitlementRulesTests {
    static let products = AppConfiguration.makeDemo().products
    static let day: TimeInterval = 86_400
    static let start = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01

    static func monthly(_ id: String, chain: String? = nil, from start: Date, days: Double = 30) -> PurchaseRecord {
        PurchaseRecord(
            transactionId: id, originalTransactionId: chain ?? id, productId: "pro_monthly", kind: .autoRenewable,
            environment: "TestStore", purchaseDate: start, expiresDate: start.addingTimeInterval(days * day))
    }

    static func evaluate(_ purchases: [PurchaseRecord], statuses: [SubscriptionStatus] = [], grants: [PromotionalGrant] = [], at offsetDays: Double)
        -> CustomerEntitlements
    {
        EntitlementRules.evaluate(
            purchases: purchases, statuses: statuses, grants: grants, products: products,
            at: start.addingTimeInterval(offsetDays * day))
    }

    @Test("an auto-renewable subscription is active until its expiry and not after")
    func subscriptionExpiry() {
        let purchase = Self.monthly("1", from: Self.start)
        #expect(Self.evaluate([purchase], at: 29.9).entitlements["pro"]?.isActive == true)
        #expect(Self.evaluate([purchase], at: 29.9).entitlements["pro"]?.willRenew == true)
        #expect(Self.evaluate([purchase], at: 30).entitlements["pro"]?.isActive == false)
        #expect(Self.evaluate([purchase], at: 30).subscriptions["pro_monthly"]?.isActive == false)
    }

    @Test("a renewal extends the chain: the newest transaction counts")
    func renewal() {
        let first = Self.monthly("1", from: Self.start)
        let renewal = Self.monthly("2", chain: "1", from: Self.start.addingTimeInterval(30 * Self.day))
        let result = Self.evaluate([renewal, first], at: 45)
        #expect(result.entitlements["pro"]?.isActive == true)
        #expect(result.entitlements["pro"]?.expiresDate == Self.start.addingTimeInterval(60 * Self.day))
        #expect(result.subscriptions["pro_monthly"]?.originalPurchaseDate == Self.start)
    }

    @Test("within a chain an upgraded transaction yields to any other, however new; the chain starts at its earliest, upgraded or not")
    func upgradedWithinChain() {
        var first = Self.monthly("1", from: Self.start)
        first.isUpgraded = true
        let current = Self.monthly("2", chain: "1", from: Self.start.addingTimeInterval(30 * Self.day))
        var newerUpgraded = Self.monthly("3", chain: "1", from: Self.start.addingTimeInterval(40 * Self.day), days: 90)
        newerUpgraded.isUpgraded = true
        var renewalOfAnotherChain = Self.monthly("4", chain: "9", from: Self.start.addingTimeInterval(50 * Self.day))
        renewalOfAnotherChain.originalPurchaseDate = Self.start.addingTimeInterval(-100 * Self.day)
        for order in [[first, current, newerUpgraded, renewalOfAnotherChain], [renewalOfAnotherChain, newerUpgraded, current, first]] {
            let chainOne = EntitlementRules.evaluate(
                purchases: order.filter { $0.originalTransactionId == "1" }, products: Self.products, at: Self.start.addingTimeInterval(45 * Self.day)
            )
            #expect(chainOne.subscriptions["pro_monthly"]?.purchaseDate == current.purchaseDate)
            #expect(chainOne.subscriptions["pro_monthly"]?.expiresDate == current.expiresDate)
            #expect(chainOne.subscriptions["pro_monthly"]?.originalPurchaseDate == Self.start)
            // Every transaction of a chain upgraded: the newest of them is shown, and grants nothing.
            let allUpgraded = EntitlementRules.evaluate(
                purchases: order.filter(\.isUpgraded), products: Self.products, at: Self.start.addingTimeInterval(45 * Self.day))
            #expect(allUpgraded.subscriptions["pro_monthly"]?.purchaseDate == newerUpgraded.purchaseDate)
            #expect(allUpgraded.entitlements["pro"]?.isActive == false)
            // A reader that handed over only a chain's newest transaction gave its first purchase date with it.
            let both = EntitlementRules.evaluate(purchases: order, products: Self.products, at: Self.start.addingTimeInterval(55 * Self.day))
            #expect(both.subscriptions["pro_monthly"]?.originalPurchaseDate == Self.start.addingTimeInterval(-100 * Self.day))
            #expect(both.entitlements["pro"]?.purchaseDate == renewalOfAnotherChain.purchaseDate)
        }
    }

    @Test("grace period counts as active until it ends; billing retry without grace does not")
    func graceAndBillingRetry() {
        let purchase = Self.monthly("1", from: Self.start)
        let grace = SubscriptionStatus(
            originalTransactionId: "1", gracePeriodExpiresDate: Self.start.addingTimeInterval(36 * Self.day), isInBillingRetry: true)
        #expect(Self.evaluate([purchase], statuses: [grace], at: 33).entitlements["pro"]?.isActive == true)
        #expect(Self.evaluate([purchase], statuses: [grace], at: 33).entitlements["pro"]?.gracePeriodExpiresDate == grace.gracePeriodExpiresDate)
        #expect(Self.evaluate([purchase], statuses: [grace], at: 36).entitlements["pro"]?.isActive == false)
        let retry = SubscriptionStatus(originalTransactionId: "1", isInBillingRetry: true)
        #expect(Self.evaluate([purchase], statuses: [retry], at: 31).entitlements["pro"]?.isActive == false)
        #expect(Self.evaluate([purchase], statuses: [retry], at: 31).subscriptions["pro_monthly"]?.isInBillingRetry == true)
    }

    @Test("auto-renew turned off: still active until expiry, but will not renew")
    func autoRenewOff() {
        let purchase = Self.monthly("1", from: Self.start)
        let off = SubscriptionStatus(originalTransactionId: "1", willRenew: false)
        let result = Self.evaluate([purchase], statuses: [off], at: 10)
        #expect(result.entitlements["pro"]?.isActive == true)
        #expect(result.entitlements["pro"]?.willRenew == false)
    }

    @Test("a refund ends access at the revocation date, for subscriptions and one-time purchases")
    func refund() {
        var purchase = Self.monthly("1", from: Self.start)
        purchase.revocationDate = Self.start.addingTimeInterval(10 * Self.day)
        #expect(Self.evaluate([purchase], at: 9).entitlements["pro"]?.isActive == true)
        #expect(Self.evaluate([purchase], at: 10).entitlements["pro"]?.isActive == false)
        var lifetime = PurchaseRecord(
            transactionId: "2", originalTransactionId: "2", productId: "lifetime", kind: .nonConsumable,
            environment: "TestStore", purchaseDate: Self.start)
        #expect(Self.evaluate([lifetime], at: 1_000).entitlements["pro"]?.isActive == true)
        #expect(Self.evaluate([lifetime], at: 1_000).entitlements["pro"]?.expiresDate == nil)
        lifetime.revocationDate = Self.start.addingTimeInterval(5 * Self.day)
        #expect(Self.evaluate([lifetime], at: 6).entitlements["pro"]?.isActive == false)
    }

    @Test("an upgraded transaction grants nothing; the upgrade's transaction does")
    func upgrade() {
        var old = Self.monthly("1", from: Self.start)
        old.isUpgraded = true
        #expect(Self.evaluate([old], at: 5).entitlements["pro"]?.isActive == false)
        let upgrade = PurchaseRecord(
            transactionId: "2", originalTransactionId: "2", productId: "lifetime", kind: .nonConsumable,
            environment: "TestStore", purchaseDate: Self.start.addingTimeInterval(5 * Self.day))
        let result = Self.evaluate([old, upgrade], at: 6)
        #expect(result.entitlements["pro"]?.isActive == true)
        #expect(result.entitlements["pro"]?.productId == "lifetime")
    }

    @Test("consumables are listed as non-subscriptions and grant no entitlement")
    func consumables() {
        let coins = (1...2).map {
            PurchaseRecord(
                transactionId: "c\($0)", originalTransactionId: "c\($0)", productId: "coins_100", kind: .consumable,
                environment: "TestStore", purchaseDate: Self.start.addingTimeInterval(Double($0) * Self.day))
        }
        let result = Self.evaluate(coins.reversed(), at: 3)
        #expect(result.nonSubscriptions["coins_100"]?.map(\.transactionId) == ["c1", "c2"])
        #expect(result.entitlements.isEmpty)
    }

    @Test("promotional grants: active in their window, lifetime when open-ended, ended by revocation")
    func promotional() {
        let week = PromotionalGrant(
            grantId: "g1", entitlement: "pro", startsDate: Self.start, expiresDate: Self.start.addingTimeInterval(7 * Self.day))
        #expect(Self.evaluate([], grants: [week], at: 6).entitlements["pro"]?.isActive == true)
        #expect(Self.evaluate([], grants: [week], at: 7).entitlements["pro"]?.isActive == false)
        let lifetime = PromotionalGrant(grantId: "g2", entitlement: "pro", startsDate: Self.start, expiresDate: nil)
        #expect(Self.evaluate([], grants: [lifetime], at: 10_000).entitlements["pro"]?.isActive == true)
        var revoked = lifetime
        revoked.revokedDate = Self.start.addingTimeInterval(2 * Self.day)
        #expect(Self.evaluate([], grants: [revoked], at: 3).entitlements["pro"]?.isActive == false)
    }

    @Test("several sources: the active one that lasts longest wins")
    func mostRelevantSource() {
        let monthly = Self.monthly("1", from: Self.start)
        let week = PromotionalGrant(
            grantId: "g1", entitlement: "pro", startsDate: Self.start, expiresDate: Self.start.addingTimeInterval(40 * Self.day))
        let result = Self.evaluate([monthly], grants: [week], at: 10)
        #expect(result.entitlements["pro"]?.source == .promotional)
        #expect(result.entitlements["pro"]?.expiresDate == week.expiresDate)
        // After the subscription lapses, the promotional grant still holds.
        #expect(Self.evaluate([monthly], grants: [week], at: 35).entitlements["pro"]?.isActive == true)
        #expect(Self.evaluate([monthly], grants: [week], at: 41).activeEntitlementIds.isEmpty)
    }

    @Test("evaluation is at the given instant: nothing is active before its purchase date")
    func notBeforePurchase() {
        let purchase = Self.monthly("1", from: Self.start.addingTimeInterval(5 * Self.day))
        #expect(Self.evaluate([purchase], at: 1).entitlements["pro"]?.isActive == false)
    }

    @Test("a promotional grant is named as RevenueCat names it: rc_promo_<entitlement>_<duration>, custom for an end time")
    func promotionalNames() {
        let start = Date(timeIntervalSince1970: 1_799_000_000.123)
        for duration in PromotionalDuration.allCases {
            let grant = PromotionalGrant(grantId: "g", entitlement: "pro", startsDate: start, expiresDate: duration.end(from: start))
            #expect(grant.productIdentifier == "rc_promo_pro_\(duration.rawValue)")
            // Stored in milliseconds, read back: the same name.
            let stored = PromotionalGrant(
                grantId: "g", entitlement: "pro", startsDate: Date(epochMilliseconds: start.epochMilliseconds),
                expiresDate: duration.end(from: start).map { Date(epochMilliseconds: $0.epochMilliseconds) })
            #expect(stored.productIdentifier == "rc_promo_pro_\(duration.rawValue)")
        }
        let custom = PromotionalGrant(grantId: "g", entitlement: "pro", startsDate: start, expiresDate: start.addingTimeInterval(5 * 86_400))
        #expect(custom.productIdentifier == "rc_promo_pro_custom")
    }
}
