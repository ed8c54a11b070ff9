import CountersignAppStore
import CountersignCore
import CountersignServerCore
import Foundation

/// What the store held of a transaction before a copy of it arrived.
public struct StoredCopy: Sendable, Equatable {
    public var signedMs: Int64
    public var expiresMs: Int64?
    public var revokedMs: Int64?

    public init(signedMs: Int64, expiresMs: Int64?, revokedMs: Int64?) {
        self.signedMs = signedMs
        self.expiresMs = expiresMs
        self.revokedMs = revokedMs
    }
}

/// A transaction's place in its chain (same app, environment and original transaction), read
/// from the stored purchases before the events are decided.
public struct ChainPlace: Sendable, Equatable {
    /// Its place from 1 (the first purchase): one more than the periods bought before it.
    public var renewalNumber: Int64
    /// The period type of the chain's transaction before it (a renewal's `is_trial_conversion`).
    public var previousPeriodType: String?
    /// Another transaction of the chain was bought after it (it is not the latest period).
    public var hasLaterPeriod: Bool

    public init(renewalNumber: Int64, previousPeriodType: String?, hasLaterPeriod: Bool) {
        self.renewalNumber = renewalNumber
        self.previousPeriodType = previousPeriodType
        self.hasLaterPeriod = hasLaterPeriod
    }
}

/// What a copy of a transaction changes, given what was stored of it before
/// (``EventRules/change(of:stored:now:)``).
public enum CopyChange: Sendable, Equatable {
    /// Nothing to report: a copy signed no later than the stored one, or one that changes nothing
    /// an event tells.
    case none
    /// New and not revoked: its purchase event.
    case purchase
    /// Revoked now and not before, or new and already revoked (the revocation, milliseconds).
    case refund(revocation: Int64)
    /// Revoked before and not now (the copy's signing time, milliseconds).
    case refundReversed(signed: Int64)
    /// A later expiry than the stored one.
    case extended

    /// Whether the events need the transaction's ``ChainPlace``: anything but nothing, or the
    /// purchase of a chain's first transaction (which is first by its ids).
    public func needsPlace(_ transaction: VerifiedTransaction) -> Bool {
        switch self {
        case .none: false
        case .purchase: transaction.transactionId != transaction.originalTransactionId
        case .refund, .refundReversed, .extended: true
        }
    }
}

/// Which of RevenueCat's webhook events each change makes (docs/webhooks.md, "Apple's
/// notifications, type by type", is the same table in prose). Pure: the facts come in, the events
/// go out; ids are derived from the change, so a change reported twice is stored once.
public enum EventRules {
    /// What a copy of a transaction changes, given what was stored of it before (nil: nothing,
    /// the copy is new), at `now` (milliseconds; a copy without a signing date counts as signed now):
    /// - new and not revoked: ``CopyChange/purchase``;
    /// - revoked now and not before, or new and already revoked: ``CopyChange/refund(revocation:)``;
    /// - revoked before and not now: ``CopyChange/refundReversed(signed:)``;
    /// - a later expiry than the stored one: ``CopyChange/extended``.
    /// A copy signed no later than the stored one changes nothing. A stored revocation no earlier
    /// than the copy was signed stands (a copy never undoes a later fact).
    public static func change(of transaction: VerifiedTransaction, stored: StoredCopy?, now: Int64) -> CopyChange {
        let signed = transaction.payload.signedDate?.epochMilliseconds ?? now
        if let stored, signed <= stored.signedMs { return .none }
        let revocation = transaction.payload.revocationDate?.epochMilliseconds ?? stored?.revokedMs.flatMap { $0 >= signed ? $0 : nil }
        let wasRevoked = stored?.revokedMs != nil
        if let revocation, stored == nil || !wasRevoked { return .refund(revocation: revocation) }
        guard let stored else { return .purchase }
        if wasRevoked, revocation == nil { return .refundReversed(signed: signed) }
        if revocation == nil, let expires = transaction.payload.expiresDate?.epochMilliseconds, expires > (stored.expiresMs ?? .max) {
            return .extended
        }
        return .none
    }

    /// The events `change` makes for `user`:
    /// - a purchase: its purchase event (``WebhookEvent/purchase(_:kind:app:user:now:)``);
    /// - a refund: `CANCELLATION` (CUSTOMER_SUPPORT, negative price) when it is the chain's latest
    ///   period, nothing for an earlier period (its refund leaves the current period, as
    ///   RevenueCat reports it);
    /// - a refund reversed: `REFUND_REVERSED`;
    /// - an extension: `SUBSCRIPTION_EXTENDED`.
    /// `place` is the transaction's ``ChainPlace`` when ``CopyChange/needsPlace(_:)`` asked for it.
    public static func transactionEvents(
        _ change: CopyChange, _ transaction: VerifiedTransaction, place: ChainPlace?, app: AppConfiguration, user: String, now: Date
    ) -> [WebhookEvent] {
        var subject = EventTransaction(transaction)
        if let place { subject.place(place) }
        switch change {
        case .none:
            return []
        case .purchase:
            return [.purchase(subject, kind: transaction.kind, app: app, user: user, now: now)]
        case .refund(let revocation):
            if transaction.kind == .autoRenewable, place?.hasLaterPeriod ?? false { return [] }
            var event = WebhookEvent(
                .cancellation, subject: "\(transaction.transactionId)\u{0}\(revocation)", app: app, user: user, transaction: subject, now: now,
                money: .refund)
            event.cancelReason = "CUSTOMER_SUPPORT"
            return [event]
        case .refundReversed(let signed):
            return [
                WebhookEvent(
                    .refundReversed, subject: "\(transaction.transactionId)\u{0}\(signed)", app: app, user: user, transaction: subject, now: now,
                    money: .charge)
            ]
        case .extended:
            return [extensionEvent(app: app, owner: user, transaction: subject, now: now)]
        }
    }

    /// The events a planned purchase makes: a `TRANSFER` when its chain moves (not within the
    /// transfer window), and what the transaction itself makes for its owner when its row is
    /// written (``transactionEvents(_:_:place:app:user:now:)``), each marked as the
    /// transaction's origin says (imported, delivered).
    public static func purchaseEvents(
        _ plan: PurchasePlan, _ facts: PurchaseFacts, _ transaction: VerifiedTransaction, change: CopyChange, place: ChainPlace?,
        app: AppConfiguration, now: Date
    ) -> [WebhookEvent] {
        var events: [WebhookEvent] = []
        if case .update(let user) = plan.owner, !plan.dampsTransfer {
            var transfer = WebhookEvent(
                .transfer, subject: "\(transaction.originalTransactionId)\u{0}\(user.rawValue)\u{0}\(now.epochMilliseconds)",
                app: app, user: user.rawValue, transaction: EventTransaction(transaction), now: now)
            if case .user(let previous) = facts.chainOwner { transfer.transferredFrom = [previous.rawValue] }
            transfer.transferredTo = [user.rawValue]
            events.append(transfer)
        }
        if plan.purchase != .none, let owner = plan.eventOwner(facts) {
            events += transactionEvents(change, transaction, place: place, app: app, user: owner.rawValue, now: now)
        }
        let (imported, delivered) = transaction.eventHandling
        for index in events.indices {
            events[index].imported = imported
            events[index].delivered = delivered
        }
        return events
    }

    // MARK: Notifications and renewal state

    /// The notification types that make events of their own (``notificationEvents(_:renewal:app:owner:subject:now:)``).
    public static let typesWithEvents: Set<NotificationType> = [.expired, .gracePeriodExpired, .didChangeRenewalPref, .renewalExtended]

    /// Events a notification's type stands for by itself (the transaction and renewal state it
    /// carries make theirs as they are stored): `EXPIRED` and `GRACE_PERIOD_EXPIRED` an
    /// `EXPIRATION` (one per period, whichever comes first), `DID_CHANGE_RENEWAL_PREF` a
    /// `PRODUCT_CHANGE`, `RENEWAL_EXTENDED` a `SUBSCRIPTION_EXTENDED` (the same event as the
    /// later-signed copy's, so once).
    public static func notificationEvents(
        _ payload: NotificationPayload, renewal: RenewalInfoPayload?, app: AppConfiguration, owner: String,
        subject: EventTransaction, now: Date
    ) -> [WebhookEvent] {
        switch payload.notificationType {
        case .expired:
            var event = expirationEvent(app: app, owner: owner, transaction: subject, now: now)
            event.expirationReason = expirationReason(payload.subtype)
            return [event]
        case .gracePeriodExpired:
            var event = expirationEvent(app: app, owner: owner, transaction: subject, now: now)
            event.expirationReason = "BILLING_ERROR"
            return [event]
        case .didChangeRenewalPref:
            // One per renewal state: the same change sent again under a new UUID is not news.
            let change = renewal?.signedDate.map { "\(subject.originalTransactionId)\u{0}\($0.epochMilliseconds)" } ?? payload.notificationUUID
            var event = WebhookEvent(.productChange, subject: change, app: app, user: owner, transaction: subject, now: now)
            event.newProductId = renewal?.autoRenewProductId
            return [event]
        case .renewalExtended:
            return [extensionEvent(app: app, owner: owner, transaction: subject, now: now)]
        default:
            return []
        }
    }

    /// The `PRODUCT_CHANGE` of a plan changed at once within a period (a web subscription's
    /// upgrade or downgrade): about the transaction it replaced, naming the new product; the new
    /// plan's transaction makes its own `RENEWAL` as it is stored (RevenueCat's "immediate
    /// product change" flow). One per replaced transaction.
    public static func immediateProductChange(replaced: EventTransaction, newProductId: String, app: AppConfiguration, owner: String, now: Date)
        -> WebhookEvent
    {
        var event = WebhookEvent(
            .productChange, subject: "\(replaced.transactionId)\u{0}replaced", app: app, user: owner, transaction: replaced, now: now)
        event.newProductId = newProductId
        return event
    }

    /// RevenueCat's `expiration_reason` for the subtype of Apple's `EXPIRED`: VOLUNTARY is
    /// UNSUBSCRIBE, BILLING_RETRY is BILLING_ERROR, PRICE_INCREASE is PRICE_INCREASE, and
    /// PRODUCT_NOT_FOR_SALE (the developer took the product off sale) is DEVELOPER_INITIATED;
    /// anything else UNKNOWN.
    public static func expirationReason(_ subtype: NotificationSubtype?) -> String {
        switch subtype {
        case .voluntary?: "UNSUBSCRIBE"
        case .billingRetry?: "BILLING_ERROR"
        case .priceIncrease?: "PRICE_INCREASE"
        case .productNotForSale?: "DEVELOPER_INITIATED"
        default: "UNKNOWN"
        }
    }

    /// The `expiration_reason` the server's own expiry check gives a period that ended, from the
    /// chain's renewal state: BILLING_ERROR in billing retry, UNSUBSCRIBE with auto-renew off,
    /// else UNKNOWN (no state, or one that meant to renew).
    public static func expirationReason(inBillingRetry: Bool, autoRenewStatus: Int64?) -> String {
        inBillingRetry ? "BILLING_ERROR" : autoRenewStatus == 0 ? "UNSUBSCRIBE" : "UNKNOWN"
    }

    /// The `EXPIRATION` of a subscription period: one per chain and expiry, whether Apple's
    /// `EXPIRED` or `GRACE_PERIOD_EXPIRED` notification or the server's own check reports it first.
    public static func expirationEvent(app: AppConfiguration, owner: String, transaction: EventTransaction, now: Date) -> WebhookEvent {
        WebhookEvent(
            .expiration, subject: "\(transaction.originalTransactionId)\u{0}\(transaction.expiresAtMs ?? 0)",
            app: app, user: owner, transaction: transaction, now: now)
    }

    /// The `SUBSCRIPTION_EXTENDED` of a transaction whose expiry moved: one per new expiry.
    public static func extensionEvent(app: AppConfiguration, owner: String, transaction: EventTransaction, now: Date) -> WebhookEvent {
        WebhookEvent(
            .subscriptionExtended, subject: "\(transaction.transactionId)\u{0}\(transaction.expiresAtMs ?? 0)",
            app: app, user: owner, transaction: transaction, now: now)
    }

    /// `CANCELLATION` (UNSUBSCRIBE) when auto-renew was turned off, `UNCANCELLATION` when back on,
    /// while the subscription has not expired; when billing retry began, `BILLING_ISSUE` (with
    /// the grace period's end, if one runs) and `CANCELLATION` (BILLING_ERROR), as RevenueCat
    /// sends both.
    public static func stateEvents(
        _ change: StateChange, chain: String, renewal: RenewalInfoPayload, app: AppConfiguration, owner: String,
        subject: EventTransaction, now: Date
    ) -> [WebhookEvent] {
        func event(_ type: WebhookEventType, _ tag: String = "") -> WebhookEvent {
            WebhookEvent(type, subject: "\(chain)\u{0}\(change.signedMs)\(tag)", app: app, user: owner, transaction: subject, now: now)
        }
        var events: [WebhookEvent] = []
        // Turning auto-renew off or on is news while the subscription runs (or is in a grace
        // period); the state that comes with its expiry is not a cancellation.
        let running = max(subject.expiresAtMs ?? .max, renewal.gracePeriodExpiresDate?.epochMilliseconds ?? .min) > now.epochMilliseconds
        if change.wasAutoRenewing != change.autoRenewing, running {
            var changed = event(change.autoRenewing ? .uncancellation : .cancellation)
            if !change.autoRenewing { changed.cancelReason = "UNSUBSCRIBE" }
            events.append(changed)
        }
        if change.inBillingRetry, !change.wasInBillingRetry {
            var issue = event(.billingIssue)
            issue.gracePeriodExpirationAtMs = renewal.gracePeriodExpiresDate.map(\.epochMilliseconds)
            var cancellation = event(.cancellation, "\u{0}billing")
            cancellation.cancelReason = "BILLING_ERROR"
            events += [issue, cancellation]
        }
        return events
    }
}

/// A chain's renewal state before and after a newer one was stored.
public struct StateChange: Sendable, Equatable {
    public var wasAutoRenewing: Bool
    public var autoRenewing: Bool
    public var wasInBillingRetry: Bool
    public var inBillingRetry: Bool
    public var signedMs: Int64

    public init(wasAutoRenewing: Bool, autoRenewing: Bool, wasInBillingRetry: Bool, inBillingRetry: Bool, signedMs: Int64) {
        self.wasAutoRenewing = wasAutoRenewing
        self.autoRenewing = autoRenewing
        self.wasInBillingRetry = wasInBillingRetry
        self.inBillingRetry = inBillingRetry
        self.signedMs = signedMs
    }

    /// The change a renewal state signed at `signedMs` makes over the stored one (nil: none
    /// stored; a chain without a stored state renews, as the App Store's default, and is not in
    /// retry).
    public init(stored: (autoRenewStatus: Int64?, inBillingRetry: Bool)?, renewal: RenewalInfoPayload, signedMs: Int64) {
        self.init(
            wasAutoRenewing: (stored?.autoRenewStatus ?? 1) == 1, autoRenewing: (renewal.autoRenewStatus ?? 1) == 1,
            wasInBillingRetry: stored?.inBillingRetry ?? false, inBillingRetry: renewal.isInBillingRetryPeriod ?? false, signedMs: signedMs)
    }
}
