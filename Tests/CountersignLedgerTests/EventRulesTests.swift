import CountersignAppStore
import CountersignCore
import CountersignLedger
import Foundation
import Testing

/// Which webhook events each change makes (RevenueCat's table in docs/webhooks.md), rule by
/// rule from facts alone. The server's WebhookTests and AppleLifecycleTests reach the same rules
/// through the API and a database; each case here names the one it stands under.
@Suite("Event rules")
struct EventRulesTests {
    static let app = Fixture.app()
    static let first = ChainPlace(renewalNumber: 1, previousPeriodType: nil, hasLaterPeriod: false)

    static func events(_ change: CopyChange, _ transaction: VerifiedTransaction, place: ChainPlace? = nil) -> [WebhookEvent] {
        EventRules.transactionEvents(change, transaction, place: place, app: app, user: "alice", now: Fixture.now)
    }

    // MARK: What a copy changes

    @Test("a new copy is a purchase; already revoked, a refund (AppleLifecycleTests: a refund of a transaction never stored)")
    func newCopies() throws {
        #expect(EventRules.change(of: try Fixture.transaction(), stored: nil, now: Fixture.nowMs) == .purchase)
        let refunded = try Fixture.transaction(revokedAgo: 60)
        #expect(EventRules.change(of: refunded, stored: nil, now: Fixture.nowMs) == .refund(revocation: Fixture.nowMs - 60_000))
    }

    @Test("a copy signed no later than the stored one changes nothing (the older copy arriving late)")
    func olderCopies() throws {
        let stored = StoredCopy(signedMs: Fixture.nowMs, expiresMs: nil, revokedMs: nil)
        #expect(EventRules.change(of: try Fixture.transaction(revokedAgo: 1), stored: stored, now: Fixture.nowMs) == .none)
        #expect(EventRules.change(of: try Fixture.transaction(signedAgo: 5), stored: stored, now: Fixture.nowMs) == .none)
    }

    @Test("revoked now and not before is a refund; revoked before and not now, a reversal (LifecycleTests.refundReversed)")
    func refunds() throws {
        let earlier = StoredCopy(signedMs: Fixture.nowMs - 60_000, expiresMs: Fixture.nowMs + 86_400_000, revokedMs: nil)
        let refund = EventRules.change(of: try Fixture.transaction(revokedAgo: 30), stored: earlier, now: Fixture.nowMs)
        #expect(refund == .refund(revocation: Fixture.nowMs - 30_000))
        var revoked = earlier
        revoked.revokedMs = Fixture.nowMs - 90_000
        #expect(EventRules.change(of: try Fixture.transaction(), stored: revoked, now: Fixture.nowMs) == .refundReversed(signed: Fixture.nowMs))
        // A stored refund no earlier than the copy was signed stands: the copy predates it.
        revoked.revokedMs = Fixture.nowMs + 1
        #expect(EventRules.change(of: try Fixture.transaction(), stored: revoked, now: Fixture.nowMs) == .none)
    }

    @Test("a later expiry than the stored one is an extension; the same or an earlier one nothing (AppleLifecycleTests: an extension extends)")
    func extensions() throws {
        let transaction = try Fixture.transaction(expiresIn: 40 * Fixture.day)
        let stored = StoredCopy(signedMs: Fixture.nowMs - 1, expiresMs: Fixture.nowMs + 29 * 86_400_000, revokedMs: nil)
        #expect(EventRules.change(of: transaction, stored: stored, now: Fixture.nowMs) == .extended)
        #expect(EventRules.change(of: try Fixture.transaction(), stored: stored, now: Fixture.nowMs) == .none)
    }

    @Test("the chain's place is read only where an event needs it")
    func placeNeeded() throws {
        #expect(!CopyChange.none.needsPlace(try Fixture.transaction()))
        #expect(!CopyChange.purchase.needsPlace(try Fixture.transaction(id: "1000")), "a chain's first transaction is first by its ids")
        #expect(CopyChange.purchase.needsPlace(try Fixture.transaction(id: "2000")))
        #expect(CopyChange.refund(revocation: 0).needsPlace(try Fixture.transaction(id: "1000")))
    }

    // MARK: The events

    @Test("INITIAL_PURCHASE, RENEWAL (with is_trial_conversion after a trial) and NON_RENEWING_PURCHASE (WebhookTests: each event once)")
    func purchaseEvents() throws {
        let initial = Self.events(.purchase, try Fixture.transaction(id: "1000"))
        #expect(initial.map(\.type) == [.initialPurchase])
        #expect(initial[0].renewalNumber == 1)
        #expect(initial[0].priceMilli == 4990)
        #expect(initial[0].entitlementIds == ["pro"])
        let renewal = Self.events(
            .purchase, try Fixture.transaction(), place: ChainPlace(renewalNumber: 2, previousPeriodType: "trial", hasLaterPeriod: false))
        #expect(renewal.map(\.type) == [.renewal])
        #expect(renewal[0].renewalNumber == 2)
        #expect(renewal[0].isTrialConversion == true)
        let normal = Self.events(
            .purchase, try Fixture.transaction(), place: ChainPlace(renewalNumber: 3, previousPeriodType: "normal", hasLaterPeriod: false))
        #expect(normal[0].isTrialConversion == false)
        #expect(Self.events(.purchase, try Fixture.lifetime()).map(\.type) == [.nonRenewingPurchase])
    }

    @Test("a refund of the latest period is a CUSTOMER_SUPPORT CANCELLATION at minus the price; of an earlier period nothing")
    func refundEvents() throws {
        let transaction = try Fixture.transaction(revokedAgo: 30)
        let latest = Self.events(
            .refund(revocation: 7), transaction, place: ChainPlace(renewalNumber: 2, previousPeriodType: nil, hasLaterPeriod: false))
        #expect(latest.map(\.type) == [.cancellation])
        #expect(latest[0].cancelReason == "CUSTOMER_SUPPORT")
        #expect(latest[0].priceMilli == -4990)
        #expect(latest[0].priceUSDMilli == -4990)
        let earlier = ChainPlace(renewalNumber: 2, previousPeriodType: nil, hasLaterPeriod: true)
        #expect(Self.events(.refund(revocation: 7), transaction, place: earlier).isEmpty)
        // A one-time purchase has no later period: its refund is always news.
        #expect(Self.events(.refund(revocation: 7), try Fixture.lifetime(), place: earlier).map(\.type) == [.cancellation])
    }

    @Test("REFUND_REVERSED charges the price again; SUBSCRIPTION_EXTENDED carries the new expiry")
    func reversalAndExtension() throws {
        let reversed = Self.events(.refundReversed(signed: 5), try Fixture.transaction(), place: Self.first)
        #expect(reversed.map(\.type) == [.refundReversed])
        #expect(reversed[0].priceMilli == 4990)
        let transaction = try Fixture.transaction(expiresIn: 40 * Fixture.day)
        let extended = Self.events(.extended, transaction, place: Self.first)
        #expect(extended.map(\.type) == [.subscriptionExtended])
        #expect(extended[0].expirationAtMs == transaction.payload.expiresDate?.epochMilliseconds)
        #expect(extended[0].priceMilli == 0)
        #expect(Self.events(.none, transaction).isEmpty)
    }

    @Test("event ids come from the change: the same change twice is one event, another change another")
    func stableIds() throws {
        let transaction = try Fixture.transaction(revokedAgo: 30)
        let once = Self.events(.refund(revocation: 7), transaction, place: Self.first)
        let again = EventRules.transactionEvents(
            .refund(revocation: 7), transaction, place: Self.first, app: Self.app, user: "alice", now: Fixture.now.addingTimeInterval(60))
        #expect(once[0].id == again[0].id)
        #expect(once[0].id != Self.events(.refund(revocation: 8), transaction, place: Self.first)[0].id)
    }

    @Test("a purchase that moves a chain makes a TRANSFER from the old owner to the new, not again within the window (secondDevice)")
    func transfers() throws {
        let transaction = try Fixture.transaction()
        let facts = PurchaseFacts(posterSeen: nil, tokenUser: nil, storedSignedDate: Fixture.nowMs, chainOwner: .user("bob"))
        var plan = PurchasePlan(status: .transferred, customer: .insert, purchase: .none, owner: .update("alice"))
        let events = EventRules.purchaseEvents(plan, facts, transaction, change: .none, place: nil, app: Self.app, now: Fixture.now)
        #expect(events.map(\.type) == [.transfer])
        #expect(events[0].transferredFrom == ["bob"])
        #expect(events[0].transferredTo == ["alice"])
        plan.dampsTransfer = true
        #expect(EventRules.purchaseEvents(plan, facts, transaction, change: .none, place: nil, app: Self.app, now: Fixture.now).isEmpty)
    }

    @Test("a new purchase's event goes to the chain's owner and an import's events are marked imported and undelivered")
    func purchaseEventOwner() throws {
        let facts = PurchaseFacts(posterSeen: nil, tokenUser: nil, storedSignedDate: nil, chainOwner: .none)
        let plan = PurchasePlan(status: .boundToAnotherUser, customer: .insert, purchase: .insert, owner: .insert("bob"))
        let transaction = try Fixture.transaction(id: "1000")
        let live = EventRules.purchaseEvents(plan, facts, transaction, change: .purchase, place: nil, app: Self.app, now: Fixture.now)
        #expect(live.map(\.appUserId) == ["bob"])
        #expect(live.map(\.imported) == [false])
        let imported = try VerifiedTransaction(imported: transaction.payload, app: Self.app, deliversEvents: false)
        let marked = EventRules.purchaseEvents(plan, facts, imported, change: .purchase, place: nil, app: Self.app, now: Fixture.now)
        #expect(marked.map(\.imported) == [true])
        #expect(marked.map(\.delivered) == [false])
        // Nothing written of the purchase's row: no purchase event (an already recorded copy).
        var none = plan
        none.purchase = .none
        #expect(EventRules.purchaseEvents(none, facts, transaction, change: .purchase, place: nil, app: Self.app, now: Fixture.now).isEmpty)
    }

    // MARK: Notifications and renewal state

    static func notification(_ type: NotificationType, _ subtype: NotificationSubtype? = nil) -> NotificationPayload {
        NotificationPayload(
            notificationType: type, subtype: subtype, notificationUUID: "n-1", data: .init(bundleId: "com.example.demo", environment: .sandbox),
            signedDate: Fixture.now)
    }

    static var subject: EventTransaction {
        get throws { EventTransaction(try Fixture.transaction()) }
    }

    @Test(
        "EXPIRED's subtype is RevenueCat's expiration_reason; GRACE_PERIOD_EXPIRED is BILLING_ERROR, the same event id (AppleLifecycleTests: billing trouble)"
    )
    func expirations() throws {
        let cases: [(NotificationSubtype?, String)] = [
            (.voluntary, "UNSUBSCRIBE"), (.billingRetry, "BILLING_ERROR"), (.priceIncrease, "PRICE_INCREASE"),
            (.productNotForSale, "DEVELOPER_INITIATED"), (nil, "UNKNOWN"),
        ]
        for (subtype, reason) in cases {
            let events = EventRules.notificationEvents(
                Self.notification(.expired, subtype), renewal: nil, app: Self.app, owner: "alice", subject: try Self.subject, now: Fixture.now)
            #expect(events.map(\.type) == [.expiration])
            #expect(events.first?.expirationReason == reason)
        }
        let grace = EventRules.notificationEvents(
            Self.notification(.gracePeriodExpired), renewal: nil, app: Self.app, owner: "alice", subject: try Self.subject, now: Fixture.now)
        #expect(grace.first?.expirationReason == "BILLING_ERROR")
        let check = EventRules.expirationEvent(app: Self.app, owner: "alice", transaction: try Self.subject, now: Fixture.now)
        #expect(grace.first?.id == check.id, "Apple's notification and the server's own check report one EXPIRATION")
    }

    @Test("the server's own expiry check: BILLING_ERROR in retry, UNSUBSCRIBE with auto-renew off, else UNKNOWN")
    func checkReasons() {
        #expect(EventRules.expirationReason(inBillingRetry: true, autoRenewStatus: 0) == "BILLING_ERROR")
        #expect(EventRules.expirationReason(inBillingRetry: false, autoRenewStatus: 0) == "UNSUBSCRIBE")
        #expect(EventRules.expirationReason(inBillingRetry: false, autoRenewStatus: 1) == "UNKNOWN")
        #expect(EventRules.expirationReason(inBillingRetry: false, autoRenewStatus: nil) == "UNKNOWN")
    }

    @Test("DID_CHANGE_RENEWAL_PREF is a PRODUCT_CHANGE once per renewal state; RENEWAL_EXTENDED the extension's event; others none")
    func otherTypes() throws {
        var renewal = RenewalInfoPayload(originalTransactionId: "1000", productId: "pro_monthly", environment: .sandbox, signedDate: Fixture.now)
        renewal.autoRenewProductId = "pro_yearly"
        let change = EventRules.notificationEvents(
            Self.notification(.didChangeRenewalPref), renewal: renewal, app: Self.app, owner: "alice", subject: try Self.subject, now: Fixture.now)
        #expect(change.map(\.type) == [.productChange])
        #expect(change.first?.newProductId == "pro_yearly")
        var resent = Self.notification(.didChangeRenewalPref)
        resent.notificationUUID = "n-2"
        let again = EventRules.notificationEvents(
            resent, renewal: renewal, app: Self.app, owner: "alice", subject: try Self.subject, now: Fixture.now)
        #expect(again.first?.id == change.first?.id)
        let extended = EventRules.notificationEvents(
            Self.notification(.renewalExtended), renewal: nil, app: Self.app, owner: "alice", subject: try Self.subject, now: Fixture.now)
        #expect(extended.first?.id == EventRules.extensionEvent(app: Self.app, owner: "alice", transaction: try Self.subject, now: Fixture.now).id)
        #expect(EventRules.typesWithEvents == [.expired, .gracePeriodExpired, .didChangeRenewalPref, .renewalExtended])
        for type in [NotificationType.didRenew, .refund, .subscribed, .didFailToRenew] {
            #expect(
                EventRules.notificationEvents(
                    Self.notification(type), renewal: nil, app: Self.app, owner: "alice", subject: try Self.subject, now: Fixture.now
                ).isEmpty)
        }
    }

    static func state(was: (Int64?, Bool)?, autoRenew: Int?, retry: Bool, grace: Date? = nil) -> (StateChange, RenewalInfoPayload) {
        var renewal = RenewalInfoPayload(originalTransactionId: "1000", productId: "pro_monthly", environment: .sandbox, signedDate: Fixture.now)
        renewal.autoRenewStatus = autoRenew
        renewal.isInBillingRetryPeriod = retry
        renewal.gracePeriodExpiresDate = grace
        return (StateChange(stored: was.map { ($0.0, $0.1) }, renewal: renewal, signedMs: Fixture.nowMs), renewal)
    }

    static func stateEvents(_ state: (StateChange, RenewalInfoPayload), subject: EventTransaction) -> [WebhookEvent] {
        EventRules.stateEvents(state.0, chain: "1000", renewal: state.1, app: Self.app, owner: "alice", subject: subject, now: Fixture.now)
    }

    @Test("auto-renew off is an UNSUBSCRIBE CANCELLATION and back on an UNCANCELLATION, while the subscription runs (WebhookTests)")
    func renewalPreference() throws {
        let off = Self.stateEvents(Self.state(was: nil, autoRenew: 0, retry: false), subject: try Self.subject)
        #expect(off.map(\.type) == [.cancellation])
        #expect(off.first?.cancelReason == "UNSUBSCRIBE")
        #expect(Self.stateEvents(Self.state(was: (0, false), autoRenew: 1, retry: false), subject: try Self.subject).map(\.type) == [.uncancellation])
        #expect(Self.stateEvents(Self.state(was: (1, false), autoRenew: 1, retry: false), subject: try Self.subject).isEmpty)
        // Expired: the state that comes with the expiry is not a cancellation.
        let ended = EventTransaction(try Fixture.transaction(expiresIn: -60))
        #expect(Self.stateEvents(Self.state(was: nil, autoRenew: 0, retry: false), subject: ended).isEmpty)
        // ... unless a grace period still runs.
        let graced = Self.state(was: nil, autoRenew: 0, retry: false, grace: Fixture.now.addingTimeInterval(3600))
        #expect(Self.stateEvents(graced, subject: ended).map(\.type) == [.cancellation])
    }

    @Test("billing retry begins: BILLING_ISSUE with the grace period's end and a BILLING_ERROR CANCELLATION, once (billing trouble)")
    func billingIssue() throws {
        let grace = Fixture.now.addingTimeInterval(6 * Fixture.day)
        let events = Self.stateEvents(Self.state(was: (1, false), autoRenew: 1, retry: true, grace: grace), subject: try Self.subject)
        #expect(events.map(\.type) == [.billingIssue, .cancellation])
        #expect(events[0].gracePeriodExpirationAtMs == grace.epochMilliseconds)
        #expect(events[1].cancelReason == "BILLING_ERROR")
        #expect(events[0].id != events[1].id)
        #expect(Self.stateEvents(Self.state(was: (1, true), autoRenew: 1, retry: true, grace: grace), subject: try Self.subject).isEmpty)
    }
}
