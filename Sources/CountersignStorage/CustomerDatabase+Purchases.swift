import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// Recording a posted purchase in three steps: read what the database holds about it (one
/// statement), decide in Swift who owns it and what to write (``Ownership/plan(_:_:app:poster:now:)``,
/// the ownership rules in one place), then write (one statement on PostgreSQL).
extension CustomerDatabase {
    /// Records a verified transaction for `poster`, or for the user its app account token names
    /// (``PurchaseStatus/boundToAnotherUser``: committed for that user), applying the app's
    /// transfer behaviour (``Ownership``). Throws ``LedgerError/purchaseOwnedByAnotherUser(_:)``
    /// and changes nothing when the purchase belongs to someone else and may not move.
    ///
    /// On PostgreSQL a purchase takes one read (two when a rule needs the chain's place or its
    /// owner's entitlements) and one write statement, without `BEGIN … COMMIT`: a single
    /// statement is atomic and committed on its own, and a purchase or an owner inserted
    /// meanwhile by another server is a unique violation, after which the purchase is decided
    /// again in a transaction. A move of a chain is written the same way: a transaction at
    /// PostgreSQL's isolation (read committed) would see what the separate statements see, and
    /// add two round trips. On SQLite every purchase is read, decided and written in one
    /// transaction on the one writer.
    public func record(_ transaction: VerifiedTransaction, app: AppConfiguration, poster: String, now: Date) async throws -> PurchaseStatus {
        try await record(transaction, app: app, poster: poster, now: now, reading: false).status
    }

    /// As ``record(_:app:poster:now:)``, with the poster's CustomerInfo as of the purchase: read
    /// together with it where it can be (on SQLite, see below), otherwise after it. Nil for a
    /// purchase that stays with another user (``PurchaseStatus/boundToAnotherUser``): the
    /// poster is refused, and nothing is read for an answer that is never sent.
    public func recordAndRead(_ transaction: VerifiedTransaction, app: AppConfiguration, poster: String, now: Date) async throws
        -> (status: PurchaseStatus, info: SubscriberResponse?)
    {
        let (status, read) = try await record(transaction, app: app, poster: poster, now: now, reading: true)
        if let read { return (status, read) }
        if status == .boundToAnotherUser { return (status, nil) }
        return (status, try await customerInfo(app: app, user: poster, now: now))
    }

    /// Records the purchase and, when `reading` on SQLite, reads the poster's CustomerInfo as of
    /// it on the writer inside the purchase's own transaction (nil otherwise, and when the
    /// purchase stays with another user). A reader connection's page cache is dropped whenever
    /// the database has changed since its last read, which during intake is every time: about
    /// eleven page reads from disk for the answer to each purchase, where the writer's cache
    /// holds the pages the purchase has just written. Answered, like the status, after the commit.
    private func record(_ transaction: VerifiedTransaction, app: AppConfiguration, poster: String, now: Date, reading: Bool) async throws
        -> (status: PurchaseStatus, info: SubscriberResponse?)
    {
        if database.commitsStatementsAlone {
            do {
                let recorded = try await database.withConnection { sql in
                    try await Self.record(sql, transaction, app: app, poster: poster, now: now)
                }
                return (recorded.status, nil)
            } catch  where Database.isUniqueViolation(error) {
                // Another server recorded this purchase or its chain meanwhile: decide again below.
            }
        }
        let readsOnWriter = reading && database.readsAnswersOnWriter
        return try await database.transactionRetryingUniqueViolations { sql in
            let (status, customer) = try await Self.record(sql, transaction, app: app, poster: poster, now: now)
            guard readsOnWriter, status != .boundToAnotherUser else { return (status, nil) }
            let read = try await Self.leanRead(sql, app: app, user: customer)
            return (status, Self.customerInfo(read, app: app, user: customer, now: now) { Self.isRecent($0, now: now) })
        }
    }

    /// Reads, decides and writes on `sql`, for the customer the poster's id names (an alias
    /// posts for the customer it was merged into). The ledger decides (``Ownership`` and
    /// ``EventRules``) from facts read before: nothing it decides reads the database.
    static func record(
        _ sql: any SQLExecutor, _ transaction: VerifiedTransaction, app: AppConfiguration, poster postedAs: String, now: Date
    ) async throws -> (status: PurchaseStatus, poster: String) {
        var poster = CustomerID(postedAs)
        var facts = try await purchaseFacts(sql, transaction, app: app.id, poster: poster.rawValue)
        if facts.posterSeen == nil, let customer = facts.posterAliasOf {
            poster = customer
            facts = try await purchaseFacts(sql, transaction, app: app.id, poster: poster.rawValue)
        }
        if Ownership.needsOwnerEntitlements(facts, app: app, poster: poster), case .user(let holder) = facts.chainOwner {
            let chain = transaction.originalTransactionId
            facts.chainGivesOwnerEntitlement =
                try await !entitlements(sql, app: app, user: holder.rawValue, now: now, onlyChain: chain).activeEntitlementIds.isEmpty
        }
        let plan = try Ownership.plan(facts, transaction, app: app, poster: poster, now: now.epochMilliseconds)
        let change = plan.purchase == .none ? .none : EventRules.change(of: transaction, stored: facts.storedCopy, now: now.epochMilliseconds)
        let place = change.needsPlace(transaction) ? try await chainPlace(sql, EventTransaction(transaction), app: app.id) : nil
        let events = EventRules.purchaseEvents(plan, facts, transaction, change: change, place: place, app: app, now: now)
        try await write(plan, on: sql, transaction, app: app, poster: poster.rawValue, now: now, events: events)
        return (plan.status, poster.rawValue)
    }

    /// The facts of a purchase in one statement: one row, the poster's customer row and the
    /// chain's owner row joined on their keys (either may be missing), the token's customer and
    /// the stored transaction as scalar subqueries. Parameters: $1 app, $2 poster, $3 app
    /// account token (lowercased; NULL: none), $4 transaction id, $5 original transaction id,
    /// $6 environment (a transaction is known by app, environment and id). The last column names
    /// the customer the poster's id is an alias of, if any.
    /// (`LIMIT 1` without `ORDER BY` on the token: a token is made from its user id, so two
    /// customers never share one; an `ORDER BY` would invite a plan that walks the app's
    /// customers in key order.)
    static let purchaseFactsSQL = """
        SELECT c.first_seen_ms, c.last_seen_ms, \
        (SELECT app_user_id FROM customers WHERE app_id = $1 AND app_account_token = $3 LIMIT 1) AS token_user, \
        p.signed_date_ms AS stored_signed_ms, \
        CAST(CASE WHEN o.app_id IS NULL THEN 0 ELSE 1 END AS BIGINT) AS owner_rows, o.app_user_id AS owner, o.moved_at_ms, \
        p.expires_date_ms AS stored_expires_ms, p.revocation_date_ms AS stored_revoked_ms, p.imported AS stored_imported, \
        (SELECT app_user_id FROM customer_aliases WHERE app_id = $1 AND alias = $2) AS alias_of \
        FROM (SELECT 1 AS one) AS facts \
        LEFT JOIN customers c ON c.app_id = $1 AND c.app_user_id = $2 \
        LEFT JOIN purchase_owners o ON o.app_id = $1 AND o.original_transaction_id = $5 \
        LEFT JOIN purchases p ON p.app_id = $1 AND p.environment = $6 AND p.transaction_id = $4
        """

    /// ``purchaseFactsSQL`` prepared once per PostgreSQL connection.
    enum PurchaseFactsStatement: PreparedSQL {
        static let name = "countersign_purchase_facts"
        static let sql = CustomerDatabase.purchaseFactsSQL
    }

    /// The facts of a purchase (one statement, prepared).
    static func purchaseFacts(_ sql: any SQLExecutor, _ transaction: VerifiedTransaction, app: String, poster: String) async throws -> PurchaseFacts {
        let values: [SQLValue] = [
            .text(app), .text(poster), .text(transaction.payload.appAccountToken?.lowercased()), .text(transaction.transactionId),
            .text(transaction.originalTransactionId), .text(transaction.environment),
        ]
        guard let facts = try await sql.first(PurchaseFactsStatement.statement(values), { try purchaseFacts($0) }) else {
            throw StoredRowError(description: "the purchase facts statement returned no row")
        }
        return facts
    }

    /// The row of ``purchaseFactsSQL`` read.
    static func purchaseFacts(_ row: some StoredRow) throws -> PurchaseFacts {
        let first = try row.integer(0, "first_seen_ms")
        let last = try row.integer(1, "last_seen_ms")
        let owner: PurchaseFacts.ChainOwner
        if try row.integer(4, "owner_rows") == 0 {
            owner = .none
        } else if let user = try row.text(5, "owner") {
            owner = .user(CustomerID(user))
        } else {
            owner = .deleted
        }
        var seen: (first: Int64, last: Int64)?
        if let first, let last { seen = (first, last) }
        let alias: String? = try row.text(10, "alias_of")
        let token: String? = try row.text(2, "token_user")
        return PurchaseFacts(
            posterSeen: seen,
            posterAliasOf: alias.map { CustomerID($0) },
            tokenUser: token.map { CustomerID($0) },
            storedSignedDate: try row.integer(3, "stored_signed_ms"),
            chainOwner: owner,
            chainMoved: try row.integer(6, "moved_at_ms"),
            storedExpires: try row.integer(7, "stored_expires_ms"),
            storedRevoked: try row.integer(8, "stored_revoked_ms"),
            storedIsImported: (try row.integer(9, "stored_imported") ?? 0) != 0
        )
    }

    /// The writes of a new purchase (the customer added unless known, the purchase, its chain's
    /// owner, its event) as one statement prepared once per PostgreSQL connection: the commonest
    /// write of an app without webhooks.
    enum NewPurchaseStatement: PreparedSQL {
        static let name = "countersign_new_purchase"
        static let sql = newPurchaseSQL(customer: CustomerDatabase.insertCustomerSQL)
    }

    /// The same for a known customer last seen over an hour ago (a returning customer's
    /// purchase, an imported row): the customer's visit noted instead.
    enum NewPurchaseTouchingStatement: PreparedSQL {
        static let name = "countersign_new_purchase_touching"
        static let sql = newPurchaseSQL(customer: CustomerDatabase.touchCustomerSQL)
    }

    private static func newPurchaseSQL(customer: String) -> String {
        SQLStatement.together(
            [customer, insertPurchaseSQL, insertOwnerSQL, insertEventSQL].map { SQLStatement($0, []) }
        ).text
    }

    /// Writes what `plan` says, on `sql` (inside the caller's transaction, or as one statement
    /// where the database commits one alone: ``SQLExecutor/runTogether(_:prepared:)``). A new
    /// purchase with its one event runs as the prepared ``NewPurchaseStatement`` or
    /// ``NewPurchaseTouchingStatement``.
    static func write(
        _ plan: PurchasePlan, on sql: any SQLExecutor, _ transaction: VerifiedTransaction,
        app: AppConfiguration, poster: String, now: Date, events: [WebhookEvent]
    ) async throws {
        let chain = transaction.originalTransactionId
        let eventWrites = events.flatMap { eventStatements($0, app: app, now: now) }
        var prepared: (any PreparedSQL.Type)?
        if sql.combinesWrites, plan.purchase == .insert, case .insert = plan.owner, eventWrites.count == 1 {
            prepared = plan.customer == .touch ? NewPurchaseTouchingStatement.self : NewPurchaseStatement.self
        }
        var statements: [SQLStatement] = []
        switch plan.customer {
        // A customer seen within the hour: the insert does nothing (ON CONFLICT DO NOTHING), as
        // the plan says, and keeps the prepared statement one shape.
        case .none: if prepared != nil { statements.append(insertCustomerStatement(app: app.id, user: poster, now: now)) }
        case .insert: statements.append(insertCustomerStatement(app: app.id, user: poster, now: now))
        case .touch: statements.append(touchCustomerStatement(app: app.id, user: poster, now: now))
        }
        switch plan.purchase {
        case .none: break
        case .insert: statements.append(insertPurchaseStatement(transaction, app: app, now: now))
        case .refresh: statements.append(refreshPurchaseStatement(transaction, app: app.id, now: now))
        case .confirm: statements.append(confirmImportedStatement(transaction, app: app, now: now))
        }
        switch plan.owner {
        case .none: break
        case .insert(let user): statements.append(insertOwnerStatement(app: app.id, chain: chain, user: user.rawValue, now: now))
        case .update(let user):
            statements.append(updateOwnerStatement(app: app.id, chain: chain, user: user.rawValue, now: now, opensWindow: !plan.dampsTransfer))
        }
        statements += eventWrites
        try await sql.runTogether(statements, prepared: prepared)
    }
}
