import CountersignAppStore
import CountersignCore
import CountersignLedger
import Foundation
import NIOConcurrencyHelpers

/// Reads and writes customers and their purchases. Every write runs in one database
/// transaction; a caller answers "recorded" only after ``record(_:app:poster:now:)`` returns,
/// that is after the commit.
public struct CustomerDatabase: Sendable {
    public let database: Database
    /// PostgreSQL's CustomerInfo reads, batched on each event loop (nil on SQLite).
    let postgresReads: PerEventLoop<ReadBatcher<LeanRequest, LeanRead>>?

    /// Reads of one batch at most (the arrays of one execution of ``LeanPostgresBatch``).
    static let largestReadBatch = 32
    /// Batches of CustomerInfo reads at PostgreSQL at once from each event loop; further reads
    /// wait for one to come back and go together. Two keep most of what one would save and leave
    /// a second batch going while one waits on a long history; the loop's other connections stay
    /// free for purchases (BENCHMARKS.md, decision 8).
    static let readBatchesPerLoop = 2

    /// The largest batch of CustomerInfo reads sent to PostgreSQL so far (0 on SQLite).
    var largestReadBatchSent: Int { postgresReads?.all.map(\.value.largestBatch).max() ?? 0 }

    public init(database: Database) {
        self.database = database
        if database.dialect == .postgres {
            postgresReads = PerEventLoop { _ in
                ReadBatcher(maxInFlight: Self.readBatchesPerLoop, maxBatch: Self.largestReadBatch) { requests in
                    try await Self.leanBatch(requests, database: database)
                }
            }
        } else {
            postgresReads = nil
        }
    }

    /// Whether a customer last seen at `lastSeen` (milliseconds) needs no new `last_seen` at `now`.
    static func isRecent(_ lastSeen: Int64, now: Date) -> Bool { Ownership.isRecent(lastSeen, now: now.epochMilliseconds) }

    /// The customer's entitlements at `now`, as the customer `user` names (an alias answers as
    /// the customer it was merged into: the answer's `original_app_user_id` says which). An id
    /// never seen is recorded as a customer now (RevenueCat records a customer at first sight):
    /// its `first_seen`, and so the answer's ETag, stay the same on every later read. What a flood
    /// of made-up ids costs is bounded by the rate limits and the retention
    /// (``pruneCustomers(app:lastSeenBefore:limit:)``).
    ///
    /// A known customer seen within the hour is answered with reads only, outside a transaction:
    /// each statement sees committed data, and this is the hot path of every app launch.
    public func customerInfo(app: AppConfiguration, user: String, now: Date) async throws -> SubscriberResponse {
        // Seen within the hour: last_seen needs no update, so no write and no transaction.
        let read = try await leanRead(app: app, user: user)
        if let known = Self.customerInfo(read, app: app, user: user, now: now, accepts: { Self.isRecent($0, now: now) }) { return known }
        // Seen over an hour ago, never seen, or an alias (which has no row of its own: asked
        // only when the id has none).
        var customer = user
        if read.seen == nil, let owner = try await database.withConnection({ sql in try await Self.aliasOwner(sql, app: app.id, alias: user) }) {
            if let known = try await leanCustomerInfo(app: app, user: owner, now: now, accepts: { Self.isRecent($0, now: now) }) { return known }
            customer = owner
        }
        return try await database.transaction { [customer] sql in
            // Merged meanwhile (a logIn racing this read): the merged customer answers.
            var id = customer
            if !(try await Self.customerExists(sql, app: app.id, user: id)) { id = try await Self.customerId(sql, app: app.id, user: id) }
            let seen = try await Self.touchCustomer(sql, app: app.id, user: id, now: now)
            let read = try await Self.leanRead(sql, app: app, user: id)
            return SubscriberResponse(
                appUserId: read.originalId ?? id, firstSeen: seen.first, lastSeen: seen.last, entitlements: read.entitlements(app: app, at: now),
                requestDate: now)
        }
    }

    /// The CustomerInfo of a known customer (or of the customer an alias names), with reads
    /// only; nil for an id never seen.
    public func existingCustomerInfo(app: AppConfiguration, user: String, now: Date) async throws -> SubscriberResponse? {
        let customer = try await customerId(app: app.id, user: user)
        return try await leanCustomerInfo(app: app, user: customer, now: now) { _ in true }
    }

    /// The entitlements `user` holds at `now` (none for an unknown customer), from CustomerInfo's
    /// own read (batched on PostgreSQL).
    public func activeEntitlementIds(app: AppConfiguration, user: String, now: Date) async throws -> Set<String> {
        let customer = try await customerId(app: app.id, user: user)
        return try await leanRead(app: app, user: customer).entitlements(app: app, at: now).activeEntitlementIds
    }

    /// The number of purchase rows of `app` with this transaction id (in any environment), for
    /// tests and the admin API.
    public func purchaseCount(app: String, transactionId: String) async throws -> Int {
        try await database.withConnection { sql in
            try await sql.first("SELECT COUNT(*) AS n FROM purchases WHERE app_id = \(bind: app) AND transaction_id = \(bind: transactionId)") {
                try $0.int("n")
            } ?? 0
        }
    }

    // MARK: Statements
    //
    // Each statement is one text for both databases (``SQLStatement``), kept prepared by its
    // text on SQLite; those of the hottest paths also run as named prepared statements on
    // PostgreSQL (``PreparedSQL``).

    /// Notes a visit of the customer (at most one write an hour), adding them when unknown.
    @discardableResult
    static func touchCustomer(_ sql: any SQLExecutor, app: String, user: String, now: Date) async throws -> (first: Date, last: Date) {
        if let (firstSeen, lastSeen) = try await sql.first(
            """
            SELECT first_seen_ms, last_seen_ms FROM customers WHERE app_id = \(bind: app) AND app_user_id = \(bind: user)
            """, { (try $0.int64("first_seen_ms"), try $0.int64("last_seen_ms")) })
        {
            // At most one write an hour per customer: a CustomerInfo fetch stays a read.
            guard !isRecent(lastSeen, now: now) else {
                return (Date(epochMilliseconds: firstSeen), Date(epochMilliseconds: lastSeen))
            }
            try await sql.run(touchCustomerStatement(app: app, user: user, now: now))
            return (Date(epochMilliseconds: firstSeen), now)
        }
        try await sql.run(insertCustomerStatement(app: app, user: user, now: now))
        return (now, now)
    }

    static func touchCustomerStatement(app: String, user: String, now: Date) -> SQLStatement {
        SQLStatement(touchCustomerSQL, [.text(app), .text(user), .integer(now.epochMilliseconds)])
    }

    static let touchCustomerSQL = "UPDATE customers SET last_seen_ms = $3 WHERE app_id = $1 AND app_user_id = $2"

    /// A customer seen for the first time (nothing when another request just added them). With
    /// ``importCustomerSQL``, a known customer first seen later than `now` is moved back to it.
    static func insertCustomerStatement(app: String, user: String, now: Date, sql: String = insertCustomerSQL) -> SQLStatement {
        SQLStatement(
            sql,
            [
                .text(app), .text(user), .text(AppAccountToken.forAppUserID(user).uuidString.lowercased()), .integer(now.epochMilliseconds),
            ])
    }

    static let insertCustomerSQL = insertCustomerPrefix + "DO NOTHING"
    static let importCustomerSQL =
        insertCustomerPrefix + "DO UPDATE SET first_seen_ms = excluded.first_seen_ms WHERE customers.first_seen_ms > excluded.first_seen_ms"
    private static let insertCustomerPrefix =
        "INSERT INTO customers (app_id, app_user_id, app_account_token, first_seen_ms, last_seen_ms) "
        + "VALUES ($1, $2, $3, $4, $4) ON CONFLICT (app_id, app_user_id) "

    static func customer(_ sql: any SQLExecutor, app: String, token: String) async throws -> String? {
        try await sql.first("SELECT app_user_id FROM customers WHERE app_id = \(bind: app) AND app_account_token = \(bind: token)") {
            try $0.string("app_user_id")
        }
    }

    static func insertPurchaseStatement(_ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) -> SQLStatement {
        let payload = transaction.payload
        return SQLStatement(
            insertPurchaseSQL,
            [
                .text(transaction.transactionId), .text(app.id), .text(transaction.originalTransactionId), .text(transaction.productId),
                .text(transaction.kind.rawValue), .text(transaction.environment), .integer(payload.purchaseDate.map(\.epochMilliseconds)),
                .integer(payload.expiresDate.map(\.epochMilliseconds)), .integer(payload.revocationDate.map(\.epochMilliseconds)),
                .integer((payload.signedDate ?? now).epochMilliseconds), .text(payload.appAccountToken), .text(transaction.jws),
                .integer(now.epochMilliseconds),
                .integer((payload.isUpgraded ?? false) ? 1 : 0), .text(payload.periodType),
                .text(payload.inAppOwnershipType == .familyShared ? "FAMILY_SHARED" : "PURCHASED"), .text(transaction.presentedOfferingId),
                .integer(payload.currency == nil ? nil : payload.price), .text(payload.price == nil ? nil : payload.currency),
                .integer(transaction.isImported ? 1 : 0),
            ])
    }

    static let insertPurchaseSQL = """
        INSERT INTO purchases (transaction_id, app_id, original_transaction_id, product_id, product_type, environment,
            purchase_date_ms, expires_date_ms, revocation_date_ms, signed_date_ms, app_account_token,
            signed_transaction, recorded_at_ms, is_upgraded, period_type, ownership_type, presented_offering_id,
            price_milliunits, currency, imported)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
        """

    /// The revocation a copy of a stored transaction leaves, as SQL over the stored row: the
    /// copy's own (`revocation`), else the stored one when it is no earlier than the copy was
    /// signed (`signed`): a copy never undoes a later fact. A refund (imported, notified or
    /// signed) stands until a copy signed after it says otherwise, as Apple's copy after a
    /// reversed refund does. ``transactionEvents(_:_:stored:app:user:now:)`` decides the same.
    static func keptRevocationSQL(revocation: String, signed: String) -> String {
        "COALESCE(\(revocation), CASE WHEN revocation_date_ms >= \(signed) THEN revocation_date_ms END)"
    }

    /// The store's signed copy of a transaction stored as imported: every field takes the signed
    /// copy's value but a later revocation (``keptRevocationSQL(revocation:signed:)``), and the
    /// row is no longer marked imported (the offering it was bought from and when it was first
    /// recorded stay).
    static func confirmImportedStatement(_ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) -> SQLStatement {
        let insert = insertPurchaseStatement(transaction, app: app, now: now).values
        return SQLStatement(
            """
            UPDATE purchases SET original_transaction_id = $3, product_id = $4, product_type = $5, purchase_date_ms = $7,
                expires_date_ms = $8, revocation_date_ms = \(keptRevocationSQL(revocation: "$9", signed: "$10")), signed_date_ms = $10, app_account_token = $11,
                signed_transaction = $12, is_upgraded = $13, period_type = $14, ownership_type = $15,
                price_milliunits = $16, currency = $17, imported = 0
            WHERE transaction_id = $1 AND app_id = $2 AND environment = $6 AND imported <> 0
            """, Array(insert[0...11]) + [insert[13], insert[14], insert[15], insert[17], insert[18]])
    }

    /// A copy of a stored transaction signed later than the stored one: every field Apple may
    /// change after the purchase takes the newer copy's value (expiry, which an extension moves;
    /// revocation, unless the stored one is later than the copy; upgrade flag; period type; the
    /// signed copy itself). The condition keeps an older copy from undoing a newer one.
    static func refreshPurchaseStatement(_ transaction: VerifiedTransaction, app: String, now: Date) -> SQLStatement {
        let payload = transaction.payload
        return SQLStatement(
            """
            UPDATE purchases SET revocation_date_ms = \(keptRevocationSQL(revocation: "$2", signed: "$4")), is_upgraded = $3, signed_date_ms = $4, expires_date_ms = $7,
                signed_transaction = $8, period_type = $9
            WHERE app_id = $5 AND environment = $6 AND transaction_id = $1 AND signed_date_ms < $4
            """,
            [
                .text(transaction.transactionId), .integer(payload.revocationDate.map(\.epochMilliseconds)),
                .integer((payload.isUpgraded ?? false) ? 1 : 0), .integer((payload.signedDate ?? now).epochMilliseconds),
                .text(app), .text(transaction.environment), .integer(payload.expiresDate.map(\.epochMilliseconds)), .text(transaction.jws),
                .text(payload.periodType),
            ])
    }

    static func insertOwnerStatement(app: String, chain: String, user: String, now: Date) -> SQLStatement {
        SQLStatement(insertOwnerSQL, [.text(app), .text(chain), .text(user), .integer(now.epochMilliseconds)])
    }

    static let insertOwnerSQL = """
        INSERT INTO purchase_owners (app_id, original_transaction_id, app_user_id, updated_at_ms) VALUES ($1, $2, $3, $4)
        """

    /// A chain's new owner; `opensWindow`: the move opens a transfer window (its time noted).
    static func updateOwnerStatement(app: String, chain: String, user: String, now: Date, opensWindow: Bool) -> SQLStatement {
        SQLStatement(
            "UPDATE purchase_owners SET app_user_id = $3, updated_at_ms = $4\(opensWindow ? ", moved_at_ms = $4" : "") "
                + "WHERE app_id = $1 AND original_transaction_id = $2",
            [.text(app), .text(chain), .text(user), .integer(now.epochMilliseconds)])
    }

    /// Evaluates the entitlement rules over what the user owns (optionally one chain only), from
    /// the lean read (``leanStatement(app:user:dialect:)``) on `sql`: the same rows CustomerInfo
    /// reads outside a transaction.
    static func entitlements(_ sql: any SQLExecutor, app: AppConfiguration, user: String, now: Date, onlyChain: String?) async throws
        -> CustomerEntitlements
    {
        var read = try await leanRead(sql, app: app, user: user)
        if let onlyChain {
            // One chain only (may it move?): promotional grants are not the chain's.
            read.purchases.removeAll { $0.originalTransactionId != onlyChain }
            read.statuses = read.statuses.filter { $0.key == onlyChain }
            read.grants = []
        }
        return read.entitlements(app: app, at: now)
    }

    /// The names of a purchase row's columns with its chain's renewal state, by position (the
    /// lean read maps its positions onto these; the names only label a NULL where none may be).
    static let purchaseColumns: [String] = [
        "transaction_id", "original_transaction_id", "product_id", "product_type", "environment",
        "purchase_date_ms", "expires_date_ms", "revocation_date_ms", "recorded_at_ms", "is_upgraded",
        "period_type", "ownership_type", "auto_renew_status", "in_billing_retry", "grace_period_expires_ms", "state_chain",
    ]

    /// The one statement of the lean CustomerInfo read: the customer, the purchases the rules
    /// need (on PostgreSQL each subscription chain's newest transaction and every one-time
    /// purchase; on SQLite every purchase of the user's chains), their
    /// chains' renewal states and their grants, each row tagged by `kind` (0 customer,
    /// 1 purchase, 2 state, 3 grant) in the columns `kind, t1…t7, i1…i6, t8, i7` (``UnionRow`` maps them
    /// back). One statement is one round trip on PostgreSQL and, on SQLite, one consistent
    /// read without `BEGIN … COMMIT`.
    ///
    /// `app` and `user` are SQL text: parameters (`$1`, `$2`), or the elements of the batch's
    /// arrays on PostgreSQL (``LeanPostgresBatch``).
    ///
    /// The user's chains are joined in each database's own way, both chosen so that the plan
    /// cannot read all of an app's purchases:
    /// - SQLite: `IN (SELECT …)`; a join measured no faster, and the query planner stability
    ///   guarantee keeps either from being prepared anew (BENCHMARKS.md, decision 2; a test
    ///   holds the re-prepare count at zero).
    /// - PostgreSQL: from the user's owner rows, a `LATERAL` subquery per chain (`OFFSET 0`
    ///   keeps it a subquery). A prepared statement gets a generic plan after five runs and keeps
    ///   it; made while the tables were nearly empty (a new deployment), the `IN` form's plan read
    ///   every purchase of the app by `app_id` and filtered, a cost that grew with the table
    ///   until the next `ANALYZE` (0.6 ms a read after a few thousand purchases). A test holds
    ///   the generic plan on an empty database to reading purchases and states by chain.
    static func leanStatement(app: String, user: String, dialect: Database.Dialect) -> String {
        let owned = "SELECT original_transaction_id FROM purchase_owners WHERE app_id = \(app) AND app_user_id = \(user)"
        /// `kind` and `columns` (names or NULL) of `table`'s rows in the user's chains.
        func chainRows(_ kind: Int, _ table: String, _ columns: [String]) -> String {
            switch dialect {
            case .sqlite:
                return
                    "SELECT \(kind), \(columns.joined(separator: ", ")) FROM \(table) WHERE app_id = \(app) AND original_transaction_id IN (\(owned))"
            case .postgres:
                let read = columns.filter { $0 != "NULL" }
                return "SELECT \(kind), \(columns.map { $0 == "NULL" ? $0 : "c." + $0 }.joined(separator: ", ")) FROM purchase_owners o "
                    + "CROSS JOIN LATERAL (SELECT \(read.joined(separator: ", ")) FROM \(table) WHERE app_id = \(app) "
                    + "AND original_transaction_id = o.original_transaction_id OFFSET 0) c WHERE o.app_id = \(app) AND o.app_user_id = \(user)"
            }
        }
        let columns = [
            "transaction_id", "original_transaction_id", "product_id", "product_type", "environment", "period_type", "ownership_type",
            "purchase_date_ms", "expires_date_ms", "revocation_date_ms", "recorded_at_ms", "is_upgraded",
        ]
        let paid = ["currency", "price_milliunits"]
        let purchases: String
        switch dialect {
        case .sqlite:
            // Every row: SQLite reads them in-process, and ranking them (below) measured slower
            // than handing all of them to the rules (BENCHMARKS.md, decision 7).
            purchases = chainRows(1, "purchases", columns + ["NULL"] + paid)
        case .postgres:
            purchases = newestOfEachChain(columns, trailing: paid, app: app, user: user)
        }
        let states = chainRows(
            2, "subscription_states",
            [
                "original_transaction_id", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL",
                "auto_renew_status", "in_billing_retry", "grace_period_expires_ms", "NULL", "NULL", "NULL", "NULL", "NULL",
            ])
        return """
            SELECT 0 AS kind, original_app_user_id AS t1, CAST(NULL AS TEXT) AS t2, CAST(NULL AS TEXT) AS t3, CAST(NULL AS TEXT) AS t4, \
            CAST(NULL AS TEXT) AS t5, CAST(NULL AS TEXT) AS t6, CAST(NULL AS TEXT) AS t7, first_seen_ms AS i1, last_seen_ms AS i2, \
            CAST(NULL AS BIGINT) AS i3, CAST(NULL AS BIGINT) AS i4, CAST(NULL AS BIGINT) AS i5, CAST(NULL AS BIGINT) AS i6, \
            CAST(NULL AS TEXT) AS t8, CAST(NULL AS BIGINT) AS i7 \
            FROM customers WHERE app_id = \(app) AND app_user_id = \(user) \
            UNION ALL \(purchases) \
            UNION ALL \(states) \
            UNION ALL SELECT 3, grant_id, entitlement, NULL, NULL, NULL, NULL, NULL, starts_ms, expires_ms, revoked_ms, NULL, NULL, NULL, \
            NULL, NULL \
            FROM promotional_grants WHERE app_id = \(app) AND app_user_id = \(user)
            """
    }

    /// PostgreSQL's purchase rows of the lean statement (kind 1): `columns`, the chain's first
    /// purchase date, then `trailing`.
    static func newestOfEachChain(_ columns: [String], trailing: [String], app: String, user: String) -> String {
        // Of a subscription chain only its newest transaction (rank 1 in the order of
        // `PurchaseRecord.chainOrder`, upgraded ones last, as the rules pick it) with the
        // chain's first purchase date (`first_ms`); every one-time purchase. Rows cross the
        // wire and are decoded field by field: a customer who has paid monthly for three
        // years is one row, not 37 (BENCHMARKS.md, decision 7).
        let subscription =
            "product_type IN ('\(AppConfiguration.ProductKind.autoRenewable.rawValue)', '\(AppConfiguration.ProductKind.nonRenewing.rawValue)')"
        let purchaseDate = "COALESCE(purchase_date_ms, recorded_at_ms)"
        return
            "SELECT 1, \((columns + ["first_ms"] + trailing).map { "c." + $0 }.joined(separator: ", ")) FROM purchase_owners o "
            + "CROSS JOIN LATERAL (SELECT \((columns + trailing).joined(separator: ", ")), "
            + "row_number() OVER (PARTITION BY \(subscription) ORDER BY is_upgraded <> 0, \(purchaseDate) DESC, "
            + "COALESCE(expires_date_ms, \(purchaseDate)) DESC, transaction_id COLLATE \"C\" DESC) AS chain_rank, "
            + "min(\(purchaseDate)) OVER (PARTITION BY \(subscription)) AS first_ms "
            + "FROM purchases WHERE app_id = \(app) AND original_transaction_id = o.original_transaction_id OFFSET 0) c "
            + "WHERE o.app_id = \(app) AND o.app_user_id = \(user) AND (c.chain_rank = 1 OR NOT c.\(subscription))"
    }

    /// A row of ``leanStatement(app:user:dialect:)`` read as the row of the query its kind stands
    /// for: position `p` of that row is at `map[p]`.
    struct UnionRow<Row: StoredRow>: StoredRow {
        let row: Row
        let map: [Int32]

        func text(_ position: Int32, _ name: String) throws -> String? { try row.text(map[Int(position)], name) }
        func integer(_ position: Int32, _ name: String) throws -> Int64? { try row.integer(map[Int(position)], name) }
        /// Read by position only (its columns are named for the union, not for the kind).
        func position(of name: String) -> Int32? { nil }
    }

    /// What the rows of the lean statement add up to.
    struct LeanRead: Sendable {
        var seen: (first: Int64, last: Int64)?
        /// The customer's first id, when it is not its own (RevenueCat's `original_app_user_id`).
        var originalId: String?
        var purchases: [PurchaseRecord] = []
        var statuses: [String: SubscriptionStatus] = [:]
        var grants: [PromotionalGrant] = []

        /// What the entitlement rules make of the rows at `now`.
        func entitlements(app: AppConfiguration, at now: Date) -> CustomerEntitlements {
            EntitlementRules.evaluate(purchases: purchases, statuses: Array(statuses.values), grants: grants, products: app.products, at: now)
        }

        private static let customer: [Int32] = [8, 9, 1]
        private static let purchase: [Int32] = [1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 6, 7, 13, 14, 15]
        private static let state: [Int32] = [8, 9, 10, 1]
        private static let grant: [Int32] = [1, 2, 8, 9, 10]

        mutating func add(_ row: some StoredRow) throws {
            switch try row.integer(0, "kind") {
            case 0:
                let seen = UnionRow(row: row, map: Self.customer)
                guard let first = try seen.integer(0, "first_seen_ms"), let last = try seen.integer(1, "last_seen_ms") else {
                    throw StoredRowError(description: "a customer lacks first_seen_ms or last_seen_ms")
                }
                self.seen = (first, last)
                originalId = try seen.text(2, "original_app_user_id")
            case 1:
                let purchase = UnionRow(row: row, map: Self.purchase)
                let count = purchases.count
                try readPurchase(purchase, into: &purchases)
                if purchases.count > count {
                    if let first = try purchase.integer(12, "first_ms") { purchases[count].originalPurchaseDate = Date(epochMilliseconds: first) }
                    if let currency = try purchase.text(13, "currency"), let price = try purchase.integer(14, "price_milliunits") {
                        purchases[count].price = PaidPrice(currency: currency, milliunits: price)
                    }
                }
            case 2: try readState(UnionRow(row: row, map: Self.state), at: 0, into: &statuses)
            default: grants.append(try readGrantRow(UnionRow(row: row, map: Self.grant)))
            }
        }
    }

    /// A chain's renewal state from the four state columns starting at `base` (auto_renew_status,
    /// in_billing_retry, grace_period_expires_ms, state_chain); none when the chain has no state.
    static func readState(_ row: some StoredRow, at base: Int32, into statuses: inout [String: SubscriptionStatus]) throws {
        guard let chain = try row.text(base + 3, purchaseColumns[15]) else { return }
        statuses[chain] = SubscriptionStatus(
            originalTransactionId: chain,
            willRenew: (try row.integer(base, purchaseColumns[12]) ?? 1) == 1,
            gracePeriodExpiresDate: try row.integer(base + 2, purchaseColumns[14]).map(Date.init(epochMilliseconds:)),
            isInBillingRetry: (try row.integer(base + 1, purchaseColumns[13]) ?? 0) != 0
        )
    }

    /// A purchase from the first twelve of ``purchaseColumns``; none when its kind is unknown.
    static func readPurchase(_ row: some StoredRow, into purchases: inout [PurchaseRecord]) throws {
        func text(_ index: Int) throws -> String? { try row.text(Int32(index), purchaseColumns[index]) }
        func integer(_ index: Int) throws -> Int64? { try row.integer(Int32(index), purchaseColumns[index]) }
        func required<T>(_ value: T?, _ index: Int) throws -> T {
            guard let value else { throw StoredRowError(description: "\(purchaseColumns[index]) is NULL") }
            return value
        }
        guard let kind = AppConfiguration.ProductKind(rawValue: try required(text(3), 3)) else { return }
        var record = PurchaseRecord(
            transactionId: try required(text(0), 0),
            originalTransactionId: try required(text(1), 1),
            productId: try required(text(2), 2),
            kind: kind,
            environment: try required(text(4), 4),
            purchaseDate: Date(epochMilliseconds: try integer(5) ?? required(integer(8), 8)),
            expiresDate: try integer(6).map(Date.init(epochMilliseconds:))
        )
        record.revocationDate = try integer(7).map(Date.init(epochMilliseconds:))
        record.isUpgraded = try required(integer(9), 9) != 0
        // Rows recorded before these columns existed read as RevenueCat's defaults.
        record.periodType = try text(10) ?? "normal"
        record.ownershipType = try text(11) ?? "PURCHASED"
        purchases.append(record)
    }

    /// A promotional grant row (grant_id, entitlement, starts_ms, expires_ms, revoked_ms).
    static func readGrantRow(_ row: some StoredRow) throws -> PromotionalGrant {
        let names = ["grant_id", "entitlement", "starts_ms", "expires_ms", "revoked_ms"]
        guard let id = try row.text(0, names[0]), let entitlement = try row.text(1, names[1]), let starts = try row.integer(2, names[2]) else {
            throw StoredRowError(description: "a promotional grant lacks its id, entitlement or start")
        }
        return PromotionalGrant(
            grantId: id, entitlement: entitlement, startsDate: Date(epochMilliseconds: starts),
            expiresDate: try row.integer(3, names[3]).map(Date.init(epochMilliseconds:)),
            revokedDate: try row.integer(4, names[4]).map(Date.init(epochMilliseconds:)))
    }

    /// The lean statement of `app` for `user` on a connection of `dialect` (on PostgreSQL
    /// prepared; outside a transaction its reads go in batches, ``LeanPostgresBatch``).
    static func leanStatement(app: AppConfiguration, user: String, dialect: Database.Dialect) -> SQLStatement {
        switch dialect {
        case .postgres: LeanPostgresCustomer.statement([.text(app.id), .text(user)])
        case .sqlite: SQLStatement(leanSQLiteText, [.text(app.id), .text(user)])
        }
    }

    static let leanSQLiteText = leanStatement(app: "$1", user: "$2", dialect: .sqlite)

    /// The rows of the lean statement for `user`, added up, read on `sql` (a transaction's
    /// connection, say).
    static func leanRead(_ sql: any SQLExecutor, app: AppConfiguration, user: String) async throws -> LeanRead {
        var read = LeanRead()
        try await sql.query(leanStatement(app: app, user: user, dialect: sql.dialect)) { row in try read.add(row) }
        return read
    }

    enum LeanPostgresCustomer: PreparedSQL {
        static let name = "countersign_lean_customer_info"
        static let sql = CustomerDatabase.leanStatement(app: "$1", user: "$2", dialect: .postgres)
    }

    /// One customer's lean read: the app and the app user id.
    struct LeanRequest: Sendable {
        let app: String
        let user: String
    }

    /// The lean statement on PostgreSQL for a batch of customers (``ReadBatcher``): each
    /// customer's rows come from the single-customer statement, run for every element of the
    /// arrays (a nested loop over them, each branch read by key as for one customer) and tagged
    /// with the element's position. Prepared once per connection by PostgresNIO, then only bound
    /// and executed.
    enum LeanPostgresBatch: PreparedSQL {
        /// A constant: PostgresNIO's default (the type's name) is built anew on every execution.
        static let name = "countersign_lean_customer_infos"
        /// The column of a row's position in the batch (1-based), after the single statement's.
        static let positionColumn = 16
        /// The positions come from `generate_subscripts`, not `unnest`: PostgreSQL estimates
        /// `unnest` of a known array by its length, so a plan made for the values of one call
        /// always looked cheaper than the plan kept for every call, and each call was planned
        /// anew (BENCHMARKS.md, decision 9). Estimated alike
        /// either way, the kept plan is used after PostgreSQL's first few calls. Their count is
        /// bounded by the largest batch (never reached: ``leanBatch(_:database:)`` sends no more),
        /// which is also the estimate: `generate_subscripts` alone is estimated at a thousand
        /// rows, a plan a thousand customers' reads dear, which at 1M customers passed the cost
        /// that turns on PostgreSQL's JIT compilation.
        static let sql =
            "SELECT x.*, w.n FROM (SELECT generate_subscripts($1::text[], 1) AS n LIMIT \(largestReadBatch)) w CROSS JOIN LATERAL ("
            + CustomerDatabase.leanStatement(app: "($1::text[])[w.n]", user: "($2::text[])[w.n]", dialect: .postgres) + ") x"
    }

    /// The lean reads of `requests` in one statement on one pooled connection. A row that does
    /// not decode fails its own customer's read only.
    static func leanBatch(_ requests: [LeanRequest], database: Database) async throws -> [Result<LeanRead, any Error>] {
        precondition(requests.count <= largestReadBatch, "the statement reads \(largestReadBatch) customers at most")
        let statement = LeanPostgresBatch.statement([.texts(requests.map(\.app)), .texts(requests.map(\.user))])
        return try await database.withConnection { sql in
            var reads = [LeanRead](repeating: LeanRead(), count: requests.count)
            var failures = [(any Error)?](repeating: nil, count: requests.count)
            try await sql.query(statement) { row in
                let position = Int(try row.integer(Int32(LeanPostgresBatch.positionColumn), "n") ?? 0) - 1
                guard reads.indices.contains(position) else {
                    throw StoredRowError(description: "a batched read answered for position \(position + 1) of \(requests.count)")
                }
                guard failures[position] == nil else { return }
                do {
                    try reads[position].add(row)
                } catch {
                    failures[position] = error
                }
            }
            return zip(reads, failures).map { read, failure -> Result<LeanRead, any Error> in failure.map { .failure($0) } ?? .success(read) }
        }
    }

    /// The rows of the lean statement for `user`, added up.
    func leanRead(app: AppConfiguration, user: String) async throws -> LeanRead {
        guard let postgresReads else {
            let statement = Self.leanStatement(app: app, user: user, dialect: .sqlite)
            guard let reader = database.sqliteReader else { throw StoredRowError(description: "no lean reader for this database") }
            return try reader.read { connection in
                var read = LeanRead()
                try connection.query(statement.text, statement.values) { row in try read.add(row) }
                return read
            }
        }
        return try await postgresReads.current.read(LeanRequest(app: app.id, user: user))
    }

    /// The CustomerInfo of a known customer in one statement: on SQLite through
    /// the lean reader (prepared once, no thread hop), on PostgreSQL straight on a pooled
    /// PostgresNIO connection, together with the reads that wait for one (``ReadBatcher``). Nil
    /// for an unknown customer or when `accepts` refuses its `last_seen`.
    func leanCustomerInfo(app: AppConfiguration, user: String, now: Date, accepts: @escaping @Sendable (Int64) -> Bool) async throws
        -> SubscriberResponse?
    {
        Self.customerInfo(try await leanRead(app: app, user: user), app: app, user: user, now: now, accepts: accepts)
    }

    /// The CustomerInfo a lean read adds up to; nil for an unknown customer or when `accepts`
    /// refuses its `last_seen`.
    static func customerInfo(_ read: LeanRead, app: AppConfiguration, user: String, now: Date, accepts: (Int64) -> Bool) -> SubscriberResponse? {
        guard let seen = read.seen, accepts(seen.last) else { return nil }
        return SubscriberResponse(
            appUserId: read.originalId ?? user, firstSeen: Date(epochMilliseconds: seen.first), lastSeen: Date(epochMilliseconds: seen.last),
            entitlements: read.entitlements(app: app, at: now), requestDate: now)
    }
}
