import CountersignAppStore
import CountersignCore
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
        _ body: @Sendable @escaping (Setup) async throws -> Void
    ) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let ca = try TestStoreCA.loadOrCreate(for: DataDirectory(directory))
            let apiKey = P256.Signing.PrivateKey()
            try Data(apiKey.pemRepresentation.utf8).write(to: directory.appendingPathComponent("iap.p8"))
            var app = AppConfiguration.makeDemo()
            app.inAppPurchaseKey = .init(keyId: "TESTKEY123", issuerId: "57246542-96fe-1a63-e053-0824d011072a", privateKeyFile: "iap.p8")
            app.legacyReceipts = legacyReceipts
            let configuredApp = app
            let standIn = try await AppStoreServerStandIn(ca: ca, bundleId: configuredApp.bundleId, apiKeyPEM: apiKey.pemRepresentation)
            try await standIn.makeApplication().test(.live) { standInClient in
                try DeploymentConfiguration(apps: [configuredApp], appStoreServerAPIURL: "http://127.0.0.1:\(try #require(standInClient.port))")
                    .save(toDataDirectory: directory)
                var configuration = ServerConfiguration(dataDirectory: directory)
                configuration.database = location
                configuration.rateLimits = rateLimits
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
                store: server.store, storeAPI: server.storeAPI, deployment: server.deployment,
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
}
