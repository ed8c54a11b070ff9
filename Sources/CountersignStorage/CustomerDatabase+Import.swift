import CountersignCore
import CountersignLedger
import Foundation

/// What an import writes beside the purchases it records through
/// ``record(_:app:poster:now:)`` (the ownership rules of posted purchases): customers as the
/// other system knew them, their former ids, promotional grants, and the App Store's
/// confirmation of imported records. Every write here is idempotent: run again with the same
/// input, it changes nothing.
extension CustomerDatabase {
    /// Adds the customer unless known, first seen at `firstSeen`, or moves a known customer's
    /// first visit back to `firstSeen` when it is earlier; `aliases` become the ids the customer
    /// was known by (RevenueCat's `aliases`, as logIn records them), each answering as the
    /// customer from then on. An alias the server had already recorded as a customer of its own
    /// (an install that read its CustomerInfo before the import) is merged into this one.
    /// `original` is the customer's first id as the other system knew it (RevenueCat's
    /// `original_app_user_id`), when not `user`.
    public func importCustomer(app: String, user: String, aliases: [String], firstSeen: Date, original: String? = nil) async throws {
        let first = firstSeen.epochMilliseconds
        try await database.transaction { sql in
            try await sql.run(Self.insertCustomerStatement(app: app, user: user, now: firstSeen, sql: Self.importCustomerSQL))
            for alias in aliases where !AppUserID.same(alias, user) {
                if try await Self.customerExists(sql, app: app, user: alias) {
                    try await Self.merge(sql, app: app, from: alias, into: user, now: firstSeen)
                }
                try await sql.run(
                    """
                    INSERT INTO customer_aliases (app_id, app_user_id, alias, first_seen_ms) \
                    VALUES (\(bind: app), \(bind: user), \(bind: alias), \(bind: first)) \
                    ON CONFLICT DO NOTHING
                    """)
            }
            if let original, !AppUserID.same(original, user) {
                try await sql.run(
                    """
                    UPDATE customers SET original_app_user_id = \(bind: original) WHERE app_id = \(bind: app) AND app_user_id = \(bind: user)
                    """)
            }
        }
    }

    /// A promotional grant from another system, known in `app` by `grantId` (made from the other
    /// system's id of it): added, or brought to the given end and revocation. False, with nothing
    /// written, when the app holds that grant for another customer (a grant never moves).
    public func importGrant(
        app: String, user: String, grantId: String, entitlement: String, starts: Date, expires: Date?, revoked: Date?
    ) async throws -> Bool {
        try await database.withConnection { sql in
            try await sql.count(
                """
                INSERT INTO promotional_grants (grant_id, app_id, app_user_id, entitlement, starts_ms, expires_ms, revoked_ms, created_ms) \
                VALUES (\(bind: grantId), \(bind: app), \(bind: user), \(bind: entitlement), \(bind: starts.epochMilliseconds), \
                \(bind: expires.map(\.epochMilliseconds)), \(bind: revoked.map(\.epochMilliseconds)), \(bind: starts.epochMilliseconds)) \
                ON CONFLICT (app_id, grant_id) DO UPDATE SET expires_ms = excluded.expires_ms, revoked_ms = excluded.revoked_ms \
                WHERE promotional_grants.app_user_id = excluded.app_user_id RETURNING grant_id
                """) == 1
        }
    }

    /// A purchase chain with records the App Store has not confirmed yet.
    public struct ImportedChain: Sendable, Hashable {
        public var originalTransactionId: String
        public var environment: String
        /// The chain's owner (nil: owned by nobody).
        public var owner: String?
        /// The chain's transactions stored as imported and not yet confirmed.
        public var unconfirmed: Set<String>

        public init(originalTransactionId: String, environment: String, owner: String?, unconfirmed: Set<String>) {
            self.originalTransactionId = originalTransactionId
            self.environment = environment
            self.owner = owner
            self.unconfirmed = unconfirmed
        }
    }

    /// The chains of `app` holding imported records not yet confirmed (marked 1), in id order.
    public func importedChains(app: String) async throws -> [ImportedChain] {
        let rows = try await database.withConnection { sql in
            try await sql.all(
                """
                SELECT p.original_transaction_id, p.environment, p.transaction_id, o.app_user_id FROM purchases p \
                LEFT JOIN purchase_owners o ON o.app_id = p.app_id AND o.original_transaction_id = p.original_transaction_id \
                WHERE p.app_id = \(bind: app) AND p.imported = 1 ORDER BY p.original_transaction_id, p.environment, p.transaction_id
                """
            ) { row in
                (
                    chain: try row.string("original_transaction_id"), environment: try row.string("environment"),
                    transaction: try row.string("transaction_id"), owner: try row.text("app_user_id")
                )
            }
        }
        var chains: [ImportedChain] = []
        for row in rows {
            if let last = chains.last, last.originalTransactionId == row.chain, last.environment == row.environment {
                chains[chains.count - 1].unconfirmed.insert(row.transaction)
            } else {
                chains.append(
                    ImportedChain(originalTransactionId: row.chain, environment: row.environment, owner: row.owner, unconfirmed: [row.transaction]))
            }
        }
        return chains
    }

    /// Marks the chain's imported records that the App Store's complete history of it does not
    /// hold (2): they stay, and are no longer asked about. Returns how many.
    @discardableResult
    public func markNotInStoreHistory(app: String, chain: String, environment: String, transactions: Set<String>) async throws -> Int {
        guard !transactions.isEmpty else { return 0 }
        return try await database.transaction { sql in
            for transaction in transactions.sorted() {
                try await sql.run(
                    """
                    UPDATE purchases SET imported = 2 WHERE app_id = \(bind: app) AND environment = \(bind: environment) \
                    AND original_transaction_id = \(bind: chain) AND transaction_id = \(bind: transaction) AND imported = 1
                    """)
            }
            return transactions.count
        }
    }

    /// How many purchases of `app` are marked imported, by mark (1: waiting for the App Store,
    /// 2: not in its history).
    public func importedPurchaseCounts(app: String) async throws -> [Int: Int] {
        try await database.withConnection { sql in
            let rows = try await sql.all(
                "SELECT imported, COUNT(*) AS n FROM purchases WHERE app_id = \(bind: app) AND imported <> 0 GROUP BY imported"
            ) { (try $0.int("imported"), try $0.int("n")) }
            return Dictionary(rows, uniquingKeysWith: +)
        }
    }
}
