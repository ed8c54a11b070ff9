import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import PostgresNIO
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// The lean CustomerInfo reads (one statement; on PostgreSQL each chain's newest transaction
/// only, in batches) against the rules evaluated over every stored row.
@Suite("Lean CustomerInfo reads", .serialized)
struct LeanReaderTests {
    /// Customers with renewal chains, refunds, lapsed states, lifetime purchases, grants and none.
    static func fill(_ database: Database, users: Int) async throws {
        try await database.transaction { sql in
            for index in 0..<users {
                let user = index % 3 == 0 ? "$CSAnonymousID:\(index)" : "user '\(index)' é"
                try await sql.run(
                    """
                    INSERT INTO customers (app_id, app_user_id, app_account_token, first_seen_ms, last_seen_ms) \
                    VALUES ('demo', \(bind: user), \(bind: "token-\(index)"), \(bind: Int64(1_700_000_000_000 + index)), 1790000000000)
                    """)
                let chain = "chain-\(index)"
                for renewal in 0..<(index % 5) {
                    let start = Int64(1_780_000_000_000) + Int64(renewal) * 2_592_000_000
                    try await Self.insertPurchase(
                        sql, id: "\(chain)-\(renewal)", chain: chain, product: "pro_monthly", kind: "autoRenewable",
                        environment: index % 2 == 0 ? "Production" : "TestStore", purchase: start,
                        expires: start + 2_592_000_000, revoked: index % 7 == 0 ? start + 86_400_000 : nil, recorded: start,
                        periodType: renewal == 0 ? "trial" : nil, ownershipType: index % 4 == 0 ? "FAMILY_SHARED" : nil)
                }
                if index % 5 > 0 {
                    try await Self.insertOwner(sql, chain: chain, user: user)
                    if index % 2 == 1 {
                        try await sql.run(
                            """
                            INSERT INTO subscription_states (app_id, original_transaction_id, auto_renew_status, in_billing_retry, \
                            grace_period_expires_ms, state_signed_date_ms) VALUES ('demo', \(bind: chain), \(bind: index % 3), \(bind: index % 2), 1790500000000, 1)
                            """)
                    }
                }
                if index % 4 == 1 {
                    try await Self.insertTangledChain(sql, chain: "tangled-\(index)", user: user, variant: index)
                }
                if index % 6 == 0 {
                    try await sql.run(
                        """
                        INSERT INTO promotional_grants (grant_id, app_id, app_user_id, entitlement, starts_ms, expires_ms, revoked_ms, created_ms) \
                        VALUES (\(bind: "grant-\(index)"), 'demo', \(bind: user), 'pro', 1780000000000, \
                        \(bind: index % 12 == 0 ? nil as Int64? : 1_800_000_000_000), NULL, 1)
                        """)
                }
            }
        }
    }

    /// One chain with what the rules must untangle: upgraded transactions (one of them the
    /// newest), two renewals equal in purchase date and expiry (the transaction id decides), a
    /// row without a purchase date (its recording time stands in) that is the chain's first, a
    /// refunded one, a lifetime purchase and consumables sharing the chain, and a row of a kind
    /// the server no longer knows. `variant` moves the dates, so the chain's newest differs.
    static func insertTangledChain(_ sql: any SQLExecutor, chain: String, user: String, variant: Int) async throws {
        let day: Int64 = 86_400_000
        let base = Int64(1_789_000_000_000) + Int64(variant % 3) * day
        let rows: [(id: String, product: String, kind: String, purchase: Int64?, expires: Int64?, revoked: Int64?, recorded: Int64, upgraded: Int)] =
            [
                ("\(chain)-up", "pro_monthly", "autoRenewable", base + 20 * day, base + 50 * day, nil, base, 1),
                ("\(chain)-b", "pro_monthly", "autoRenewable", base, base + 30 * day, nil, base, 0),
                ("\(chain)-c", "pro_monthly", "autoRenewable", base, base + 30 * day, variant % 2 == 0 ? base + day : nil, base, 0),
                ("\(chain)-a", "pro_monthly", "autoRenewable", base, base + Int64(variant % 5) * 10 * day, nil, base, 0),
                ("\(chain)-old", "pro_monthly", "autoRenewable", nil, base - day, nil, base - Int64(5 + variant % 4) * day, 0),
                ("\(chain)-old-up", "pro_monthly", "autoRenewable", base - 9 * day, base - 8 * day, nil, base, 1),
                ("\(chain)-life", "lifetime", "nonConsumable", base + day, nil, variant % 3 == 0 ? base + 2 * day : nil, base, 0),
                ("\(chain)-coins-1", "coins_100", "consumable", base + 2 * day, nil, nil, base, 0),
                ("\(chain)-coins-2", "coins_100", "consumable", base + 2 * day, nil, nil, base, 0),
                ("\(chain)-gone", "retired", "subscriptionOfOld", base + 40 * day, base + 70 * day, nil, base, 0),
            ]
        for row in rows {
            try await insertPurchase(
                sql, id: row.id, chain: chain, product: row.product, kind: row.kind, environment: "Production",
                purchase: row.purchase, expires: row.expires, revoked: row.revoked, recorded: row.recorded, upgraded: row.upgraded)
        }
        try await insertOwner(sql, chain: chain, user: user)
    }

    /// A purchase row of app `demo` (signed when recorded, its JWS a placeholder).
    static func insertPurchase(
        _ sql: any SQLExecutor, id: String, chain: String, product: String, kind: String, environment: String,
        purchase: Int64?, expires: Int64?, revoked: Int64?, recorded: Int64, upgraded: Int = 0,
        periodType: String? = nil, ownershipType: String? = nil
    ) async throws {
        try await sql.run(
            """
            INSERT INTO purchases (transaction_id, app_id, original_transaction_id, product_id, product_type, environment, \
            purchase_date_ms, expires_date_ms, revocation_date_ms, signed_date_ms, signed_transaction, recorded_at_ms, is_upgraded, \
            period_type, ownership_type) VALUES (\(bind: id), 'demo', \(bind: chain), \(bind: product), \(bind: kind), \(bind: environment), \
            \(bind: purchase), \(bind: expires), \(bind: revoked), \(bind: recorded), 'jws', \(bind: recorded), \(bind: upgraded), \
            \(bind: periodType), \(bind: ownershipType))
            """)
    }

    /// `user` owns `chain` (app `demo`).
    static func insertOwner(_ sql: any SQLExecutor, chain: String, user: String) async throws {
        try await sql.run(
            """
            INSERT INTO purchase_owners (app_id, original_transaction_id, app_user_id, updated_at_ms) VALUES ('demo', \(bind: chain), \(bind: user), 1)
            """)
    }

    /// The rules over every purchase row of the user's chains with their states, and the user's
    /// grants: what the lean read, which on PostgreSQL reads each chain's newest transaction
    /// only, must come to.
    static func entitlementsOfEveryRow(_ sql: any SQLExecutor, app: AppConfiguration, user: String, now: Date) async throws -> CustomerEntitlements {
        var purchases: [PurchaseRecord] = []
        var statuses: [String: SubscriptionStatus] = [:]
        let columns = CustomerDatabase.purchaseColumns.prefix(12).map { "p." + $0 }.joined(separator: ", ")
        try await sql.query(
            """
            SELECT \(raw: columns), s.auto_renew_status, s.in_billing_retry, s.grace_period_expires_ms, s.original_transaction_id AS state_chain \
            FROM purchases p JOIN purchase_owners o ON p.original_transaction_id = o.original_transaction_id \
            LEFT JOIN subscription_states s ON s.original_transaction_id = p.original_transaction_id AND s.app_id = p.app_id \
            WHERE o.app_id = \(bind: app.id) AND p.app_id = \(bind: app.id) AND o.app_user_id = \(bind: user)
            """
        ) { row in
            try CustomerDatabase.readState(row, at: 12, into: &statuses)
            try CustomerDatabase.readPurchase(row, into: &purchases)
        }
        let grants = try await CustomerDatabase.grants(sql, app: app.id, user: user)
        return EntitlementRules.evaluate(purchases: purchases, statuses: Array(statuses.values), grants: grants, products: app.products, at: now)
    }

    @Test(
        "CustomerInfo read lean equals the rules over every stored row for 60 varied customers; SQLite's statement is prepared once",
        arguments: TestDatabaseKind.available)
    func leanEqualsEveryRow(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, _ in
            let database = try await Database.open(location, logger: FreshDatabase.logger, now: Date())
            let store = CustomerDatabase(database: database)
            let app = AppConfiguration.makeDemo()
            try await Self.fill(database, users: 60)
            let now = Date(timeIntervalSince1970: 1_790_000_100)
            for index in 0..<60 {
                let user = index % 3 == 0 ? "$CSAnonymousID:\(index)" : "user '\(index)' é"
                let lean = try #require(try await store.existingCustomerInfo(app: app, user: user, now: now))
                let expected = try await database.withConnection { sql in
                    let entitlements = try await Self.entitlementsOfEveryRow(sql, app: app, user: user, now: now)
                    return SubscriberResponse(
                        appUserId: user, firstSeen: Date(timeIntervalSince1970: 1_700_000_000 + Double(index) / 1000),
                        lastSeen: Date(timeIntervalSince1970: 1_790_000_000), entitlements: entitlements, requestDate: now)
                }
                #expect(lean == expected, "customer \(index)")
            }
            #expect(try await store.existingCustomerInfo(app: app, user: "nobody", now: now) == nil)
            // On PostgreSQL a subscription chain is read as one row however long it is (SQLite
            // reads them all: in-process, ranking costs more than it saves). Customer 4 has four
            // renewals; customer 9 four renewals and the tangled chain (its newest subscription
            // transaction, the lifetime purchase, two consumables, the unknown kind left out).
            let chain4 = try await store.leanRead(app: app, user: "user '4' é").purchases.map(\.transactionId).sorted()
            let tangled = try await store.leanRead(app: app, user: "$CSAnonymousID:9").purchases
            let tied = try await store.leanRead(app: app, user: "user '5' é").purchases.filter(\.isSubscription).map(\.transactionId).sorted()
            if kind == .postgres {
                #expect(chain4 == ["chain-4-3"])
                #expect(tangled.filter(\.isSubscription).map(\.transactionId).sorted() == ["chain-9-3", "tangled-9-a"])
                // Customer 5's two equal renewals: the greater transaction id, bytewise.
                #expect(tied == ["tangled-5-c"])
            } else {
                #expect(chain4 == ["chain-4-0", "chain-4-1", "chain-4-2", "chain-4-3"])
                #expect(tangled.filter(\.isSubscription).count == 10)
                #expect(tied.count == 6)
            }
            #expect(
                tangled.filter { !$0.isSubscription }.map(\.transactionId).sorted() == ["tangled-9-coins-1", "tangled-9-coins-2", "tangled-9-life"])
            // One statement, prepared once per connection and never again.
            guard let reader = database.sqliteReader else { return try await database.close() }
            let reprepares = reader.reprepares()
            #expect(reprepares.count == 1)
            #expect(reprepares.values.allSatisfy { $0 == 0 }, "prepared again: \(reprepares)")
            try await database.close()
        }
    }

    @Test(
        "PostgreSQL: 610 reads at once go in batches, and each customer gets its own CustomerInfo, as read alone",
        arguments: TestDatabaseKind.available.filter { $0 == .postgres })
    func batchedReadsKeepCustomersApart(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, _ in
            let database = try await Database.open(location, logger: FreshDatabase.logger, now: Date())
            let store = CustomerDatabase(database: database)
            let app = AppConfiguration.makeDemo()
            let other = {
                var app = AppConfiguration.makeDemo(); app.id = "other"; return app
            }()
            try await Self.fill(database, users: 60)
            let now = Date(timeIntervalSince1970: 1_790_000_100)
            let users = (0..<60).map { $0 % 3 == 0 ? "$CSAnonymousID:\($0)" : "user '\($0)' é" } + ["nobody"]
            // Alone first: while nothing else is at the database, each read is a batch of one.
            var alone: [String: SubscriberResponse?] = [:]
            for user in users { alone[user] = try await store.existingCustomerInfo(app: app, user: user, now: now) }
            #expect(store.largestReadBatchSent == 1)
            #expect(alone.values.filter { $0 == nil }.count == 1)
            // Then five reads of each at once, mixed with five of the same ids in another app
            // (which has no customers): a batch carries both apps.
            let together = try await withThrowingTaskGroup(of: (String, Bool, SubscriberResponse?).self) { group in
                for _ in 0..<5 {
                    for user in users.shuffled() {
                        group.addTask { (user, false, try await store.existingCustomerInfo(app: app, user: user, now: now)) }
                        group.addTask { (user, true, try await store.existingCustomerInfo(app: other, user: user, now: now)) }
                    }
                }
                var answers: [(String, Bool, SubscriberResponse?)] = []
                for try await answer in group { answers.append(answer) }
                return answers
            }
            #expect(together.count == users.count * 10)
            for (user, otherApp, answer) in together {
                if otherApp {
                    #expect(answer == nil, "\(user) found in an app without customers")
                } else {
                    #expect(answer == alone[user]!, "\(user) read together differs from alone")
                }
            }
            #expect(store.largestReadBatchSent > 1, "610 reads at once never waited for a batch")
            try await database.close()
        }
    }

    @Test(
        "a purchase committed by the writer is in the next lean read, and an app id with a quote is read safely",
        arguments: TestDatabaseKind.available)
    func seesCommittedWrites(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, _ in
            let database = try await Database.open(location, logger: FreshDatabase.logger, now: Date())
            let store = CustomerDatabase(database: database)
            let app = {
                var app = AppConfiguration.makeDemo(); app.id = "o'brien"; return app
            }()
            try await database.transaction { sql in
                try await sql.run(
                    """
                    INSERT INTO customers (app_id, app_user_id, app_account_token, first_seen_ms, last_seen_ms) VALUES (\(bind: app.id), 'u', 't', 1, 2)
                    """)
            }
            let now = Date(timeIntervalSince1970: 1_790_000_000)
            #expect(try await store.existingCustomerInfo(app: app, user: "u", now: now)?.subscriber.entitlements.isEmpty == true)
            try await database.transaction { sql in
                try await sql.run(
                    """
                    INSERT INTO promotional_grants (grant_id, app_id, app_user_id, entitlement, starts_ms, expires_ms, revoked_ms, created_ms) \
                    VALUES ('g', \(bind: app.id), 'u', 'pro', 1, NULL, NULL, 1)
                    """)
            }
            #expect(try await store.existingCustomerInfo(app: app, user: "u", now: now)?.subscriber.entitlements.keys.sorted() == ["pro"])
            #expect(try await store.existingCustomerInfo(app: AppConfiguration.makeDemo(), user: "u", now: now) == nil)
            try await database.close()
        }
    }

    /// Runs `body` with a pooled connection of a PostgreSQL database.
    static func withPostgres<T: Sendable>(_ database: Database, _ body: @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await database.withConnection { sql in
            let postgres = try #require(sql as? PostgresExecutor, "not a PostgreSQL database")
            return try await body(postgres.connection)
        }
    }

    /// The plan PostgreSQL keeps for `sql` once it stops planning each run (a generic plan),
    /// made on an empty database as on a new deployment's first requests.
    static func genericPlan(_ database: Database, _ sql: String, types: String, arguments: String) async throws -> [String] {
        try await Self.withPostgres(database) { connection in
            // The simple query protocol: PREPARE's own $1, $2, … are not this query's parameters.
            _ = try await connection.simpleQuery("SET plan_cache_mode = force_generic_plan").get()
            _ = try await connection.simpleQuery("PREPARE plan_check (\(types)) AS " + sql).get()
            let rows = try await connection.simpleQuery("EXPLAIN EXECUTE plan_check(\(arguments))").get()
            _ = try await connection.simpleQuery("DEALLOCATE plan_check").get()
            _ = try await connection.simpleQuery("RESET plan_cache_mode").get()
            return try rows.map { try $0.decode(String.self) }
        }
    }

    /// How many of `calls` executions of `sql` (prepared under PostgreSQL's default plan cache
    /// mode) ran the plan it keeps rather than a plan made for that call's values.
    static func keptPlanRuns(_ database: Database, _ sql: String, types: String, arguments: String, calls: Int) async throws -> Int {
        try await Self.withPostgres(database) { connection in
            _ = try await connection.simpleQuery("PREPARE plan_check (\(types)) AS " + sql).get()
            for _ in 0..<calls { _ = try await connection.simpleQuery("EXECUTE plan_check(\(arguments))").get() }
            let rows = try await connection.simpleQuery("SELECT generic_plans FROM pg_prepared_statements WHERE name = 'plan_check'").get()
            _ = try await connection.simpleQuery("DEALLOCATE plan_check").get()
            return try rows.first?.decode(Int.self) ?? 0
        }
    }

    /// Checks that every scan of a table in `plan` is an index scan whose condition names the
    /// table's key column (`keys[table]`), not `app_id` alone.
    static func expectKeyedScans(_ plan: [String], _ keys: [String: String]) {
        let text = plan.joined(separator: "\n")
        for (table, key) in keys {
            let scans = plan.indices.filter { plan[$0].contains(" on \(table) ") || plan[$0].hasSuffix(" on \(table)") }
            #expect(!scans.isEmpty, "no scan of \(table) in:\n\(text)")
            for index in scans {
                #expect(!plan[index].contains("Seq Scan"), "\(table) read whole:\n\(text)")
                let condition = plan[(index + 1)...].first { $0.contains("Index Cond") } ?? ""
                #expect(condition.contains(key), "\(table) not read by \(key):\n\(text)")
            }
        }
    }

    @Test(
        "PostgreSQL: the generic plans of the lean read and of a purchase's facts, made on an empty database, read by key",
        arguments: TestDatabaseKind.available.filter { $0 == .postgres })
    func genericPlansReadByKey(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, _ in
            let database = try await Database.open(location, logger: FreshDatabase.logger, now: Date())
            let lean = try await Self.genericPlan(
                database, CustomerDatabase.LeanPostgresBatch.sql, types: "text[], text[]",
                arguments: "ARRAY['demo', 'demo'], ARRAY['someone', 'another']")
            Self.expectKeyedScans(
                lean,
                [
                    "customers": "app_user_id", "purchase_owners": "app_user_id", "purchases": "original_transaction_id",
                    "subscription_states": "original_transaction_id", "promotional_grants": "app_user_id",
                ])
            // And PostgreSQL uses that plan rather than planning every call anew (as it did when
            // the batch's positions came from `unnest`, whose rows it counts in a known array).
            let kept = try await Self.keptPlanRuns(
                database, CustomerDatabase.LeanPostgresBatch.sql, types: "text[], text[]",
                arguments: "ARRAY['demo'], ARRAY['someone']", calls: 10)
            #expect(kept >= 4, "the batched read was planned anew on \(10 - kept) of 10 calls")
            // Estimated for the largest batch, not the thousand rows PostgreSQL guesses for a
            // set-returning function: at 1M customers that guess priced the read past the cost
            // that turns on JIT compilation, 15 ms a call. And JIT is off on the server's
            // connections whatever a plan's estimate.
            let batch = try await Self.genericPlan(
                database, CustomerDatabase.LeanPostgresBatch.sql, types: "text[], text[]",
                arguments: "ARRAY['demo'], ARRAY['someone']")
            #expect(
                batch.contains { $0.contains("Limit") && $0.contains("rows=\(CustomerDatabase.largestReadBatch) ") },
                "the batch's positions are not estimated at the largest batch:\n\(batch.joined(separator: "\n"))")
            let jit = try await Self.withPostgres(database) { connection in
                try await connection.simpleQuery("SHOW jit").get().first?.decode(String.self)
            }
            #expect(jit == "off")
            let facts = try await Self.genericPlan(
                database, CustomerDatabase.purchaseFactsSQL, types: "text, text, text, text, text, text",
                arguments: "'demo', 'someone', 'token', '2000', '1000', 'TestStore'")
            Self.expectKeyedScans(facts, ["purchases": "transaction_id", "purchase_owners": "original_transaction_id"])
            // The customer by id and by token: each scan names the one or the other.
            for line in facts.indices where facts[line].contains(" on customers") {
                let condition = facts[(line + 1)...].first { $0.contains("Index Cond") } ?? ""
                #expect(
                    condition.contains("app_user_id") || condition.contains("app_account_token"),
                    "customers read by app only:\n\(facts.joined(separator: "\n"))")
            }
            try await database.close()
        }
    }
}
