import CountersignCore
import Foundation

/// Recording a posted purchase in three steps: read what the database holds about it (one
/// statement), decide in Swift who owns it and what to write (``plan(_:_:app:poster:now:ownerHasActiveEntitlement:)``,
/// the ownership rules in one place), then write (one statement on PostgreSQL).
extension CustomerDatabase {
    /// Records a verified transaction for `poster`, or for the user its app account token names
    /// (``PurchaseStatus/boundToAnotherUser``: committed for that user), applying the app's
    /// transfer behaviour. Throws an ``APIError`` and changes nothing when the purchase belongs to
    /// someone else and may not move.
    ///
    /// Who owns a purchase chain:
    /// - a token naming a known customer who logged in (not an anonymous id) pins the chain to
    ///   that customer, whoever posts it: a purchase made while signed in can never be replayed
    ///   to unlock another account;
    /// - a token naming an anonymous id pins nothing: the anonymous id is gone after a reinstall
    ///   or was merged into a real user by logIn, so the transfer behaviour decides as for a
    ///   purchase without a token;
    /// - a chain whose owner was deleted is owned by nobody: `transfer` and `transferIfNoActive`
    ///   give it to the poster, `keepWithOriginal` refuses.
    ///
    /// On PostgreSQL a purchase that moves no chain (a new one, one already recorded) takes one
    /// read and one write statement, without `BEGIN … COMMIT`: a single statement is atomic and
    /// committed on its own, and every write it holds is safe against a concurrent one (a
    /// purchase or an owner inserted meanwhile by another server is a unique violation, after
    /// which the purchase is decided again in a transaction). A purchase that moves a chain from
    /// one owner to another is always decided and written in one transaction.
    public func record(_ transaction: VerifiedTransaction, app: AppConfiguration, poster: String, now: Date) async throws -> PurchaseStatus {
        try await record(transaction, app: app, poster: poster, now: now, reading: false).status
    }

    /// As ``record(_:app:poster:now:)``, with the poster's CustomerInfo as of the purchase: read
    /// together with it where it can be (on SQLite, see below), otherwise after it.
    public func recordAndRead(_ transaction: VerifiedTransaction, app: AppConfiguration, poster: String, now: Date) async throws
        -> (status: PurchaseStatus, info: SubscriberResponse)
    {
        let (status, read) = try await record(transaction, app: app, poster: poster, now: now, reading: true)
        if let read { return (status, read) }
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
        if database.dialect == .postgres {
            do {
                let recorded = try await database.withConnection { sql in
                    try await Self.record(sql, transaction, app: app, poster: poster, now: now, movesChains: false)
                }
                if let recorded { return (recorded.status, nil) }
            } catch  where Database.isUniqueViolation(error) {
                // Another server recorded this purchase or its chain meanwhile: decide again below.
            }
        }
        let readsOnWriter = reading && database.dialect == .sqlite
        return try await database.transactionRetryingUniqueViolations { sql in
            // Never nil when chains may move.
            let (status, customer) = try await Self.record(sql, transaction, app: app, poster: poster, now: now, movesChains: true)!
            guard readsOnWriter, status != .boundToAnotherUser else { return (status, nil) }
            let read = try await Self.leanRead(sql, app: app, user: customer)
            return (status, Self.customerInfo(read, app: app, user: customer, now: now) { Self.isRecent($0, now: now) })
        }
    }

    /// Reads, decides and writes on `sql`, for the customer the poster's id names (an alias
    /// posts for the customer it was merged into); nil, with nothing written, when the purchase
    /// would move a chain and `movesChains` is false.
    static func record(
        _ sql: any SQLExecutor, _ transaction: VerifiedTransaction, app: AppConfiguration,
        poster postedAs: String, now: Date, movesChains: Bool
    ) async throws -> (status: PurchaseStatus, poster: String)? {
        var poster = postedAs
        var facts = try await purchaseFacts(sql, transaction, app: app.id, poster: poster)
        if facts.posterSeen == nil, let customer = facts.posterAliasOf {
            poster = customer
            facts = try await purchaseFacts(sql, transaction, app: app.id, poster: poster)
        }
        let chain = transaction.originalTransactionId
        let plan = try await Self.plan(facts, transaction, app: app, poster: poster, now: now) { other in
            try await !entitlements(sql, app: app, user: other, now: now, onlyChain: chain).activeEntitlementIds.isEmpty
        }
        if case .update = plan.owner, !movesChains { return nil }
        try await write(
            plan, on: sql, transaction, app: app, poster: poster, now: now,
            events: try await purchaseEvents(sql, plan, facts, transaction, app: app, now: now))
        return (plan.status, poster)
    }

    /// The events a planned purchase makes: a `TRANSFER` when its chain moves, and what the
    /// transaction itself makes for its owner (``transactionEvents(_:_:stored:app:user:now:)``:
    /// the purchase event of a new one, a refund or its reversal, an extension).
    static func purchaseEvents(
        _ sql: any SQLExecutor, _ plan: PurchasePlan, _ facts: PurchaseFacts, _ transaction: VerifiedTransaction, app: AppConfiguration,
        now: Date
    ) async throws -> [WebhookEvent] {
        var events: [WebhookEvent] = []
        var owner: String?
        switch plan.owner {
        case .insert(let user):
            owner = user
        case .update(let user) where !plan.dampsTransfer:
            owner = user
            var transfer = WebhookEvent(
                .transfer, subject: "\(transaction.originalTransactionId)\u{0}\(user)\u{0}\(now.epochMilliseconds)",
                app: app, user: user, transaction: EventTransaction(transaction), now: now)
            if case .user(let previous) = facts.chainOwner { transfer.transferredFrom = [previous] }
            transfer.transferredTo = [user]
            events.append(transfer)
        case .update(let user):
            owner = user
        case .none:
            if case .user(let user) = facts.chainOwner { owner = user }
        }
        if plan.purchase != .none, let owner {
            events += try await transactionEvents(sql, transaction, stored: facts.storedCopy, app: app, user: owner, now: now)
        }
        let (imported, delivered) = transaction.eventHandling
        for index in events.indices {
            events[index].imported = imported
            events[index].delivered = delivered
        }
        return events
    }

    /// What the database holds about a posted purchase.
    struct PurchaseFacts: Sendable {
        enum ChainOwner: Sendable, Equatable {
            /// The chain has no owner row.
            case none
            /// Its owner was deleted.
            case deleted
            case user(String)
        }

        /// The poster's first and last visit (milliseconds); nil for a new customer.
        var posterSeen: (first: Int64, last: Int64)?
        /// The customer whose alias the poster's id is, if any (the poster then has no row).
        var posterAliasOf: String? = nil
        /// The customer whose app account token the transaction carries, if any.
        var tokenUser: String?
        /// When the stored copy of the transaction was signed; nil when it is new.
        var storedSignedDate: Int64?
        var chainOwner: ChainOwner
        /// When the chain's current transfer window opened (milliseconds): the last move that
        /// made a `TRANSFER` event; nil if it never moved.
        var chainMoved: Int64? = nil
        /// The stored copy's expiry and revocation (milliseconds), when it is stored.
        var storedExpires: Int64? = nil
        var storedRevoked: Int64? = nil
        /// The stored copy is an imported record (not the store's signed copy).
        var storedIsImported = false

        /// What the database held of the transaction; nil when it is new.
        var storedCopy: StoredCopy? {
            storedSignedDate.map { StoredCopy(signedMs: $0, expiresMs: storedExpires, revokedMs: storedRevoked) }
        }
    }

    /// What recording a purchase writes, and what the poster hears.
    struct PurchasePlan: Sendable, Equatable {
        enum CustomerWrite: Sendable, Equatable {
            case none
            case insert
            /// `last_seen` is over an hour old.
            case touch
        }

        enum PurchaseWrite: Sendable, Equatable {
            case none
            case insert
            /// The posted copy was signed after the stored one: its revocation and upgrade state win.
            case refresh
            /// The store's signed copy of an imported record: it replaces the record.
            case confirm
        }

        enum OwnerWrite: Sendable, Equatable {
            case none
            case insert(String)
            case update(String)
        }

        var status: PurchaseStatus
        var customer: CustomerWrite
        var purchase: PurchaseWrite
        var owner: OwnerWrite
        /// The chain moved within the transfer window: it moves again, without a `TRANSFER`
        /// event and without starting a new window.
        var dampsTransfer = false
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
            owner = .user(user)
        } else {
            owner = .deleted
        }
        return PurchaseFacts(
            posterSeen: first.flatMap { first in last.map { (first, $0) } },
            posterAliasOf: try row.text(10, "alias_of"),
            tokenUser: try row.text(2, "token_user"),
            storedSignedDate: try row.integer(3, "stored_signed_ms"),
            chainOwner: owner,
            chainMoved: try row.integer(6, "moved_at_ms"),
            storedExpires: try row.integer(7, "stored_expires_ms"),
            storedRevoked: try row.integer(8, "stored_revoked_ms"),
            storedIsImported: (try row.integer(9, "stored_imported") ?? 0) != 0
        )
    }

    /// The window (milliseconds) that damps `TRANSFER` events: a chain that moved within it
    /// moves again when posted (entitlements always follow the latest poster the rules allow),
    /// but only the move that opened the window makes an event and its webhook deliveries. The
    /// same purchase posted alternately as two ids made an event and a delivery per post.
    static let transferWindow: Int64 = 600_000

    /// The ownership rules of ``record(_:app:poster:now:)``: who owns the purchase's chain after
    /// it is posted, and what that writes. `ownerHasActiveEntitlement` answers, for
    /// `transferIfNoActive`, whether the chain still gives its current owner an entitlement.
    /// What recording a purchase writes of the poster's customer row (at most one write an hour)
    /// and of the transaction's row (a copy signed later refreshes the stored one).
    static func rowWrites(_ facts: PurchaseFacts, _ transaction: VerifiedTransaction, now: Date)
        -> (customer: PurchasePlan.CustomerWrite, purchase: PurchasePlan.PurchaseWrite)
    {
        let customer: PurchasePlan.CustomerWrite =
            facts.posterSeen.map { now.epochMilliseconds - $0.last >= lastSeenResolution ? .touch : .none } ?? .insert
        let purchase: PurchasePlan.PurchaseWrite
        switch (facts.storedSignedDate, facts.storedIsImported, transaction.isImported) {
        case (nil, _, _): purchase = .insert
        // A signed copy always replaces an imported record; an imported record never replaces a signed copy.
        case (_, true, false): purchase = .confirm
        case (_, false, true): purchase = .none
        case (let stored?, _, _): purchase = (transaction.payload.signedDate ?? now).epochMilliseconds > stored ? .refresh : .none
        }
        return (customer, purchase)
    }

    static func plan(
        _ facts: PurchaseFacts, _ transaction: VerifiedTransaction, app: AppConfiguration, poster: String, now: Date,
        ownerHasActiveEntitlement: (String) async throws -> Bool
    ) async throws -> PurchasePlan {
        let (customer, purchase) = rowWrites(facts, transaction, now: now)
        func plan(_ status: PurchaseStatus, _ owner: PurchasePlan.OwnerWrite) -> PurchasePlan {
            PurchasePlan(status: status, customer: customer, purchase: purchase, owner: owner)
        }

        var owner = poster
        if let token = transaction.payload.appAccountToken?.lowercased(),
            token != AppAccountToken.forAppUserID(poster).uuidString.lowercased(),
            let bound = facts.tokenUser, !isAnonymous(bound)
        {
            owner = bound
        }
        // Ids compare by their bytes, as the database compares them (`AppUserID`).
        let ownerIsPoster = AppUserID.same(owner, poster)
        let current: String?
        switch facts.chainOwner {
        case .none:
            return plan(ownerIsPoster ? .new : .boundToAnotherUser, .insert(owner))
        case .user(let user) where AppUserID.same(user, owner):
            if !ownerIsPoster { return plan(.boundToAnotherUser, .none) }
            return plan(purchase == .insert ? .new : .alreadyRecorded, .none)
        case .user(let user):
            current = user
        case .deleted:
            current = nil
        }
        if !ownerIsPoster {
            // The token's user wins over whoever holds the chain now.
            return plan(.boundToAnotherUser, .update(owner))
        }
        switch app.transferBehavior {
        case .transfer:
            break
        case .keepWithOriginal:
            throw APIError(.purchaseOwnedByAnotherUser, "this purchase belongs to another user and the app keeps purchases with their first owner")
        case .transferIfNoActive:
            if let current, try await ownerHasActiveEntitlement(current) {
                throw APIError(.purchaseOwnedByAnotherUser, "this purchase still gives another user an active entitlement")
            }
        }
        var transferred = plan(.transferred, .update(poster))
        // Posted back and forth: it moves each time, but one TRANSFER a window tells of it.
        transferred.dampsTransfer = facts.chainMoved.map { now.epochMilliseconds - $0 < transferWindow } ?? false
        return transferred
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

    /// Writes what `plan` says: on SQLite statement by statement (inside the caller's
    /// transaction), on PostgreSQL as one statement (each write a data-modifying `WITH` clause;
    /// a new purchase's the prepared ``NewPurchaseStatement`` or ``NewPurchaseTouchingStatement``).
    static func write(
        _ plan: PurchasePlan, on sql: any SQLExecutor, _ transaction: VerifiedTransaction,
        app: AppConfiguration, poster: String, now: Date, events: [WebhookEvent]
    ) async throws {
        let chain = transaction.originalTransactionId
        let eventWrites = events.flatMap { eventStatements($0, app: app, now: now) }
        let postgres = sql.dialect == .postgres
        if postgres, plan.purchase == .insert, case .insert(let owner) = plan.owner, eventWrites.count == 1 {
            // A customer seen within the hour: the insert does nothing (ON CONFLICT DO NOTHING), as
            // the plan says; one seen before is touched.
            let touches = plan.customer == .touch
            let customer =
                touches ? touchCustomerStatement(app: app.id, user: poster, now: now) : insertCustomerStatement(app: app.id, user: poster, now: now)
            let values =
                customer.values
                + insertPurchaseStatement(transaction, app: app, now: now).values
                + insertOwnerStatement(app: app.id, chain: chain, user: owner, now: now).values
                + eventWrites[0].values
            try await sql.run(touches ? NewPurchaseTouchingStatement.statement(values) : NewPurchaseStatement.statement(values))
            return
        }
        var statements: [SQLStatement] = []
        switch plan.customer {
        case .none: break
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
        case .insert(let user): statements.append(insertOwnerStatement(app: app.id, chain: chain, user: user, now: now))
        case .update(let user):
            statements.append(updateOwnerStatement(app: app.id, chain: chain, user: user, now: now, opensWindow: !plan.dampsTransfer))
        }
        statements += eventWrites
        if statements.count > 1, postgres {
            try await sql.run(SQLStatement.together(statements))
        } else {
            for statement in statements { try await sql.run(statement) }
        }
    }
}
