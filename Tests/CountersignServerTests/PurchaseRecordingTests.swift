import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignTesting
import Foundation
import Logging
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Recording a purchase: statements run together, the PostgreSQL path without a transaction, and
/// many posts of one purchase at once (the ownership rules alone: CountersignLedgerTests).
@Suite("Purchase recording", .serialized)
struct PurchaseRecordingTests {
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
                let outcomes = try await withThrowingTaskGroup(of: (String, Result<PurchaseStatus, LedgerError>).self) { group in
                    for index in 0..<20 {
                        group.addTask {
                            let user = "racer-\(index)"
                            do {
                                return (user, .success(try await server.store.record(transaction, app: app, poster: user, now: Date())))
                            } catch let error as LedgerError {
                                return (user, .failure(error))
                            }
                        }
                    }
                    return try await group.reduce(into: [String: Result<PurchaseStatus, LedgerError>]()) { $0[$1.0] = $1.1 }
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
                        if case .failure(.purchaseOwnedByAnotherUser) = $0 { true } else { false }
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

    @Test(
        "a purchase that moves a chain: on PostgreSQL one read and one write statement, no transaction; its TRANSFER stored once",
        arguments: TestDatabaseKind.available)
    func movingInOneStatement(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let server = try await OperationsTests.server(location, directory)
            var app = server.deployment.apps[0]
            app.transferBehavior = .transfer
            let transaction = try Self.purchase(server)
            #expect(try await server.store.record(transaction, app: app, poster: "first", now: Date()) == .new)
            var fewest = Int.max
            for poster in ["second", "first", "second"] {
                let before = server.store.database.postgresRoundTrips.withLockedValue { $0 }
                #expect(try await server.store.record(transaction, app: app, poster: poster, now: Date()) == .transferred)
                fewest = min(fewest, server.store.database.postgresRoundTrips.withLockedValue { $0 } - before)
                #expect(try await Self.counts(server, transaction).owners == [poster])
            }
            if kind == .postgres { #expect(fewest == 2, "the facts, then the writes") }
            // Moved three times within the transfer window: the first move's TRANSFER only.
            let transfers = try await server.store.events(app: app.id, user: "second").filter { $0.type == "TRANSFER" }
            #expect(transfers.count == 1)
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
            let plan = PurchasePlan(status: .new, customer: .insert, purchase: .insert, owner: .insert("poster"))
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
