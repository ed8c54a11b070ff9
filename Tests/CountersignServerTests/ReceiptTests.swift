import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Purchases end to end over real HTTP: post a test-store transaction, get a signed CustomerInfo.
@Suite("Receipts and subscribers")
struct ReceiptTests {
    struct Harness: Sendable {
        let server: CountersignServer
        let client: any TestClientProtocol
        let app: AppConfiguration
        let ca: TestStoreCA
        var key: String { app.publicApiKeys[0] }

        func mint(_ productId: String, type: ProductType = .autoRenewable, token: UUID? = nil, bundleId: String? = nil) throws -> (
            jws: String, payload: TransactionPayload
        ) {
            try ca.mintTransaction(.init(productId: productId, type: type, bundleId: bundleId ?? app.bundleId, appAccountToken: token))
        }

        /// Posts a receipt; verifies the signature of a 200 and returns the status and JSON body.
        func post(user: String, jws: String, key: String? = nil, extra: [String: Any] = [:]) async throws -> (status: Int, json: [String: Any]) {
            let body = try JSONSerialization.data(withJSONObject: extra.merging(["app_user_id": user, "fetch_token": jws]) { $1 })
            let nonce = SignedRequestParts.makeNonce()
            let hash = FieldsHash.headerValue([("app_user_id", user), ("fetch_token", jws)])!
            var headers: HTTPFields = [.authorization: "Bearer \(key ?? self.key)", .contentType: "application/json"]
            headers[SignatureHeader.nonce] = nonce.base64EncodedString()
            headers[SignatureHeader.postParamsHash] = hash
            return try await client.execute(uri: "/v1/receipts", method: .post, headers: headers, body: ByteBuffer(data: body)) { response in
                let data = Data(response.body.readableBytesView)
                if response.status == .ok {
                    let outcome = verify(
                        response, data: data,
                        request: SignedRequestParts(
                            authValue: key ?? self.key, nonce: nonce, path: "/v1/receipts", postParamsHash: hash
                        ))
                    #expect(outcome == .verified)
                }
                return (Int(response.status.code), (try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:])
            }
        }

        func customerInfo(_ user: String) async throws -> [String: Any] {
            let nonce = SignedRequestParts.makeNonce()
            var headers: HTTPFields = [.authorization: "Bearer \(key)"]
            headers[SignatureHeader.nonce] = nonce.base64EncodedString()
            let path = "/v1/subscribers/\(user.pathSegment)"
            return try await client.execute(uri: path, method: .get, headers: headers) { response in
                let data = Data(response.body.readableBytesView)
                #expect(response.status == .ok)
                #expect(verify(response, data: data, request: SignedRequestParts(authValue: key, nonce: nonce, path: path)) == .verified)
                return try JSONSerialization.jsonObject(with: data) as! [String: Any]
            }
        }

        func verify(_ response: TestResponse, data: Data, request: SignedRequestParts) -> VerificationOutcome {
            SignatureVerifier(rootKeys: [server.keys.managedRootPublicKey!]).verify(
                request: request,
                response: ReceivedResponse(
                    statusCode: Int(response.status.code), signature: response.headers[SignatureHeader.signature],
                    requestTime: response.headers[SignatureHeader.requestTime], etag: response.headers[SignatureHeader.etag], body: data
                )
            )
        }
    }

    static func withHarness(
        _ kind: TestDatabaseKind, transferBehavior: AppConfiguration.TransferBehavior = .transfer, environments: [String]? = nil,
        clock: ManualClock? = nil, configure: @Sendable (inout AppConfiguration, inout ServerConfiguration) -> Void = { _, _ in },
        _ body: @Sendable @escaping (Harness) async throws -> Void
    ) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            var app = AppConfiguration.makeDemo()
            app.transferBehavior = transferBehavior
            if let environments { app.environments = environments }
            var configuration = ServerConfiguration(dataDirectory: directory)
            configuration.database = location
            if let clock { configuration.now = { clock.now } }
            configure(&app, &configuration)
            try DeploymentConfiguration(apps: [app]).save(toDataDirectory: directory)
            let configuredApp = app
            try await LiveServer.run(configuration) { server, client in
                let ca = try TestStoreCA.loadOrCreate(for: DataDirectory(directory))
                try await body(Harness(server: server, client: client, app: configuredApp, ca: ca))
            }
        }
    }

    static func entitlement(_ json: [String: Any], _ id: String) -> [String: Any]? {
        ((json["subscriber"] as? [String: Any])?["entitlements"] as? [String: Any])?[id] as? [String: Any]
    }

    /// Whether the CustomerInfo lists `id` as active at its own request date (RevenueCat's rule:
    /// entitlements stay listed after they end, with their end date).
    static func isActive(_ json: [String: Any], _ id: String) -> Bool {
        guard let entitlement = entitlement(json, id),
            let requestDate = json["request_date_ms"] as? Int64 ?? (json["request_date_ms"] as? Int).map(Int64.init)
        else { return false }
        guard let expires = entitlement["expires_date"] as? String else { return true }
        return WireDate.parse(expires).map { Int64($0.timeIntervalSince1970 * 1000) > requestDate } ?? false
    }

    @Test("post a pro_monthly purchase: new, then already recorded (one row), then transferred to u2", arguments: TestDatabaseKind.available)
    func transferFlow(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind) { harness in
            let (jws, payload) = try harness.mint("pro_monthly")
            let first = try await harness.post(user: "u1", jws: jws)
            #expect(first.status == 200)
            #expect(first.json["purchase_status"] as? String == "new")
            #expect(Self.entitlement(first.json, "pro")?["product_identifier"] as? String == "pro_monthly")

            let again = try await harness.post(user: "u1", jws: jws)
            #expect(again.json["purchase_status"] as? String == "already_recorded")
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: payload.transactionId!) == 1)

            let moved = try await harness.post(user: "u2", jws: jws)
            #expect(moved.json["purchase_status"] as? String == "transferred")
            #expect(Self.entitlement(moved.json, "pro") != nil)
            #expect(Self.entitlement(try await harness.customerInfo("u1"), "pro") == nil)
        }
    }

    @Test("keepWithOriginal: another user's post is refused with a distinct code and changes nothing", arguments: TestDatabaseKind.available)
    func keepWithOriginal(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind, transferBehavior: .keepWithOriginal) { harness in
            let (jws, _) = try harness.mint("lifetime", type: .nonConsumable)
            #expect(try await harness.post(user: "u1", jws: jws).status == 200)
            let refused = try await harness.post(user: "u2", jws: jws)
            #expect(refused.status == 409)
            #expect(refused.json["code"] as? Int == APIErrorCode.purchaseOwnedByAnotherUser.rawValue)
            #expect(Self.entitlement(try await harness.customerInfo("u1"), "pro") != nil)
            #expect(Self.entitlement(try await harness.customerInfo("u2"), "pro") == nil)
        }
    }

    /// Ids that Swift's `==` holds equal (Unicode canonical equivalence) and the database does not:
    /// "é" as one code point or as "e" and U+0301, "K" or the Kelvin sign U+212A. RevenueCat and
    /// the databases keep them as two customers, so every ownership rule must too: a restore by
    /// the other spelling moves the purchase (or is refused by keepWithOriginal), and a token
    /// bound to one is not the other's.
    @Test("ids that differ only in their Unicode spelling are two customers to every ownership rule", arguments: TestDatabaseKind.available)
    func canonicallyEquivalentIds(_ kind: TestDatabaseKind) async throws {
        let (composed, decomposed, kelvin) = ("jos\u{E9}", "jose\u{301}", "\u{212A}ate")
        #expect(composed == decomposed && kelvin == "Kate", "Swift's == is canonical equivalence")
        try await Self.withHarness(kind) { harness in
            let (jws, _) = try harness.mint("lifetime", type: .nonConsumable)
            #expect(try await harness.post(user: composed, jws: jws).json["purchase_status"] as? String == "new")
            let restored = try await harness.post(user: decomposed, jws: jws)
            #expect(restored.json["purchase_status"] as? String == "transferred")
            #expect((restored.json["subscriber"] as? [String: Any])?["original_app_user_id"] as? String == decomposed)
            #expect(Self.entitlement(restored.json, "pro") != nil)
            #expect(Self.entitlement(try await harness.customerInfo(composed), "pro") == nil)

            try await harness.logIn("Kate")
            let (bound, _) = try harness.mint("lifetime", type: .nonConsumable, token: AppAccountToken.forAppUserID("Kate"))
            let posted = try await harness.post(user: kelvin, jws: bound)
            #expect(posted.status == 409)
            #expect(posted.json["code"] as? Int == APIErrorCode.purchaseBoundToAnotherUser.rawValue)
            #expect(Self.entitlement(try await harness.customerInfo("Kate"), "pro") != nil)
            #expect(Self.entitlement(try await harness.customerInfo(kelvin), "pro") == nil)
        }
        try await Self.withHarness(kind, transferBehavior: .keepWithOriginal) { harness in
            let (jws, _) = try harness.mint("lifetime", type: .nonConsumable)
            #expect(try await harness.post(user: composed, jws: jws).status == 200)
            let refused = try await harness.post(user: decomposed, jws: jws)
            #expect(refused.status == 409)
            #expect(refused.json["code"] as? Int == APIErrorCode.purchaseOwnedByAnotherUser.rawValue)
            #expect(Self.entitlement(try await harness.customerInfo(composed), "pro") != nil)
            #expect(Self.entitlement(try await harness.customerInfo(decomposed), "pro") == nil)
        }
    }

    @Test("a transaction carrying u1's app account token, posted by u2, stays with u1", arguments: TestDatabaseKind.available)
    func appAccountTokenBinding(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind) { harness in
            try await harness.logIn("u1")
            let (jws, _) = try harness.mint("lifetime", type: .nonConsumable, token: AppAccountToken.forAppUserID("u1"))
            let posted = try await harness.post(user: "u2", jws: jws)
            #expect(posted.status == 409)
            #expect(posted.json["code"] as? Int == APIErrorCode.purchaseBoundToAnotherUser.rawValue)
            #expect(Self.entitlement(try await harness.customerInfo("u1"), "pro") != nil)
            #expect(Self.entitlement(try await harness.customerInfo("u2"), "pro") == nil)
        }
    }

    @Test("bad purchases get a 4xx with a stable code and record nothing", arguments: TestDatabaseKind.available)
    func badPurchases(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind) { harness in
            let (good, _) = try harness.mint("lifetime", type: .nonConsumable)
            let (otherBundle, otherPayload) = try harness.mint("lifetime", type: .nonConsumable, bundleId: "com.attacker.app")
            let forged = TestStoreCA.Purchase(productId: "lifetime", type: .nonConsumable, bundleId: harness.app.bundleId)
            let (foreignJWS, _) = try TestStoreCA.create(name: "attacker").mintTransaction(forged)
            let cases: [(String, String, String?, APIErrorCode)] = [
                ("u1", otherBundle, nil, .wrongApp),
                ("u1", foreignJWS, nil, .invalidStoreSignature),
                ("u1", "a.b.c", nil, .invalidStoreSignature),
                ("", good, nil, .invalidAppUserId),
                (String(repeating: "x", count: 2_048), good, nil, .invalidAppUserId),
                ("u\u{0}1", good, nil, .invalidAppUserId),
                ("u1", good, harness.app.secretApiKeys[0], .wrongKeyKind),
                ("u1", good, "cs_pub_unknown", .invalidAPIKey),
                ("u1", String(repeating: "a", count: 70_000), nil, .bodyTooLarge),
            ]
            for (user, jws, key, code) in cases {
                let result = try await harness.post(user: user, jws: jws, key: key)
                #expect(result.status == code.httpStatus, "\(code)")
                #expect(result.json["code"] as? Int == code.rawValue, "\(code)")
            }
            // Refused store data names Apple's status and our reason.
            for (jws, status, reason) in [
                (otherBundle, "INVALID_APP_IDENTIFIER", "bundle-id"), (foreignJWS, "VERIFICATION_FAILURE", "untrusted-chain"),
                ("a.b.c", "VERIFICATION_FAILURE", "malformed-jws"),
            ] {
                let result = try await harness.post(user: "u1", jws: jws, key: nil)
                #expect(result.json["store_status"] as? String == status)
                #expect(result.json["store_reason"] as? String == reason)
            }
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: otherPayload.transactionId!) == 0)
            #expect(Self.entitlement(try await harness.customerInfo("u1"), "pro") == nil)
        }
    }

    /// Posts `jws` for `user` over its own HTTP connection; the status and the JSON answer.
    static func livePost(_ harness: Harness, user: String, jws: String) async throws -> (status: Int, json: [String: String]) {
        let body = try JSONSerialization.data(withJSONObject: ["app_user_id": user, "fetch_token": jws])
        let (status, data) = try await LiveHTTP.send(
            port: try #require(harness.client.port), method: "POST", path: "/v1/receipts",
            headers: [
                "Authorization": "Bearer \(harness.key)", "Content-Type": "application/json",
                "X-Nonce": SignedRequestParts.makeNonce().base64EncodedString(),
            ],
            body: body
        )
        let object = (try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
        return (status, object.compactMapValues { value in (value as? String) ?? (value as? Int).map(String.init) })
    }

    @Test("100 concurrent HTTP posts of one transaction for one user: one record, 100 successful answers", arguments: TestDatabaseKind.available)
    func concurrentSameUser(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind) { harness in
            let (jws, payload) = try harness.mint("lifetime", type: .nonConsumable)
            let answers = try await withThrowingTaskGroup(of: (status: Int, json: [String: String]).self) { group in
                for _ in 0..<100 {
                    group.addTask { try await Self.livePost(harness, user: "u1", jws: jws) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.filter { $0.status == 200 }.count == 100)
            #expect(answers.filter { $0.json["purchase_status"] == "new" }.count == 1)
            #expect(answers.filter { $0.json["purchase_status"] == "already_recorded" }.count == 99)
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: payload.transactionId!) == 1)
        }
    }

    @Test("100 concurrent HTTP posts by 100 users under keepWithOriginal: exactly one owner", arguments: TestDatabaseKind.available)
    func concurrentUsersKeepWithOriginal(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind, transferBehavior: .keepWithOriginal) { harness in
            let (jws, payload) = try harness.mint("lifetime", type: .nonConsumable)
            let answers = try await withThrowingTaskGroup(of: (user: String, status: Int, code: String?).self) { group in
                for index in 0..<100 {
                    group.addTask {
                        let answer = try await Self.livePost(harness, user: "user\(index)", jws: jws)
                        return ("user\(index)", answer.status, answer.json["code"])
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let winners = answers.filter { $0.status == 200 }
            #expect(winners.count == 1)
            #expect(answers.filter { $0.status == 409 && $0.code == String(APIErrorCode.purchaseOwnedByAnotherUser.rawValue) }.count == 99)
            let owner = try #require(winners.first?.user)
            #expect(Self.entitlement(try await harness.customerInfo(owner), "pro") != nil)
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: payload.transactionId!) == 1)
        }
    }
}
