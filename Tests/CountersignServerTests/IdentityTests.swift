import CountersignAppStore
import CountersignCore
import CountersignTesting
import Foundation
import HTTPTypes
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Identity as RevenueCat keeps it, read back as users read it (over HTTP with the public key,
/// the secret key and the admin API, after the real `countersign import`), on both databases:
/// an id merged into a customer answers as the customer ("the user can then be referenced by any
/// of their aliases and the same result will be returned", RevenueCat's App User IDs guide); a
/// customer is recorded at first sight, so `first_seen` and the ETag hold still; the retention
/// removes only customers who left nothing to keep.
@Suite("Identity: aliases, first sight, retention")
struct IdentityTests {
    static func subscriber(_ json: [String: Any]) -> [String: Any] { json["subscriber"] as? [String: Any] ?? [:] }

    static func anonymousID() -> String { "$RCAnonymousID:" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased() }

    /// The signed read of `user` with the public key, verified.
    static func read(_ harness: ReceiptTests.Harness, _ user: String, etag: String? = nil) async throws -> Reply {
        let (reply, outcome) = try await harness.signed(.get, "/v1/subscribers/\(user.pathSegment)", etag: etag)
        #expect(outcome == .verified, "the read of \(user) did not verify")
        return reply
    }

    @Test(
        "after logIn the anonymous id answers as the merged customer: public key, secret key, admin API, purchases, attributes, grants, deletion",
        arguments: TestDatabaseKind.available)
    func logInAlias(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let anonymous = Self.anonymousID()
            #expect(try await harness.post(user: anonymous, jws: try harness.mint("pro_monthly").jws).status == 200)
            let logIn = try await harness.signed(
                .post, "/v1/subscribers/identify", json: ["app_user_id": anonymous, "new_app_user_id": "bob"], paramKeys: ParamKeys.identify)
            #expect(logIn.reply.status == 201 && logIn.outcome == .verified)

            // The alias's answer is bob's: his entitlement, his first id (RevenueCat's
            // `original_app_user_id`: the anonymous id he started as), his ETag. An answer for an
            // id that is not the first one says which id asked (inside the signature).
            let viaAlias = try await Self.read(harness, anonymous)
            let viaBob = try await Self.read(harness, "bob")
            #expect(viaAlias.status == 200)
            #expect(Self.subscriber(viaAlias.json)["original_app_user_id"] as? String == anonymous)
            #expect(Self.subscriber(viaBob.json)["original_app_user_id"] as? String == anonymous)
            #expect(viaAlias.json["app_user_id"] == nil, "the first id's answer is RevenueCat's, without the member")
            #expect(viaBob.json["app_user_id"] as? String == "bob")
            #expect(ReceiptTests.isActive(viaAlias.json, "pro"))
            #expect(Self.subscriber(viaAlias.json)["first_seen"] as? String == Self.subscriber(viaBob.json)["first_seen"] as? String)
            let etag = try #require(viaBob.headers[SignatureHeader.etag])
            #expect(viaAlias.headers[SignatureHeader.etag] == etag)
            let notModified = try await Self.read(harness, anonymous, etag: etag)
            #expect(notModified.status == 304, "bob's ETag is current for his alias")

            // With the secret key, and through the admin API.
            let secret = try await harness.send(.get, "/v1/subscribers/\(anonymous.pathSegment)", key: harness.secretKey)
            #expect(secret.status == 200 && ReceiptTests.isActive(secret.json, "pro"))
            let admin = try await harness.send(.get, "/v1/admin/customers/\(anonymous.pathSegment)", key: harness.secretKey)
            #expect(admin.status == 200 && admin.json["app_user_id"] as? String == "bob")
            #expect(admin.json["aliases"] as? [String] == [anonymous])

            // A purchase posted under the alias lands on bob.
            let posted = try await harness.post(user: anonymous, jws: try harness.mint("lifetime", type: .nonConsumable).jws)
            #expect(posted.status == 200)
            #expect(ReceiptTests.isActive(posted.json, "pro"), "the answer is bob's")
            #expect((Self.subscriber(try await Self.read(harness, "bob").json)["non_subscriptions"] as? [String: Any])?["lifetime"] != nil)

            // Attributes set under the alias are bob's; so is a grant made under it.
            let attributes = try JSONSerialization.data(withJSONObject: [
                "attributes": ["$email": ["value": "bob@example.com", "updated_at_ms": Date().epochMilliseconds]]
            ])
            let set = try await harness.send(
                .post, "/v1/subscribers/\(anonymous.pathSegment)/attributes", key: harness.secretKey, body: attributes,
                headers: [.contentType: "application/json"])
            #expect(set.status == 200)
            let bobRead = try await harness.send(.get, "/v1/subscribers/bob", key: harness.secretKey)
            #expect(
                ((Self.subscriber(bobRead.json)["subscriber_attributes"] as? [String: Any])?["$email"] as? [String: Any])?["value"] as? String
                    == "bob@example.com")
            let grant = try await AdminTests.grant(harness, anonymous.pathSegment, ["duration": "weekly"])
            #expect(grant.status == 201)
            let bobRecord = try await harness.send(.get, "/v1/admin/customers/bob", key: harness.secretKey)
            #expect((bobRecord.json["promotional_grants"] as? [Any])?.count == 1)

            // A logIn from the merged id merges nothing more: bob keeps what he has.
            let again = try await harness.signed(
                .post, "/v1/subscribers/identify", json: ["app_user_id": anonymous, "new_app_user_id": "carol"], paramKeys: ParamKeys.identify)
            #expect(again.reply.status == 201)
            #expect(!ReceiptTests.isActive(again.reply.json, "pro"))
            #expect(ReceiptTests.isActive(try await Self.read(harness, "bob").json, "pro"))

            // Deleting through the alias deletes bob.
            #expect(try await harness.send(.delete, "/v1/admin/customers/\(anonymous.pathSegment)", key: harness.secretKey).status == 200)
            #expect(try await harness.send(.get, "/v1/admin/customers/bob", key: harness.secretKey).status == 404)
        }
    }

    @Test("the dashboard's search finds the customer by an alias", arguments: TestDatabaseKind.available)
    func dashboardSearchByAlias(_ kind: TestDatabaseKind) async throws {
        try await DashboardTests.withSetup(kind) { setup in
            let anonymous = Self.anonymousID()
            #expect(try await setup.harness.post(user: anonymous, jws: try setup.harness.mint("pro_monthly").jws).status == 200)
            let logIn = try await setup.harness.signed(
                .post, "/v1/subscribers/identify", json: ["app_user_id": anonymous, "new_app_user_id": "erin"], paramKeys: ParamKeys.identify)
            #expect(logIn.reply.status == 201)
            #expect(try await setup.browser.signIn(setup.harness.secretKey).status == 303)
            let search = DashboardTests.text(try await setup.browser.get("/dashboard/customers?q=\(anonymous.pathSegment)"))
            #expect(search.contains("href=\"/dashboard/customers/erin\""))
            // Opened through the alias, the page is erin's, and names the alias.
            let page = DashboardTests.text(try await setup.browser.get("/dashboard/customers/\(anonymous.pathSegment)"))
            #expect(page.contains("<h1 class=\"breakable\">erin</h1>"))
            #expect(page.contains("Also known as \(anonymous)"))
        }
    }

    @Test(
        "after an import both RevenueCat's original id and the last seen alias answer, even when the original was read first",
        arguments: TestDatabaseKind.available)
    func importedAliases(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let app = SecurityReviewThreeTests.app()
            let ca = try SecurityReviewThreeTests.deployment(in: directory, apps: [app])
            let original = Self.anonymousID()
            let daveLater = Self.anonymousID()
            // An install read its CustomerInfo before the move (first sight recorded `original`).
            let database = try await Database.open(location, logger: FreshDatabase.logger, now: Date())
            _ = try await CustomerDatabase(database: database).customerInfo(app: app, user: original, now: Date())
            try await database.close()

            let bought = Date().addingTimeInterval(-3_600)
            let export =
                "rc_original_app_user_id,rc_last_seen_app_user_id_alias,product_identifier,start_time,store,is_sandbox,store_transaction_id,original_store_transaction_id,is_auto_renewable\n"
                + "\(original),carol,lifetime,\(SecurityReviewThreeTests.stamp(bought)),app_store,t,8101,8101,f\n"
                // Logged in as dave, then out: RevenueCat names the customer by the last seen
                // identified id, so dave is the customer and the anonymous id his alias.
                + "dave,\(daveLater),lifetime,\(SecurityReviewThreeTests.stamp(bought)),app_store,t,8102,8102,f\n"
            let imported = try await SecurityReviewThreeTests.importExport(Data(export.utf8), directory: directory, location: location)
            #expect(imported.status == 0, "\(imported.stdout)\(imported.stderr)")

            try await SecurityReviewThreeTests.serve(directory, location, apps: [app], ca: ca) { harnesses in
                let harness = harnesses[0]
                for id in [original, "carol"] {
                    let reply = try await Self.read(harness, id)
                    #expect(ReceiptTests.isActive(reply.json, "pro"), "\(id) answers without carol's purchase")
                    // RevenueCat's `original_app_user_id` of the customer, from the export.
                    #expect(Self.subscriber(reply.json)["original_app_user_id"] as? String == original)
                    let secret = try await harness.send(.get, "/v1/subscribers/\(id.pathSegment)", key: harness.secretKey)
                    #expect(secret.status == 200 && ReceiptTests.isActive(secret.json, "pro"))
                    let admin = try await harness.send(.get, "/v1/admin/customers/\(id.pathSegment)", key: harness.secretKey)
                    #expect(admin.status == 200 && admin.json["app_user_id"] as? String == "carol")
                    #expect((admin.json["transactions"] as? [Any])?.count == 1)
                }
                for id in [daveLater, "dave"] {
                    let reply = try await Self.read(harness, id)
                    #expect(ReceiptTests.isActive(reply.json, "pro") && Self.subscriber(reply.json)["original_app_user_id"] as? String == "dave")
                    #expect(reply.json["app_user_id"] as? String == (id == "dave" ? nil : id))
                }
                let dave = try await harness.send(.get, "/v1/admin/customers/dave", key: harness.secretKey)
                #expect(dave.json["aliases"] as? [String] == [daveLater])
                #expect(try await harness.server.store.events(app: app.id, user: "dave").map(\.type) == ["NON_RENEWING_PURCHASE"])
                // The id read before the import is no customer of its own any more.
                let rows = try await harness.server.database.withConnection { sql in
                    try await sql.all("SELECT app_user_id FROM customers ORDER BY app_user_id") { try $0.string("app_user_id") }
                }
                #expect(rows == ["carol", "dave"])
            }
        }
    }

    @Test(
        "a never-seen id is recorded at first sight: the same first_seen a second later, a signed 304 for its ETag, found by the admin API",
        arguments: TestDatabaseKind.available)
    func firstSight(_ kind: TestDatabaseKind) async throws {
        let clock = ManualClock(Date())
        try await ReceiptTests.withHarness(kind, clock: clock) { harness in
            let id = Self.anonymousID()
            #expect(try await harness.send(.get, "/v1/admin/customers/\(id.pathSegment)", key: harness.secretKey).status == 404)
            let first = try await Self.read(harness, id)
            #expect(first.status == 200)
            let etag = try #require(first.headers[SignatureHeader.etag])
            clock.now = clock.now.addingTimeInterval(1)
            let second = try await Self.read(harness, id)
            #expect(Self.subscriber(second.json)["first_seen"] as? String == Self.subscriber(first.json)["first_seen"] as? String)
            #expect(second.headers[SignatureHeader.etag] == etag)
            let cached = try await Self.read(harness, id, etag: etag)
            #expect(cached.status == 304)
            #expect(try await harness.send(.get, "/v1/admin/customers/\(id.pathSegment)", key: harness.secretKey).status == 200)
        }
    }

    @Test(
        "PostgreSQL round trips: a first launch one, an id never seen two, a known customer one, a stale one two; the answers as before",
        arguments: TestDatabaseKind.available)
    func firstSightRoundTrips(_ kind: TestDatabaseKind) async throws {
        let clock = ManualClock(Date())
        try await ReceiptTests.withHarness(kind, clock: clock, configure: { _, server in server.webhooks.pollInterval = .seconds(3_600) }) {
            harness in
            let database = harness.server.store.database
            /// The fewest statements `read` sent to PostgreSQL in three tries (a service of the
            /// server may send one meanwhile), each try on the ids `ids` gives it.
            func roundTrips(_ read: (Int) async throws -> Void) async throws -> Int {
                var fewest = Int.max
                for attempt in 0..<3 {
                    let before = database.postgresRoundTrips.withLockedValue { $0 }
                    try await read(attempt)
                    fewest = min(fewest, database.postgresRoundTrips.withLockedValue { $0 } - before)
                }
                return fewest
            }
            let launches = (0..<3).map { _ in Self.anonymousID() }
            var firstSeen: [String: String] = [:]
            let firstLaunch = try await roundTrips { attempt in
                let reply = try await Self.read(harness, launches[attempt])
                #expect(reply.status == 200)
                #expect(Self.subscriber(reply.json)["original_app_user_id"] as? String == launches[attempt])
                firstSeen[launches[attempt]] = Self.subscriber(reply.json)["first_seen"] as? String
            }
            // The SDK's next launch sends the ETag it cached: one batched read answers 304.
            let etag = try #require(try await Self.read(harness, launches[0]).headers[SignatureHeader.etag])
            let cached = try await roundTrips { _ in
                let reply = try await Self.read(harness, launches[0], etag: etag)
                #expect(reply.status == 304)
            }
            // Without its ETag a known anonymous id is taken for a first launch: still one, and
            // still the customer first seen before.
            clock.now = clock.now.addingTimeInterval(1)
            let knownAgain = try await roundTrips { attempt in
                let reply = try await Self.read(harness, launches[attempt])
                #expect(Self.subscriber(reply.json)["first_seen"] as? String == firstSeen[launches[attempt]])
            }
            let named = (0..<3).map { "carol-\($0)-\(UUID().uuidString)" }
            let neverSeen = try await roundTrips { attempt in
                let reply = try await Self.read(harness, named[attempt])
                #expect(reply.status == 200)
            }
            let known = try await roundTrips { attempt in
                let reply = try await Self.read(harness, named[attempt])
                #expect(reply.status == 200)
            }
            clock.now = clock.now.addingTimeInterval(3_601)
            let stale = try await roundTrips { attempt in
                let reply = try await Self.read(harness, named[attempt])
                #expect(reply.status == 200)
                #expect(Self.subscriber(reply.json)["last_seen"] != nil)
            }
            // An anonymous id merged by logIn, read as a first launch: its customer answers.
            let anonymous = Self.anonymousID()
            #expect(try await harness.post(user: anonymous, jws: try harness.mint("pro_monthly").jws).status == 200)
            let logIn = try await harness.signed(
                .post, "/v1/subscribers/identify", json: ["app_user_id": anonymous, "new_app_user_id": "dave"], paramKeys: ParamKeys.identify)
            #expect(logIn.reply.status == 201)
            let merged = try await Self.read(harness, anonymous)
            #expect(ReceiptTests.isActive(merged.json, "pro"))
            let dave = try await Self.read(harness, "dave")
            #expect(merged.headers[SignatureHeader.etag] == dave.headers[SignatureHeader.etag])
            // An hour on, the alias's read notes its customer's visit: dave's last_seen moves.
            clock.now = clock.now.addingTimeInterval(3_601)
            let later = try await Self.read(harness, anonymous)
            #expect(ReceiptTests.isActive(later.json, "pro"))
            let lastSeen = Self.subscriber(later.json)["last_seen"] as? String
            #expect(lastSeen != nil && lastSeen != Self.subscriber(merged.json)["last_seen"] as? String)
            #expect(Self.subscriber(try await Self.read(harness, "dave").json)["last_seen"] as? String == lastSeen)
            guard kind == .postgres else { return }
            #expect(firstLaunch == 1, "a first launch: the visit and the read in one statement")
            #expect(cached == 1)
            #expect(knownAgain == 1)
            #expect(neverSeen == 2, "an id never seen that is not a first launch: the read, then the visit with the read")
            #expect(known == 1)
            #expect(stale == 2)
        }
    }

    /// One customer of the retention test: what they did on the first day.
    enum RetentionCase: String, CaseIterable, Sendable {
        case onlyRead = "only read"
        case bought, loggedIn = "logged in", attributes, granted = "promotional grant", cameBack = "came back on day 60"

        /// Whether the customer is still there 91 days after the first day.
        var kept: Bool { self != .onlyRead }
    }

    static let retentionCases = TestDatabaseKind.available.flatMap { kind in RetentionCase.allCases.map { (kind, $0) } }

    @Test(
        "the retention removes a customer who only read, 91 days unseen, and keeps one who bought, logged in, has attributes or a grant, or came back",
        arguments: retentionCases)
    func retention(_ kind: TestDatabaseKind, _ retentionCase: RetentionCase) async throws {
        let clock = ManualClock(Date())
        try await ReceiptTests.withHarness(kind, clock: clock) { harness in
            let id = retentionCase == .loggedIn ? "member" : Self.anonymousID()
            func known() async throws -> Bool {
                try await harness.send(.get, "/v1/admin/customers/\(id.pathSegment)", key: harness.secretKey).status == 200
            }
            switch retentionCase {
            case .onlyRead, .cameBack:
                _ = try await Self.read(harness, id)
            case .bought:
                #expect(try await harness.post(user: id, jws: try harness.mint("pro_monthly").jws).status == 200)
            case .loggedIn:
                // From an identified id: nothing merges, so the logIn alone keeps them.
                let logIn = try await harness.signed(
                    .post, "/v1/subscribers/identify", json: ["app_user_id": "someone-else", "new_app_user_id": id],
                    paramKeys: ParamKeys.identify)
                #expect(logIn.reply.status == 201)
            case .attributes:
                _ = try await Self.read(harness, id)
                let attributes = try JSONSerialization.data(withJSONObject: [
                    "attributes": ["$displayName": ["value": "T", "updated_at_ms": clock.now.epochMilliseconds]]
                ])
                let set = try await harness.send(
                    .post, "/v1/subscribers/\(id.pathSegment)/attributes", key: harness.secretKey, body: attributes,
                    headers: [.contentType: "application/json"])
                #expect(set.status == 200)
            case .granted:
                #expect(try await AdminTests.grant(harness, id.pathSegment, ["duration": "weekly"]).status == 201)
            }
            #expect(try await known())
            // 60 days on, one comes back (read through the store: the server's signing key does
            // not outlive a jump of the clock by months); 89 days on, nobody is due yet.
            clock.now = clock.now.addingTimeInterval(60 * 86_400)
            if retentionCase == .cameBack { _ = try await harness.server.store.customerInfo(app: harness.app, user: id, now: clock.now) }
            clock.now = clock.now.addingTimeInterval(29 * 86_400)
            try await harness.server.webhookService.prune()
            #expect(try await known(), "pruned before 90 days")
            clock.now = clock.now.addingTimeInterval(2 * 86_400)
            try await harness.server.webhookService.prune()
            #expect(try await known() == retentionCase.kept, "\(retentionCase.rawValue): kept \(!retentionCase.kept)")
            if !retentionCase.kept {
                // Seen again, they are recorded anew.
                _ = try await harness.server.store.customerInfo(app: harness.app, user: id, now: clock.now)
                #expect(try await known())
            }
        }
    }

    @Test("a flood of made-up ids is held by the per-address limit: no more customers than the burst", arguments: TestDatabaseKind.available)
    func floodLimited(_ kind: TestDatabaseKind) async throws {
        let limits = SecurityReviewTests.limits { $0.publicPerClient = .init(perSecond: 0.01, burst: 5) }
        try await ReceiptTests.withHarness(kind, configure: { _, configuration in configuration.rateLimits = limits }) { harness in
            var statuses: [Int] = []
            for _ in 0..<20 {
                statuses.append(try await harness.signed(.get, "/v1/subscribers/\(Self.anonymousID().pathSegment)").reply.status)
            }
            #expect(statuses.filter { $0 == 200 }.count <= 5)
            #expect(statuses.contains(429))
            let rows = try await harness.server.database.withConnection { sql in
                try await sql.first("SELECT COUNT(*) AS n FROM customers") { try $0.int("n") }
            }
            #expect((rows ?? 0) <= 5)
        }
    }
}
