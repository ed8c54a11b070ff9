import CountersignAppStore
import CountersignCore
import Foundation
import SQLKit

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
            let seen = try await sql.select().column("notification_uuid").from("notifications")
                .where("notification_uuid", .equal, payload.notificationUUID).first()
            guard seen == nil else { return .duplicate }
            try await sql.insert(into: "notifications")
                .columns("notification_uuid", "app_id", "notification_type", "subtype", "signed_date_ms", "received_at_ms")
                .values(SQLBind(payload.notificationUUID), SQLBind(app.id), SQLBind(payload.notificationType.rawValue),
                        SQLBind(payload.subtype?.rawValue), SQLBind(Self.milliseconds(payload.signedDate ?? now)), SQLBind(Self.milliseconds(now)))
                .run()
            if let transactionPayload = notification.transaction, let jws = payload.data?.signedTransactionInfo,
               let transaction = try? VerifiedTransaction(jws: jws, payload: transactionPayload, app: app) {
                try await Self.upsertTransaction(sql, transaction, app: app, now: now)
            }
            if let renewal = notification.renewalInfo, let chain = renewal.originalTransactionId {
                try await Self.updateSubscriptionState(sql, app: app.id, chain: chain, renewal: renewal, now: now)
            }
            return .applied
        }
    }

    /// Adds a transaction a notification carries (a renewal, say) or brings a stored one up to
    /// date. A stored transaction takes the revocation and upgrade state of the copy signed
    /// last, so a refund (`REFUND`) and its reversal (`REFUND_REVERSED`, the same transaction
    /// without a revocation date) end in the right state in either order of arrival. The chain's
    /// owner, if it has one, owns it; a purchase bound by app account token to a known customer
    /// gets that owner.
    static func upsertTransaction(_ sql: any SQLDatabase, _ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) async throws {
        try await storeTransaction(sql, transaction, app: app, now: now)
        let owner = try await sql.select().column("app_user_id").from("purchase_owners")
            .where("app_id", .equal, app.id).where("original_transaction_id", .equal, transaction.originalTransactionId).first()
        if owner == nil, let token = transaction.payload.appAccountToken?.lowercased(),
           let user = try await customer(sql, app: app.id, token: token) {
            try await sql.raw(insertOwnerStatement(app: app.id, chain: transaction.originalTransactionId, user: user, now: now).query).run()
        }
    }

    /// Inserts a transaction, or refreshes a stored one from a copy signed later than the stored
    /// one (revocation and upgrade state); an older copy changes nothing. Returns whether the
    /// transaction was new.
    @discardableResult
    static func storeTransaction(_ sql: any SQLDatabase, _ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) async throws -> Bool {
        let stored = try await sql.raw("SELECT signed_date_ms FROM purchases WHERE transaction_id = \(bind: transaction.transactionId)")
            .first().map { try $0.decode(column: "signed_date_ms", as: Int64.self) }
        guard let stored else {
            try await sql.raw(insertPurchaseStatement(transaction, app: app, now: now).query).run()
            return true
        }
        if milliseconds(transaction.payload.signedDate ?? now) > stored {
            try await sql.raw(refreshPurchaseStatement(transaction, now: now).query).run()
        }
        return false
    }

    static func updateSubscriptionState(_ sql: any SQLDatabase, app: String, chain: String, renewal: RenewalInfoPayload, now: Date) async throws {
        let signed = milliseconds(renewal.signedDate ?? now)
        let stored = try await sql.select().column("state_signed_date_ms").from("subscription_states")
            .where("app_id", .equal, app).where("original_transaction_id", .equal, chain).first()
            .map { try $0.decode(column: "state_signed_date_ms", as: Int64.self) }
        if let stored, stored >= signed { return } // an older state arriving late changes nothing
        let values: [any SQLExpression] = [
            SQLBind(renewal.autoRenewStatus), SQLBind((renewal.isInBillingRetryPeriod ?? false) ? 1 : 0),
            SQLBind(renewal.gracePeriodExpiresDate.map(milliseconds)), SQLBind(signed),
        ]
        if stored == nil {
            try await sql.insert(into: "subscription_states")
                .columns("app_id", "original_transaction_id", "auto_renew_status", "in_billing_retry", "grace_period_expires_ms", "state_signed_date_ms")
                .values([SQLBind(app), SQLBind(chain)] + values)
                .run()
        } else {
            try await sql.update("subscription_states")
                .set("auto_renew_status", to: values[0]).set("in_billing_retry", to: values[1])
                .set("grace_period_expires_ms", to: values[2]).set("state_signed_date_ms", to: values[3])
                .where("app_id", .equal, app).where("original_transaction_id", .equal, chain).run()
        }
    }
}
