import CountersignAppStore
import CountersignCore
import Foundation

extension CustomerDatabase {
    /// What became of a notification.
    public enum NotificationOutcome: String, Sendable {
        case applied
        /// The same `notificationUUID` was stored before: nothing changed.
        case duplicate
    }

    /// Stores a verified App Store Server Notification V2 and applies it, in one transaction.
    ///
    /// Idempotent on `notificationUUID`; safe out of order: a transaction's copy signed later
    /// replaces an earlier one (the rules pick the newest transaction of a chain), and the
    /// renewal state is replaced only by one signed later than the stored one. What each type
    /// does and the events it makes: docs/webhooks.md, "Apple's notifications, type by type".
    public func apply(_ notification: SignedDataVerifier.VerifiedNotification, app: AppConfiguration, now: Date) async throws -> NotificationOutcome {
        let payload = notification.notification
        return try await database.transactionRetryingUniqueViolations { sql in
            let seen = try await sql.first("SELECT 1 AS seen FROM notifications WHERE notification_uuid = \(bind: payload.notificationUUID)") { _ in
                true
            }
            guard seen == nil else { return .duplicate }
            try await sql.run(
                """
                INSERT INTO notifications (notification_uuid, app_id, notification_type, subtype, signed_date_ms, received_at_ms) \
                VALUES (\(bind: payload.notificationUUID), \(bind: app.id), \(bind: payload.notificationType.rawValue), \
                \(bind: payload.subtype?.rawValue), \(bind: (payload.signedDate ?? now).epochMilliseconds), \(bind: now.epochMilliseconds))
                """)
            var transaction: VerifiedTransaction?
            if let transactionPayload = notification.transaction, let jws = payload.data?.signedTransactionInfo {
                transaction = try? VerifiedTransaction(jws: jws, payload: transactionPayload, app: app)
            }
            try await Self.applyStoreState(sql, transaction: transaction, renewal: notification.renewalInfo, app: app, now: now)
            if payload.notificationType == .consumptionRequest, app.refundRequests != nil, let transaction {
                try await Self.recordConsumptionRequest(
                    sql, notificationUUID: payload.notificationUUID, transaction: transaction, app: app.id, now: now)
            }
            let chain = transaction?.originalTransactionId ?? notification.renewalInfo?.originalTransactionId
            if Self.typesWithEvents.contains(payload.notificationType),
                let (subject, owner) = try await Self.eventSubject(sql, transaction: transaction, chain: chain, app: app)
            {
                let events = Self.notificationEvents(
                    payload, renewal: notification.renewalInfo, app: app, owner: owner, subject: subject, now: now)
                try await Self.emit(events, on: sql, app: app, now: now)
            }
            return .applied
        }
    }

    /// Applies what the App Store says of a subscription now (a transaction and its renewal
    /// state, from a notification or from Get All Subscription Statuses) in one transaction.
    public func applyStoreState(transaction: VerifiedTransaction?, renewal: RenewalInfoPayload?, app: AppConfiguration, now: Date) async throws {
        try await database.transactionRetryingUniqueViolations { sql in
            try await Self.applyStoreState(sql, transaction: transaction, renewal: renewal, app: app, now: now)
        }
    }

    /// Stores the transaction and the renewal state, with their events (see
    /// ``upsertTransaction(_:_:app:now:)`` and ``stateEvents(_:chain:renewal:app:owner:subject:now:)``).
    static func applyStoreState(
        _ sql: any SQLExecutor, transaction: VerifiedTransaction?, renewal: RenewalInfoPayload?,
        app: AppConfiguration, now: Date
    ) async throws {
        if let transaction {
            try await upsertTransaction(sql, transaction, app: app, now: now)
        }
        if let renewal, let chain = renewal.originalTransactionId,
            let change = try await updateSubscriptionState(sql, app: app.id, chain: chain, renewal: renewal, now: now),
            let (subject, owner) = try await eventSubject(sql, transaction: transaction, chain: chain, app: app)
        {
            try await emit(
                stateEvents(change, chain: chain, renewal: renewal, app: app, owner: owner, subject: subject, now: now), on: sql, app: app, now: now)
        }
    }

    /// What an event about a chain reports and whom it goes to: the notification's transaction,
    /// or else the newest stored transaction of the chain, with the chain's owner; nil when the
    /// chain has no owner (nobody to tell).
    static func eventSubject(_ sql: any SQLExecutor, transaction: VerifiedTransaction?, chain: String?, app: AppConfiguration) async throws
        -> (EventTransaction, String)?
    {
        guard let chain else { return nil }
        let owner = try await sql.first(
            """
            SELECT app_user_id FROM purchase_owners WHERE app_id = \(bind: app.id) AND original_transaction_id = \(bind: chain) \
            AND app_user_id IS NOT NULL
            """
        ) { try $0.string("app_user_id") }
        guard let owner else { return nil }
        var subject: EventTransaction
        if let transaction {
            subject = EventTransaction(transaction)
        } else {
            let latest = try await sql.first(
                """
                SELECT \(raw: EventTransaction.storedColumns) FROM purchases p WHERE p.app_id = \(bind: app.id) \
                AND p.original_transaction_id = \(bind: chain) ORDER BY p.purchase_date_ms DESC LIMIT 1
                """
            ) { try EventTransaction(stored: $0) }
            guard let latest else { return nil }
            subject = latest
        }
        try await placeInChain(sql, &subject, app: app.id)
        return (subject, owner)
    }

    /// Works out the transaction's place in its chain (`renewal_number`) and the period type of
    /// the transaction before it (a renewal's `is_trial_conversion`), unless known.
    static func placeInChain(_ sql: any SQLExecutor, _ subject: inout EventTransaction, app: String) async throws {
        guard subject.renewalNumber == nil, let purchased = subject.purchasedAtMs else { return }
        let chain = subject.originalTransactionId
        let place = try await sql.first(
            """
            SELECT COUNT(*) AS earlier, (SELECT q.period_type FROM purchases q WHERE q.app_id = \(bind: app) \
            AND q.environment = \(bind: subject.environment) AND q.original_transaction_id = \(bind: chain) \
            AND q.purchase_date_ms < \(bind: purchased) ORDER BY q.purchase_date_ms DESC LIMIT 1) AS previous \
            FROM purchases p WHERE p.app_id = \(bind: app) AND p.environment = \(bind: subject.environment) \
            AND p.original_transaction_id = \(bind: chain) AND p.purchase_date_ms < \(bind: purchased)
            """
        ) { (earlier: try $0.int64("earlier"), previous: try $0.text("previous")) }
        subject.renewalNumber = (place?.earlier ?? 0) + 1
        subject.previousPeriodType = place?.previous
    }

    /// The notification types that make events of their own (``notificationEvents(_:renewal:app:owner:subject:now:)``).
    static let typesWithEvents: Set<NotificationType> = [.expired, .gracePeriodExpired, .didChangeRenewalPref, .renewalExtended]

    /// Events a notification's type stands for by itself (the transaction and renewal state it
    /// carries make theirs as they are stored): `EXPIRED` and `GRACE_PERIOD_EXPIRED` an
    /// `EXPIRATION` (one per period, whichever comes first), `DID_CHANGE_RENEWAL_PREF` a
    /// `PRODUCT_CHANGE`, `RENEWAL_EXTENDED` a `SUBSCRIPTION_EXTENDED` (the same event as the
    /// later-signed copy's, so once).
    static func notificationEvents(
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

    /// RevenueCat's `expiration_reason` for the subtype of Apple's `EXPIRED`: VOLUNTARY is
    /// UNSUBSCRIBE, BILLING_RETRY is BILLING_ERROR, PRICE_INCREASE is PRICE_INCREASE, and
    /// PRODUCT_NOT_FOR_SALE (the developer took the product off sale) is DEVELOPER_INITIATED;
    /// anything else UNKNOWN.
    static func expirationReason(_ subtype: NotificationSubtype?) -> String {
        switch subtype {
        case .voluntary?: "UNSUBSCRIBE"
        case .billingRetry?: "BILLING_ERROR"
        case .priceIncrease?: "PRICE_INCREASE"
        case .productNotForSale?: "DEVELOPER_INITIATED"
        default: "UNKNOWN"
        }
    }

    /// The `EXPIRATION` of a subscription period: one per chain and expiry, whether Apple's
    /// `EXPIRED` or `GRACE_PERIOD_EXPIRED` notification or the server's own check reports it first.
    static func expirationEvent(app: AppConfiguration, owner: String, transaction: EventTransaction, now: Date) -> WebhookEvent {
        WebhookEvent(
            .expiration, subject: "\(transaction.originalTransactionId)\u{0}\(transaction.expiresAtMs ?? 0)",
            app: app, user: owner, transaction: transaction, now: now)
    }

    /// The `SUBSCRIPTION_EXTENDED` of a transaction whose expiry moved: one per new expiry.
    static func extensionEvent(app: AppConfiguration, owner: String, transaction: EventTransaction, now: Date) -> WebhookEvent {
        WebhookEvent(
            .subscriptionExtended, subject: "\(transaction.transactionId)\u{0}\(transaction.expiresAtMs ?? 0)",
            app: app, user: owner, transaction: transaction, now: now)
    }

    /// A chain's renewal state before and after a newer one was stored.
    struct StateChange: Sendable {
        var wasAutoRenewing: Bool
        var autoRenewing: Bool
        var wasInBillingRetry: Bool
        var inBillingRetry: Bool
        var signedMs: Int64
    }

    /// `CANCELLATION` (UNSUBSCRIBE) when auto-renew was turned off, `UNCANCELLATION` when back on,
    /// while the subscription has not expired;
    /// when billing retry began, `BILLING_ISSUE` (with the grace period's end, if one runs) and
    /// `CANCELLATION` (BILLING_ERROR), as RevenueCat sends both.
    static func stateEvents(
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

    /// What the database held of a transaction before a copy of it arrived.
    struct StoredCopy: Sendable, Equatable {
        var signedMs: Int64
        var expiresMs: Int64?
        var revokedMs: Int64?
    }

    /// Adds a transaction a notification carries (a renewal, say) or brings a stored one up to
    /// date, with the events that makes for the chain's owner (``transactionEvents(_:_:stored:app:user:now:)``).
    /// The chain's owner, if it has one, owns it; a purchase bound by app account token to a
    /// known customer gets that owner.
    static func upsertTransaction(_ sql: any SQLExecutor, _ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) async throws {
        let stored = try await storeTransaction(sql, transaction, app: app, now: now)
        var owner = try await sql.first(
            """
            SELECT app_user_id FROM purchase_owners WHERE app_id = \(bind: app.id) AND original_transaction_id = \(bind: transaction.originalTransactionId)
            """
        ) { try $0.text("app_user_id") }
        if owner == nil, let token = transaction.payload.appAccountToken?.lowercased(),
            let user = try await customer(sql, app: app.id, token: token)
        {
            try await sql.run(insertOwnerStatement(app: app.id, chain: transaction.originalTransactionId, user: user, now: now))
            owner = .some(user)
        }
        guard let user = owner ?? nil else { return }
        try await emit(transactionEvents(sql, transaction, stored: stored, app: app, user: user, now: now), on: sql, app: app, now: now)
    }

    /// The events a copy of a transaction makes for `user`, given what was stored of it before
    /// (nil: nothing, the copy is new):
    /// - new and not revoked: its purchase event (``WebhookEvent/purchase(_:kind:app:user:now:)``);
    /// - revoked now and not before, or new and already revoked: `CANCELLATION`
    ///   (CUSTOMER_SUPPORT, negative price) when it is the chain's latest period, nothing for an
    ///   earlier period (its refund leaves the current period, as RevenueCat reports it);
    /// - revoked before and not now: `REFUND_REVERSED`;
    /// - a later expiry than the stored one: `SUBSCRIPTION_EXTENDED`.
    /// A copy signed no later than the stored one makes nothing.
    static func transactionEvents(
        _ sql: any SQLExecutor, _ transaction: VerifiedTransaction, stored: StoredCopy?, app: AppConfiguration, user: String, now: Date
    ) async throws -> [WebhookEvent] {
        let signed = (transaction.payload.signedDate ?? now).epochMilliseconds
        if let stored, signed <= stored.signedMs { return [] }
        // A stored revocation no earlier than the copy stands (``keptRevocationSQL``).
        let revocation = transaction.payload.revocationDate?.epochMilliseconds ?? stored?.revokedMs.flatMap { $0 >= signed ? $0 : nil }
        let wasRevoked = stored.map { $0.revokedMs != nil } ?? false
        var subject = EventTransaction(transaction)
        if let revocation, stored == nil || !wasRevoked {
            guard try await isLatestPeriod(sql, transaction, app: app.id) else { return [] }
            try await placeInChain(sql, &subject, app: app.id)
            var event = WebhookEvent(
                .cancellation, subject: "\(transaction.transactionId)\u{0}\(revocation)", app: app, user: user, transaction: subject, now: now,
                money: .refund)
            event.cancelReason = "CUSTOMER_SUPPORT"
            return [event]
        }
        guard let stored else {
            if subject.renewalNumber == nil { try await placeInChain(sql, &subject, app: app.id) }
            return [.purchase(subject, kind: transaction.kind, app: app, user: user, now: now)]
        }
        if wasRevoked, revocation == nil {
            try await placeInChain(sql, &subject, app: app.id)
            return [
                WebhookEvent(
                    .refundReversed, subject: "\(transaction.transactionId)\u{0}\(signed)", app: app, user: user, transaction: subject, now: now,
                    money: .charge)
            ]
        }
        if revocation == nil, let expires = subject.expiresAtMs, expires > (stored.expiresMs ?? .max) {
            try await placeInChain(sql, &subject, app: app.id)
            return [extensionEvent(app: app, owner: user, transaction: subject, now: now)]
        }
        return []
    }

    /// Whether the transaction is its chain's latest period: true for anything but an
    /// auto-renewable subscription, else no other stored transaction of the chain was bought later.
    static func isLatestPeriod(_ sql: any SQLExecutor, _ transaction: VerifiedTransaction, app: String) async throws -> Bool {
        guard transaction.kind == .autoRenewable, let purchased = transaction.payload.purchaseDate?.epochMilliseconds else { return true }
        let later = try await sql.first(
            """
            SELECT 1 AS later FROM purchases WHERE app_id = \(bind: app) AND environment = \(bind: transaction.environment) \
            AND original_transaction_id = \(bind: transaction.originalTransactionId) AND transaction_id <> \(bind: transaction.transactionId) \
            AND purchase_date_ms > \(bind: purchased) LIMIT 1
            """
        ) { _ in true }
        return later == nil
    }

    /// Inserts a transaction, or refreshes a stored one from a copy signed later than the stored
    /// one (``refreshPurchaseStatement(_:app:now:)``); an older copy changes nothing. Returns
    /// what was stored before (nil: nothing).
    @discardableResult
    static func storeTransaction(_ sql: any SQLExecutor, _ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) async throws
        -> StoredCopy?
    {
        let stored = try await sql.first(
            """
            SELECT signed_date_ms, expires_date_ms, revocation_date_ms, imported FROM purchases \
            WHERE app_id = \(bind: app.id) AND environment = \(bind: transaction.environment) AND transaction_id = \(bind: transaction.transactionId)
            """
        ) {
            (
                StoredCopy(
                    signedMs: try $0.int64("signed_date_ms"), expiresMs: try $0.integer("expires_date_ms"),
                    revokedMs: try $0.integer("revocation_date_ms")),
                imported: try $0.int64("imported") != 0
            )
        }
        guard let (stored, imported) = stored else {
            try await sql.run(insertPurchaseStatement(transaction, app: app, now: now))
            return nil
        }
        if imported {
            // The store's signed copy replaces an imported record, whatever its dates.
            try await sql.run(confirmImportedStatement(transaction, app: app, now: now))
        } else if (transaction.payload.signedDate ?? now).epochMilliseconds > stored.signedMs {
            try await sql.run(refreshPurchaseStatement(transaction, app: app.id, now: now))
        }
        return stored
    }

    /// Stores a chain's renewal state unless the stored one was signed at the same time or later;
    /// returns the change (nil when nothing was stored).
    @discardableResult
    static func updateSubscriptionState(_ sql: any SQLExecutor, app: String, chain: String, renewal: RenewalInfoPayload, now: Date) async throws
        -> StateChange?
    {
        let signed = (renewal.signedDate ?? now).epochMilliseconds
        let stored = try await sql.first(
            """
            SELECT state_signed_date_ms, auto_renew_status, in_billing_retry FROM subscription_states \
            WHERE app_id = \(bind: app) AND original_transaction_id = \(bind: chain)
            """
        ) {
            (signed: try $0.int64("state_signed_date_ms"), autoRenew: try $0.integer("auto_renew_status"), retry: try $0.integer("in_billing_retry"))
        }
        if let stored, stored.signed >= signed { return nil }  // an older state arriving late changes nothing
        let autoRenew = renewal.autoRenewStatus.map(Int64.init)
        let retry: Int64 = (renewal.isInBillingRetryPeriod ?? false) ? 1 : 0
        let grace = renewal.gracePeriodExpiresDate.map(\.epochMilliseconds)
        if stored == nil {
            try await sql.run(
                """
                INSERT INTO subscription_states (app_id, original_transaction_id, auto_renew_status, in_billing_retry, grace_period_expires_ms, \
                state_signed_date_ms) VALUES (\(bind: app), \(bind: chain), \(bind: autoRenew), \(bind: retry), \(bind: grace), \(bind: signed))
                """)
        } else {
            try await sql.run(
                """
                UPDATE subscription_states SET auto_renew_status = \(bind: autoRenew), in_billing_retry = \(bind: retry), \
                grace_period_expires_ms = \(bind: grace), state_signed_date_ms = \(bind: signed) \
                WHERE app_id = \(bind: app) AND original_transaction_id = \(bind: chain)
                """)
        }
        // A chain without a stored state renews (the App Store's default) and is not in retry.
        return StateChange(
            wasAutoRenewing: (stored?.autoRenew ?? 1) == 1,
            autoRenewing: (renewal.autoRenewStatus ?? 1) == 1,
            wasInBillingRetry: (stored?.retry ?? 0) != 0,
            inBillingRetry: renewal.isInBillingRetryPeriod ?? false,
            signedMs: signed
        )
    }
}
