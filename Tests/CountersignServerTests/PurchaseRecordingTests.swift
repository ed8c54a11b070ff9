import CountersignAppStore
import CountersignCore
import CountersignTesting
import Foundation
import Logging
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Recording a purchase: the ownership rules on their own (``CustomerDatabase/plan``), the
/// PostgreSQL path without a transaction, and many posts of one purchase at once.
@Suite("Purchase recording", .serialized)
struct PurchaseRecordingTests {
    typealias Facts = CustomerDatabase.PurchaseFacts
    typealias Plan = CustomerDatabase.PurchasePlan

    static let now = Date(timeIntervalSince1970: 1_790_000_000)

    static func app(_ behavior: AppConfiguration.TransferBehavior = .transfer) -> AppConfiguration {
        var app = AppConfiguration.makeDemo()
        app.transferBehavior = behavior
        return app
    }

    /// A verified transaction (not signed: the rules never look at the signature).
    static func transaction(token: UUID? = nil, signedAgo: TimeInterval = 0) throws -> VerifiedTransaction {
        var payload = TransactionPayload(
            transactionId: "2000", originalTransactionId: "1000", bundleId: "com.example.demo", productId: "pro_monthly",
            purchaseDate: now.addingTimeInterval(-86_400), type: .autoRenewable, environment: .testStore,
            signedDate: now.addingTimeInterval(-signedAgo)
        )
        payload.appAccountToken = token?.uuidString
        return try VerifiedTransaction(jws: "jws", payload: payload, app: app())
    }

    static func plan(
        _ facts: Facts, _ transaction: VerifiedTransaction, behavior: AppConfiguration.TransferBehavior = .transfer,
        poster: String = "alice", ownerActive: Bool = false, asked: Collected<String>? = nil
    ) async throws -> Plan {
        try await CustomerDatabase.plan(facts, transaction, app: app(behavior), poster: poster, now: now) { owner in
            asked?.add(owner)
            return ownerActive
        }
    }

    static let seenNow = (first: Int64(1_700_000_000_000), last: now.epochMilliseconds)

    @Test("a new purchase by a new customer: customer, purchase and owner inserted, answered new")
    func newPurchase() async throws {
        let plan = try await Self.plan(Facts(posterSeen: nil, tokenUser: nil, storedSignedDate: nil, chainOwner: .none), Self.transaction())
        #expect(plan == Plan(status: .new, customer: .insert, purchase: .insert, owner: .insert("alice")))
    }

    @Test("a known customer is touched at most once an hour")
    func lastSeen() async throws {
        let facts = Facts(posterSeen: Self.seenNow, tokenUser: nil, storedSignedDate: nil, chainOwner: .none)
        #expect(try await Self.plan(facts, Self.transaction()).customer == .none)
        var stale = facts
        stale.posterSeen = (Self.seenNow.first, Self.seenNow.last - CustomerDatabase.lastSeenResolution)
        #expect(try await Self.plan(stale, Self.transaction()).customer == .touch)
    }

    @Test("the same copy again is already recorded; a copy signed later refreshes the stored one, an older one does not")
    func repost() async throws {
        let signed = Self.now.epochMilliseconds
        let facts = Facts(posterSeen: Self.seenNow, tokenUser: nil, storedSignedDate: signed, chainOwner: .user("alice"))
        #expect(try await Self.plan(facts, Self.transaction()) == Plan(status: .alreadyRecorded, customer: .none, purchase: .none, owner: .none))
        var older = facts
        older.storedSignedDate = signed - 1000
        #expect(try await Self.plan(older, Self.transaction()).purchase == .refresh)
        #expect(try await Self.plan(facts, Self.transaction(signedAgo: 60)).purchase == .none)
    }

    @Test("a stored transaction without an owner (a notification came first) is new to its poster")
    func storedWithoutOwner() async throws {
        let facts = Facts(posterSeen: Self.seenNow, tokenUser: nil, storedSignedDate: Self.now.epochMilliseconds, chainOwner: .none)
        #expect(try await Self.plan(facts, Self.transaction()) == Plan(status: .new, customer: .none, purchase: .none, owner: .insert("alice")))
    }

    @Test("a token naming a logged-in customer pins the chain to them, whoever posts it")
    func tokenPins() async throws {
        let token = AppAccountToken.forAppUserID("bob")
        let fresh = Facts(posterSeen: nil, tokenUser: "bob", storedSignedDate: nil, chainOwner: .none)
        #expect(try await Self.plan(fresh, Self.transaction(token: token)).owner == .insert("bob"))
        #expect(try await Self.plan(fresh, Self.transaction(token: token)).status == .boundToAnotherUser)
        var held = fresh
        held.chainOwner = .user("mallory")
        // Even an app that keeps purchases with their first owner: the token's user wins.
        let plan = try await Self.plan(held, Self.transaction(token: token), behavior: .keepWithOriginal)
        #expect(plan.owner == .update("bob"))
        #expect(plan.status == .boundToAnotherUser)
        held.chainOwner = .user("bob")
        #expect(
            try await Self.plan(held, Self.transaction(token: token))
                == Plan(status: .boundToAnotherUser, customer: .insert, purchase: .insert, owner: .none))
    }

    @Test("a token naming an anonymous id, or the poster's own token, pins nothing")
    func tokenPinsNothing() async throws {
        let anonymous = ReservedAppUserID.anonymousPrefix + "0f3c2a56-9d1e-4b7a-8c21-5e6f7a8b9c0d"
        let facts = Facts(posterSeen: nil, tokenUser: anonymous, storedSignedDate: nil, chainOwner: .none)
        #expect(try await Self.plan(facts, Self.transaction(token: AppAccountToken.forAppUserID(anonymous))).owner == .insert("alice"))
        let own = Facts(posterSeen: nil, tokenUser: "alice", storedSignedDate: nil, chainOwner: .none)
        #expect(try await Self.plan(own, Self.transaction(token: AppAccountToken.forAppUserID("alice"))).status == .new)
    }

    @Test("a chain held by another user: moved, refused or moved only when it gives them nothing, by the app's setting")
    func transferBehaviours() async throws {
        let facts = Facts(posterSeen: Self.seenNow, tokenUser: nil, storedSignedDate: Self.now.epochMilliseconds, chainOwner: .user("bob"))
        #expect(
            try await Self.plan(facts, Self.transaction()) == Plan(status: .transferred, customer: .none, purchase: .none, owner: .update("alice")))
        await #expect(throws: APIError.self) { try await Self.plan(facts, Self.transaction(), behavior: .keepWithOriginal) }
        let asked = Collected<String>()
        await #expect(throws: APIError.self) {
            try await Self.plan(facts, Self.transaction(), behavior: .transferIfNoActive, ownerActive: true, asked: asked)
        }
        #expect(asked.all == ["bob"], "the rule asks about the current owner")
        #expect(try await Self.plan(facts, Self.transaction(), behavior: .transferIfNoActive, ownerActive: false).owner == .update("alice"))
    }

    @Test("a chain whose owner was deleted goes to the poster unless the app keeps purchases with their first owner")
    func deletedOwner() async throws {
        let facts = Facts(posterSeen: nil, tokenUser: nil, storedSignedDate: Self.now.epochMilliseconds, chainOwner: .deleted)
        let asked = Collected<String>()
        let plan = try await Self.plan(facts, Self.transaction(), behavior: .transferIfNoActive, ownerActive: true, asked: asked)
        #expect(plan.owner == .update("alice"))
        #expect(asked.all.isEmpty, "nobody to ask about")
        await #expect(throws: APIError.self) { try await Self.plan(facts, Self.transaction(), behavior: .keepWithOriginal) }
    }

    @Test("statements run together: parameters numbered on, each but the last a WITH clause, a $ without digits left alone")
    func together() {
        let first = SQLStatement("INSERT INTO a VALUES ($1, $2, $1, '$x')", [.text("one"), .integer(2)])
        let second = SQLStatement("UPDATE b SET c = $2 WHERE d = $1", [.text("three"), .integer(nil)])
        let both = SQLStatement.together([first, second])
        #expect(both.text == "WITH w0 AS (INSERT INTO a VALUES ($1, $2, $1, '$x')) UPDATE b SET c = $4 WHERE d = $3")
        #expect(both.values.map { "\($0)" } == (first.values + second.values).map { "\($0)" })
        #expect(SQLStatement.together([second]).text == second.text)
        #expect(SQLStatement.pieces("a $12b$").map { "\($0.literal)|\($0.parameter.map(String.init) ?? "-")" } == ["a |12", "b$|-"])
    }

    @Test("a numbered statement runs on the embedded database with $n bound to value n, whatever order the numbers appear in")
    func numberedOnSQLite() async throws {
        // SQLite would read `$2` as a named parameter and number it 1 (its first appearance).
        #expect(SQLStatement.sqliteText("INSERT INTO t VALUES ($2, $1, $2, '$x')") == "INSERT INTO t VALUES (?2, ?1, ?2, '$x')")
        let directory = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let connection = try SQLiteConnection(path: directory.appendingPathComponent("t.sqlite").path, readOnly: false)
        defer { connection.close() }
        try connection.query("CREATE TABLE t (a, b, c, d)", []) { _ in }
        let sql = SQLiteExecutor(connection: connection)
        for _ in 0..<2 {  // prepared once, then kept: the same answer both times
            try await sql.run(SQLStatement("INSERT INTO t VALUES ($2, $1, $2, '$x')", [.text("first"), .integer(7)]))
        }
        try await sql.run(SQLStatement("UPDATE t SET c = $2 WHERE rowid = 2 AND b = $1", [.text("first"), .integer(nil)]))
        var rows: [String] = []
        try await sql.query(SQLStatement("SELECT a, b, c, d FROM t WHERE b = $1 ORDER BY rowid", [.text("first")])) { row in
            rows.append(
                [try row.integer(0, "a").map(String.init), try row.text(1, "b"), try row.integer(2, "c").map(String.init), try row.text(3, "d")]
                    .map { $0 ?? "NULL" }.joined(separator: " "))
        }
        #expect(rows == ["7 first 7 $x", "7 first NULL $x"])
        #expect(connection.reprepares().count == 4)
    }

    @Test("a token with a dot anywhere is a JWS, one without is a legacy receipt")
    func legacyReceiptOrJWS() {
        #expect(PublicRoutes.isLegacyReceipt("MIIUWAYJKoZIhvcNAQcCoIIUSTCCFEUCAQExDzANBglghkgBZQMEAgEFADCCA44GCSqGSIb3DQEHAaCCA38Eggh7+/=="))
        #expect(PublicRoutes.isLegacyReceipt(""))
        #expect(!PublicRoutes.isLegacyReceipt(String(repeating: "e", count: 3000) + ".payload.signature"))
        #expect(!PublicRoutes.isLegacyReceipt("\u{e9}."), "a dot after a multi-byte character")
    }

    // MARK: Against the databases

    static func purchase(_ server: CountersignServer, appAccountToken: UUID? = nil) throws -> VerifiedTransaction {
        let app = server.deployment.apps[0]
        let (jws, payload) = try server.testStore!.mintTransaction(
            .init(
                productId: "lifetime", type: .nonConsumable, bundleId: app.bundleId,
                appAccountToken: appAccountToken))
        return try VerifiedTransaction(jws: jws, payload: payload, app: app)
    }

    static func counts(_ server: CountersignServer, _ transaction: VerifiedTransaction) async throws -> (purchases: Int, owners: [String]) {
        try await server.store.database.withConnection { sql in
            let purchases =
                try await sql.first("SELECT COUNT(*) AS n FROM purchases WHERE transaction_id = \(bind: transaction.transactionId)") {
                    try $0.int("n")
                } ?? -1
            let owners = try await sql.all(
                """
                SELECT app_user_id FROM purchase_owners WHERE original_transaction_id = \(bind: transaction.originalTransactionId)
                """
            ) { try $0.string("app_user_id") }
            return (purchases, owners)
        }
    }

    @Test(
        "twenty customers post one new purchase at once: one gets it, the others hear the app's rule, one owner row",
        arguments: TestDatabaseKind.available)
    func sameNewPurchaseAtOnce(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let server = try await OperationsTests.server(location, directory)
            for behavior in [AppConfiguration.TransferBehavior.keepWithOriginal, .transfer] {
                var configured = server.deployment.apps[0]
                configured.transferBehavior = behavior
                let app = configured
                let transaction = try Self.purchase(server)
                let outcomes = try await withThrowingTaskGroup(of: (String, Result<PurchaseStatus, APIError>).self) { group in
                    for index in 0..<20 {
                        group.addTask {
                            let user = "racer-\(index)"
                            do {
                                return (user, .success(try await server.store.record(transaction, app: app, poster: user, now: Date())))
                            } catch let error as APIError {
                                return (user, .failure(error))
                            }
                        }
                    }
                    return try await group.reduce(into: [String: Result<PurchaseStatus, APIError>]()) { $0[$1.0] = $1.1 }
                }
                let stored = try await Self.counts(server, transaction)
                #expect(stored.purchases == 1)
                #expect(stored.owners.count == 1)
                let new = outcomes.filter { (try? $0.value.get()) == .new }.map(\.key)
                #expect(new.count == 1, "exactly one poster recorded it first (\(behavior))")
                switch behavior {
                case .keepWithOriginal:
                    #expect(stored.owners == new, "the first owner keeps it")
                    let refused = outcomes.values.filter {
                        if case .failure(let error) = $0 { error.code == APIErrorCode.purchaseOwnedByAnotherUser.rawValue } else { false }
                    }
                    #expect(refused.count == 19)
                default:
                    let owner = try #require(stored.owners.first)
                    #expect(
                        [PurchaseStatus.new, .transferred].contains(try #require(outcomes[owner]).get()), "the owner is one who was told they got it")
                    #expect(outcomes.values.allSatisfy { (try? $0.get()) != nil }, "every poster of a movable purchase gets an answer")
                }
            }
            try await server.shutdown()
        }
    }

    @Test("SQLite: the statements of new, repeated, transferred and token-bound purchases are prepared once, never again")
    func purchaseStatementsKept() async throws {
        try await FreshDatabase.with(.sqlite) { location, directory in
            let server = try await OperationsTests.server(location, directory)
            let app = server.deployment.apps[0]
            let now = Date()
            // Migrations change the schema, which prepares statements again: counted from here.
            let before = try #require(await server.store.database.sqliteWriterReprepares())
            for index in 0..<3 {
                let transaction = try Self.purchase(server)
                #expect(try await server.store.record(transaction, app: app, poster: "buyer-\(index)", now: now) == .new)
                #expect(try await server.store.record(transaction, app: app, poster: "buyer-\(index)", now: now) == .alreadyRecorded)
                #expect(try await server.store.record(transaction, app: app, poster: "other-\(index)", now: now) == .transferred)
                let bound = try Self.purchase(server, appAccountToken: AppAccountToken.forAppUserID("buyer-\(index)"))
                #expect(try await server.store.record(bound, app: app, poster: "other-\(index)", now: now) == .boundToAnotherUser)
            }
            let after = try #require(await server.store.database.sqliteWriterReprepares())
            let purchaseStatements = after.keys.filter { before[$0] == nil }
            #expect(purchaseStatements.contains(CustomerDatabase.purchaseFactsSQL))
            let again = after.filter { $0.value > before[$0.key, default: 0] }
            #expect(again.isEmpty, "prepared again: \(again)")
            try await server.shutdown()
        }
    }

    @Test("a purchase that would move a chain is left to a transaction: the one-statement path writes nothing", arguments: TestDatabaseKind.available)
    func movingLeftToTransaction(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let server = try await OperationsTests.server(location, directory)
            let app = server.deployment.apps[0]
            let transaction = try Self.purchase(server)
            #expect(try await server.store.record(transaction, app: app, poster: "first", now: Date()) == .new)
            let status = try await server.store.database.withConnection { sql in
                try await CustomerDatabase.record(sql, transaction, app: app, poster: "second", now: Date(), movesChains: false)
            }
            #expect(status == nil)
            #expect(try await Self.counts(server, transaction).owners == ["first"])
            #expect(try await server.store.existingCustomerInfo(app: app, user: "second", now: Date()) == nil, "not even the poster was added")
            #expect(try await server.store.record(transaction, app: app, poster: "second", now: Date()) == .transferred)
            #expect(try await Self.counts(server, transaction).owners == ["second"])
            try await server.shutdown()
        }
    }

    @Test(
        "a returning customer's new purchase (last seen over an hour ago) writes purchase, owner and event and notes the visit",
        arguments: TestDatabaseKind.available)
    func returningCustomer(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let server = try await OperationsTests.server(location, directory)
            let app = server.deployment.apps[0]
            let now = Date()
            let earlier = now.addingTimeInterval(-2 * 3_600)
            #expect(try await server.store.record(try Self.purchase(server), app: app, poster: "back", now: earlier) == .new)
            // On PostgreSQL the prepared statement of a known customer's purchase.
            let second = try Self.purchase(server)
            #expect(try await server.store.record(second, app: app, poster: "back", now: now) == .new)
            #expect(try await Self.counts(server, second) == (1, ["back"]))
            let info = try await server.store.existingCustomerInfo(app: app, user: "back", now: now)
            #expect(info?.subscriber.lastSeen == WireDate.format(now))
            #expect(info?.subscriber.firstSeen == WireDate.format(earlier))
            let events = try await server.store.events(app: app.id, user: "back")
            #expect(events.filter { $0.body.contains(#""transaction_id":"\#(second.transactionId)""#) }.map(\.type) == ["NON_RENEWING_PURCHASE"])
            try await server.shutdown()
        }
    }

    @Test("the writes of a purchase stand or fall together: an owner row in the way leaves no purchase behind", arguments: TestDatabaseKind.available)
    func writesAreAtomic(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let server = try await OperationsTests.server(location, directory)
            let app = server.deployment.apps[0]
            let transaction = try Self.purchase(server)
            try await server.store.database.withConnection { sql in
                try await sql.run(
                    CustomerDatabase.insertOwnerStatement(app: app.id, chain: transaction.originalTransactionId, user: "holder", now: Date()))
            }
            // What the rules would write had the owner row not been there (it arrived meanwhile).
            let plan = Plan(status: .new, customer: .insert, purchase: .insert, owner: .insert("poster"))
            let events = [
                WebhookEvent(
                    .initialPurchase, subject: transaction.transactionId, app: app, user: "poster",
                    transaction: EventTransaction(transaction), now: Date())
            ]
            await #expect(throws: (any Error).self) {
                // PostgreSQL: one statement outside a transaction; SQLite: inside the caller's transaction.
                if kind == .sqlite {
                    try await server.store.database.transaction { sql in
                        try await CustomerDatabase.write(plan, on: sql, transaction, app: app, poster: "poster", now: Date(), events: events)
                    }
                } else {
                    // The prepared statement of a new purchase (the path `record` takes).
                    try await server.store.database.withConnection { sql in
                        try await CustomerDatabase.write(plan, on: sql, transaction, app: app, poster: "poster", now: Date(), events: events)
                    }
                }
            }
            let stored = try await Self.counts(server, transaction)
            #expect(stored.purchases == 0)
            #expect(stored.owners == ["holder"])
            #expect(try await server.store.events(app: app.id, user: "poster").isEmpty)
            #expect(try await server.store.existingCustomerInfo(app: app, user: "poster", now: Date()) == nil)
            try await server.shutdown()
        }
    }
}
