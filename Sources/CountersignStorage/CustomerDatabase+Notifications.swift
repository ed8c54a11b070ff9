import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
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
            if EventRules.typesWithEvents.contains(payload.notificationType),
                let (subject, owner) = try await Self.eventSubject(sql, transaction: transaction, chain: chain, app: app)
            {
                let events = EventRules.notificationEvents(
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
    /// ``upsertTransaction(_:_:app:now:)`` and ``EventRules/stateEvents(_:chain:renewal:app:owner:subject:now:)``).
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
                EventRules.stateEvents(change, chain: chain, renewal: renewal, app: app, owner: owner, subject: subject, now: now), on: sql,
                app: app, now: now)
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

    /// The transaction's place in its chain (``ChainPlace``) in one statement: how many of the
    /// chain's periods were bought before it, the period type of the one just before, and whether
    /// one was bought after it. Nil when the transaction has no purchase date.
    static func chainPlace(_ sql: any SQLExecutor, _ subject: EventTransaction, app: String) async throws -> ChainPlace? {
        guard let purchased = subject.purchasedAtMs else { return nil }
        let (environment, chain) = (subject.environment, subject.originalTransactionId)
        return try await sql.first(
            """
            SELECT COUNT(*) AS earlier, (SELECT q.period_type FROM purchases q WHERE q.app_id = \(bind: app) \
            AND q.environment = \(bind: environment) AND q.original_transaction_id = \(bind: chain) \
            AND q.purchase_date_ms < \(bind: purchased) ORDER BY q.purchase_date_ms DESC LIMIT 1) AS previous, \
            (SELECT 1 FROM purchases q WHERE q.app_id = \(bind: app) AND q.environment = \(bind: environment) \
            AND q.original_transaction_id = \(bind: chain) AND q.transaction_id <> \(bind: subject.transactionId) \
            AND q.purchase_date_ms > \(bind: purchased) LIMIT 1) AS later \
            FROM purchases p WHERE p.app_id = \(bind: app) AND p.environment = \(bind: environment) \
            AND p.original_transaction_id = \(bind: chain) AND p.purchase_date_ms < \(bind: purchased)
            """
        ) {
            ChainPlace(
                renewalNumber: try $0.int64("earlier") + 1, previousPeriodType: try $0.text("previous"),
                hasLaterPeriod: try $0.integer("later") != nil)
        }
    }

    /// Works out the transaction's place in its chain (`renewal_number`) and the period type of
    /// the transaction before it (a renewal's `is_trial_conversion`), unless known.
    static func placeInChain(_ sql: any SQLExecutor, _ subject: inout EventTransaction, app: String) async throws {
        guard subject.renewalNumber == nil, let place = try await chainPlace(sql, subject, app: app) else { return }
        subject.place(place)
    }

    /// Adds a transaction a notification carries (a renewal, say) or brings a stored one up to
    /// date, with the events that makes for the chain's owner (``EventRules/transactionEvents(_:_:place:app:user:now:)``).
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
        let change = EventRules.change(of: transaction, stored: stored, now: now.epochMilliseconds)
        let place = change.needsPlace(transaction) ? try await chainPlace(sql, EventTransaction(transaction), app: app.id) : nil
        try await emit(
            EventRules.transactionEvents(change, transaction, place: place, app: app, user: user, now: now), on: sql, app: app, now: now)
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
        return StateChange(stored: stored.map { ($0.autoRenew, ($0.retry ?? 0) != 0) }, renewal: renewal, signedMs: signed)
    }
}
