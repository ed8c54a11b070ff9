import CountersignAppStore
import CountersignCore
import CountersignTesting
import Foundation
import HTTPTypes
import NIOCore
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Apple's App Store Server Notifications V2, type by type and subtype by subtype, signed by the
/// test store and posted over real HTTP: each changes entitlements as the table in
/// docs/webhooks.md says and stores the table's events once, also when it arrives again.
@Suite("Apple's lifecycle, type by type", .serialized)
struct AppleLifecycleTests {
    typealias Harness = ReceiptTests.Harness
    static let day: TimeInterval = 86_400

    /// What a notification carries, made for the subscription u1 holds.
    enum Carries: String, Sendable {
        /// A new transaction of a new chain, bound to u1 by its app account token.
        case newChain = "a new chain's first transaction"
        /// A new transaction of u1's chain.
        case renewal = "a new transaction of the chain"
        /// u1's current transaction, refunded.
        case refunded = "the current transaction, revoked"
        /// u1's current transaction, refunded before, now without a revocation.
        case reinstated = "the current transaction, revocation gone"
        /// u1's current transaction with an expiry a month later.
        case extended = "the current transaction, expiry later"
        /// u1's current transaction unchanged, with renewal info turning auto-renew off.
        case autoRenewOff = "renewal info: auto-renew off"
        /// … turning it back on (after it was turned off).
        case autoRenewOn = "renewal info: auto-renew on again"
        /// … in billing retry, with a grace period of five more days.
        case billingRetry = "renewal info: billing retry, grace period"
        /// … in billing retry, without a grace period.
        case billingRetryNoGrace = "renewal info: billing retry, no grace period"
        /// … renewing into another product.
        case otherProduct = "renewal info: renews into pro_yearly"
        /// u1's subscription past its expiry, auto-renew off.
        case expired = "the expired transaction, auto-renew off"
        /// u1's subscription past its expiry, its grace period just ended.
        case graceEnded = "the expired transaction, grace period over"
        /// A consumable bought by u1.
        case consumable = "a consumable's transaction"
        /// u1's current transaction and renewal info, unchanged.
        case unchanged = "the current transaction, unchanged"
        /// No transaction (a summary, an external purchase token, consent).
        case nothing = "no transaction"
    }

    struct Case: Sendable, CustomTestStringConvertible {
        let type: NotificationType
        let subtype: NotificationSubtype?
        let carries: Carries
        /// Whether u1 has `pro` afterwards.
        let entitled: Bool
        /// The events it stores, as `TYPE` or `TYPE (reason)`.
        let events: [String]

        var name: String { type.rawValue + (subtype.map { "/" + $0.rawValue } ?? "") }
        var testDescription: String { name }
    }

    /// Every notification type and subtype Apple documents for V2, and what it does here.
    static let cases: [Case] = [
        Case(type: .subscribed, subtype: .initialBuy, carries: .newChain, entitled: true, events: ["INITIAL_PURCHASE"]),
        Case(type: .subscribed, subtype: .resubscribe, carries: .renewal, entitled: true, events: ["RENEWAL"]),
        Case(type: .didRenew, subtype: nil, carries: .renewal, entitled: true, events: ["RENEWAL"]),
        Case(type: .didRenew, subtype: .billingRecovery, carries: .renewal, entitled: true, events: ["RENEWAL"]),
        Case(
            type: .didFailToRenew, subtype: nil, carries: .billingRetryNoGrace, entitled: false,
            events: ["BILLING_ISSUE", "CANCELLATION (BILLING_ERROR)"]),
        Case(
            type: .didFailToRenew, subtype: .gracePeriod, carries: .billingRetry, entitled: true,
            events: ["BILLING_ISSUE", "CANCELLATION (BILLING_ERROR)"]),
        Case(type: .gracePeriodExpired, subtype: nil, carries: .graceEnded, entitled: false, events: ["EXPIRATION (BILLING_ERROR)"]),
        Case(type: .expired, subtype: .voluntary, carries: .expired, entitled: false, events: ["EXPIRATION (UNSUBSCRIBE)"]),
        Case(type: .expired, subtype: .billingRetry, carries: .expired, entitled: false, events: ["EXPIRATION (BILLING_ERROR)"]),
        Case(type: .expired, subtype: .priceIncrease, carries: .expired, entitled: false, events: ["EXPIRATION (PRICE_INCREASE)"]),
        Case(type: .expired, subtype: .productNotForSale, carries: .expired, entitled: false, events: ["EXPIRATION (DEVELOPER_INITIATED)"]),
        Case(type: .didChangeRenewalPref, subtype: .upgrade, carries: .otherProduct, entitled: true, events: ["PRODUCT_CHANGE"]),
        Case(type: .didChangeRenewalPref, subtype: .downgrade, carries: .otherProduct, entitled: true, events: ["PRODUCT_CHANGE"]),
        Case(type: .didChangeRenewalPref, subtype: nil, carries: .otherProduct, entitled: true, events: ["PRODUCT_CHANGE"]),
        Case(
            type: .didChangeRenewalStatus, subtype: .autoRenewDisabled, carries: .autoRenewOff, entitled: true, events: ["CANCELLATION (UNSUBSCRIBE)"]
        ),
        Case(type: .didChangeRenewalStatus, subtype: .autoRenewEnabled, carries: .autoRenewOn, entitled: true, events: ["UNCANCELLATION"]),
        Case(type: .offerRedeemed, subtype: .initialBuy, carries: .newChain, entitled: true, events: ["INITIAL_PURCHASE"]),
        Case(type: .offerRedeemed, subtype: .resubscribe, carries: .renewal, entitled: true, events: ["RENEWAL"]),
        Case(type: .offerRedeemed, subtype: .upgrade, carries: .renewal, entitled: true, events: ["RENEWAL"]),
        Case(type: .offerRedeemed, subtype: .downgrade, carries: .unchanged, entitled: true, events: []),
        Case(type: .offerRedeemed, subtype: nil, carries: .unchanged, entitled: true, events: []),
        Case(type: .priceIncrease, subtype: .pending, carries: .unchanged, entitled: true, events: []),
        Case(type: .priceIncrease, subtype: .accepted, carries: .unchanged, entitled: true, events: []),
        Case(type: .refund, subtype: nil, carries: .refunded, entitled: false, events: ["CANCELLATION (CUSTOMER_SUPPORT)"]),
        Case(type: .refundDeclined, subtype: nil, carries: .unchanged, entitled: true, events: []),
        Case(type: .refundReversed, subtype: nil, carries: .reinstated, entitled: true, events: ["REFUND_REVERSED"]),
        Case(type: .revoke, subtype: nil, carries: .refunded, entitled: false, events: ["CANCELLATION (CUSTOMER_SUPPORT)"]),
        Case(type: .renewalExtended, subtype: nil, carries: .extended, entitled: true, events: ["SUBSCRIPTION_EXTENDED"]),
        Case(type: .renewalExtension, subtype: .summary, carries: .nothing, entitled: true, events: []),
        Case(type: .renewalExtension, subtype: .failure, carries: .unchanged, entitled: true, events: []),
        Case(type: .consumptionRequest, subtype: nil, carries: .unchanged, entitled: true, events: []),
        Case(type: .oneTimeCharge, subtype: nil, carries: .consumable, entitled: true, events: ["NON_RENEWING_PURCHASE"]),
        Case(type: .metadataUpdate, subtype: nil, carries: .unchanged, entitled: true, events: []),
        Case(type: .migration, subtype: nil, carries: .unchanged, entitled: true, events: []),
        Case(type: .priceChange, subtype: nil, carries: .unchanged, entitled: true, events: []),
        Case(type: .rescindConsent, subtype: nil, carries: .nothing, entitled: true, events: []),
        Case(type: .externalPurchaseToken, subtype: .unreported, carries: .nothing, entitled: true, events: []),
        Case(type: .test, subtype: nil, carries: .nothing, entitled: true, events: []),
    ]

    /// The table docs/webhooks.md shows.
    static func table() -> String {
        var lines = ["| notification | carries | `pro` after | events |", "|---|---|---|---|"]
        for item in cases {
            let events = item.events.isEmpty ? "none" : item.events.map { "`\($0)`" }.joined(separator: ", ")
            lines.append("| `\(item.name)` | \(item.carries.rawValue) | \(item.entitled ? "active" : "ended") | \(events) |")
        }
        return lines.joined(separator: "\n")
    }

    @Test("docs/webhooks.md's notification table is the table these tests check")
    func document() throws {
        let section = GeneratedDocSection(name: "notifications", generatedBy: "AppleLifecycleTests", expected: Self.table())
        let current = try #require(
            try section.current(in: LifecycleTests.projectRoot.appendingPathComponent("docs/webhooks.md")),
            "docs/webhooks.md lacks the notifications markers")
        #expect(current == Self.table(), "docs/webhooks.md's notification table is out of date; regenerate with COUNTERSIGN_WRITE_DOCS=1")
    }

    /// u1's pro_monthly subscription: bought `ageDays` ago, expiring `expiresInDays` from now.
    static func subscribe(_ harness: Harness, ageDays: Double = 5, expiresInDays: Double = 25) async throws -> TransactionPayload {
        var purchase = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId)
        purchase.purchaseDate = Date().addingTimeInterval(-ageDays * day)
        purchase.expiresDate = Date().addingTimeInterval(expiresInDays * day)
        purchase.price = 9_990
        let (jws, payload) = try harness.ca.mintTransaction(purchase, signedDate: Date().addingTimeInterval(-600))
        #expect(try await harness.post(user: "u1", jws: jws).status == 200)
        return payload
    }

    /// A renewal of `original`'s chain paying for the current period (bought 5 days ago, 25 days
    /// left), signed `offset` seconds from now.
    static func currentPeriod(_ harness: Harness, of original: TransactionPayload, signedIn offset: TimeInterval) throws -> (
        jws: String, payload: TransactionPayload
    ) {
        var purchase = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId)
        purchase.originalTransactionId = original.originalTransactionId
        purchase.purchaseDate = Date().addingTimeInterval(-5 * day)
        purchase.expiresDate = Date().addingTimeInterval(25 * day)
        purchase.price = 9_990
        return try harness.ca.mintTransaction(purchase, signedDate: Date().addingTimeInterval(offset))
    }

    /// `payload` signed again `offset` seconds from now, changed by `change`.
    static func copy(
        _ harness: Harness, _ payload: TransactionPayload, signedIn offset: TimeInterval, _ change: (inout TransactionPayload) -> Void = { _ in }
    )
        throws -> (jws: String, payload: TransactionPayload)
    {
        var copy = payload
        change(&copy)
        copy.signedDate = Date().addingTimeInterval(offset)
        return (try harness.ca.sign(copy), copy)
    }

    /// Renewal info for u1's chain, signed `offset` seconds from now.
    static func renewal(_ chain: TransactionPayload, signedIn offset: TimeInterval, _ change: (inout RenewalInfoPayload) -> Void = { _ in })
        -> RenewalInfoPayload
    {
        var info = RenewalInfoPayload(
            originalTransactionId: chain.originalTransactionId!, productId: "pro_monthly", environment: .testStore,
            signedDate: Date().addingTimeInterval(offset))
        info.autoRenewStatus = 1
        info.isInBillingRetryPeriod = false
        change(&info)
        return info
    }

    /// The stored events of u1, oldest first, as `TYPE` or `TYPE (reason)`, with their bodies.
    static func events(_ harness: Harness) async throws -> [(name: String, body: [String: Any])] {
        try await harness.server.store.events(app: harness.app.id, user: "u1").reversed().map { stored in
            let body = try #require(try JSONSerialization.jsonObject(with: Data(stored.body.utf8)) as? [String: Any])
            let event = try #require(body["event"] as? [String: Any])
            let reason = (event["cancel_reason"] ?? event["expiration_reason"]) as? String
            return (stored.type + (reason.map { " (\($0))" } ?? ""), event)
        }
    }

    static func proActive(_ harness: Harness) async throws -> Bool {
        try await ReceiptTests.proActive(harness)
    }

    /// Brings u1's subscription to the state the case starts from and makes the notification's
    /// transaction and renewal info.
    static func prepare(_ item: Case, _ harness: Harness) async throws -> (transaction: String?, renewal: RenewalInfoPayload?) {
        switch item.carries {
        case .newChain:
            _ = try await subscribe(harness)
            var purchase = TestStoreCA.Purchase(
                productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId,
                appAccountToken: AppAccountToken.forAppUserID("u1"))
            purchase.price = 9_990
            let minted = try harness.ca.mintTransaction(purchase, signedDate: Date())
            return (minted.jws, renewal(minted.payload, signedIn: 0))
        case .renewal:
            let original = try await subscribe(harness, ageDays: 35, expiresInDays: -5)
            return (try currentPeriod(harness, of: original, signedIn: 0).jws, renewal(original, signedIn: 0))
        case .refunded:
            let original = try await subscribe(harness)
            return (
                try copy(harness, original, signedIn: 0) {
                    $0.revocationDate = Date().addingTimeInterval(-60); $0.revocationReason = 0
                }.jws, nil
            )
        case .reinstated:
            let original = try await subscribe(harness)
            let refunded = try copy(harness, original, signedIn: -300) {
                $0.revocationDate = Date().addingTimeInterval(-400); $0.revocationReason = 0
            }
            #expect(try await ReceiptTests.notify(harness, .refund, transaction: refunded.jws) == 200)
            #expect(try await proActive(harness) == false)
            return (try copy(harness, original, signedIn: 0).jws, nil)
        case .extended:
            let original = try await subscribe(harness)
            return (try copy(harness, original, signedIn: 0) { $0.expiresDate = $0.expiresDate!.addingTimeInterval(30 * day) }.jws, nil)
        case .autoRenewOff:
            let original = try await subscribe(harness)
            return (try copy(harness, original, signedIn: -700).jws, renewal(original, signedIn: 0) { $0.autoRenewStatus = 0 })
        case .autoRenewOn:
            let original = try await subscribe(harness)
            let off = renewal(original, signedIn: -300) { $0.autoRenewStatus = 0 }
            #expect(try await ReceiptTests.notify(harness, .didChangeRenewalStatus, subtype: .autoRenewDisabled, renewal: off) == 200)
            return (try copy(harness, original, signedIn: -700).jws, renewal(original, signedIn: 0))
        case .billingRetry, .billingRetryNoGrace:
            let original = try await subscribe(harness, ageDays: 31, expiresInDays: -1)
            let grace = item.carries == .billingRetry
            let info = renewal(original, signedIn: 0) {
                $0.isInBillingRetryPeriod = true
                $0.gracePeriodExpiresDate = grace ? Date().addingTimeInterval(5 * day) : nil
            }
            return (try copy(harness, original, signedIn: -700).jws, info)
        case .otherProduct:
            let original = try await subscribe(harness)
            return (try copy(harness, original, signedIn: -700).jws, renewal(original, signedIn: 0) { $0.autoRenewProductId = "pro_yearly" })
        case .expired:
            let original = try await subscribe(harness, ageDays: 31, expiresInDays: -1)
            return (try copy(harness, original, signedIn: -700).jws, renewal(original, signedIn: 0) { $0.autoRenewStatus = 0 })
        case .graceEnded:
            let original = try await subscribe(harness, ageDays: 31, expiresInDays: -1)
            let grace = renewal(original, signedIn: -300) {
                $0.isInBillingRetryPeriod = true
                $0.gracePeriodExpiresDate = Date().addingTimeInterval(5 * day)
            }
            #expect(try await ReceiptTests.notify(harness, .didFailToRenew, subtype: .gracePeriod, renewal: grace) == 200)
            #expect(try await proActive(harness) == true)
            let ended = renewal(original, signedIn: 0) {
                $0.isInBillingRetryPeriod = true
                $0.gracePeriodExpiresDate = Date().addingTimeInterval(-60)
            }
            return (try copy(harness, original, signedIn: -700).jws, ended)
        case .consumable:
            _ = try await subscribe(harness)
            var purchase = TestStoreCA.Purchase(
                productId: "coins_100", type: .consumable, bundleId: harness.app.bundleId, appAccountToken: AppAccountToken.forAppUserID("u1"))
            purchase.price = 990
            return (try harness.ca.mintTransaction(purchase, signedDate: Date()).jws, nil)
        case .unchanged:
            let original = try await subscribe(harness)
            return (try copy(harness, original, signedIn: -700).jws, renewal(original, signedIn: -800))
        case .nothing:
            _ = try await subscribe(harness)
            return (nil, nil)
        }
    }

    @Test("each notification type and subtype changes entitlements and stores events as the table says, once", arguments: Self.cases)
    func notification(_ item: Case) async throws {
        for kind in TestDatabaseKind.available {
            try await ReceiptTests.withHarness(kind) { harness in
                let (transaction, renewal) = try await Self.prepare(item, harness)
                let before = try await Self.events(harness).count
                #expect(try await ReceiptTests.notify(harness, item.type, subtype: item.subtype, transaction: transaction, renewal: renewal) == 200)
                let made = try await Self.events(harness).dropFirst(before)
                #expect(made.map(\.name) == item.events, "\(item.name) on \(kind)")
                #expect(try await Self.proActive(harness) == item.entitled, "\(item.name) on \(kind)")
                // Apple sends a notification again when it is not sure we got it (a new UUID is a
                // new notification carrying the same data): nothing more happens.
                #expect(try await ReceiptTests.notify(harness, item.type, subtype: item.subtype, transaction: transaction, renewal: renewal) == 200)
                #expect(try await Self.events(harness).count == before + item.events.count, "\(item.name) repeated on \(kind)")
                #expect(try await Self.proActive(harness) == item.entitled)
            }
        }
    }

    @Test("an extension extends: the later expiry is in CustomerInfo, the event carries it, and an older copy arriving late changes nothing")
    func extensionExtends() async throws {
        for kind in TestDatabaseKind.available {
            try await ReceiptTests.withHarness(kind) { harness in
                let original = try await Self.subscribe(harness, expiresInDays: 8)
                let extended = try Self.copy(harness, original, signedIn: 0) { $0.expiresDate = $0.expiresDate!.addingTimeInterval(30 * Self.day) }
                #expect(try await ReceiptTests.notify(harness, .renewalExtended, transaction: extended.jws) == 200)
                let pro = try #require(ReceiptTests.entitlement(try await harness.customerInfo("u1"), "pro"))
                let newExpiry = WireDate.format(extended.payload.expiresDate!)
                #expect(pro["expires_date"] as? String == newExpiry)
                let events = try await Self.events(harness)
                #expect(events.last?.name == "SUBSCRIPTION_EXTENDED")
                let announced = try #require(events.last?.body["expiration_at_ms"] as? Int64)
                #expect(abs(announced - extended.payload.expiresDate!.epochMilliseconds) <= 1)  // the JWS carries whole milliseconds
                // The copy signed before the extension, delivered late (a DID_RENEW retried):
                // the expiry stays the extended one.
                let stale = try Self.copy(harness, original, signedIn: -60)
                #expect(try await ReceiptTests.notify(harness, .didRenew, transaction: stale.jws) == 200)
                #expect(ReceiptTests.entitlement(try await harness.customerInfo("u1"), "pro")?["expires_date"] as? String == newExpiry)
                // The device posting the extended copy itself records nothing new.
                #expect(try await harness.post(user: "u1", jws: extended.jws).status == 200)
                #expect(try await Self.events(harness).count == events.count)
            }
        }
    }

    @Test("a refund of an older period leaves the current one and makes no CANCELLATION; the current period's refund does")
    func refundOfOlderPeriod() async throws {
        for kind in TestDatabaseKind.available {
            try await ReceiptTests.withHarness(kind) { harness in
                let original = try await Self.subscribe(harness, ageDays: 35, expiresInDays: -5)
                let current = try Self.currentPeriod(harness, of: original, signedIn: -300)
                #expect(try await ReceiptTests.notify(harness, .didRenew, transaction: current.jws) == 200)
                let before = try await Self.events(harness)
                #expect(before.map(\.name) == ["INITIAL_PURCHASE", "RENEWAL"])
                #expect(before.last?.body["renewal_number"] as? Int == 2)
                let olderRefund = try Self.copy(harness, original, signedIn: 0) { $0.revocationDate = Date().addingTimeInterval(-60) }
                #expect(try await ReceiptTests.notify(harness, .refund, transaction: olderRefund.jws) == 200)
                #expect(try await Self.proActive(harness) == true)
                #expect(try await Self.events(harness).count == before.count)
                let currentRefund = try Self.copy(harness, current.payload, signedIn: 0) { $0.revocationDate = Date().addingTimeInterval(-30) }
                #expect(try await ReceiptTests.notify(harness, .refund, transaction: currentRefund.jws) == 200)
                #expect(try await Self.proActive(harness) == false)
                let refund = try #require(try await Self.events(harness).last)
                #expect(refund.name == "CANCELLATION (CUSTOMER_SUPPORT)")
                #expect(refund.body["price_in_purchased_currency"] as? Double == -9.99)
                #expect(refund.body["transaction_id"] as? String == current.payload.transactionId)
            }
        }
    }

    @Test("a refund of a transaction never stored is a refund, not a purchase")
    func refundOfUnknownTransaction() async throws {
        for kind in TestDatabaseKind.available {
            try await ReceiptTests.withHarness(kind) { harness in
                let original = try await Self.subscribe(harness, ageDays: 35, expiresInDays: -5)
                let renewal = try Self.currentPeriod(harness, of: original, signedIn: -300)
                let refunded = try Self.copy(harness, renewal.payload, signedIn: 0) { $0.revocationDate = Date().addingTimeInterval(-60) }
                #expect(try await ReceiptTests.notify(harness, .refund, transaction: refunded.jws) == 200)
                #expect(try await Self.events(harness).map(\.name) == ["INITIAL_PURCHASE", "CANCELLATION (CUSTOMER_SUPPORT)"])
                #expect(try await Self.proActive(harness) == false)
            }
        }
    }

    @Test("billing trouble: BILLING_ISSUE with the grace period's end and a BILLING_ERROR cancellation; its end one EXPIRATION, not two")
    func billingTrouble() async throws {
        for kind in TestDatabaseKind.available {
            try await ReceiptTests.withHarness(kind) { harness in
                let original = try await Self.subscribe(harness, ageDays: 31, expiresInDays: -1)
                let graceEnd = Date(epochMilliseconds: Date().addingTimeInterval(5 * Self.day).epochMilliseconds)  // whole milliseconds, as signed
                let grace = Self.renewal(original, signedIn: -300) {
                    $0.isInBillingRetryPeriod = true
                    $0.gracePeriodExpiresDate = graceEnd
                }
                #expect(try await ReceiptTests.notify(harness, .didFailToRenew, subtype: .gracePeriod, renewal: grace) == 200)
                let issue = try #require(try await Self.events(harness).first { $0.name == "BILLING_ISSUE" })
                #expect(issue.body["grace_period_expiration_at_ms"] as? Int64 == graceEnd.epochMilliseconds)
                let ended = Self.renewal(original, signedIn: -200) {
                    $0.isInBillingRetryPeriod = true
                    $0.gracePeriodExpiresDate = Date().addingTimeInterval(-60)
                }
                #expect(try await ReceiptTests.notify(harness, .gracePeriodExpired, renewal: ended) == 200)
                #expect(try await Self.proActive(harness) == false)
                let expired = Self.renewal(original, signedIn: 0) { $0.autoRenewStatus = 0 }
                #expect(try await ReceiptTests.notify(harness, .expired, subtype: .billingRetry, renewal: expired) == 200)
                #expect(
                    try await Self.events(harness).map(\.name) == [
                        "INITIAL_PURCHASE", "BILLING_ISSUE", "CANCELLATION (BILLING_ERROR)", "EXPIRATION (BILLING_ERROR)",
                    ])
            }
        }
    }

    @Test("without Apple's notification, the server's own check reports the end of a grace period, once, and Apple's later one adds nothing")
    func graceEndByTheServer() async throws {
        for kind in TestDatabaseKind.available {
            try await ReceiptTests.withHarness(kind) { harness in
                let store = harness.server.store
                let original = try await Self.subscribe(harness, ageDays: 31, expiresInDays: -1)
                let graceEnd = Date().addingTimeInterval(3_600)
                let grace = Self.renewal(original, signedIn: -300) {
                    $0.isInBillingRetryPeriod = true
                    $0.gracePeriodExpiresDate = graceEnd
                }
                #expect(try await ReceiptTests.notify(harness, .didFailToRenew, subtype: .gracePeriod, renewal: grace) == 200)
                _ = try await store.recordExpirations(apps: [harness.app], now: Date())  // the first check notes the time
                #expect(try await store.recordExpirations(apps: [harness.app], now: graceEnd.addingTimeInterval(-60)) == 0)
                #expect(try await store.recordExpirations(apps: [harness.app], now: graceEnd.addingTimeInterval(61)) == 1)
                #expect(try await store.recordExpirations(apps: [harness.app], now: graceEnd.addingTimeInterval(200)) == 0)
                let ended = Self.renewal(original, signedIn: 0) {
                    $0.isInBillingRetryPeriod = true
                    $0.gracePeriodExpiresDate = graceEnd
                }
                #expect(try await ReceiptTests.notify(harness, .gracePeriodExpired, renewal: ended) == 200)
                #expect(
                    try await Self.events(harness).map(\.name) == [
                        "INITIAL_PURCHASE", "BILLING_ISSUE", "CANCELLATION (BILLING_ERROR)", "EXPIRATION (BILLING_ERROR)",
                    ])
            }
        }
    }
}
