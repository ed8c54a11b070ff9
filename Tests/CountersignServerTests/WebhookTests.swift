import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Webhooks over real HTTP: a receiver started by the test, the server posting to it, each
/// delivery checked with the verifier, by hand with Ed25519, and with `countersign verify-webhook`.
@Suite("Webhooks", .serialized)
struct WebhookTests {
    struct Setup: Sendable {
        let harness: ReceiptTests.Harness
        let receiver: WebhookReceiver
        let clock: ManualClock
        let path: String
        /// The endpoint as the app configures it.
        let url: String

        var secretKey: String { harness.app.secretApiKeys[0] }
        var root: Curve25519.Signing.PublicKey { harness.server.keys.managedRootPublicKey! }

        /// Waits (real time; the service polls every 20 ms) until `done` holds for what arrived.
        func received(until done: @Sendable ([WebhookReceiver.Received]) -> Bool) async throws -> [WebhookReceiver.Received] {
            if try await waitUntil({ done(await receiver.received) }) { return await receiver.received }
            let received = await receiver.received
            Issue.record("timed out waiting for webhook deliveries; have \(received.map { $0.event["type"] as? String ?? "?" })")
            return received
        }

        func admin(_ method: HTTPRequest.Method, _ path: String) async throws -> Reply {
            try await harness.send(method, path, key: secretKey)
        }

        func testStore(_ action: String, _ body: [String: String]) async throws -> [String: Any] {
            let reply = try await harness.send(
                .post, "/v1/admin/test_store/\(action)", key: secretKey,
                body: try JSONSerialization.data(withJSONObject: body))
            #expect(reply.status == 200, "\(action): \(String(decoding: reply.body, as: UTF8.self))")
            return ((reply.json["transactions"] as? [[String: Any]])?.first) ?? [:]
        }
    }

    /// A server whose app posts to a receiver at `/hooks/countersign?source=test` with an
    /// authorization header and an immediate retry schedule.
    static func withSetup(
        _ kind: TestDatabaseKind, answers: [Int] = [], schedule: [Double] = [0, 0], attemptTimeout: TimeInterval = 2,
        url: (@Sendable (Int) -> String)? = nil, otherWebhooks: [AppConfiguration.Webhook] = [],
        _ body: @Sendable @escaping (Setup) async throws -> Void
    ) async throws {
        let receiver = WebhookReceiver(answers: answers)
        try await receiver.makeApplication().test(.live) { receiverClient in
            let port = try #require(receiverClient.port)
            let address = url?(port) ?? "http://127.0.0.1:\(port)/hooks/countersign?source=test"
            try await FreshDatabase.with(kind) { location, directory in
                var app = AppConfiguration.makeDemo()
                app.webhooks =
                    otherWebhooks + [AppConfiguration.Webhook(url: address, authorization: "Bearer hook-secret", retryScheduleSeconds: schedule)]
                try DeploymentConfiguration(apps: [app]).save(toDataDirectory: directory)
                let clock = ManualClock(Date())
                var configuration = ServerConfiguration(dataDirectory: directory)
                configuration.database = location
                configuration.now = { clock.now }
                configuration.webhooks.pollInterval = .milliseconds(20)
                configuration.webhooks.attemptTimeout = attemptTimeout
                let configuredApp = app
                try await LiveServer.run(configuration) { server, client in
                    let ca = try TestStoreCA.loadOrCreate(for: DataDirectory(directory))
                    let harness = ReceiptTests.Harness(server: server, client: client, app: configuredApp, ca: ca)
                    try await body(Setup(harness: harness, receiver: receiver, clock: clock, path: "/hooks/countersign", url: address))
                }
            }
        }
    }

    /// Checks a delivery three ways: the SDK's verifier, Ed25519 by hand over the documented
    /// message, and the CLI.
    static func expectVerified(_ delivery: WebhookReceiver.Received, setup: Setup) async throws {
        let signature = try #require(delivery.header("X-Signature"))
        let time = try #require(delivery.header("X-Request-Time"))
        let verifier = SignatureVerifier(rootKeys: [setup.root])
        let url = setup.url
        let parts = try #require(WebhookSignature.requestParts(appId: setup.harness.app.id, url: url))
        #expect(
            verifier.verify(
                request: parts,
                response: ReceivedResponse(statusCode: 200, signature: signature, requestTime: time, etag: nil, body: delivery.body)) == .verified)
        // Replayed to another endpoint of the app, another app's receiver on the same URL, or
        // another host: the signature names the receiver, and fails.
        for (app, elsewhere) in [
            (setup.harness.app.id, url.replacingOccurrences(of: "/hooks/countersign", with: "/hooks/countersign2")), ("other", url),
            (setup.harness.app.id, url.replacingOccurrences(of: "127.0.0.1", with: "localhost")),
        ] {
            #expect(
                verifier.verify(
                    request: try #require(WebhookSignature.requestParts(appId: app, url: elsewhere)),
                    response: ReceivedResponse(statusCode: 200, signature: signature, requestTime: time, etag: nil, body: delivery.body))
                    == .failed(.payloadMismatch))
        }
        // By hand: the blob is the intermediate's key (bytes 0..<32), its expiry (32..<36), the
        // root's signature over expiry ‖ key (36..<100), a 16-byte salt and the signature.
        let blob = [UInt8](try #require(Data(base64Encoded: signature)))
        #expect(blob.count == 180)
        #expect(setup.root.isValidSignature(blob[36..<100], for: blob[32..<36] + blob[0..<32]))
        let intermediate = try Curve25519.Signing.PublicKey(rawRepresentation: blob[0..<32])
        let salt = Data(blob[100..<116])
        let message = salt + Data(setup.path.utf8) + Data(try #require(parts.headersHash).utf8) + Data(time.utf8) + delivery.body
        #expect(intermediate.isValidSignature(Data(blob[116..<180]), for: message))
        let capture = try makeTemporaryDirectory("webhook").appendingPathComponent("delivery.http")
        try delivery.raw.write(to: capture)
        let cli = try await CLIRunner.runInBackground([
            "verify-webhook", "--root-key", setup.root.rawRepresentation.base64EncodedString(),
            "--request", capture.path, "--app-id", setup.harness.app.id, "--url", url,
        ])
        #expect(cli.status == 0 && cli.stdout.contains("verified"), "\(cli.lines)")
    }

    @Test("a purchase, a renewal, a refund, a transfer and an expiry each deliver their event once, signed", arguments: TestDatabaseKind.available)
    func lifecycle(_ kind: TestDatabaseKind) async throws {
        // A generous attempt timeout: on a machine busy with the whole suite a 2 s attempt can
        // time out after the receiver got it, and the retry would be a (legitimate) duplicate.
        try await Self.withSetup(kind, attemptTimeout: 20) { setup in
            let harness = setup.harness
            // alice subscribes; the test store renews it and then refunds the renewal.
            let purchase = try harness.mint("pro_monthly")
            #expect(try await harness.post(user: "alice", jws: purchase.jws).status == 200)
            let chain = try #require(purchase.payload.originalTransactionId)
            let renewal = try await setup.testStore("renew", ["original_transaction_id": chain])
            let renewalId = try #require(renewal["transaction_id"] as? String)
            _ = try await setup.testStore("refund", ["transaction_id": renewalId])
            // bob restores the purchase on his account: it moves to him.
            #expect(try await harness.post(user: "bob", jws: purchase.jws).status == 200)
            // carol's lifetime purchase and monthly subscription; the clock passes its expiry.
            #expect(try await harness.post(user: "carol", jws: try harness.mint("lifetime", type: .nonConsumable).jws).status == 200)
            let carols = try harness.mint("pro_monthly")
            #expect(try await harness.post(user: "carol", jws: carols.jws).status == 200)
            // Every event so far delivered before the clock jumps: a lease taken before the jump
            // would look run out after it, and an attempt still in flight would be sent again.
            _ = try await waitUntil {
                let delivered = try await setup.admin(.get, "/v1/admin/webhooks/deliveries?status=delivered")
                return (delivered.json["deliveries"] as? [[String: Any]])?.count == 6
            }
            setup.clock.now = setup.clock.now.addingTimeInterval(40 * 86_400)
            try harness.server.keys.rotateIfNeeded()  // as the rotation service would, 40 days on

            let expected = ["INITIAL_PURCHASE", "RENEWAL", "CANCELLATION", "TRANSFER", "NON_RENEWING_PURCHASE", "INITIAL_PURCHASE", "EXPIRATION"]
            let received = try await setup.received { $0.count >= expected.count }
            try await Task.sleep(for: .milliseconds(200))  // nothing more may come
            let all = await setup.receiver.received
            #expect(all.count == expected.count)
            #expect(Set(all.compactMap { $0.event["id"] as? String }).count == all.count, "an event was delivered twice")
            #expect(received.map { $0.event["type"] as? String ?? "" }.sorted() == expected.sorted())

            func event(_ type: String, _ user: String) -> [String: Any]? {
                all.map(\.event).first { $0["type"] as? String == type && $0["app_user_id"] as? String == user }
            }
            let initial = try #require(event("INITIAL_PURCHASE", "alice"))
            #expect(initial["product_id"] as? String == "pro_monthly")
            #expect(initial["entitlement_ids"] as? [String] == ["pro"])
            #expect(initial["transaction_id"] as? String == chain && initial["original_transaction_id"] as? String == chain)
            #expect(initial["store"] as? String == "TEST_STORE" && initial["environment"] as? String == "SANDBOX")
            #expect(initial["aliases"] as? [String] == ["alice"] && initial["original_app_user_id"] as? String == "alice")
            #expect(initial["app_id"] as? String == harness.app.id && initial["period_type"] as? String != nil)
            #expect(event("RENEWAL", "alice")?["transaction_id"] as? String == renewalId)
            let cancellation = try #require(event("CANCELLATION", "alice"))
            #expect(cancellation["cancel_reason"] as? String == "CUSTOMER_SUPPORT" && cancellation["transaction_id"] as? String == renewalId)
            // RevenueCat's TRANSFER names its customers in its two lists only: no app_user_id.
            let transfer = try #require(all.map(\.event).first { $0["type"] as? String == "TRANSFER" })
            #expect(transfer["transferred_from"] as? [String] == ["alice"] && transfer["transferred_to"] as? [String] == ["bob"])
            #expect(transfer["app_user_id"] == nil && transfer["transaction_id"] == nil && transfer["aliases"] == nil)
            #expect(event("NON_RENEWING_PURCHASE", "carol")?["product_id"] as? String == "lifetime")
            let expiration = try #require(event("EXPIRATION", "carol"))
            #expect(expiration["original_transaction_id"] as? String == carols.payload.originalTransactionId)
            #expect(expiration["expiration_reason"] as? String == "UNKNOWN")

            // alice's events arrived in the order they happened.
            let alices = all.map(\.event).filter { $0["app_user_id"] as? String == "alice" }.compactMap { $0["type"] as? String }
            #expect(alices == ["INITIAL_PURCHASE", "RENEWAL", "CANCELLATION"])
            for delivery in all {
                #expect(delivery.target == "/hooks/countersign?source=test")
                #expect(delivery.header("Authorization") == "Bearer hook-secret")
                #expect(delivery.header("Content-Type") == "application/json")
                try await Self.expectVerified(delivery, setup: setup)
            }
            let listed = try await setup.admin(.get, "/v1/admin/webhooks/deliveries?status=delivered")
            #expect((listed.json["deliveries"] as? [[String: Any]])?.count == expected.count)
        }
    }

    @Test("an endpoint answering 500 gets the same event again and it is delivered on the retry", arguments: TestDatabaseKind.available)
    func retried(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind, answers: [500]) { setup in
            #expect(try await setup.harness.post(user: "dana", jws: try setup.harness.mint("pro_monthly").jws).status == 200)
            let received = try await setup.received { $0.count >= 2 }
            #expect(received.count == 2)
            #expect(received[0].event["id"] as? String == received[1].event["id"] as? String)
            #expect(received[0].event["type"] as? String == "INITIAL_PURCHASE")
            // The retry is signed anew (its own request time and salt) and verifies.
            try await Self.expectVerified(received[1], setup: setup)
            let listed = try await setup.admin(.get, "/v1/admin/webhooks/deliveries")
            let delivery = try #require((listed.json["deliveries"] as? [[String: Any]])?.first)
            #expect(delivery["status"] as? String == "delivered" && delivery["attempts"] as? Int == 2 && delivery["last_status"] as? Int == 200)
        }
    }

    @Test("an endpoint down for the whole schedule: the delivery fails, and the admin API queues it again", arguments: TestDatabaseKind.available)
    func failedAndRedelivered(_ kind: TestDatabaseKind) async throws {
        // Port 9 on loopback (discard): nothing listens there on a test machine.
        try await Self.withSetup(kind, attemptTimeout: 0.3, url: { _ in "http://127.0.0.1:9/down" }) { setup in
            #expect(try await setup.harness.post(user: "erin", jws: try setup.harness.mint("pro_monthly").jws).status == 200)
            var delivery: [String: Any] = [:]
            _ = try await waitUntil {
                let listed = try await setup.admin(.get, "/v1/admin/webhooks/deliveries?status=failed")
                delivery = (listed.json["deliveries"] as? [[String: Any]])?.first ?? [:]
                return !delivery.isEmpty
            }
            #expect(delivery["attempts"] as? Int == 3)  // the first attempt and the schedule's two retries
            #expect((delivery["last_error"] as? String)?.isEmpty == false)
            let id = try #require(delivery["event_id"] as? String)
            let queued = try await setup.admin(.post, "/v1/admin/webhooks/deliveries/\(id)/redeliver")
            #expect(queued.status == 202)
            let unknown = try await setup.admin(.post, "/v1/admin/webhooks/deliveries/not-an-event/redeliver")
            #expect(unknown.status == 404)
            // Queued again: attempted anew (and, the endpoint still down, failed again).
            let attemptedAgain = try await waitUntil {
                let listed = try await setup.admin(.get, "/v1/admin/webhooks/deliveries?status=failed")
                return ((listed.json["deliveries"] as? [[String: Any]])?.first?["attempts"] as? Int) == 3
            }
            #expect(attemptedAgain, "the redelivered event was not attempted again")
            let all = try await setup.admin(.get, "/v1/admin/webhooks/deliveries")
            #expect((all.json["deliveries"] as? [[String: Any]])?.count == 1)
        }
    }

    @Test("a TEST event from the admin API; bad admin requests are refused", arguments: TestDatabaseKind.available)
    func testEvent(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let queued = try await setup.admin(.post, "/v1/admin/webhooks/test")
            #expect(queued.status == 202)
            let received = try await setup.received { !$0.isEmpty }
            #expect(received.first?.event["type"] as? String == "TEST")
            #expect(received.first?.event["id"] as? String == queued.json["event_id"] as? String)
            try await Self.expectVerified(try #require(received.first), setup: setup)
            #expect(try await setup.admin(.get, "/v1/admin/webhooks/deliveries?status=lost").status == 400)
            #expect(try await setup.admin(.get, "/v1/admin/webhooks/deliveries?limit=0").status == 400)
            #expect(try await setup.harness.send(.post, "/v1/admin/webhooks/test", key: setup.harness.key).status == 403)  // a public key
        }
    }

    @Test("a slow endpoint holds up only its own deliveries", arguments: TestDatabaseKind.available)
    func slowEndpoint(_ kind: TestDatabaseKind) async throws {
        let slow = WebhookReceiver(delay: .seconds(3))
        try await slow.makeApplication().test(.live) { slowClient in
            let slowURL = "http://127.0.0.1:\(try #require(slowClient.port))/slow"
            try await Self.withSetup(kind, attemptTimeout: 20, otherWebhooks: [AppConfiguration.Webhook(url: slowURL)]) { setup in
                #expect(try await setup.harness.post(user: "fay", jws: try setup.harness.mint("pro_monthly").jws).status == 200)
                let fast = try await setup.received { !$0.isEmpty }
                #expect(fast.first?.event["type"] as? String == "INITIAL_PURCHASE")
                // The same event's attempt at the slow endpoint arrives (each endpoint has its own
                // loop, so it may come before or after the fast one) and waits for its answer.
                var arrivedAtSlow = 0
                for _ in 0..<100 where arrivedAtSlow == 0 {
                    arrivedAtSlow = await slow.received.count
                    if arrivedAtSlow == 0 { try await Task.sleep(for: .milliseconds(20)) }
                }
                #expect(arrivedAtSlow == 1)
                let listed = try await setup.admin(.get, "/v1/admin/webhooks/deliveries")
                let bySlow = (listed.json["deliveries"] as? [[String: Any]])?.first { $0["endpoint"] as? String == slowURL }
                #expect(bySlow?["status"] as? String == "pending" && bySlow?["attempts"] as? Int == 0)
                // And the API answers meanwhile.
                #expect(try await setup.harness.customerInfo("fay")["subscriber"] != nil)
            }
        }
    }

    @Test(
        "with no valid signing key nothing is sent and no attempt is spent; once a key is there the event goes out",
        arguments: TestDatabaseKind.available)
    func noKeyYet(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            setup.clock.now = setup.clock.now.addingTimeInterval(40 * 86_400)  // the intermediate has expired
            #expect(try await setup.admin(.post, "/v1/admin/webhooks/test").status == 202)
            try await Task.sleep(for: .milliseconds(300))  // passes that cannot sign
            #expect(await setup.receiver.received.isEmpty)
            let pending = try await setup.admin(.get, "/v1/admin/webhooks/deliveries?status=pending")
            #expect((pending.json["deliveries"] as? [[String: Any]])?.first?["attempts"] as? Int == 0)
            try setup.harness.server.keys.rotateIfNeeded()
            let received = try await setup.received { !$0.isEmpty }
            #expect(received.first?.event["type"] as? String == "TEST")
            try await Self.expectVerified(try #require(received.first), setup: setup)
        }
    }

    @Test("the event body written directly parses to the fields RevenueCat documents for each type, odd strings included")
    func leanBody() throws {
        var app = AppConfiguration.makeDemo()
        app.id = "app \"quoted\" \\ / \u{1}é"
        app.commissionPercentage = 0.15
        app.usdExchangeRates = .init(asOf: "2026-11-01", usdPerUnit: ["EUR": 1.08])
        var transaction = EventTransaction(
            transactionId: "2000000123", originalTransactionId: "2000000100", productId: "pro_monthly",
            environment: "Production", periodType: "trial", purchasedAtMs: 1_799_000_000_000, expiresAtMs: nil)
        transaction.priceMilli = 7_990
        transaction.currency = "EUR"
        transaction.storefront = "DEU"
        transaction.offerCode = "WINTER"
        transaction.renewalNumber = 3
        for type in WebhookEventType.allCases where type != .test {
            for user in ["alice", "a\nb\"c/d\u{7f}ü", nil] as [String?] {
                var event = WebhookEvent(
                    type, subject: "s", app: app, user: user, transaction: transaction, now: Date(timeIntervalSince1970: 1_799_000_000.5),
                    money: .refund)
                event.cancelReason = "UNSUBSCRIBE"
                event.expirationReason = nil
                event.newProductId = "pro_yearly"
                event.transferredFrom = user.map { [$0, "x"] }
                event.transferredTo = []
                event.isTrialConversion = true
                event.gracePeriodExpirationAtMs = 1_799_100_000_000
                let object = try #require(try JSONSerialization.jsonObject(with: Data(event.body.utf8)) as? [String: Any])
                #expect(object["api_version"] as? String == "1.0")
                let fields = try #require(object["event"] as? [String: Any])
                var expected: [String: Any] = [
                    "id": event.id, "type": type.rawValue, "app_id": app.id, "event_timestamp_ms": 1_799_000_000_500,
                    "environment": "PRODUCTION", "store": "APP_STORE", "experiments": [Any](),
                ]
                if type == .transfer {
                    expected["transferred_from"] = user.map { [$0, "x"] } ?? []
                    expected["transferred_to"] = [String]()
                } else {
                    expected.merge(
                        [
                            "app_user_id": user ?? NSNull(), "product_id": "pro_monthly", "entitlement_ids": ["pro"], "entitlement_id": NSNull(),
                            "period_type": "TRIAL", "purchased_at_ms": 1_799_000_000_000, "expiration_at_ms": NSNull(),
                            "transaction_id": "2000000123", "original_transaction_id": "2000000100", "is_family_share": false,
                            "country_code": "DE", "currency": "EUR", "price_in_purchased_currency": -7.99, "price": -8.629,
                            "takehome_percentage": 0.85, "commission_percentage": 0.15, "tax_percentage": NSNull(), "offer_code": "WINTER",
                            "presented_offering_id": NSNull(), "renewal_number": 3,
                        ], uniquingKeysWith: { $1 })
                    switch type {
                    case .cancellation: expected["cancel_reason"] = "UNSUBSCRIBE"
                    case .expiration: expected["expiration_reason"] = NSNull()
                    case .productChange: expected["new_product_id"] = "pro_yearly"
                    case .renewal: expected["is_trial_conversion"] = true
                    case .billingIssue: expected["grace_period_expiration_at_ms"] = 1_799_100_000_000
                    case .refundReversed: expected["metadata"] = NSNull()
                    default: break
                    }
                }
                #expect(Self.canonical(fields) == Self.canonical(expected), "\(type) \(user ?? "nil")")
            }
        }
        let test = try #require(try JSONSerialization.jsonObject(with: Data(WebhookEvent.test(app: app, now: Date()).body.utf8)) as? [String: Any])
        #expect((test["event"] as? [String: Any])?["type"] as? String == "TEST")
        #expect(WebhookEvent.decimal(milli: 4_990) == "4.99" && WebhookEvent.decimal(milli: -25) == "-0.025" && WebhookEvent.decimal(milli: 0) == "0")
    }

    /// A JSON object's text with sorted keys, so two objects compare by their JSON values.
    static func canonical(_ object: [String: Any]) -> String {
        String(decoding: (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data(), as: UTF8.self)
    }

    @Test("a delivery with any signed part changed fails: path, request time, body, signature")
    func tampering() throws {
        let root = RootSigningKey()
        let key = try root.issueIntermediate(validForDays: 30)
        let signer = ResponseSigner(key: key)
        let body = Data(#"{"api_version":"1.0","event":{"id":"E","type":"TEST"}}"#.utf8)
        let time = String(Date().epochMilliseconds)
        let signature = try signer.signature(
            request: SignedRequestParts(path: "/hooks"), response: SignedResponseParts(requestTime: time, body: body))
        let verifier = SignatureVerifier(rootKeys: [root.publicKey])
        func check(
            path: String = "/hooks", time checked: String = time, body checkedBody: Data = body, signature checkedSignature: String = signature
        ) -> VerificationOutcome {
            verifier.verify(
                request: SignedRequestParts(path: path),
                response: ReceivedResponse(statusCode: 200, signature: checkedSignature, requestTime: checked, etag: nil, body: checkedBody))
        }
        #expect(check() == .verified)
        #expect(check(path: "/hooks2") == .failed(.payloadMismatch))
        #expect(check(time: String(Int64(time)! + 1)) == .failed(.payloadMismatch))
        #expect(check(body: Data(#"{"api_version":"1.0","event":{"id":"F","type":"TEST"}}"#.utf8)) == .failed(.payloadMismatch))
        var blob = Data(base64Encoded: signature)!
        blob[blob.count - 1] ^= 1
        #expect(check(signature: blob.base64EncodedString()) == .failed(.payloadMismatch))
        #expect(check(signature: "") == .failed(.malformedSignature))
    }

    static func eventTable() -> String {
        (["| type | sent when |", "|---|---|"] + WebhookEventType.allCases.map { "| `\($0.rawValue)` | \($0.meaning) |" })
            .joined(separator: "\n")
    }

    @Test("docs/webhooks.md lists the event types the code has")
    func document() throws {
        let section = GeneratedDocSection(name: "webhook-events", generatedBy: "WebhookTests", expected: Self.eventTable())
        let file = LifecycleTests.projectRoot.appendingPathComponent("docs/webhooks.md")
        let current = try #require(try section.current(in: file), "docs/webhooks.md lacks the event markers")
        #expect(current == Self.eventTable(), "docs/webhooks.md's event table is out of date; regenerate with COUNTERSIGN_WRITE_DOCS=1")
    }

    @Test("webhooks in countersign.json are checked at start")
    func configuration() throws {
        func decode(_ webhook: String) throws -> DeploymentConfiguration {
            var app = AppConfiguration.makeDemo()
            app.webhooks = []
            let encoded = String(decoding: try JSONEncoder().encode(DeploymentConfiguration(apps: [app])), as: UTF8.self)
                .replacingOccurrences(of: #""webhooks":[]"#, with: #""webhooks":[\#(webhook)]"#)
            return try DeploymentConfiguration.decode(Data(encoded.utf8), source: "test")
        }
        #expect(
            try decode(#"{"url":"https://backend.example/hooks"}"#).apps[0].webhooks?.first?.retrySchedule
                == AppConfiguration.Webhook.defaultRetrySchedule)
        for bad in [
            #"{"url":"ftp://backend.example/hooks"}"#, #"{"url":"/hooks"}"#, #"{"url":"https://user:pw@backend.example/"}"#,
            #"{"url":"https://backend.example/#x"}"#, #"{"url":"https://backend.example/","authorization":"a\nb"}"#,
            #"{"url":"https://backend.example/","retryScheduleSeconds":[-1]}"#,
            #"{"url":"https://backend.example/"},{"url":"https://backend.example/"}"#,
            #"{"url":"https://backend.example/","eventTypes":["PURCHASE"]}"#, #"{"url":"https://backend.example/","eventTypes":[]}"#,
            #"{"url":"https://backend.example/","environments":["STAGING"]}"#,
        ] {
            #expect(throws: ConfigurationError.self, "\(bad)") { _ = try decode(bad) }
        }
        let parts = WebhookSignature.requestParts(appId: "demo", url: "https://Backend.Example:443/a%20b/c?x=1")
        #expect(parts?.path == "/a%20b/c")
        #expect(parts?.headersHash == FieldsHash.headerValue([("app_id", "demo"), ("endpoint", "backend.example/a%20b/c")]))
        #expect(WebhookSignature.requestParts(appId: "demo", url: "https://backend.example")?.path == "/")
        #expect(
            WebhookSignature.requestParts(appId: "demo", url: "http://backend.example:8080/h")?.headersHash
                == FieldsHash.headerValue([("app_id", "demo"), ("endpoint", "backend.example:8080/h")]))
    }

    @Test("an endpoint's eventTypes and environments choose the events that get a delivery to it")
    func endpointFilters() throws {
        var app = AppConfiguration.makeDemo()
        app.webhooks = [
            .init(url: "https://all.example/h"),
            .init(url: "https://renewals.example/h", eventTypes: ["RENEWAL", "TEST"]),
            .init(url: "https://production.example/h", environments: ["PRODUCTION"]),
        ]
        func endpoints(_ type: WebhookEventType, environment: String) -> [String] {
            let transaction = EventTransaction(
                transactionId: "2", originalTransactionId: "1", productId: "pro_monthly", environment: environment, periodType: "normal",
                purchasedAtMs: 1, expiresAtMs: 2)
            let event = WebhookEvent(type, subject: "s", app: app, user: "u", transaction: transaction, now: Date())
            return CustomerDatabase.eventStatements(event, app: app, now: Date()).dropFirst().compactMap { statement in
                if case .text(let url?) = statement.values[1] { url } else { nil }
            }
        }
        #expect(endpoints(.renewal, environment: "Production") == app.webhooks!.map(\.url))
        #expect(endpoints(.renewal, environment: "TestStore") == ["https://all.example/h", "https://renewals.example/h"])
        #expect(endpoints(.initialPurchase, environment: "Production") == ["https://all.example/h", "https://production.example/h"])
        #expect(endpoints(.initialPurchase, environment: "Sandbox") == ["https://all.example/h"])
        // A TEST event has no environment: every endpoint that takes its type gets it.
        let test = WebhookEvent.test(app: app, now: Date())
        #expect(CustomerDatabase.eventStatements(test, app: app, now: Date()).count == 4)
    }
}
