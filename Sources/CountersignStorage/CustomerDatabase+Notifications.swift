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
    /// Idempotent on `notificationUUID`; safe out of order: transactions are only ever added
    /// (the rules pick the newest of a chain), a revocation is only ever set, and the renewal
    /// state is replaced only by one signed later than the stored one.
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
            let owner = try await Self.applyStoreState(sql, transaction: transaction, renewal: notification.renewalInfo, app: app, now: now)
            if let transaction, let owner {
                let events = Self.notificationEvents(
                    payload, renewal: notification.renewalInfo, app: app, owner: owner, transaction: transaction, now: now)
                try await Self.emit(events, on: sql, app: app, now: now)
            }
            return .applied
        }
    }

    /// Applies what the App Store says of a subscription now (a transaction and its renewal
    /// state, from a notification or from Get All Subscription Statuses) in one transaction.
    public func applyStoreState(transaction: VerifiedTransaction?, renewal: RenewalInfoPayload?, app: AppConfiguration, now: Date) async throws {
        try await database.transactionRetryingUniqueViolations { sql in
            _ = try await Self.applyStoreState(sql, transaction: transaction, renewal: renewal, app: app, now: now)
        }
    }

    /// Stores the transaction and the renewal state, with their events (see
    /// ``upsertTransaction(_:_:app:now:)`` and ``stateEvents(_:chain:renewal:app:owner:transaction:now:)``);
    /// returns the chain's owner.
    static func applyStoreState(
        _ sql: any SQLExecutor, transaction: VerifiedTransaction?, renewal: RenewalInfoPayload?,
        app: AppConfiguration, now: Date
    ) async throws -> String? {
        var owner: String?
        if let transaction {
            owner = try await upsertTransaction(sql, transaction, app: app, now: now)
        }
        if let renewal, let chain = renewal.originalTransactionId {
            let change = try await updateSubscriptionState(sql, app: app.id, chain: chain, renewal: renewal, now: now)
            if let change, let transaction, let owner {
                try await emit(
                    stateEvents(change, chain: chain, renewal: renewal, app: app, owner: owner, transaction: transaction, now: now),
                    on: sql, app: app, now: now)
            }
        }
        return owner
    }

    /// Events a notification's type stands for by itself: `EXPIRED` (with Apple's reason),
    /// `DID_CHANGE_RENEWAL_PREF` and `RENEWAL_EXTENDED`.
    static func notificationEvents(
        _ payload: NotificationPayload, renewal: RenewalInfoPayload?, app: AppConfiguration, owner: String,
        transaction: VerifiedTransaction, now: Date
    ) -> [WebhookEvent] {
        let subject = EventTransaction(transaction)
        switch payload.notificationType {
        case .expired:
            var event = expirationEvent(app: app, owner: owner, transaction: subject, now: now)
            event.expirationReason =
                switch payload.subtype {
                case .voluntary?: "UNSUBSCRIBE"
                case .billingRetry?: "BILLING_ERROR"
                case NotificationSubtype(rawValue: "PRICE_INCREASE")?: "PRICE_INCREASE"
                case NotificationSubtype(rawValue: "PRODUCT_NOT_FOR_SALE")?: "PRODUCT_NOT_AVAILABLE"
                default: "UNKNOWN"
                }
            return [event]
        case .didChangeRenewalPref:
            var event = WebhookEvent(.productChange, subject: payload.notificationUUID, app: app, user: owner, transaction: subject, now: now)
            event.newProductId = renewal?.autoRenewProductId
            return [event]
        case .renewalExtended:
            return [WebhookEvent(.subscriptionExtended, subject: payload.notificationUUID, app: app, user: owner, transaction: subject, now: now)]
        default:
            return []
        }
    }

    /// The `EXPIRATION` of a subscription period: one per chain and expiry, whether Apple's
    /// `EXPIRED` notification or the server's own check reports it first.
    static func expirationEvent(app: AppConfiguration, owner: String, transaction: EventTransaction, now: Date) -> WebhookEvent {
        WebhookEvent(
            .expiration, subject: "\(transaction.originalTransactionId)\u{0}\(transaction.expiresAtMs ?? 0)",
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
    /// `BILLING_ISSUE` when billing retry began.
    static func stateEvents(
        _ change: StateChange, chain: String, renewal: RenewalInfoPayload, app: AppConfiguration, owner: String,
        transaction: VerifiedTransaction, now: Date
    ) -> [WebhookEvent] {
        let subject = EventTransaction(transaction)
        func event(_ type: WebhookEventType) -> WebhookEvent {
            WebhookEvent(type, subject: "\(chain)\u{0}\(change.signedMs)", app: app, user: owner, transaction: subject, now: now)
        }
        var events: [WebhookEvent] = []
        if change.wasAutoRenewing != change.autoRenewing {
            var changed = event(change.autoRenewing ? .uncancellation : .cancellation)
            if !change.autoRenewing { changed.cancelReason = "UNSUBSCRIBE" }
            events.append(changed)
        }
        if change.inBillingRetry, !change.wasInBillingRetry { events.append(event(.billingIssue)) }
        return events
    }

    /// Adds a transaction a notification carries (a renewal, say) or brings a stored one up to
    /// date, and stores the events that makes for the chain's owner: the purchase event of a new
    /// transaction, `CANCELLATION` (CUSTOMER_SUPPORT) for a refund, `UNCANCELLATION` for a
    /// refund reversed. A stored transaction takes the revocation and upgrade state of the copy
    /// signed last, so a refund (`REFUND`) and its reversal (`REFUND_REVERSED`, the same
    /// transaction without a revocation date) end in the right state in either order of
    /// arrival. The chain's owner, if it has one, owns it; a purchase bound by app account token
    /// to a known customer gets that owner. Returns the chain's owner.
    @discardableResult
    static func upsertTransaction(_ sql: any SQLExecutor, _ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) async throws
        -> String?
    {
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
        guard let user = owner ?? nil else { return nil }
        let subject = EventTransaction(transaction)
        var events: [WebhookEvent] = []
        switch stored {
        case .inserted:
            events.append(.purchase(transaction, app: app, user: user, now: now))
        case .refreshed(revoked: true):
            var event = WebhookEvent(.cancellation, subject: transaction.transactionId, app: app, user: user, transaction: subject, now: now)
            event.cancelReason = "CUSTOMER_SUPPORT"
            events.append(event)
        case .refreshed(revoked: false):
            let signed = (transaction.payload.signedDate ?? now).epochMilliseconds
            events.append(
                WebhookEvent(
                    .uncancellation, subject: "\(transaction.transactionId)\u{0}\(signed)", app: app, user: user,
                    transaction: subject, now: now))
        case .refreshed(revoked: nil), .unchanged:
            break
        }
        try await emit(events, on: sql, app: app, now: now)
        return user
    }

    /// What storing a transaction did.
    enum StoredTransaction: Equatable {
        case inserted
        /// A later copy replaced the stored one; `revoked` says whether it revoked the
        /// transaction (true), took a revocation back (false) or left it as it was (nil).
        case refreshed(revoked: Bool?)
        case unchanged
    }

    /// Inserts a transaction, or refreshes a stored one from a copy signed later than the stored
    /// one (revocation and upgrade state); an older copy changes nothing.
    @discardableResult
    static func storeTransaction(_ sql: any SQLExecutor, _ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) async throws
        -> StoredTransaction
    {
        let stored = try await sql.first(
            """
            SELECT signed_date_ms, revocation_date_ms FROM purchases \
            WHERE app_id = \(bind: app.id) AND environment = \(bind: transaction.environment) AND transaction_id = \(bind: transaction.transactionId)
            """
        ) { (signed: try $0.int64("signed_date_ms"), revoked: try $0.integer("revocation_date_ms")) }
        guard let stored else {
            try await sql.run(insertPurchaseStatement(transaction, app: app, now: now))
            return .inserted
        }
        guard (transaction.payload.signedDate ?? now).epochMilliseconds > stored.signed else { return .unchanged }
        try await sql.run(refreshPurchaseStatement(transaction, app: app.id, now: now))
        let wasRevoked = stored.revoked != nil
        let revoked = transaction.payload.revocationDate != nil
        return .refreshed(revoked: wasRevoked == revoked ? nil : revoked)
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
