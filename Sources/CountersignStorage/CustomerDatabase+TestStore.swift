import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// The test store's accounts: what StoreKit keeps for an Apple ID, kept by the server so a
/// running SDK on any platform hears renewals, refunds, Ask-to-Buy approvals, Family Sharing
/// grants and purchases on another device through its transaction updates.
extension CustomerDatabase {
    /// One transaction a store account received, in the order it arrived.
    public struct FeedEntry: Codable, Sendable, Hashable {
        public var sequence: Int64
        public var signedTransaction: String

        enum CodingKeys: String, CodingKey {
            case sequence, signedTransaction = "signed_transaction"
        }
    }

    /// A purchase waiting for approval (Ask to Buy).
    public struct PendingPurchase: Codable, Sendable, Hashable {
        public var pendingId: String
        public var storeAccount: String
        public var productId: String
        public var appAccountToken: String?

        enum CodingKeys: String, CodingKey {
            case pendingId = "pending_id", storeAccount = "store_account", productId = "product_id", appAccountToken = "app_account_token"
        }
    }

    /// Adds a signed transaction to a store account's feed; returns its sequence number.
    @discardableResult
    public func appendToFeed(
        app: String, account: String, transactionId: String, originalTransactionId: String,
        signedTransaction: String, now: Date
    ) async throws -> Int64 {
        try await database.transactionRetryingUniqueViolations { sql in
            let last =
                try await sql.first(
                    """
                    SELECT MAX(sequence) AS last FROM test_store_feed WHERE app_id = \(bind: app) AND store_account = \(bind: account)
                    """
                ) { try $0.integer("last") ?? 0 } ?? 0
            try await sql.run(
                """
                INSERT INTO test_store_feed (app_id, store_account, sequence, transaction_id, original_transaction_id, signed_transaction, \
                created_at_ms) VALUES (\(bind: app), \(bind: account), \(bind: last + 1), \(bind: transactionId), \(bind: originalTransactionId), \
                \(bind: signedTransaction), \(bind: now.epochMilliseconds))
                """)
            return last + 1
        }
    }

    /// The account's feed after `sequence`, oldest first, at most `limit` entries.
    public func feed(app: String, account: String, after sequence: Int64, limit: Int) async throws -> [FeedEntry] {
        try await database.withConnection { sql in
            try await sql.all(
                """
                SELECT sequence, signed_transaction FROM test_store_feed WHERE app_id = \(bind: app) AND store_account = \(bind: account) \
                AND sequence > \(bind: sequence) ORDER BY sequence LIMIT \(bind: limit)
                """
            ) { row in FeedEntry(sequence: try row.int64("sequence"), signedTransaction: try row.string("signed_transaction")) }
        }
    }

    /// The store account a purchase chain was bought with through the test store, if any.
    public func feedAccount(app: String, originalTransactionId: String) async throws -> String? {
        try await database.withConnection { sql in
            try await sql.first(
                """
                SELECT store_account FROM test_store_feed WHERE app_id = \(bind: app) AND original_transaction_id = \(bind: originalTransactionId) \
                ORDER BY created_at_ms LIMIT 1
                """
            ) { try $0.string("store_account") }
        }
    }

    /// The stored signed transaction `transactionId` of `app`.
    public func signedTransaction(app: String, transactionId: String) async throws -> String? {
        try await database.withConnection { sql in
            try await sql.first("SELECT signed_transaction FROM purchases WHERE app_id = \(bind: app) AND transaction_id = \(bind: transactionId)") {
                try $0.string("signed_transaction")
            }
        }
    }

    /// The newest signed transaction of a purchase chain (by purchase date).
    public func latestSignedTransaction(app: String, originalTransactionId: String) async throws -> String? {
        try await database.withConnection { sql in
            try await sql.first(
                """
                SELECT signed_transaction FROM purchases WHERE app_id = \(bind: app) AND original_transaction_id = \(bind: originalTransactionId) \
                ORDER BY purchase_date_ms DESC, transaction_id DESC LIMIT 1
                """
            ) { try $0.string("signed_transaction") }
        }
    }

    /// Applies a transaction the store signed outside any purchase (a renewal, a refund), as an
    /// App Store Server Notification would: stored, and owned by the chain's owner.
    public func applyStoreTransaction(_ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) async throws {
        try await database.transactionRetryingUniqueViolations { sql in
            try await Self.upsertTransaction(sql, transaction, app: app, now: now)
        }
    }

    public func addPending(app: String, account: String, productId: String, appAccountToken: String?, now: Date) async throws -> PendingPurchase {
        let pending = PendingPurchase(
            pendingId: UUID().uuidString.lowercased(), storeAccount: account, productId: productId, appAccountToken: appAccountToken)
        try await database.transaction { sql in
            try await sql.run(
                """
                INSERT INTO test_store_pending (pending_id, app_id, store_account, product_id, app_account_token, created_at_ms) \
                VALUES (\(bind: pending.pendingId), \(bind: app), \(bind: account), \(bind: productId), \(bind: appAccountToken), \
                \(bind: now.epochMilliseconds))
                """)
        }
        return pending
    }

    /// Removes and returns the account's pending purchases (one of them when `pendingId` is given).
    public func takePending(app: String, account: String, pendingId: String?) async throws -> [PendingPurchase] {
        try await database.transaction { sql in
            var query: SQLStatement = """
                SELECT pending_id, store_account, product_id, app_account_token FROM test_store_pending \
                WHERE app_id = \(bind: app) AND store_account = \(bind: account)
                """
            if let pendingId { query = query + " AND pending_id = \(bind: pendingId)" }
            let pending = try await sql.all(query + " ORDER BY created_at_ms, pending_id") { row in
                PendingPurchase(
                    pendingId: try row.string("pending_id"), storeAccount: try row.string("store_account"),
                    productId: try row.string("product_id"), appAccountToken: try row.text("app_account_token"))
            }
            for purchase in pending {
                try await sql.run("DELETE FROM test_store_pending WHERE pending_id = \(bind: purchase.pendingId)")
            }
            return pending
        }
    }
}
