import CountersignAppStore
import CountersignCore
@testable import CountersignServer
import CountersignTesting
import Crypto
import Foundation
import HTTPTypes
import Testing
import X509

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

    @Test("finding 2: an Xcode-signed copy of another app's transaction, revoked and dated years ahead, revokes nothing",
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
            let ahead = try await attacker.send(.post, "/v1/receipts", key: attacker.key,
                                                body: try JSONSerialization.data(withJSONObject: ["app_user_id": "mallory", "fetch_token": try xcode.sign(forged)]))
            #expect(ahead.status == 422 && ahead.code == APIErrorCode.invalidStoreSignature.rawValue)
            #expect((ahead.json["message"] as? String)?.contains("future") == true)

            // Dated now it is the developer app's own Xcode transaction, in its own rows.
            forged.signedDate = Date()
            let now = try await attacker.send(.post, "/v1/receipts", key: attacker.key,
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
}
