import CountersignCore
import Foundation
import SQLKit

/// Customers beyond purchases: logIn merges, the admin API's lookups, promotional grants and
/// deletion.
extension CustomerDatabase {
    /// Whether an app user id is one the SDK made up for a user who has not logged in.
    public static func isAnonymous(_ appUserId: String) -> Bool {
        ReservedAppUserID.isAnonymous(appUserId)
    }

    /// logIn: `newUser` becomes the customer; when `currentUser` is anonymous its purchases and
    /// grants move to `newUser` (the merge RevenueCat's logIn does). Returns whether `newUser`
    /// was seen for the first time.
    public func identify(app: AppConfiguration, currentUser: String, newUser: String, now: Date) async throws -> Bool {
        try await database.transaction { sql in
            let existed = try await Self.customerExists(sql, app: app.id, user: newUser)
            try await Self.touchCustomer(sql, app: app.id, user: newUser, now: now)
            if !AppUserID.same(currentUser, newUser), Self.isAnonymous(currentUser) {
                for table in ["purchase_owners", "promotional_grants"] {
                    try await sql.update(table).set("app_user_id", to: newUser)
                        .where("app_id", .equal, app.id).where("app_user_id", .equal, currentUser).run()
                }
            }
            return !existed
        }
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

        enum CodingKeys: String, CodingKey {
            case transactionId = "transaction_id", originalTransactionId = "original_transaction_id"
            case productId = "product_id", productType = "product_type", environment
            case purchaseDateMs = "purchase_date_ms", expiresDateMs = "expires_date_ms"
            case revocationDateMs = "revocation_date_ms", recordedAtMs = "recorded_at_ms"
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

        enum CodingKeys: String, CodingKey {
            case appUserId = "app_user_id", appAccountToken = "app_account_token", customerInfo = "customer_info"
            case transactions, promotionalGrants = "promotional_grants", subscriberAttributes = "subscriber_attributes"
        }
    }

    /// The customer with their transactions and grants; nil for a customer never seen. Reading
    /// changes nothing (unlike the app's own CustomerInfo fetch, which records a visit).
    public func lookup(app: AppConfiguration, user: String, now: Date) async throws -> CustomerRecord? {
        try await lookupWithEntitlements(app: app, user: user, now: now)?.record
    }

    /// ``lookup(app:user:now:)`` with what the entitlement rules made of the customer's
    /// purchases and grants (the dashboard's "why"), from the same read.
    func lookupWithEntitlements(app: AppConfiguration, user: String, now: Date) async throws
        -> (record: CustomerRecord, entitlements: CustomerEntitlements)? {
        try await database.transaction { sql in
            guard let row = try await sql.select().columns("app_account_token", "first_seen_ms", "last_seen_ms").from("customers")
                .where("app_id", .equal, app.id).where("app_user_id", .equal, user).first()
            else { return nil }
            let entitlements = try await Self.entitlements(sql, app: app, user: user, now: now, onlyChain: nil)
            let info = SubscriberResponse(
                appUserId: user, firstSeen: Self.date(try row.decode(column: "first_seen_ms", as: Int64.self)),
                lastSeen: Self.date(try row.decode(column: "last_seen_ms", as: Int64.self)), entitlements: entitlements, requestDate: now
            )
            let transactions = try await Self.ownedPurchases(sql, app: app.id, user: user)
                .columns(["transaction_id", "original_transaction_id", "product_id", "product_type", "environment",
                          "purchase_date_ms", "expires_date_ms", "revocation_date_ms", "recorded_at_ms"].map { SQLColumn($0, table: "p") })
                .orderBy(SQLColumn("recorded_at_ms", table: "p"))
                .orderBy(SQLColumn("transaction_id", table: "p"))
                .all(decoding: TransactionRecord.self)
            let grants = try await sql.select().columns("grant_id", "entitlement", "starts_ms", "expires_ms", "revoked_ms")
                .from("promotional_grants").where("app_id", .equal, app.id).where("app_user_id", .equal, user)
                .orderBy("created_ms").orderBy("grant_id")
                .all(decoding: GrantRecord.self)
            let record = CustomerRecord(
                appUserId: user, appAccountToken: try row.decode(column: "app_account_token", as: String.self),
                customerInfo: info, transactions: transactions, promotionalGrants: grants,
                subscriberAttributes: try await Self.attributes(sql, app: app.id, user: user).filter { $0.value.value != nil }
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
            try await Self.touchCustomer(sql, app: app.id, user: user, now: now)
            try await sql.insert(into: "promotional_grants")
                .columns("grant_id", "app_id", "app_user_id", "entitlement", "starts_ms", "expires_ms", "revoked_ms", "created_ms")
                .values(SQLBind(grantId), SQLBind(app.id), SQLBind(user), SQLBind(entitlement), SQLBind(Self.milliseconds(now)),
                        SQLBind(expires.map(Self.milliseconds)), SQLBind(Int64?.none), SQLBind(Self.milliseconds(now)))
                .run()
        }
        return grantId
    }

    /// Ends every unrevoked promotional grant of `entitlement` for the user now; returns how many.
    public func revokePromotionals(app: AppConfiguration, user: String, entitlement: String, now: Date) async throws -> Int {
        try await database.transaction { sql in
            let open = try await sql.select().column("grant_id").from("promotional_grants")
                .where("app_id", .equal, app.id).where("app_user_id", .equal, user).where("entitlement", .equal, entitlement)
                .where("revoked_ms", .is, SQLLiteral.null).all()
            try await sql.update("promotional_grants").set("revoked_ms", to: Self.milliseconds(now))
                .where("app_id", .equal, app.id).where("app_user_id", .equal, user).where("entitlement", .equal, entitlement)
                .where("revoked_ms", .is, SQLLiteral.null).run()
            return open.count
        }
    }

    /// Deletes a customer, their grants and attributes. Their purchases stay recorded (a transaction can
    /// never be replayed as new) and stay owned, by nobody: the owner becomes NULL, which no
    /// query by app user id can match (so under `keepWithOriginal` nobody can claim them, and
    /// under `transfer` the next user who restores them gets them). Returns false for an unknown
    /// customer.
    public func deleteCustomer(app: AppConfiguration, user: String, now: Date) async throws -> Bool {
        try await database.transaction { sql in
            guard try await Self.customerExists(sql, app: app.id, user: user) else { return false }
            try await sql.delete(from: "promotional_grants").where("app_id", .equal, app.id).where("app_user_id", .equal, user).run()
            try await sql.delete(from: "subscriber_attributes").where("app_id", .equal, app.id).where("app_user_id", .equal, user).run()
            try await sql.update("purchase_owners").set("app_user_id", to: SQLLiteral.null)
                .set("updated_at_ms", to: Self.milliseconds(now))
                .where("app_id", .equal, app.id).where("app_user_id", .equal, user).run()
            try await sql.delete(from: "customers").where("app_id", .equal, app.id).where("app_user_id", .equal, user).run()
            return true
        }
    }

    /// The user's purchases (`p`) joined with their owners (`o`); the caller picks the columns.
    static func ownedPurchases(_ sql: any SQLDatabase, app: String, user: String) -> SQLSelectBuilder {
        sql.select()
            .from(SQLAlias(SQLIdentifier("purchases"), as: SQLIdentifier("p")))
            .join(SQLAlias(SQLIdentifier("purchase_owners"), as: SQLIdentifier("o")), method: SQLJoinMethod.inner,
                  on: SQLBinaryExpression(SQLColumn("original_transaction_id", table: "p"), .equal, SQLColumn("original_transaction_id", table: "o")))
            .where(SQLColumn("app_id", table: "o"), .equal, SQLBind(app))
            .where(SQLColumn("app_id", table: "p"), .equal, SQLBind(app))
            .where(SQLColumn("app_user_id", table: "o"), .equal, SQLBind(user))
    }

    static func customerExists(_ sql: any SQLDatabase, app: String, user: String) async throws -> Bool {
        try await sql.select().column("app_user_id").from("customers")
            .where("app_id", .equal, app).where("app_user_id", .equal, user).first() != nil
    }

    static func grants(_ sql: any SQLDatabase, app: String, user: String) async throws -> [PromotionalGrant] {
        try await sql.select().columns("grant_id", "entitlement", "starts_ms", "expires_ms", "revoked_ms")
            .from("promotional_grants").where("app_id", .equal, app).where("app_user_id", .equal, user)
            .all(decoding: GrantRecord.self)
            .map { grant in
                PromotionalGrant(grantId: grant.grantId, entitlement: grant.entitlement, startsDate: date(grant.startsMs),
                                 expiresDate: grant.expiresMs.map(date), revokedDate: grant.revokedMs.map(date))
            }
    }
}
