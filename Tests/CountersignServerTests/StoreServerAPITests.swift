import CountersignAppStore
import CountersignCore
@testable import CountersignServer
import CountersignTesting
import Crypto
import Foundation
import HummingbirdTesting
import Testing

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

    /// A legacy "purchase-info" transaction receipt naming `transactionId`, base64 as apps send it.
    static func legacyReceipt(_ transactionId: String) -> String {
        let info = Data("{\n\t\"transaction-id\" = \"\(transactionId)\";\n\t\"product-id\" = \"pro_monthly\";\n}".utf8).base64EncodedString()
        return Data("{\n\t\"signature\" = \"AAAA\";\n\t\"purchase-info\" = \"\(info)\";\n}".utf8).base64EncodedString()
    }

    static func withSetup(_ kind: TestDatabaseKind, _ body: @Sendable @escaping (Setup) async throws -> Void) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let ca = try TestStoreCA.loadOrCreate(for: DataDirectory(directory))
            let apiKey = P256.Signing.PrivateKey()
            try Data(apiKey.pemRepresentation.utf8).write(to: directory.appendingPathComponent("iap.p8"))
            var app = AppConfiguration.makeDemo()
            app.inAppPurchaseKey = .init(keyId: "TESTKEY123", issuerId: "57246542-96fe-1a63-e053-0824d011072a", privateKeyFile: "iap.p8")
            let configuredApp = app
            let standIn = try await AppStoreServerStandIn(ca: ca, bundleId: configuredApp.bundleId, apiKeyPEM: apiKey.pemRepresentation)
            try await standIn.makeApplication().test(.live) { standInClient in
                try DeploymentConfiguration(apps: [configuredApp], appStoreServerAPIURL: "http://127.0.0.1:\(try #require(standInClient.port))")
                    .save(toDataDirectory: directory)
                var configuration = ServerConfiguration(dataDirectory: directory)
                configuration.database = location
                try await LiveServer.run(configuration) { server, client in
                    let harness = ReceiptTests.Harness(server: server, client: client, app: configuredApp, ca: ca)
                    try await body(Setup(harness: harness, standIn: standIn))
                }
            }
        }
    }

    static func post(_ setup: Setup, user: String, receipt: String) async throws -> Reply {
        try await setup.harness.send(.post, "/v1/receipts", key: setup.harness.key,
                                     body: try JSONSerialization.data(withJSONObject: ["app_user_id": user, "fetch_token": receipt]))
    }

    @Test("a legacy receipt is resolved through the API; a renewal and a refund no notification brought are found by a refresh",
          arguments: TestDatabaseKind.available)
    func legacyReceiptAndRefresh(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let bundle = setup.harness.app.bundleId
            var first = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: bundle, purchaseDate: Date().addingTimeInterval(-20 * 86_400))
            first.expiresDate = Date().addingTimeInterval(10 * 86_400)
            let original = try await setup.standIn.add(first)
            let chain = try #require(original.transactionId)

            let posted = try await Self.post(setup, user: "alice", receipt: Self.legacyReceipt(chain))
            #expect(posted.status == 200)
            #expect(posted.json["purchase_status"] as? String == "new")
            #expect(ReceiptTests.isActive(try await setup.harness.customerInfo("alice"), "pro"))
            #expect(try await setup.events("alice") == ["INITIAL_PURCHASE"])

            // The subscription renews at Apple; no notification arrives. A refresh finds it.
            var renewal = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: bundle, purchaseDate: Date().addingTimeInterval(-3_600))
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
            let unknown = try await Self.post(setup, user: "bob", receipt: Self.legacyReceipt("999999999"))
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
            var lapsed = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: bundle, purchaseDate: Date().addingTimeInterval(-31 * 86_400))
            lapsed.expiresDate = Date().addingTimeInterval(-86_400)
            let original = try await setup.standIn.add(lapsed)
            let chain = try #require(original.transactionId)
            #expect(try await Self.post(setup, user: "carol", receipt: Self.legacyReceipt(chain)).status == 200)
            #expect(!ReceiptTests.isActive(try await setup.harness.customerInfo("carol"), "pro"))

            var renewal = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: bundle, purchaseDate: Date().addingTimeInterval(-86_400))
            renewal.originalTransactionId = chain
            renewal.expiresDate = Date().addingTimeInterval(29 * 86_400)
            try await setup.standIn.add(renewal)
            let server = setup.harness.server
            let service = ReconciliationService(store: server.store, storeAPI: server.storeAPI, deployment: server.deployment,
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
        try await ReceiptTests.withHarness(kind) { harness in
            let reply = try await harness.send(.post, "/v1/receipts", key: harness.key,
                                               body: try JSONSerialization.data(withJSONObject: ["app_user_id": "dana", "fetch_token": Self.legacyReceipt("2000000909538865")]))
            #expect(reply.status == 422 && reply.code == APIErrorCode.storeAPINotConfigured.rawValue)
            #expect((reply.json["message"] as? String)?.contains("legacy receipt") == true)
            #expect(try await harness.post(user: "dana", jws: try harness.mint("pro_monthly").jws).status == 200)
            let refresh = try await harness.send(.post, "/v1/admin/customers/dana/refresh", key: harness.secretKey)
            #expect(refresh.status == 422 && refresh.code == APIErrorCode.storeAPINotConfigured.rawValue)
        }
    }
}
