import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// Customers beyond purchases: logIn merges, the admin API's lookups, promotional grants and
/// deletion.
extension CustomerDatabase {
    /// Whether an app user id is one the SDK made up for a user who has not logged in.
    public static func isAnonymous(_ appUserId: String) -> Bool {
        ReservedAppUserID.isAnonymous(appUserId)
    }

    /// One stored transaction, as the admin API lists it.
    public struct TransactionRecord: Codable, Sendable, Hashable {
        public var transactionId: String
        public var originalTransactionId: String
        public var productId: String
        public var productType: String
        public var environment: String
        public var purchaseDateMs: Int64?
        public var expiresDateMs: Int64?
        public var revocationDateMs: Int64?
        public var recordedAtMs: Int64
        /// Nil for the store's signed copy; for a record imported from another system,
        /// `awaiting_store` until the App Store confirms it, `not_in_store_history` when the App
        /// Store's history of its chain does not hold it.
        public var importStatus: String?

        enum CodingKeys: String, CodingKey {
            case transactionId = "transaction_id", originalTransactionId = "original_transaction_id"
            case productId = "product_id", productType = "product_type", environment
            case purchaseDateMs = "purchase_date_ms", expiresDateMs = "expires_date_ms"
            case revocationDateMs = "revocation_date_ms", recordedAtMs = "recorded_at_ms", importStatus = "import_status"
        }

        /// The columns ``init(_:)`` reads, of the table `p`.
        static let columns = [
            "transaction_id", "original_transaction_id", "product_id", "product_type", "environment",
            "purchase_date_ms", "expires_date_ms", "revocation_date_ms", "recorded_at_ms", "imported",
        ]
        .map { "p." + $0 }.joined(separator: ", ")

        init(_ row: some StoredRow) throws {
            transactionId = try row.string("transaction_id")
            originalTransactionId = try row.string("original_transaction_id")
            productId = try row.string("product_id")
            productType = try row.string("product_type")
            environment = try row.string("environment")
            purchaseDateMs = try row.integer("purchase_date_ms")
            expiresDateMs = try row.integer("expires_date_ms")
            revocationDateMs = try row.integer("revocation_date_ms")
            recordedAtMs = try row.int64("recorded_at_ms")
            switch try row.int64("imported") {
            case 0: importStatus = nil
            case 1: importStatus = "awaiting_store"
            default: importStatus = "not_in_store_history"
            }
        }
    }

    /// A promotional grant as the admin API lists it.
    public struct GrantRecord: Codable, Sendable, Hashable {
        public var grantId: String
        public var entitlement: String
        public var startsMs: Int64
        public var expiresMs: Int64?
        public var revokedMs: Int64?

        enum CodingKeys: String, CodingKey {
            case grantId = "grant_id", entitlement, startsMs = "starts_ms", expiresMs = "expires_ms", revokedMs = "revoked_ms"
        }

        /// The columns ``init(_:)`` reads.
        static let columns = "grant_id, entitlement, starts_ms, expires_ms, revoked_ms"

        init(_ row: some StoredRow) throws {
            grantId = try row.string("grant_id")
            entitlement = try row.string("entitlement")
            startsMs = try row.int64("starts_ms")
            expiresMs = try row.integer("expires_ms")
            revokedMs = try row.integer("revoked_ms")
        }
    }

    /// Everything the server holds about a customer.
    public struct CustomerRecord: Codable, Sendable, Hashable {
        public var appUserId: String
        public var appAccountToken: String
        public var customerInfo: SubscriberResponse
        public var transactions: [TransactionRecord]
        public var promotionalGrants: [GrantRecord]
        /// Subscriber attributes with a value (a key set to nil is left out).
        public var subscriberAttributes: [String: AttributeRecord]
        /// The ids merged into the customer (logIn, an import), oldest first: each answers as them.
        public var aliases: [String]

        enum CodingKeys: String, CodingKey {
            case appUserId = "app_user_id", appAccountToken = "app_account_token", customerInfo = "customer_info"
            case transactions, promotionalGrants = "promotional_grants", subscriberAttributes = "subscriber_attributes", aliases
        }
    }

    /// The customer with their transactions and grants; nil for a customer never seen. Reading
    /// changes nothing (unlike the app's own CustomerInfo fetch, which records a visit).
    public func lookup(app: AppConfiguration, user: String, now: Date) async throws -> CustomerRecord? {
        try await lookupWithEntitlements(app: app, user: user, now: now)?.record
    }

    /// ``lookup(app:user:now:)`` with what the entitlement rules made of the customer's
    /// purchases and grants (the dashboard's "why"), from the same read.
    public func lookupWithEntitlements(app: AppConfiguration, user: String, now: Date) async throws
        -> (record: CustomerRecord, entitlements: CustomerEntitlements)?
    {
        try await database.transaction { sql in
            let user = try await Self.customerId(sql, app: app.id, user: user)
            let customer = try await sql.first(
                """
                SELECT app_account_token, first_seen_ms, last_seen_ms, original_app_user_id FROM customers \
                WHERE app_id = \(bind: app.id) AND app_user_id = \(bind: user)
                """
            ) { row in
                (
                    token: try row.string("app_account_token"), first: try row.int64("first_seen_ms"), last: try row.int64("last_seen_ms"),
                    original: try row.text("original_app_user_id")
                )
            }
            guard let customer else { return nil }
            let entitlements = try await Self.entitlements(sql, app: app, user: user, now: now, onlyChain: nil)
            let info = SubscriberResponse(
                appUserId: customer.original ?? user, firstSeen: Date(epochMilliseconds: customer.first),
                lastSeen: Date(epochMilliseconds: customer.last),
                entitlements: entitlements, requestDate: now, stripePortalURL: app.stripe?.customerPortalURL)
            let transactions = try await sql.all(
                """
                SELECT \(raw: TransactionRecord.columns) FROM \(Self.ownedPurchases(app: app.id, user: user)) ORDER BY p.recorded_at_ms, p.transaction_id
                """
            ) { try TransactionRecord($0) }
            let grants = try await sql.all(
                """
                SELECT \(raw: GrantRecord.columns) FROM promotional_grants WHERE app_id = \(bind: app.id) AND app_user_id = \(bind: user) \
                ORDER BY created_ms, grant_id
                """
            ) { try GrantRecord($0) }
            let record = CustomerRecord(
                appUserId: user, appAccountToken: customer.token, customerInfo: info, transactions: transactions, promotionalGrants: grants,
                subscriberAttributes: try await Self.attributes(sql, app: app.id, user: user).filter { $0.value.value != nil },
                aliases: try await Self.aliases(sql, app: app.id, user: user)
            )
            return (record, entitlements)
        }
    }

    /// Grants `entitlement` from `now` until `expires` (nil: for life). Creates the customer if
    /// needed (a backend may grant before the app first calls). Returns the grant id.
    @discardableResult
    public func grantPromotional(app: AppConfiguration, user: String, entitlement: String, expires: Date?, now: Date) async throws -> String {
        let grantId = UUID().uuidString.lowercased()
        try await database.transaction { sql in
            let user = try await Self.customerId(sql, app: app.id, user: user)
            try await Self.touchCustomer(sql, app: app.id, user: user, now: now)
            try await sql.run(
                """
                INSERT INTO promotional_grants (grant_id, app_id, app_user_id, entitlement, starts_ms, expires_ms, revoked_ms, created_ms) \
                VALUES (\(bind: grantId), \(bind: app.id), \(bind: user), \(bind: entitlement), \(bind: now.epochMilliseconds), \
                \(bind: expires.map(\.epochMilliseconds)), NULL, \(bind: now.epochMilliseconds))
                """)
        }
        return grantId
    }

    /// Ends every unrevoked promotional grant of `entitlement` for the user now; returns how many.
    public func revokePromotionals(app: AppConfiguration, user: String, entitlement: String, now: Date) async throws -> Int {
        try await database.transaction { sql in
            let user = try await Self.customerId(sql, app: app.id, user: user)
            return try await sql.count(
                """
                UPDATE promotional_grants SET revoked_ms = \(bind: now.epochMilliseconds) WHERE app_id = \(bind: app.id) \
                AND app_user_id = \(bind: user) AND entitlement = \(bind: entitlement) AND revoked_ms IS NULL RETURNING grant_id
                """)
        }
    }

    /// Deletes a customer, their grants, attributes and the redemption links they used. Their purchases stay recorded (a transaction can
    /// never be replayed as new) and stay owned, by nobody: the owner becomes NULL, which no
    /// query by app user id can match (so under `keepWithOriginal` nobody can claim them, and
    /// under `transfer` the next user who restores them gets them). Returns false for an unknown
    /// customer.
    public func deleteCustomer(app: AppConfiguration, user: String, now: Date) async throws -> Bool {
        try await database.transaction { sql in
            let user = try await Self.customerId(sql, app: app.id, user: user)
            guard try await Self.customerExists(sql, app: app.id, user: user) else { return false }
            let customer: SQLStatement = "app_id = \(bind: app.id) AND app_user_id = \(bind: user)"
            try await sql.run("DELETE FROM promotional_grants WHERE \(customer)")
            try await sql.run("DELETE FROM subscriber_attributes WHERE \(customer)")
            try await sql.run("DELETE FROM customer_aliases WHERE \(customer)")
            // The links they redeemed name them; the links go (a spent one reads as unknown).
            try await sql.run("DELETE FROM web_redemptions WHERE app_id = \(bind: app.id) AND redeemed_by = \(bind: user)")
            try await sql.run("UPDATE purchase_owners SET app_user_id = NULL, updated_at_ms = \(bind: now.epochMilliseconds) WHERE \(customer)")
            try await sql.run("DELETE FROM customers WHERE \(customer)")
            return true
        }
    }

    /// The user's purchases (`p`) joined with their owners (`o`), for a `FROM` clause.
    /// The purchases `user` owns, as `purchases p`: their chains found through the owners'
    /// index by user, then each chain's rows by `purchases_by_original`. (Written as a join,
    /// SQLite planned a walk over every purchase of the app, checking each one's owner: a
    /// lookup cost what the app had sold, and an import's summary of 8,000 customers took
    /// minutes. ImportTests holds the plan to the owners' index.)
    static func ownedPurchases(app: String, user: String) -> SQLStatement {
        """
        purchases p WHERE p.app_id = \(bind: app) AND p.original_transaction_id IN \
        (SELECT o.original_transaction_id FROM purchase_owners o WHERE o.app_id = \(bind: app) AND o.app_user_id = \(bind: user))
        """
    }

    static func customerExists(_ sql: any SQLExecutor, app: String, user: String) async throws -> Bool {
        try await sql.first("SELECT 1 AS found FROM customers WHERE app_id = \(bind: app) AND app_user_id = \(bind: user)") { _ in true } ?? false
    }

    static func grants(_ sql: any SQLExecutor, app: String, user: String) async throws -> [PromotionalGrant] {
        try await sql.all(
            """
            SELECT \(raw: GrantRecord.columns) FROM promotional_grants WHERE app_id = \(bind: app) AND app_user_id = \(bind: user)
            """
        ) { try readGrantRow($0) }
    }
}
