import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignStorage
import Foundation

/// Web purchases through Stripe (docs/stripe.md): a subscription posted by the app (`POST
/// /v1/receipts`, `X-Platform: stripe`) or named by one of Stripe's events is read from Stripe's
/// API with the app's secret key, turned into the ledger's facts (``StripeFacts``) and recorded
/// under the same rules as an App Store purchase.
struct StripeWeb: Sendable {
    let store: CustomerDatabase
    /// The API client of each app that sells through Stripe, by app id.
    let clients: [String: StripeClient]

    init(deployment: DeploymentConfiguration, store: CustomerDatabase) {
        self.store = store
        var clients: [String: StripeClient] = [:]
        for app in deployment.apps {
            if let settings = app.stripe, let client = StripeClient(settings: settings) { clients[app.id] = client }
        }
        self.clients = clients
    }

    func client(for app: AppConfiguration) throws(APIError) -> (StripeSettings, StripeClient) {
        guard let settings = app.stripe, let client = clients[app.id] else {
            throw APIError(.stripeNotConfigured, "app '\(app.id)' does not sell through Stripe (no stripe in its configuration)")
        }
        return (settings, client)
    }

    /// The subscription `token` names: a subscription id, or a Checkout Session that made one.
    func subscription(forToken token: String, app: AppConfiguration) async throws(APIError) -> Stripe.Subscription {
        let (settings, client) = try client(for: app)
        if token.hasPrefix("cs_") {
            let session = try await client.checkoutSession(token)
            guard let id = session.subscription?.id else {
                throw APIError(.invalidField, "the Checkout Session \(token.prefix(64)) has made no subscription (yet)")
            }
            return Self.naming(try await client.subscription(id), sessionUser: session.metadata?[settings.metadataKey], settings)
        }
        guard token.hasPrefix("sub_") else {
            throw APIError(.invalidField, "fetch_token must be a Stripe subscription (sub_…) or Checkout Session (cs_…) id with X-Platform: stripe")
        }
        return try await client.subscription(token)
    }

    /// `subscription`, its app user taken from its Checkout Session's metadata when its own
    /// metadata names none (RevenueCat reads the session's for a session, the subscription's for
    /// a subscription; a team may have set either).
    static func naming(_ subscription: Stripe.Subscription, sessionUser: String?, _ settings: StripeSettings) -> Stripe.Subscription {
        guard let user = sessionUser, !user.isEmpty, (subscription.metadata?[settings.metadataKey] ?? "").isEmpty else { return subscription }
        var named = subscription
        named.metadata = (named.metadata ?? [:]).merging([settings.metadataKey: user]) { _, new in new }
        return named
    }

    /// Records the subscription `token` names for `poster` and answers their CustomerInfo (nil
    /// when the subscription names another app user). A Stripe subscription another customer
    /// owns is never moved by a post (409): its id is no proof of having paid, unlike a signed
    /// transaction; the subscription's metadata, or a redemption, says whose it is.
    func record(token: String, app: AppConfiguration, poster: String, now: Date) async throws -> (PurchaseStatus, SubscriberResponse?) {
        let (settings, _) = try client(for: app)
        let facts = try await facts(of: subscription(forToken: token, app: app), app: app, settings: settings, now: now)
        let status = try await recordNeverMoving(facts.transaction, app: app, poster: poster, now: now)
        guard status != .boundToAnotherUser else { return (status, nil) }
        try await applyState(facts, app: app, now: now)
        return (status, try await store.customerInfo(app: app, user: poster, now: now))
    }

    /// Records `transaction` for `poster` under the ledger's rules, except that a Stripe
    /// subscription another user owns is never moved (whatever the app's transfer behaviour).
    func recordNeverMoving(_ transaction: VerifiedTransaction, app: AppConfiguration, poster: String, now: Date) async throws
        -> PurchaseStatus
    {
        var keeping = app
        keeping.transferBehavior = .keepWithOriginal
        return try await store.record(transaction, app: keeping, poster: poster, now: now)
    }

    /// The facts of `subscription` now, against what is stored of its current period:
    /// - the period's stored transaction keeps its id and purchase date on every later read;
    /// - a price of another product than the stored one is a plan change within the period
    ///   (``planChange(_:from:at:app:)``), at `changedAt` (the event's time; else `now`);
    /// - a refund stored for the period's transaction is kept (a subscription does not name its
    ///   refunds: without this, the next read would read as the refund reversed);
    /// - the chain's owner, as stored, comes with the facts.
    func facts(
        of subscription: Stripe.Subscription, app: AppConfiguration, settings: StripeSettings, now: Date,
        refund: (date: Date, percentage: Int64?)? = nil, changedAt: Date? = nil
    )
        async throws -> StripeFacts
    {
        var (payload, renewal, appUserId) = try subscription.payloads(app: app, settings: settings, now: now)
        var replaced: VerifiedTransaction?
        var kept = refund
        var stored: CustomerDatabase.StoredPeriod?
        if let start = payload.purchaseDate, let environment = payload.environment {
            stored = try await store.storedPeriod(
                app: app.id, environment: environment.rawValue, chain: subscription.id, fromMs: start.epochMilliseconds)
        }
        if let stored {
            if stored.productId == payload.productId {
                payload.transactionId = stored.transactionId
                payload.purchaseDate = Date(epochMilliseconds: stored.purchaseMs)
                kept = kept ?? stored.refund
            } else {
                replaced = try planChange(&payload, from: stored, at: changedAt ?? now, app: app)
            }
        }
        if let kept { Stripe.Subscription.refund(&payload, kept) }
        return StripeFacts(
            transaction: try Stripe.Subscription.verified(payload, app: app), renewal: renewal, appUserId: appUserId, replaced: replaced,
            storedOwner: stored?.owner)
    }

    /// A plan changed within the period (an upgrade or a downgrade, which Stripe applies at
    /// once): `payload` becomes the new plan's transaction, purchased at the change
    /// (`<id>_<period start>_<change>`, so every later read finds it), priced at what Stripe
    /// prorates for the rest of the period (the new price less the old, for the share of the
    /// period left; nothing for a downgrade, whose credit is no refund). Returns the period's
    /// earlier transaction marked upgraded and ended at the change.
    func planChange(_ payload: inout TransactionPayload, from stored: CustomerDatabase.StoredPeriod, at change: Date, app: AppConfiguration)
        throws(APIError) -> VerifiedTransaction
    {
        let previousStart = Date(epochMilliseconds: stored.purchaseMs)
        let at = Date(timeIntervalSince1970: max(change, previousStart + 1).timeIntervalSince1970.rounded(.down))
        var previous = payload
        previous.transactionId = stored.transactionId
        previous.productId = stored.productId
        previous.purchaseDate = previousStart
        (previous.price, previous.currency) = (stored.priceMilliunits, stored.currency)
        (previous.offerType, previous.offerDiscountType) = (nil, nil)
        previous.isUpgraded = true
        previous.revocationDate = at
        let periodStart = payload.purchaseDate ?? previousStart
        if let end = payload.expiresDate, end > at, let new = payload.price, let old = stored.priceMilliunits, stored.currency == payload.currency {
            let left = end.timeIntervalSince(at) / end.timeIntervalSince(periodStart)
            // In doubles: both prices are within the ledger's range, so the share is too.
            payload.price = max(0, Int64(((Double(new) - Double(old)) * left).rounded()))
        }
        // Whole seconds through the clamped milliseconds: an event may say any time at all.
        payload.transactionId = "\(payload.originalTransactionId ?? "")_\(periodStart.epochMilliseconds / 1000)_\(at.epochMilliseconds / 1000)"
        payload.purchaseDate = at
        return try Stripe.Subscription.verified(previous, app: app)
    }

    /// Reads `subscription` from Stripe's API again and applies what it says now (the
    /// reconciliation of a subscription in doubt: a renewal or an expiry whose event was lost).
    func refresh(subscription: String, app: AppConfiguration, now: Date) async throws {
        let (settings, client) = try client(for: app)
        let facts = try await facts(of: client.subscription(subscription), app: app, settings: settings, now: now)
        try await applyState(facts, storingTransaction: true, app: app, now: now)
    }

    /// The renewal state (with the period's transaction, unless it was recorded already, in the
    /// same database transaction), then the transaction a plan change replaced with its
    /// `PRODUCT_CHANGE`.
    func applyState(_ facts: StripeFacts, storingTransaction: Bool = false, app: AppConfiguration, now: Date) async throws {
        try await store.applyStoreState(
            transaction: storingTransaction ? facts.transaction : nil, renewal: facts.renewal, app: app, now: now)
        if let replaced = facts.replaced {
            try await store.applyReplaced(replaced, newProductId: facts.transaction.productId, app: app, now: now)
        }
    }

    /// What an event did.
    enum EventOutcome: Sendable, Equatable {
        case applied, duplicate
        /// Nothing to do (an object the server does not follow, or a price the app does not
        /// map): the reason, and its code when it is a refusal.
        case ignored(String, code: APIErrorCode?)
    }

    /// What an event is about: its subscription, and for a charge or a dispute the refund it
    /// stands for and the start of the period the charge paid for (its invoice's first line).
    struct EventTarget: Sendable {
        var subscription: String
        var refund: (date: Date, percentage: Int64?)?
        var paidPeriodStart: Int64?
        /// For a Checkout Session's event: the app user its metadata names.
        var sessionUser: String?
    }

    enum Found: Sendable {
        case target(EventTarget)
        case nothing(EventOutcome)
    }

    /// The subscription `event` names (read through its charge and invoice for a charge or a
    /// dispute), or why it names none.
    func target(of event: Stripe.Event, client: StripeClient, settings: StripeSettings, now: Date) async throws -> Found {
        let object = event.data.object
        switch object.object {
        case "checkout.session":
            guard let id = object.id else { return .nothing(.ignored("the event names no Checkout Session", code: nil)) }
            let session = try await client.checkoutSession(id)
            guard let subscription = session.subscription?.id else {
                return .nothing(.ignored("Checkout Session \(id) made no subscription (one-time purchases are not followed)", code: nil))
            }
            return .target(EventTarget(subscription: subscription, sessionUser: session.metadata?[settings.metadataKey]))
        case "subscription", "invoice":
            let id = object.object == "subscription" ? object.id : object.subscription?.id ?? object.parent?.subscriptionDetails?.subscription?.id
            guard let id else { return .nothing(.ignored("the event names no subscription", code: nil)) }
            return .target(EventTarget(subscription: id))
        case "charge", "dispute":
            let chargeId = object.object == "charge" ? object.id : object.charge?.id
            guard let chargeId else { return .nothing(.ignored("the event names no charge", code: nil)) }
            let charge = try await client.charge(chargeId)
            var invoiceId = charge.invoice?.id
            if invoiceId == nil, let intent = charge.paymentIntent?.id {
                invoiceId = try await client.invoicePayments(paymentIntent: intent).data.lazy.compactMap(\.invoice?.id).first
            }
            guard let invoiceId else { return .nothing(.ignored("charge \(chargeId) is not a subscription's", code: nil)) }
            let invoice = try await client.invoice(invoiceId)
            guard let id = invoice.subscriptionId else { return .nothing(.ignored("the event names no subscription", code: nil)) }
            return .target(
                EventTarget(subscription: id, refund: Self.refund(of: charge, event: event, now: now), paidPeriodStart: invoice.paidPeriodStart))
        default:
            return .nothing(.ignored("events about \(object.object ?? "this object") change no subscription", code: nil))
        }
    }

    /// Applies one verified Stripe event: the subscription it concerns is read again from
    /// Stripe's API (the event's copy is never trusted), then recorded for the app user its
    /// metadata names, and its state applied, with the event's id stored so a replay changes
    /// nothing. A refund of a charge that paid for an earlier period refunds that period's
    /// transaction, and leaves the current one.
    func apply(_ event: Stripe.Event, app: AppConfiguration, now: Date) async throws -> EventOutcome {
        let (settings, client) = try client(for: app)
        guard event.account == settings.account || (event.account == nil) else {
            throw APIError(.stripeForeignAccount, "the event is of Stripe account \(event.account ?? "") not the app's")
        }
        if try await store.stripeEventSeen(event.id) { return .duplicate }
        let target: EventTarget
        switch try await self.target(of: event, client: client, settings: settings, now: now) {
        case .target(let found): target = found
        case .nothing(let outcome): return outcome
        }
        let subscription = Self.naming(try await client.subscription(target.subscription), sessionUser: target.sessionUser, settings)
        var refund = target.refund
        var earlier: VerifiedTransaction?
        if let paidFor = target.refund, let paid = target.paidPeriodStart, let current = subscription.periodStart, paid < current {
            earlier = try await earlierPeriod(of: subscription, from: paid, before: current, refund: paidFor, app: app, now: now)
            refund = nil
        }
        let created = event.created.map { Date(timeIntervalSince1970: TimeInterval($0)) }
        let facts: StripeFacts
        do {
            facts = try await self.facts(of: subscription, app: app, settings: settings, now: now, refund: refund, changedAt: created)
        } catch let refusal as APIError {
            guard refusal.code == APIErrorCode.stripeProductNotMapped.rawValue else { throw refusal }
            return .ignored(refusal.message, code: .stripeProductNotMapped)
        }
        // Bound to the metadata's user the first time; once the chain is theirs, the event's own
        // transaction (below) applies the rest.
        if let owner = facts.appUserId, facts.storedOwner != owner {
            _ = try await recordNeverMoving(facts.transaction, app: app, poster: owner, now: now)
        }
        let outcome = try await store.applyStripeEvent(
            id: event.id, type: event.type, created: created, transaction: facts.transaction, replaced: facts.replaced, refunded: earlier,
            renewal: facts.renewal, app: app, now: now)
        return outcome == .duplicate ? .duplicate : .applied
    }

    /// The stored transaction of the period from `start` (before `end`, the current period's
    /// start), refunded as `refund` says; nil when none is stored.
    func earlierPeriod(
        of subscription: Stripe.Subscription, from start: Int64, before end: Int64, refund: (date: Date, percentage: Int64?),
        app: AppConfiguration, now: Date
    ) async throws -> VerifiedTransaction? {
        let environment: AppStoreEnvironment = subscription.livemode == true ? .stripe : .stripeTest
        guard
            let stored = try await store.storedPeriod(
                app: app.id, environment: environment.rawValue, chain: subscription.id,
                fromMs: Date(timeIntervalSince1970: TimeInterval(start)).epochMilliseconds,
                beforeMs: Date(timeIntervalSince1970: TimeInterval(end)).epochMilliseconds)
        else { return nil }
        var payload = TransactionPayload(
            transactionId: stored.transactionId, originalTransactionId: subscription.id, bundleId: app.bundleId, productId: stored.productId,
            purchaseDate: Date(epochMilliseconds: stored.purchaseMs), type: .autoRenewable, environment: environment, signedDate: now)
        payload.expiresDate = stored.expiresMs.map { Date(epochMilliseconds: $0) }
        (payload.price, payload.currency) = (stored.priceMilliunits, stored.currency)
        Stripe.Subscription.refund(&payload, refund)
        return try Stripe.Subscription.verified(payload, app: app)
    }

    /// The refund a charge event stands for: the share Stripe refunded (all of it, or a part in
    /// thousandths of a percent), or a dispute lost; nil when none.
    static func refund(of charge: Stripe.Charge, event: Stripe.Event, now: Date) -> (date: Date, percentage: Int64?)? {
        let now = event.created.map { Date(timeIntervalSince1970: TimeInterval($0)) } ?? now
        if event.data.object.object == "dispute" {
            let lost = event.type == "charge.dispute.funds_withdrawn" || event.type == "charge.dispute.closed" && event.data.object.status == "lost"
            return lost ? (now, nil) : nil
        }
        guard let refunded = charge.amountRefunded, refunded > 0, let amount = charge.amount, amount > 0 else { return nil }
        guard refunded < amount else { return (now, nil) }
        return (now, Int64((Double(refunded) / Double(amount) * 100_000).rounded()))
    }
}
