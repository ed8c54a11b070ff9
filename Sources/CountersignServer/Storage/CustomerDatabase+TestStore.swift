import CountersignCore
import Foundation
import SQLKit

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
    public func appendToFeed(app: String, account: String, transactionId: String, originalTransactionId: String,
                             signedTransaction: String, now: Date) async throws -> Int64 {
        try await database.transactionRetryingUniqueViolations { sql in
            let last = try await sql.select().column(SQLFunction("MAX", args: SQLIdentifier("sequence")), as: "last")
                .from("test_store_feed").where("app_id", .equal, app).where("store_account", .equal, account).first()
                .flatMap { try $0.decodeNil(column: "last") ? nil : $0.decode(column: "last", as: Int64.self) } ?? 0
            try await sql.insert(into: "test_store_feed")
                .columns("app_id", "store_account", "sequence", "transaction_id", "original_transaction_id", "signed_transaction", "created_at_ms")
                .values(SQLBind(app), SQLBind(account), SQLBind(last + 1), SQLBind(transactionId), SQLBind(originalTransactionId),
                        SQLBind(signedTransaction), SQLBind(Self.milliseconds(now)))
                .run()
            return last + 1
        }
    }

    /// The account's feed after `sequence`, oldest first, at most `limit` entries.
    public func feed(app: String, account: String, after sequence: Int64, limit: Int) async throws -> [FeedEntry] {
        try await database.withConnection { sql in
            try await sql.select().column("sequence").column(SQLColumn("signed_transaction"), as: "signedTransaction")
                .from("test_store_feed").where("app_id", .equal, app).where("store_account", .equal, account)
                .where("sequence", .greaterThan, sequence).orderBy("sequence").limit(limit)
                .all().map { row in
                    FeedEntry(sequence: try row.decode(column: "sequence", as: Int64.self),
                              signedTransaction: try row.decode(column: "signedTransaction", as: String.self))
                }
        }
    }

    /// The store account a purchase chain was bought with through the test store, if any.
    public func feedAccount(app: String, originalTransactionId: String) async throws -> String? {
        try await database.withConnection { sql in
            try await sql.select().column("store_account").from("test_store_feed")
                .where("app_id", .equal, app).where("original_transaction_id", .equal, originalTransactionId)
                .orderBy("created_at_ms").limit(1).first()
                .map { try $0.decode(column: "store_account", as: String.self) }
        }
    }

    /// The stored signed transaction `transactionId` of `app`.
    public func signedTransaction(app: String, transactionId: String) async throws -> String? {
        try await database.withConnection { sql in
            try await sql.select().column("signed_transaction").from("purchases")
                .where("app_id", .equal, app).where("transaction_id", .equal, transactionId).first()
                .map { try $0.decode(column: "signed_transaction", as: String.self) }
        }
    }

    /// The newest signed transaction of a purchase chain (by purchase date).
    public func latestSignedTransaction(app: String, originalTransactionId: String) async throws -> String? {
        try await database.withConnection { sql in
            try await sql.select().column("signed_transaction").from("purchases")
                .where("app_id", .equal, app).where("original_transaction_id", .equal, originalTransactionId)
                .orderBy("purchase_date_ms", .descending).orderBy("transaction_id", .descending).limit(1).first()
                .map { try $0.decode(column: "signed_transaction", as: String.self) }
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
        let pending = PendingPurchase(pendingId: UUID().uuidString.lowercased(), storeAccount: account, productId: productId, appAccountToken: appAccountToken)
        try await database.transaction { sql in
            try await sql.insert(into: "test_store_pending")
                .columns("pending_id", "app_id", "store_account", "product_id", "app_account_token", "created_at_ms")
                .values(SQLBind(pending.pendingId), SQLBind(app), SQLBind(account), SQLBind(productId), SQLBind(appAccountToken),
                        SQLBind(Self.milliseconds(now)))
                .run()
        }
        return pending
    }

    /// Removes and returns the account's pending purchases (one of them when `pendingId` is given).
    public func takePending(app: String, account: String, pendingId: String?) async throws -> [PendingPurchase] {
        try await database.transaction { sql in
            var query = sql.select().columns("pending_id", "store_account", "product_id", "app_account_token").from("test_store_pending")
                .where("app_id", .equal, app).where("store_account", .equal, account)
            if let pendingId { query = query.where("pending_id", .equal, pendingId) }
            let pending = try await query.orderBy("created_at_ms").orderBy("pending_id").all(decoding: PendingPurchase.self)
            for purchase in pending {
                try await sql.delete(from: "test_store_pending").where("pending_id", .equal, purchase.pendingId).run()
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
    }

    /// Stores attributes for the user (created if needed); returns how many changed.
    @discardableResult
    public func setAttributes(app: String, user: String, _ attributes: [String: AttributeRecord], now: Date) async throws -> Int {
        try await database.transactionRetryingUniqueViolations { sql in
            try await Self.touchCustomer(sql, app: app, user: user, now: now)
            var changed = 0
            for (key, attribute) in attributes.sorted(by: { $0.key < $1.key }) {
                let stored = try await sql.select().column("updated_at_ms").from("subscriber_attributes")
                    .where("app_id", .equal, app).where("app_user_id", .equal, user).where("attribute_key", .equal, key).first()
                    .map { try $0.decode(column: "updated_at_ms", as: Int64.self) }
                if let stored {
                    guard attribute.updatedAtMs >= stored else { continue }
                    try await sql.update("subscriber_attributes")
                        .set("attribute_value", to: SQLBind(attribute.value)).set("updated_at_ms", to: SQLBind(attribute.updatedAtMs))
                        .where("app_id", .equal, app).where("app_user_id", .equal, user).where("attribute_key", .equal, key).run()
                } else {
                    try await sql.insert(into: "subscriber_attributes")
                        .columns("app_id", "app_user_id", "attribute_key", "attribute_value", "updated_at_ms")
                        .values(SQLBind(app), SQLBind(user), SQLBind(key), SQLBind(attribute.value), SQLBind(attribute.updatedAtMs))
                        .run()
                }
                changed += 1
            }
            return changed
        }
    }

    static func attributes(_ sql: any SQLDatabase, app: String, user: String) async throws -> [String: AttributeRecord] {
        let rows = try await sql.select().columns("attribute_key", "attribute_value", "updated_at_ms").from("subscriber_attributes")
            .where("app_id", .equal, app).where("app_user_id", .equal, user).all()
        var attributes: [String: AttributeRecord] = [:]
        for row in rows {
            attributes[try row.decode(column: "attribute_key", as: String.self)] = AttributeRecord(
                value: try row.decode(column: "attribute_value", as: String?.self),
                updatedAtMs: try row.decode(column: "updated_at_ms", as: Int64.self)
            )
        }
        return attributes
    }
}

extension CustomerDatabase {
    /// Each product's introductory offer eligibility for `user`: ineligible once the customer owns
    /// (or owned) any transaction of a product in the same subscription group (a product without
    /// a group is a group of its own); `noIntroOfferExists` for a product without an offer.
    public func introductoryOfferEligibility(app: AppConfiguration, user: String, products: [AppConfiguration.Product]) async throws -> [String: IntroEligibilityStatus] {
        let owned: Set<String> = try await database.withConnection { sql in
            let rows = try await Self.ownedPurchases(sql, app: app.id, user: user).distinct().column(SQLColumn("product_id", table: "p")).all()
            return Set(try rows.map { try $0.decode(column: "product_id", as: String.self) })
        }
        func group(_ product: AppConfiguration.Product) -> String { product.subscriptionGroup ?? "product:" + product.id }
        let ownedGroups = Set(app.products.filter { owned.contains($0.id) && $0.type == .autoRenewable }.map(group))
        var answer: [String: IntroEligibilityStatus] = [:]
        for product in products {
            answer[product.id] = product.introductoryOffer == nil ? .noIntroOfferExists
                : ownedGroups.contains(group(product)) ? .ineligible : .eligible
        }
        return answer
    }
}
