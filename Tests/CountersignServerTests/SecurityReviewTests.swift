import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import HTTPTypes
import Testing
import X509

@testable import CountersignServer
@testable import CountersignStorage

/// The security review's findings that concern storage and the public routes, each from the
/// attacker's side, over real HTTP on both databases (finding 1's tests are with the App Store
/// Server API stand-in, in `StoreServerAPITests`).
@Suite("Security review: purchases across apps, floods")
struct SecurityReviewTests {
    /// A server with several apps; one harness per app (each with its own keys), sharing the
    /// server and the deployment's test store.
    static func withApps(
        _ kind: TestDatabaseKind, _ apps: [AppConfiguration], configure: @Sendable (inout ServerConfiguration) -> Void = { _ in },
        _ body: @Sendable @escaping ([ReceiptTests.Harness]) async throws -> Void
    ) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            try DeploymentConfiguration(apps: apps).save(toDataDirectory: directory)
            var configuration = ServerConfiguration(dataDirectory: directory)
            configuration.database = location
            configure(&configuration)
            try await LiveServer.run(configuration) { server, client in
                let ca = try TestStoreCA.loadOrCreate(for: DataDirectory(directory))
                try await body(apps.map { ReceiptTests.Harness(server: server, client: client, app: $0, ca: ca) })
            }
        }
    }

    static func app(_ id: String, bundle: String, environments: [String] = ["TestStore", "Sandbox"]) -> AppConfiguration {
        var app = AppConfiguration.makeDemo()
        app.id = id
        app.bundleId = bundle
        app.environments = environments
        return app
    }

    /// A test-store transaction for `harness`'s app with the given id (as Xcode numbers them).
    static func transaction(_ harness: ReceiptTests.Harness, id: String, product: String = "lifetime") throws -> String {
        var payload = try harness.mint(product, type: .nonConsumable).payload
        payload.transactionId = id
        payload.originalTransactionId = id
        return try harness.ca.sign(payload)
    }

    // MARK: Finding 2: purchases keyed by transaction id across all apps

    @Test("finding 2: two apps whose transactions share an id each keep their own purchase", arguments: TestDatabaseKind.available)
    func sameIdInTwoApps(_ kind: TestDatabaseKind) async throws {
        let apps = [Self.app("first", bundle: "com.example.first"), Self.app("second", bundle: "com.example.second")]
        try await Self.withApps(kind, apps) { harnesses in
            for harness in harnesses {
                let posted = try await harness.post(user: "buyer", jws: try Self.transaction(harness, id: "0"))
                #expect(posted.status == 200)
                #expect(posted.json["purchase_status"] as? String == "new", "\(harness.app.id)")
                #expect(ReceiptTests.isActive(try await harness.customerInfo("buyer"), "pro"), "\(harness.app.id)")
                #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: "0") == 1)
            }
        }
    }

    /// A StoreKit Testing certificate and its key, as a developer's Xcode holds them.
    struct XcodeSigner {
        let key = P256.Signing.PrivateKey()
        let certificate: Certificate

        init() throws {
            let name = try DistinguishedName { CommonName("StoreKit Testing in Xcode") }
            certificate = try Certificate(
                version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: Date().addingTimeInterval(-86_400),
                notValidAfter: Date().addingTimeInterval(365 * 86_400), issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
                extensions: .init(), issuerPrivateKey: .init(key)
            )
        }

        var base64: String {
            Data(try! certificate.serializeAsPEM().derBytes).base64EncodedString()
        }

        func sign(_ payload: TransactionPayload) throws -> String {
            let header = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "x5c": [base64]], options: [.sortedKeys])
            let input = header.base64URLEncodedString + "." + (try AppStoreJSON.makeEncoder().encode(payload)).base64URLEncodedString
            return input + "." + (try key.signature(for: Data(input.utf8))).rawRepresentation.base64URLEncodedString
        }
    }

    @Test(
        "finding 2: an Xcode-signed copy of another app's transaction, revoked and dated years ahead, revokes nothing",
        arguments: TestDatabaseKind.available)
    func xcodeCopyRevokesNothing(_ kind: TestDatabaseKind) async throws {
        let xcode = try XcodeSigner()
        var developer = Self.app("developer", bundle: "com.example.developer", environments: ["Xcode"])
        developer.storeKitTestingCertificates = [xcode.base64]
        try await Self.withApps(kind, [Self.app("shop", bundle: "com.example.shop"), developer]) { harnesses in
            let (shop, attacker) = (harnesses[0], harnesses[1])
            let bought = try shop.mint("lifetime", type: .nonConsumable)
            #expect(try await shop.post(user: "alice", jws: bought.jws).status == 200)

            var forged = bought.payload
            forged.bundleId = attacker.app.bundleId
            forged.environment = .xcode
            forged.revocationDate = Date()
            forged.revocationReason = 0
            forged.signedDate = Date().addingTimeInterval(10 * 365 * 86_400)
            let ahead = try await attacker.send(
                .post, "/v1/receipts", key: attacker.key,
                body: try JSONSerialization.data(withJSONObject: ["app_user_id": "mallory", "fetch_token": try xcode.sign(forged)]))
            #expect(ahead.status == 422 && ahead.code == APIErrorCode.signedDateAhead.rawValue)
            #expect((ahead.json["message"] as? String)?.contains("future") == true)

            // Dated now it is the developer app's own Xcode transaction, in its own rows.
            forged.signedDate = Date()
            let now = try await attacker.send(
                .post, "/v1/receipts", key: attacker.key,
                body: try JSONSerialization.data(withJSONObject: ["app_user_id": "mallory", "fetch_token": try xcode.sign(forged)]))
            #expect(now.status == 200)
            #expect(try await attacker.server.store.purchaseCount(app: attacker.app.id, transactionId: bought.payload.transactionId!) == 1)
            #expect(ReceiptTests.isActive(try await shop.customerInfo("alice"), "pro"))
            // And Alice's own copy, posted again, is still hers and unrevoked.
            #expect(try await shop.post(user: "alice", jws: bought.jws).json["purchase_status"] as? String == "already_recorded")
        }
    }

    @Test("finding 2: the migration keys existing purchases by app, environment and transaction id", arguments: TestDatabaseKind.available)
    func migrationKeepsRows(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            #expect(try await Migrations.appliedVersions(on: harness.server.database).contains(9))
            let bought = try harness.mint("pro_monthly")
            #expect(try await harness.post(user: "u", jws: bought.jws).status == 200)
            // The same id in another environment of the same app is another row.
            var sandbox = bought.payload
            sandbox.environment = .sandbox
            let transaction = try VerifiedTransaction(jws: bought.jws, payload: sandbox, app: harness.app)
            #expect(try await harness.server.store.record(transaction, app: harness.app, poster: "u", now: Date()) == .new)
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: bought.payload.transactionId!) == 2)
        }
    }

    // MARK: Finding 4: one purchase makes unbounded events and deliveries

    static func limits(_ change: (inout RateLimitSettings) -> Void) -> RateLimitSettings {
        var limits = RateLimitSettings.standard
        change(&limits)
        return limits
    }

    @Test(
        "finding 4: the public routes are limited per address and per app, with a signed 429 and Retry-After", arguments: TestDatabaseKind.available)
    func publicRoutesRateLimited(_ kind: TestDatabaseKind) async throws {
        let perClient = Self.limits { $0.publicPerClient = .init(perSecond: 0.01, burst: 3) }
        try await ReceiptTests.withHarness(kind, configure: { _, configuration in configuration.rateLimits = perClient }) { harness in
            for _ in 0..<3 { #expect(try await harness.signed(.get, "/v1/subscribers/u").reply.status == 200) }
            let (limited, outcome) = try await harness.signed(.get, "/v1/subscribers/u")
            #expect(limited.status == 429 && limited.code == APIErrorCode.rateLimited.rawValue)
            #expect(outcome == .verified)
            #expect(limited.headers[.retryAfter].flatMap(Int.init).map { (1...100).contains($0) } == true)
            // A purchase from that address is refused too, and records nothing.
            let before = try await harness.snapshot()
            #expect(try await harness.post(user: "u", jws: try harness.mint("lifetime", type: .nonConsumable).jws).status == 429)
            #expect(try await harness.snapshot() == before)
        }
        let perApp = Self.limits { $0.publicPerApp = .init(perSecond: 0.01, burst: 2) }
        try await ReceiptTests.withHarness(kind, configure: { _, configuration in configuration.rateLimits = perApp }) { harness in
            for _ in 0..<2 { #expect(try await harness.signed(.get, "/v1/subscribers/u").reply.status == 200) }
            let limited = try await harness.signed(.get, "/v1/subscribers/u").reply
            #expect(limited.status == 429 && (limited.json["message"] as? String)?.contains("app 'demo'") == true)
            #expect(limited.headers[.retryAfter] != nil)
        }
    }

    @Test(
        "finding 4: a purchase posted back and forth as two ids follows each post but makes one TRANSFER a window",
        arguments: TestDatabaseKind.available)
    func pingPongDamped(_ kind: TestDatabaseKind) async throws {
        let clock = ManualClock(Date())
        try await ReceiptTests.withHarness(
            kind, clock: clock,
            configure: { app, _ in
                // Nothing listens there: each event's delivery stays pending, so deliveries can be counted.
                app.webhooks = [.init(url: "http://127.0.0.1:9/hooks")]
            }
        ) { harness in
            var payload = try harness.mint("lifetime", type: .nonConsumable).payload
            payload.signedDate = clock.now
            let jws = try harness.ca.sign(payload)
            #expect(try await harness.post(user: "a", jws: jws).status == 200)
            for user in ["b", "a", "b", "a", "b"] {
                let posted = try await harness.post(user: user, jws: jws)
                #expect(posted.json["purchase_status"] as? String == "transferred", "\(user)")
                #expect(ReceiptTests.entitlement(posted.json, "pro") != nil, "entitlements follow every move")
            }
            let store = harness.server.store
            func transfers() async throws -> Int {
                var count = 0
                for user in ["a", "b"] { count += try await store.events(app: harness.app.id, user: user).filter { $0.type == "TRANSFER" }.count }
                return count
            }
            #expect(try await transfers() == 1)
            let deliveries = try await harness.server.database.withConnection { sql in
                try await sql.first("SELECT COUNT(*) AS n FROM webhook_deliveries") { try $0.int("n") }
            }
            #expect(deliveries == 2, "the purchase's and one transfer's")
            #expect(ReceiptTests.isActive(try await harness.customerInfo("b"), "pro"))
            #expect(!ReceiptTests.isActive(try await harness.customerInfo("a"), "pro"))
            // After the window a move opens another, with its event.
            clock.now = clock.now.addingTimeInterval(601)
            #expect(try await harness.post(user: "a", jws: jws).json["purchase_status"] as? String == "transferred")
            #expect(try await transfers() == 2)
        }
    }

    /// Finding 4 once made a read write nothing; RevenueCat records a customer at first sight and
    /// the identity issue follows it (a stable `first_seen`, an ETag that earns a 304). What a
    /// flood of made-up ids costs is now one row each, bounded by the rate limits and pruned by
    /// the retention (IdentityTests).
    @Test("finding 4: a read of an unknown id writes one customer row, once", arguments: TestDatabaseKind.available)
    func readCreatesOneRow(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let ids = ["nobody", "$CSAnonymousID:6b7f3ad2a8a34f6f9a3a1c7d2e4f5a6b", "made-up-\(UUID())"]
            for _ in 0..<2 {
                for id in ids {
                    let (reply, outcome) = try await harness.signed(.get, "/v1/subscribers/\(id.pathSegment)")
                    #expect(reply.status == 200 && outcome == .verified)
                    #expect(ReceiptTests.entitlement(reply.json, "pro") == nil)
                }
            }
            let rows = try await harness.server.database.withConnection { sql in
                try await sql.first("SELECT COUNT(*) AS n FROM customers") { try $0.int("n") }
            }
            #expect(rows == ids.count)
            #expect(try await harness.server.store.existingCustomerInfo(app: harness.app, user: "nobody", now: Date()) != nil)
        }
    }

    @Test("finding 4: delivered deliveries and their events are deleted past the retention; pending ones stay", arguments: TestDatabaseKind.available)
    func retention(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(
            kind,
            configure: { app, _ in
                // Nothing listens there: the delivery stays pending.
                app.webhooks = [.init(url: "http://127.0.0.1:9/hooks")]
            }
        ) { harness in
            #expect(try await harness.post(user: "kept", jws: try harness.mint("pro_monthly").jws).status == 200)
            #expect(try await harness.post(user: "gone", jws: try harness.mint("pro_monthly").jws).status == 200)
            try await harness.server.database.withConnection { sql in
                try await sql.run(
                    """
                    UPDATE webhook_deliveries SET status = 'delivered', delivered_at_ms = 1 \
                    WHERE event_id IN (SELECT event_id FROM events WHERE app_user_id = 'gone')
                    """)
            }
            let store = harness.server.store
            // Nothing is older than a day yet.
            let first = try await store.pruneEvents(before: Date().addingTimeInterval(-86_400))
            #expect(first.events == 0 && first.deliveries == 1)
            let second = try await store.pruneEvents(before: Date().addingTimeInterval(60))
            #expect(second.events == 1 && second.deliveries == 0)
            #expect(try await store.events(app: harness.app.id, user: "gone").isEmpty)
            #expect(try await store.events(app: harness.app.id, user: "kept").count == 1)
            #expect(ReceiptTests.isActive(try await harness.customerInfo("gone"), "pro"))
        }
    }

    // MARK: Finding 9: tamper telemetry floods

    @Test("finding 9: telemetry is limited per address before the app's budget, with Retry-After", arguments: TestDatabaseKind.available)
    func telemetryPerAddress(_ kind: TestDatabaseKind) async throws {
        let limits = Self.limits { $0.telemetryPerClient = .init(perSecond: 0.01, burst: 2) }
        try await ReceiptTests.withHarness(kind, configure: { _, configuration in configuration.rateLimits = limits }) { harness in
            let report = try JSONSerialization.data(withJSONObject: [
                "failures": [["reason": "payloadMismatch", "mode": "enforced", "path": "/v1/subscribers/x"]]
            ])
            func send() async throws -> Reply {
                try await harness.send(
                    .post, "/v1/diagnostics/verification_failures", key: harness.key, body: report, headers: [.contentType: "application/json"])
            }
            #expect(try await send().status == 202)
            #expect(try await send().status == 202)
            let limited = try await send()
            #expect(limited.status == 429 && (limited.json["message"] as? String)?.contains("address") == true)
            #expect(limited.headers[.retryAfter] != nil)
            let counted = try await harness.server.store.verificationFailures(app: harness.app.id, days: 1, now: Date())
            #expect(counted.map(\.count).reduce(0, +) == 2)
        }
    }

    // MARK: Found by the API contract check

    @Test(
        "an attribute value holding U+0000 is refused by name (PostgreSQL's text cannot hold it); the batch's valid attributes are stored",
        arguments: TestDatabaseKind.available)
    func nulInAttributeValue(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            try await harness.logIn("nul")
            let before = try await harness.snapshot()
            let body = Data(#"{"attributes":{"$email":{"value":"a\u0000b","updated_at_ms":5},"plain":{"value":"ok","updated_at_ms":5}}}"#.utf8)
            let reply = try await harness.send(
                .post, "/v1/subscribers/nul/attributes", key: harness.key, body: body,
                headers: [SignatureHeader.nonce: SignedRequestParts.makeNonce().base64EncodedString()])
            #expect(reply.status == 400 && reply.code == APIErrorCode.invalidSubscriberAttributes.rawValue)
            #expect((reply.json["message"] as? String)?.contains("$email") == true)
            // RevenueCat's answer: each refused attribute by name; the others are stored.
            let errors = try #require(reply.json["attribute_errors"] as? [[String: Any]])
            #expect(errors.map { $0["key_name"] as? String } == ["$email"])
            #expect(try await harness.snapshot() != before)
            let record = try await harness.send(.get, "/v1/admin/customers/nul", key: harness.secretKey)
            let stored = try #require(record.json["subscriber_attributes"] as? [String: [String: Any]])
            #expect(stored.keys.sorted() == ["plain"] && stored["plain"]?["value"] as? String == "ok")
        }
    }
}
