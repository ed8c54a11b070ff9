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

/// Subscriber attributes, as RevenueCat keeps them: string values (nil deletes) per key, each
/// with the device time it was set; a value set earlier than the stored one changes nothing.
extension CustomerDatabase {
    public struct AttributeRecord: Codable, Sendable, Hashable {
        public var value: String?
        public var updatedAtMs: Int64

        enum CodingKeys: String, CodingKey {
            case value, updatedAtMs = "updated_at_ms"
        }

        public init(value: String?, updatedAtMs: Int64) {
            self.value = value
            self.updatedAtMs = updatedAtMs
        }
    }

    /// Stores attributes for the user (created if needed); returns how many changed. An
    /// attribute replaces a stored one updated no later than it; an `updatedAtMs` after `now` is
    /// taken as `now`.
    @discardableResult
    public func setAttributes(app: String, user: String, _ attributes: [String: AttributeRecord], now: Date) async throws -> Int {
        try await database.transactionRetryingUniqueViolations { sql in
            let user = try await Self.customerId(sql, app: app, user: user)
            try await Self.touchCustomer(sql, app: app, user: user, now: now)
            var changed = 0
            for (key, sent) in attributes.sorted(by: { $0.key < $1.key }) {
                // A client's clock, or a client, may say any time: none lies beyond the server's
                // (an attribute dated 9e18 would otherwise never be replaced).
                var attribute = sent
                attribute.updatedAtMs = min(sent.updatedAtMs, now.epochMilliseconds)
                let customerKey: SQLStatement = "app_id = \(bind: app) AND app_user_id = \(bind: user) AND attribute_key = \(bind: key)"
                let stored = try await sql.first("SELECT updated_at_ms FROM subscriber_attributes WHERE \(customerKey)") {
                    try $0.int64("updated_at_ms")
                }
                if let stored {
                    guard attribute.updatedAtMs >= stored else { continue }
                    try await sql.run(
                        """
                        UPDATE subscriber_attributes SET attribute_value = \(bind: attribute.value), updated_at_ms = \(bind: attribute.updatedAtMs) \
                        WHERE \(customerKey)
                        """)
                } else {
                    try await sql.run(
                        """
                        INSERT INTO subscriber_attributes (app_id, app_user_id, attribute_key, attribute_value, updated_at_ms) \
                        VALUES (\(bind: app), \(bind: user), \(bind: key), \(bind: attribute.value), \(bind: attribute.updatedAtMs))
                        """)
                }
                changed += 1
            }
            return changed
        }
    }

    /// The customer's attributes with a value (a key set to nil was deleted).
    public func attributes(app: String, user: String) async throws -> [String: SubscriberAttributeValue] {
        try await database.withConnection { sql in
            let user = try await Self.customerId(sql, app: app, user: user)
            return try await Self.attributes(sql, app: app, user: user).compactMapValues { record in
                record.value.map { SubscriberAttributeValue(value: $0, updatedAtMs: record.updatedAtMs) }
            }
        }
    }

    static func attributes(_ sql: any SQLExecutor, app: String, user: String) async throws -> [String: AttributeRecord] {
        var attributes: [String: AttributeRecord] = [:]
        try await sql.query(
            """
            SELECT attribute_key, attribute_value, updated_at_ms FROM subscriber_attributes WHERE app_id = \(bind: app) AND app_user_id = \(bind: user)
            """
        ) { row in
            attributes[try row.string("attribute_key")] = AttributeRecord(
                value: try row.text("attribute_value"), updatedAtMs: try row.int64("updated_at_ms"))
        }
        return attributes
    }
}

extension CustomerDatabase {
    /// Each product's introductory offer eligibility for `user`: ineligible once the customer owns
    /// (or owned) any transaction of a product in the same subscription group (a product without
    /// a group is a group of its own); `noIntroOfferExists` for a product without an offer.
    public func introductoryOfferEligibility(app: AppConfiguration, user: String, products: [AppConfiguration.Product]) async throws -> [String:
        IntroEligibilityStatus]
    {
        let owned: Set<String> = try await database.withConnection { sql in
            let user = try await Self.customerId(sql, app: app.id, user: user)
            return Set(
                try await sql.all("SELECT DISTINCT p.product_id FROM \(Self.ownedPurchases(app: app.id, user: user))") { try $0.string("product_id") }
            )
        }
        func group(_ product: AppConfiguration.Product) -> String { product.subscriptionGroup ?? "product:" + product.id }
        let ownedGroups = Set(app.products.filter { owned.contains($0.id) && $0.type == .autoRenewable }.map(group))
        var answer: [String: IntroEligibilityStatus] = [:]
        for product in products {
            answer[product.id] =
                product.introductoryOffer == nil
                ? .noIntroOfferExists
                : ownedGroups.contains(group(product)) ? .ineligible : .eligible
        }
        return answer
    }
}
