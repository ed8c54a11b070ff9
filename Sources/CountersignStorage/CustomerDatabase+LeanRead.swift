import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// CustomerInfo's one statement (the lean read), a statement builder: its text for each
/// database, and its rows added up into what the entitlement rules take.
extension CustomerDatabase {
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
    /// arrays on PostgreSQL (``LeanPostgresBatch``). `customers` is where the customer's row
    /// comes from (`original_app_user_id`, `first_seen_ms`, `last_seen_ms`), when not the table.
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
    static func leanStatement(
        app: String, user: String, dialect: Database.Dialect, customers: String? = nil
    ) -> String {
        let customers = customers ?? "customers WHERE app_id = \(app) AND app_user_id = \(user)"
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
            FROM \(customers) \
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

    /// The lean statement for the embedded database's in-process reader (``SQLiteReader``).
    static func leanReaderStatement(app: AppConfiguration, user: String) -> SQLStatement {
        leanStatement(app: app, user: user, dialect: .sqlite)
    }

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

    /// A visit and the lean read in one PostgreSQL statement, prepared: the customer is added
    /// when never seen (unless the id is an alias: an alias has no row of its own), or its
    /// `last_seen` noted when over an hour old, and the answer is read as it is after the visit
    /// (the customer's row from the visit's `RETURNING`, the table's row when the visit changed
    /// nothing). Parameters: $1 app, $2 user, $3 app account token, $4 now (milliseconds).
    /// No customer row comes back for an alias.
    enum VisitPostgresCustomer: PreparedSQL {
        static let name = "countersign_visit_customer_info"
        static let sql =
            "WITH visit AS (INSERT INTO customers (app_id, app_user_id, app_account_token, first_seen_ms, last_seen_ms) "
            + "SELECT $1, $2, $3, $4, $4 WHERE NOT EXISTS (SELECT 1 FROM customer_aliases WHERE app_id = $1 AND alias = $2) "
            + "ON CONFLICT (app_id, app_user_id) DO UPDATE SET last_seen_ms = excluded.last_seen_ms "
            + "WHERE customers.last_seen_ms <= excluded.last_seen_ms - \(Ownership.lastSeenResolution) "
            + "RETURNING original_app_user_id, first_seen_ms, last_seen_ms) "
            + CustomerDatabase.leanStatement(
                app: "$1", user: "$2", dialect: .postgres,
                customers: "(SELECT original_app_user_id, first_seen_ms, last_seen_ms FROM visit UNION ALL "
                    + "SELECT original_app_user_id, first_seen_ms, last_seen_ms FROM customers WHERE app_id = $1 AND app_user_id = $2 "
                    + "AND NOT EXISTS (SELECT 1 FROM visit)) AS c")

        static func statement(app: String, user: String, now: Date) -> SQLStatement {
            statement([
                .text(app), .text(user), .text(AppAccountToken.forAppUserID(user).uuidString.lowercased()), .integer(now.epochMilliseconds),
            ])
        }
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
}
