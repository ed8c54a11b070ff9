import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import HummingbirdTesting
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Reconciliation and legacy receipts against the App Store Server API stand-in, over real HTTP
/// on both sides: the server asks the stand-in, verifies what it signs and records it.
@Suite("App Store Server API: reconciliation and legacy receipts", .serialized)
struct StoreServerAPITests {
    struct Setup: Sendable {
        let harness: ReceiptTests.Harness
        let standIn: AppStoreServerStandIn
        var secretKey: String { harness.app.secretApiKeys[0] }

        func events(_ user: String) async throws -> [String] {
            try await harness.server.store.events(app: harness.app.id, user: user).map(\.type).reversed()
        }
    }

    /// A legacy PKCS#7 app receipt naming `transactionId`, signed under the test store's root
    /// (which the demo app trusts), base64 as apps send it.
    static func legacyReceipt(_ setup: Setup, _ transactionId: String) throws -> String {
        try setup.harness.ca.mintAppReceipt(bundleId: setup.harness.app.bundleId, transactionIds: [transactionId], creationDate: Date())
    }

    static func withSetup(
        _ kind: TestDatabaseKind, legacyReceipts: Bool = true, rateLimits: RateLimitSettings? = nil,
        refundRequests: AppConfiguration.RefundRequests? = nil, consumptionAnswerInterval: Duration = .seconds(30),
        _ body: @Sendable @escaping (Setup) async throws -> Void
    ) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let ca = try TestStoreCA.loadOrCreate(for: DataDirectory(directory))
            let apiKey = P256.Signing.PrivateKey()
            try Data(apiKey.pemRepresentation.utf8).write(to: directory.appendingPathComponent("iap.p8"))
            var app = AppConfiguration.makeDemo()
            app.inAppPurchaseKey = .init(keyId: "TESTKEY123", issuerId: "57246542-96fe-1a63-e053-0824d011072a", privateKeyFile: "iap.p8")
            app.legacyReceipts = legacyReceipts
            app.refundRequests = refundRequests
            let configuredApp = app
            let standIn = try await AppStoreServerStandIn(ca: ca, bundleId: configuredApp.bundleId, apiKeyPEM: apiKey.pemRepresentation)
            try await standIn.makeApplication().test(.live) { standInClient in
                try DeploymentConfiguration(apps: [configuredApp], appStoreServerAPIURL: "http://127.0.0.1:\(try #require(standInClient.port))")
                    .save(toDataDirectory: directory)
                var configuration = ServerConfiguration(dataDirectory: directory)
                configuration.database = location
                configuration.rateLimits = rateLimits
                configuration.consumptionAnswerInterval = consumptionAnswerInterval
                try await LiveServer.run(configuration) { server, client in
                    let harness = ReceiptTests.Harness(server: server, client: client, app: configuredApp, ca: ca)
                    try await body(Setup(harness: harness, standIn: standIn))
                }
            }
        }
    }

    static func post(_ setup: Setup, user: String, receipt: String) async throws -> Reply {
        try await setup.harness.send(
            .post, "/v1/receipts", key: setup.harness.key,
            body: try JSONSerialization.data(withJSONObject: ["app_user_id": user, "fetch_token": receipt]))
    }

    @Test(
        "a legacy receipt is resolved through the API; a renewal and a refund no notification brought are found by a refresh",
        arguments: TestDatabaseKind.available)
    func legacyReceiptAndRefresh(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let bundle = setup.harness.app.bundleId
            var first = TestStoreCA.Purchase(
                productId: "pro_monthly", type: .autoRenewable, bundleId: bundle, purchaseDate: Date().addingTimeInterval(-20 * 86_400))
            first.expiresDate = Date().addingTimeInterval(10 * 86_400)
            let original = try await setup.standIn.add(first)
            let chain = try #require(original.transactionId)

            let posted = try await Self.post(setup, user: "alice", receipt: try Self.legacyReceipt(setup, chain))
            #expect(posted.status == 200)
            #expect(posted.json["purchase_status"] as? String == "new")
            #expect(ReceiptTests.isActive(try await setup.harness.customerInfo("alice"), "pro"))
            #expect(try await setup.events("alice") == ["INITIAL_PURCHASE"])

            // The subscription renews at Apple; no notification arrives. A refresh finds it.
            var renewal = TestStoreCA.Purchase(
                productId: "pro_monthly", type: .autoRenewable, bundleId: bundle, purchaseDate: Date().addingTimeInterval(-3_600))
            renewal.originalTransactionId = chain
            renewal.expiresDate = Date().addingTimeInterval(40 * 86_400)
            let renewed = try await setup.standIn.add(renewal)
            let refreshed = try await setup.harness.send(.post, "/v1/admin/customers/alice/refresh", key: setup.secretKey)
            #expect(refreshed.status == 200)
            #expect(try await setup.events("alice") == ["INITIAL_PURCHASE", "RENEWAL"])
            let expires = ReceiptTests.entitlement(try await setup.harness.customerInfo("alice"), "pro")?["expires_date"] as? String
            #expect(expires.flatMap(WireDate.parse).map { $0 > Date().addingTimeInterval(35 * 86_400) } == true)

            // Apple refunds the renewal; a refresh finds that too, and the entitlement ends.
            try await setup.standIn.refund(try #require(renewed.transactionId))
            #expect(try await setup.harness.send(.post, "/v1/admin/customers/alice/refresh", key: setup.secretKey).status == 200)
            #expect(try await setup.events("alice") == ["INITIAL_PURCHASE", "RENEWAL", "CANCELLATION"])
            // Asking again changes nothing and makes no event.
            #expect(try await setup.harness.send(.post, "/v1/admin/customers/alice/refresh", key: setup.secretKey).status == 200)
            #expect(try await setup.events("alice").count == 3)
            #expect(try await setup.harness.send(.post, "/v1/admin/customers/nobody/refresh", key: setup.secretKey).status == 404)

            // A receipt whose transaction the App Store does not know, and one that is no receipt.
            let unknown = try await Self.post(setup, user: "bob", receipt: try Self.legacyReceipt(setup, "999999999"))
            #expect(unknown.status == 422 && unknown.code == APIErrorCode.invalidStoreSignature.rawValue)
            let garbage = try await Self.post(setup, user: "bob", receipt: Data("just text".utf8).base64EncodedString())
            #expect(garbage.status == 400 && garbage.code == APIErrorCode.invalidField.rawValue)
            #expect(try await setup.harness.server.store.existingCustomerInfo(app: setup.harness.app, user: "bob", now: Date()) == nil)
        }
    }

    @Test("the scheduled pass asks about subscriptions past their expiry, once per recheck period", arguments: TestDatabaseKind.available)
    func scheduledReconciliation(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let bundle = setup.harness.app.bundleId
            var lapsed = TestStoreCA.Purchase(
                productId: "pro_monthly", type: .autoRenewable, bundleId: bundle, purchaseDate: Date().addingTimeInterval(-31 * 86_400))
            lapsed.expiresDate = Date().addingTimeInterval(-86_400)
            let original = try await setup.standIn.add(lapsed)
            let chain = try #require(original.transactionId)
            #expect(try await Self.post(setup, user: "carol", receipt: try Self.legacyReceipt(setup, chain)).status == 200)
            #expect(!ReceiptTests.isActive(try await setup.harness.customerInfo("carol"), "pro"))

            var renewal = TestStoreCA.Purchase(
                productId: "pro_monthly", type: .autoRenewable, bundleId: bundle, purchaseDate: Date().addingTimeInterval(-86_400))
            renewal.originalTransactionId = chain
            renewal.expiresDate = Date().addingTimeInterval(29 * 86_400)
            try await setup.standIn.add(renewal)
            let server = setup.harness.server
            let service = ReconciliationService(
                store: server.store, storeAPI: server.storeAPI, stripe: server.stripe, deployment: server.deployment,
                interval: .seconds(3_600), now: { Date() }, logger: server.logger)
            #expect(await service.reconcile(setup.harness.app) == 1)
            #expect(ReceiptTests.isActive(try await setup.harness.customerInfo("carol"), "pro"))
            #expect(try await setup.events("carol") == ["INITIAL_PURCHASE", "RENEWAL"])
            // Asked once: not again until the recheck period has passed.
            let asked = await setup.standIn.requestCount
            #expect(await service.reconcile(setup.harness.app) == 0)
            #expect(await setup.standIn.requestCount == asked)
        }
    }

    @Test("without an In-App Purchase key a legacy receipt and a refresh are a clear 422", arguments: TestDatabaseKind.available)
    func notConfigured(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind, configure: { app, _ in app.legacyReceipts = true }) { harness in
            let receipt = try harness.ca.mintAppReceipt(bundleId: harness.app.bundleId, transactionIds: ["2000000909538865"], creationDate: Date())
            let reply = try await harness.send(
                .post, "/v1/receipts", key: harness.key,
                body: try JSONSerialization.data(withJSONObject: ["app_user_id": "dana", "fetch_token": receipt]))
            #expect(reply.status == 422 && reply.code == APIErrorCode.storeAPINotConfigured.rawValue)
            #expect((reply.json["message"] as? String)?.contains("legacy receipt") == true)
            #expect(try await harness.post(user: "dana", jws: try harness.mint("pro_monthly").jws).status == 200)
            let refresh = try await harness.send(.post, "/v1/admin/customers/dana/refresh", key: harness.secretKey)
            #expect(refresh.status == 422 && refresh.code == APIErrorCode.storeAPINotConfigured.rawValue)
        }
    }

    // MARK: Security review, finding 1: a forged legacy receipt takes another customer's purchases

    /// Alice owns a one-time purchase (its id is in her CustomerInfo); Mallory has the app's
    /// public key and writes a receipt naming it.
    static func alicesPurchase(_ setup: Setup) async throws -> String {
        let bought = TestStoreCA.Purchase(
            productId: "lifetime", type: .nonConsumable, bundleId: setup.harness.app.bundleId,
            purchaseDate: Date().addingTimeInterval(-86_400))
        let chain = try #require(try await setup.standIn.add(bought).transactionId)
        #expect(try await Self.post(setup, user: "alice", receipt: try Self.legacyReceipt(setup, chain)).status == 200)
        #expect(ReceiptTests.isActive(try await setup.harness.customerInfo("alice"), "pro"))
        return chain
    }

    @Test("finding 1: an unsigned receipt naming another customer's transaction is refused and moves nothing", arguments: TestDatabaseKind.available)
    func forgedReceiptRefused(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let chain = try await Self.alicesPurchase(setup)
            let asked = await setup.standIn.requestCount
            let forged = LegacyReceiptForgery.unsigned(transactionId: chain, bundleId: setup.harness.app.bundleId).base64EncodedString()
            let reply = try await Self.post(setup, user: "mallory", receipt: forged)
            #expect(reply.status == 422 && reply.code == APIErrorCode.invalidStoreSignature.rawValue)
            // A receipt signed by another CA (anyone can make one) fares no better.
            let otherCA = try TestStoreCA.create(name: "mallory")
            let foreign = try otherCA.mintAppReceipt(bundleId: setup.harness.app.bundleId, transactionIds: [chain], creationDate: Date())
            #expect(try await Self.post(setup, user: "mallory", receipt: foreign).code == APIErrorCode.invalidStoreSignature.rawValue)
            // A genuine receipt of another app.
            let otherApp = try setup.harness.ca.mintAppReceipt(bundleId: "com.example.other", transactionIds: [chain], creationDate: Date())
            #expect(try await Self.post(setup, user: "mallory", receipt: otherApp).code == APIErrorCode.wrongApp.rawValue)
            // None of them reached the App Store Server API, and Alice keeps her purchase.
            #expect(await setup.standIn.requestCount == asked)
            #expect(ReceiptTests.isActive(try await setup.harness.customerInfo("alice"), "pro"))
            #expect(!ReceiptTests.isActive(try await setup.harness.customerInfo("mallory"), "pro"))
        }
    }

    @Test(
        "finding 1: a genuine receipt never moves a chain another user owns, under the default transfer behaviour",
        arguments: TestDatabaseKind.available)
    func receiptNeverTransfers(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let chain = try await Self.alicesPurchase(setup)
            #expect(setup.harness.app.transferBehavior == .transfer)
            let reply = try await Self.post(setup, user: "mallory", receipt: try Self.legacyReceipt(setup, chain))
            #expect(reply.status == 409 && reply.code == APIErrorCode.purchaseOwnedByAnotherUser.rawValue)
            #expect(ReceiptTests.isActive(try await setup.harness.customerInfo("alice"), "pro"))
            #expect(!ReceiptTests.isActive(try await setup.harness.customerInfo("mallory"), "pro"))
            #expect(try await setup.events("alice") == ["NON_RENEWING_PURCHASE"])
            // Alice posting her own receipt again is fine.
            #expect(try await Self.post(setup, user: "alice", receipt: try Self.legacyReceipt(setup, chain)).status == 200)
        }
    }

    @Test("finding 1: legacy receipts are refused unless the app enables them", arguments: TestDatabaseKind.available)
    func legacyReceiptsOffByDefault(_ kind: TestDatabaseKind) async throws {
        #expect(AppConfiguration.makeDemo().legacyReceipts == nil)
        try await Self.withSetup(kind, legacyReceipts: false) { setup in
            let bought = TestStoreCA.Purchase(productId: "lifetime", type: .nonConsumable, bundleId: setup.harness.app.bundleId, purchaseDate: Date())
            let chain = try #require(try await setup.standIn.add(bought).transactionId)
            let reply = try await Self.post(setup, user: "alice", receipt: try Self.legacyReceipt(setup, chain))
            #expect(reply.status == 422 && reply.code == APIErrorCode.legacyReceiptsDisabled.rawValue)
            #expect((reply.json["message"] as? String)?.contains("legacyReceipts") == true)
            #expect(await setup.standIn.requestCount == 0)
        }
    }

    @Test("finding 1: receipts that reach the App Store Server API are rate-limited per app, with Retry-After", arguments: TestDatabaseKind.available)
    func lookupsRateLimited(_ kind: TestDatabaseKind) async throws {
        var limits = RateLimitSettings.standard
        limits.storeLookupsPerApp = .init(perSecond: 0.01, burst: 2)
        try await Self.withSetup(kind, rateLimits: limits) { setup in
            let bought = TestStoreCA.Purchase(productId: "lifetime", type: .nonConsumable, bundleId: setup.harness.app.bundleId, purchaseDate: Date())
            let chain = try #require(try await setup.standIn.add(bought).transactionId)
            let receipt = try Self.legacyReceipt(setup, chain)
            #expect(try await Self.post(setup, user: "alice", receipt: receipt).status == 200)
            #expect(try await Self.post(setup, user: "alice", receipt: receipt).status == 200)
            let asked = await setup.standIn.requestCount
            let limited = try await Self.post(setup, user: "alice", receipt: receipt)
            #expect(limited.status == 429 && limited.code == APIErrorCode.rateLimited.rawValue)
            #expect(limited.headers[.retryAfter].flatMap(Int.init).map { $0 >= 1 && $0 <= 100 } == true)
            #expect(await setup.standIn.requestCount == asked)
            // A signed transaction posted directly does not spend the lookup budget.
            #expect(try await setup.harness.post(user: "alice", jws: try setup.harness.mint("pro_monthly").jws).status == 200)
        }
    }

    // MARK: Refund requests

    @Test(
        "CONSUMPTION_REQUEST is answered through Send Consumption Information: once per notification, what the server knows, retried after a 429",
        arguments: TestDatabaseKind.available)
    func consumptionRequests(_ kind: TestDatabaseKind) async throws {
        let settings = AppConfiguration.RefundRequests(preference: .decline, sampleContentProvided: true)
        try await Self.withSetup(kind, refundRequests: settings, consumptionAnswerInterval: .seconds(3_600)) { setup in
            let harness = setup.harness
            let bundle = harness.app.bundleId
            // Alice bought coins on her device (delivered) and prefers refunds granted.
            let coins = try #require(
                try await setup.standIn.add(.init(productId: "coins_100", type: .consumable, bundleId: bundle)).transactionId)
            #expect(try await harness.post(user: "alice", jws: try #require(await setup.standIn.signed(coins))).status == 200)
            // The preference is the app backend's to set (its secret key); the app's public key is refused.
            for (key, status) in [(harness.key, 400), (harness.secretKey, 200)] as [(String, Int)] {
                let attribute = try await harness.send(
                    .post, "/v1/subscribers/alice/attributes", key: key,
                    body: Data(#"{"attributes":{"$appleRefundHandlingPreference":{"value":"grant_full","updated_at_ms":5}}}"#.utf8),
                    headers: [SignatureHeader.nonce: SignedRequestParts.makeNonce().base64EncodedString()])
                #expect(attribute.status == status)
            }
            // A non-renewing pass, 30 days of which 6 have gone, that no device ever posted.
            var pass = TestStoreCA.Purchase(
                productId: "season_pass", type: .nonRenewing, bundleId: bundle, purchaseDate: Date().addingTimeInterval(-6 * 86_400))
            pass.expiresDate = Date().addingTimeInterval(24 * 86_400)
            let passId = try #require(try await setup.standIn.add(pass).transactionId)

            let coinsRequest = UUID().uuidString
            for (uuid, id) in [(coinsRequest, coins), (coinsRequest, coins), (UUID().uuidString, passId)] {
                #expect(
                    try await ReceiptTests.notify(
                        harness, .consumptionRequest, uuid: uuid, transaction: try #require(await setup.standIn.signed(id))) == 200)
            }
            #expect(try await harness.server.store.consumptionRequests(app: harness.app.id).map(\.status) == ["pending", "pending"])

            let clock = ManualClock(Date())
            let service = ConsumptionAnswerService(
                store: harness.server.store, storeAPI: harness.server.storeAPI, deployment: harness.server.deployment, interval: .seconds(1),
                now: { clock.now }, logger: harness.server.logger)
            // Apple is busy: nothing is sent, both wait for their next attempt.
            await setup.standIn.rateLimitNext(2, retryAfter: 90)
            #expect(try await service.answer(harness.app) == 0)
            #expect(await setup.standIn.consumptionAnswers.isEmpty)
            let waiting = try await harness.server.store.consumptionRequests(app: harness.app.id)
            #expect(waiting.map(\.status) == ["pending", "pending"] && waiting.map(\.attempts) == [1, 1])
            #expect(waiting.allSatisfy { $0.lastError?.contains("rateLimited") == true })
            // Not yet due a minute later (Apple asked for 90 seconds), sent after.
            clock.now += 60
            #expect(try await service.answer(harness.app) == 0)
            clock.now += 60
            #expect(try await service.answer(harness.app) == 2)
            #expect(try await service.answer(harness.app) == 0)
            let answers = await setup.standIn.consumptionAnswers
            #expect(answers.count == 2)
            let coinsAnswer = try #require(answers.first { $0.transactionId == coins }?.body)
            #expect(coinsAnswer.customerConsented && coinsAnswer.sampleContentProvided)
            #expect(coinsAnswer.deliveryStatus == "DELIVERED")
            #expect(coinsAnswer.refundPreference == "GRANT_FULL")
            #expect(coinsAnswer.consumptionPercentage == nil)
            let passAnswer = try #require(answers.first { $0.transactionId == passId }?.body)
            #expect(passAnswer.deliveryStatus == "UNDELIVERED_OTHER")
            #expect(passAnswer.refundPreference == "DECLINE")
            #expect(
                passAnswer.consumptionPercentage.map { abs($0 - 20_000) < 200 } == true, "\(String(describing: passAnswer.consumptionPercentage))")
            #expect(try await harness.server.store.consumptionRequests(app: harness.app.id).map(\.status) == ["sent", "sent"])

            // One that cannot be sent before Apple's 12 hours are up fails for good.
            let late = Date()
            #expect(
                try await ReceiptTests.notify(harness, .consumptionRequest, transaction: try #require(await setup.standIn.signed(coins))) == 200)
            await setup.standIn.rateLimitNext(1, retryAfter: 0)
            clock.now = late.addingTimeInterval(12 * 3_600 - 10)
            #expect(try await service.answer(harness.app) == 0)
            let expired = try #require(try await harness.server.store.consumptionRequests(app: harness.app.id).first)
            #expect(expired.status == "failed" && expired.lastError?.contains("12 hours") == true)
            clock.now += 3_600
            #expect(try await service.answer(harness.app) == 0)
            #expect(await setup.standIn.consumptionAnswers.count == 2)
        }
    }

    @Test("refundRequests is read from countersign.json; without an In-App Purchase key, or with another preference, it is refused at start")
    func refundRequestsConfiguration() throws {
        func decode(_ refundRequests: String, key: Bool = true) throws -> DeploymentConfiguration {
            var app = AppConfiguration.makeDemo()
            app.commissionPercentage = 0.3
            if key { app.inAppPurchaseKey = .init(keyId: "K", issuerId: "I", privateKeyFile: "iap.p8") }
            let encoded = String(decoding: try JSONEncoder().encode(DeploymentConfiguration(apps: [app])), as: UTF8.self)
                .replacingOccurrences(of: #""commissionPercentage":0.3"#, with: #""refundRequests":\#(refundRequests)"#)
            return try DeploymentConfiguration.decode(Data(encoded.utf8), source: "test")
        }
        #expect(try decode(#"{"preference":"noPreference"}"#).apps[0].refundRequests == .init(preference: .noPreference))
        #expect(try decode(#"{"preference":"grant","sampleContentProvided":true}"#).apps[0].refundRequests?.sampleContentProvided == true)
        #expect(throws: ConfigurationError.self) { _ = try decode(#"{"preference":"decline"}"#, key: false) }
        #expect(throws: (any Error).self) { _ = try decode(#"{"preference":"GRANT_FULL"}"#) }
        #expect(throws: (any Error).self) { _ = try decode(#"{}"#) }
    }

    @Test("the running service answers consumption requests by itself; one Apple refuses (unknown transaction) fails at once")
    func consumptionRequestFailures() async throws {
        let settings = AppConfiguration.RefundRequests(preference: .noPreference)
        try await Self.withSetup(.sqlite, refundRequests: settings, consumptionAnswerInterval: .milliseconds(100)) { setup in
            let harness = setup.harness
            let bundle = harness.app.bundleId
            let lifetime = try #require(
                try await setup.standIn.add(.init(productId: "lifetime", type: .nonConsumable, bundleId: bundle)).transactionId)
            #expect(
                try await ReceiptTests.notify(harness, .consumptionRequest, transaction: try #require(await setup.standIn.signed(lifetime)))
                    == 200)
            #expect(try await waitUntil { await !setup.standIn.consumptionAnswers.isEmpty })
            let answer = try #require(await setup.standIn.consumptionAnswers.first?.body)
            #expect(answer.refundPreference == nil && !answer.sampleContentProvided)
            #expect(try await waitUntil { try await harness.server.store.consumptionRequests(app: harness.app.id).first?.status == "sent" })

            // A transaction the App Store does not know (signed by the test store, never added
            // to the stand-in): Apple answers 404, and the request fails at once.
            let unknown = try harness.mint("lifetime", type: .nonConsumable)
            #expect(try await ReceiptTests.notify(harness, .consumptionRequest, transaction: unknown.jws) == 200)
            #expect(try await waitUntil { try await harness.server.store.consumptionRequests(app: harness.app.id).first?.status == "failed" })
            let failed = try #require(try await harness.server.store.consumptionRequests(app: harness.app.id).first)
            #expect(failed.transactionId == unknown.payload.transactionId && failed.attempts == 1)
        }
    }
}
