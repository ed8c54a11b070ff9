import CountersignCore
import Foundation
import Testing

@testable import Countersign

/// RevenueCat's `EntitlementInfosTests` (purchases-ios, MIT), case by case: the same answers,
/// read by this SDK, give the values RevenueCat's tests assert. Each test names the one it
/// follows; where RevenueCat's test leaves a value unchecked and its source decides it, the
/// source is named instead.
@Suite("RevenueCat's EntitlementInfosTests")
struct RevenueCatEntitlementInfosTests {
    /// RevenueCat's `stubResponse`: request date 2019-08-16, read today (so judged at the device
    /// clock, the request date being years old).
    static func info(
        entitlements: [String: Any] = [:], nonSubscriptions: [String: Any] = [:], subscriptions: [String: Any] = [:],
        requestDate: String = "2019-08-16T10:30:42Z", now: Date = Date()
    ) throws -> CustomerInfo {
        let response: [String: Any] = [
            "request_date": requestDate,
            "subscriber": [
                "entitlements": entitlements, "first_seen": "2019-07-26T23:29:50Z", "non_subscriptions": nonSubscriptions,
                "original_app_user_id": "cesarsandbox1", "original_application_version": "1.0", "subscriptions": subscriptions,
            ] as [String: Any],
        ]
        return try CustomerInfo(
            answer: try JSONSerialization.data(withJSONObject: response), verification: .notRequested, failure: nil, now: now)
    }

    static func date(_ text: String) -> Date? { WireDate.parse(text) }

    static var proCat: [String: Any] {
        [
            "pro_cat": ["expires_date": "2200-07-26T23:50:40Z", "product_identifier": "monthly_freetrial", "purchase_date": "2019-07-26T23:45:40Z"]
        ]
    }

    static func monthly(
        expires: String = "2200-07-26T23:50:40Z", store: String = "app_store", unsubscribe: Any = NSNull(), billing: Any = NSNull(),
        ownership: String? = nil, periodType: String = "normal"
    ) -> [String: Any] {
        var subscription: [String: Any] = [
            "billing_issues_detected_at": billing, "expires_date": expires, "is_sandbox": false,
            "original_purchase_date": "2019-07-26T23:30:41Z", "period_type": periodType, "purchase_date": "2019-07-26T23:45:40Z",
            "store": store, "unsubscribe_detected_at": unsubscribe,
        ]
        if let ownership { subscription["ownership_type"] = ownership }
        return ["monthly_freetrial": subscription]
    }

    static var lifetimePurchases: [String: Any] {
        [
            "lifetime": [
                [
                    "id": "5b9ba226bc", "is_sandbox": false, "original_purchase_date": "2019-07-26T22:10:27Z",
                    "purchase_date": "2019-07-26T22:10:27Z", "store": "app_store",
                ],
                [
                    "id": "ea820afcc4", "is_sandbox": false, "original_purchase_date": "2019-07-26T23:45:40Z",
                    "purchase_date": "2019-07-26T23:45:40Z", "store": "app_store",
                ],
            ]
        ]
    }

    static var lifetimeCat: [String: Any] {
        [
            "lifetime_cat": ["expires_date": NSNull(), "product_identifier": "lifetime", "purchase_date": "2019-07-26T23:45:40Z"]
        ]
    }

    @Test("testMultipleEntitlements: a subscription's and a lifetime purchase's entitlements, with their details")
    func multipleEntitlements() throws {
        let info = try Self.info(
            entitlements: Self.proCat.merging(Self.lifetimeCat) { $1 }, nonSubscriptions: Self.lifetimePurchases,
            subscriptions: Self.monthly())
        #expect(info.entitlements.all.count == 2)
        let pro = try #require(info.entitlements["pro_cat"])
        #expect(pro.isActive && pro.willRenew)
        #expect(pro.periodType == .normal && pro.store == .appStore && !pro.isSandbox)
        #expect(pro.productIdentifier == "monthly_freetrial")
        #expect(pro.latestPurchaseDate == Self.date("2019-07-26T23:45:40Z"))
        #expect(pro.originalPurchaseDate == Self.date("2019-07-26T23:30:41Z"))
        #expect(pro.expirationDate == Self.date("2200-07-26T23:50:40Z"))
        let lifetime = try #require(info.entitlements["lifetime_cat"])
        #expect(lifetime.isActive && !lifetime.willRenew)
        #expect(lifetime.periodType == .normal && lifetime.store == .appStore && !lifetime.isSandbox)
        #expect(lifetime.productIdentifier == "lifetime")
        #expect(lifetime.latestPurchaseDate == Self.date("2019-07-26T23:45:40Z"))
        // The latest purchase's original_purchase_date.
        #expect(lifetime.originalPurchaseDate == Self.date("2019-07-26T23:45:40Z"))
        #expect(lifetime.expirationDate == nil)
    }

    @Test("testStringAccessor: the entitlement's own expires_date decides isActive, not the subscription's")
    func stringAccessor() throws {
        let info = try Self.info(entitlements: Self.proCat, subscriptions: Self.monthly(expires: "2000-07-26T23:50:40Z"))
        #expect(info.entitlements["pro_cat"] != nil)
        #expect(info.entitlements.active["pro_cat"] != nil)
    }

    @Test("testInactiveSubscription: an entitlement that ended is inactive; it still 'will renew' (RevenueCat's willRenewWithExpirationDate)")
    func inactiveSubscription() throws {
        let entitlements: [String: Any] = [
            "pro_cat": ["expires_date": "2000-07-26T23:50:40Z", "product_identifier": "monthly_freetrial", "purchase_date": "1999-07-26T23:30:41Z"]
        ]
        let info = try Self.info(entitlements: entitlements, subscriptions: Self.monthly(expires: "2000-07-26T23:50:40Z"))
        let pro = try #require(info.entitlements["pro_cat"])
        #expect(!pro.isActive)
        #expect(pro.willRenew, "neither promotional, lifetime, unsubscribed, in billing trouble nor prepaid")
        #expect(info.activeSubscriptions.isEmpty)
    }

    @Test("testGetsEmptySubscriberInfo")
    func emptySubscriberInfo() throws {
        let info = try Self.info()
        #expect(info.originalAppUserId == "cesarsandbox1")
        #expect(info.entitlements.all.isEmpty)
    }

    @Test("testCreatesEntitlementWithNonSubscriptionsAndSubscription and testNonSubscription: a lifetime entitlement from one-time purchases")
    func nonSubscription() throws {
        for subscriptions in [Self.monthly(), [:]] {
            let entitlements: [String: Any] = [
                "pro_cat": ["expires_date": NSNull(), "product_identifier": "lifetime", "purchase_date": "2019-07-26T23:45:40Z"]
            ]
            let info = try Self.info(entitlements: entitlements, nonSubscriptions: Self.lifetimePurchases, subscriptions: subscriptions)
            let pro = try #require(info.entitlements["pro_cat"])
            #expect(pro.isActive && !pro.willRenew)
            #expect(pro.periodType == .normal && pro.store == .appStore && !pro.isSandbox)
            #expect(pro.latestPurchaseDate == Self.date("2019-07-26T23:45:40Z"))
            #expect(pro.originalPurchaseDate == Self.date("2019-07-26T23:45:40Z"))
            #expect(pro.expirationDate == nil)
        }
    }

    @Test("testSubscriptionWontRenewBillingError, testSubscriptionWontRenewCancelled and both at once")
    func wontRenew() throws {
        let billing = try #require(
            try Self.info(entitlements: Self.proCat, subscriptions: Self.monthly(billing: "2019-07-27T23:30:41Z")).entitlements["pro_cat"])
        #expect(billing.isActive && !billing.willRenew)
        #expect(billing.billingIssueDetectedAt == Self.date("2019-07-27T23:30:41Z"))
        let cancelled = try #require(
            try Self.info(entitlements: Self.proCat, subscriptions: Self.monthly(unsubscribe: "2019-07-27T23:30:41Z")).entitlements["pro_cat"])
        #expect(cancelled.isActive && !cancelled.willRenew)
        #expect(cancelled.unsubscribeDetectedAt == Self.date("2019-07-27T23:30:41Z"))
        let both = try #require(
            try Self.info(
                entitlements: Self.proCat, subscriptions: Self.monthly(unsubscribe: "2019-07-27T23:30:41Z", billing: "2019-07-27T22:30:41Z")
            ).entitlements["pro_cat"])
        #expect(!both.willRenew)
        #expect(both.unsubscribeDetectedAt == Self.date("2019-07-27T23:30:41Z"))
        #expect(both.billingIssueDetectedAt == Self.date("2019-07-27T22:30:41Z"))
    }

    @Test("testParseOwnershipTypeAssignsTheRightValue and testParseOwnershipTypeDefaultsToPurchasedIfMissing")
    func ownershipType() throws {
        let cases: [(String?, PurchaseOwnershipType)] = [
            ("PURCHASED", .purchased), ("FAMILY_SHARED", .familyShared), ("BOATY_MCBOATFACE", .unknown), (nil, .purchased),
        ]
        for (wire, expected) in cases {
            let info = try Self.info(entitlements: Self.proCat, subscriptions: Self.monthly(ownership: wire))
            #expect(info.entitlements.active["pro_cat"]?.ownershipType == expected, "\(wire ?? "missing")")
        }
    }

    @Test("testParseStoreFromSubscription: every store RevenueCat names, and unknownStore for any other")
    func storeFromSubscription() throws {
        let cases: [(String, Store)] = [
            ("app_store", .appStore), ("mac_app_store", .macAppStore), ("play_store", .playStore), ("promotional", .promotional),
            ("stripe", .stripe), ("tienda", .unknownStore), ("amazon", .amazon), ("rc_billing", .rcBilling), ("external", .external),
            ("paddle", .paddle), ("test_store", .testStore), ("galaxy", .galaxy),
        ]
        for (wire, expected) in cases {
            let info = try Self.info(entitlements: Self.proCat, subscriptions: Self.monthly(store: wire))
            #expect(info.entitlements["pro_cat"]?.store == expected, "\(wire)")
        }
        #expect(Store.allCases.count == 12)
        #expect(Store.unknownStore.rawValue == 5 && Store.galaxy.rawValue == 11)
    }

    @Test("a promotional or prepaid entitlement never renews (RevenueCat's EntitlementInfo.willRenewWithExpirationDate)")
    func promotionalAndPrepaid() throws {
        let promotional = try Self.info(entitlements: Self.proCat, subscriptions: Self.monthly(store: "promotional"))
        #expect(promotional.entitlements["pro_cat"]?.willRenew == false)
        let prepaid = try Self.info(entitlements: Self.proCat, subscriptions: Self.monthly(periodType: "prepaid"))
        #expect(prepaid.entitlements["pro_cat"]?.willRenew == false)
    }

    @Test("dates are judged at the request date for three days, then at the device clock (RevenueCat's CustomerInfo.isDateActive)")
    func requestDateGrace() throws {
        let entitlements: [String: Any] = [
            "pro_cat": ["expires_date": "2026-01-02T00:00:00Z", "product_identifier": "monthly_freetrial", "purchase_date": "2025-12-02T00:00:00Z"]
        ]
        let subscriptions = Self.monthly(expires: "2026-01-02T00:00:00Z")
        let requestDate = "2026-01-01T00:00:00Z"
        let day: TimeInterval = 86_400
        let asked = try #require(Self.date(requestDate))
        // Two days after the answer, past the expiry by the device clock: still active.
        let cached = try Self.info(entitlements: entitlements, subscriptions: subscriptions, requestDate: requestDate, now: asked + 2 * day)
        #expect(cached.entitlements["pro_cat"]?.isActive == true)
        #expect(cached.activeSubscriptions == ["monthly_freetrial"])
        // Four days after: judged at the device clock, so ended.
        let stale = try Self.info(entitlements: entitlements, subscriptions: subscriptions, requestDate: requestDate, now: asked + 4 * day)
        #expect(stale.entitlements["pro_cat"]?.isActive == false)
        #expect(stale.activeSubscriptions.isEmpty)
        // A device clock set back changes nothing: the request date rules.
        let rewound = try Self.info(entitlements: entitlements, subscriptions: subscriptions, requestDate: requestDate, now: asked - 30 * day)
        #expect(rewound.entitlements["pro_cat"]?.isActive == true)
    }

    @Test("activeSubscriptions counts a subscription without an end as active (RevenueCat's CustomerInfo.activeKeys)")
    func subscriptionWithoutEnd() throws {
        var subscriptions = Self.monthly()
        subscriptions["rc_promo_pro_lifetime"] = [
            "expires_date": NSNull(), "is_sandbox": false, "original_purchase_date": "2019-07-26T23:30:41Z", "period_type": "normal",
            "purchase_date": "2019-07-26T23:45:40Z", "store": "promotional",
        ]
        let info = try Self.info(subscriptions: subscriptions)
        #expect(info.activeSubscriptions == ["monthly_freetrial", "rc_promo_pro_lifetime"])
        #expect(info.expirationDate(forProductIdentifier: "rc_promo_pro_lifetime") == nil)
    }
}
