import Countersign
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

/// The defects found by trying the product as an attacker and as a paying customer would, one
/// test per item (the lifecycles of item 3 are ``LifecycleTests``; the forged refusal of item 5
/// is in the SDK's `RefusalTests`).
@Suite("Real-world correctness")
struct RealWorldCorrectnessTests {
    // MARK: 1. One body, one meaning

    @Test("oneBodyOneMeaning: a repeated key is refused before anything reads it, at any depth and after unescaping")
    func oneBodyOneMeaning() async throws {
        try await ReceiptTests.withHarness(.sqlite) { harness in
            let (jws, _) = try harness.mint("lifetime", type: .nonConsumable)
            #expect(try await harness.post(user: "victim", jws: jws).status == 200)
            // The attack of the report: the hash covers (anonymous, "me"); the handler used to act on "victim".
            let body = Data(#"{"app_user_id":"$CSAnonymousID:x","new_app_user_id":"victim","new_app_user_id":"me"}"#.utf8)
            var headers: HTTPFields = [.contentType: "application/json"]
            headers[SignatureHeader.nonce] = SignedRequestParts.makeNonce().base64EncodedString()
            headers[SignatureHeader.postParamsHash] = FieldsHash.headerValue([("app_user_id", "$CSAnonymousID:x"), ("new_app_user_id", "me")])
            let reply = try await harness.send(.post, "/v1/subscribers/identify", key: harness.key, body: body, headers: headers)
            #expect(reply.status == 400)
            #expect(reply.code == APIErrorCode.duplicateJSONKey.rawValue)
            #expect(!String(decoding: reply.body, as: UTF8.self).contains("lifetime"))
        }
        // The reader itself: what two parsers could read two ways is refused.
        let refused: [(String, JSONSyntax.Problem)] = [
            (#"{"a":1,"a":2}"#, .duplicateKey("a")),
            (#"{"a_b":1,"a\u005fb":2}"#, .duplicateKey("a_b")),
            (#"{"x":[{"k":1,"k":1}]}"#, .duplicateKey("k")),
            (#"{"\ud83d\ude00":1,"😀":2}"#, .duplicateKey("😀")),
            (#"{"a":"\ud800"}"#, .malformed),
            (#"{"a":"\udc00\ud800"}"#, .malformed),
        ]
        for (text, problem) in refused {
            #expect(JSONSyntax.check(Data(text.utf8), topLevel: .object) == problem, "\(text)")
        }
        #expect(JSONSyntax.check(Data([0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D]), topLevel: .object) == .malformed, "invalid UTF-8")
        #expect(JSONSyntax.check(Data(#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#.utf8), topLevel: .object) == nil, "one key per object is fine")
    }

    /// A server that signs, with a real key ring, a CustomerInfo about another user than the one
    /// asked for (what a server bug like the duplicated key used to produce): "victim" for "me",
    /// and ids Swift's `==` holds equal to the one asked for (Unicode canonical equivalence) but
    /// that are other customers to the server ("Kate" for the Kelvin sign's "\u{212A}ate", a
    /// precomposed "é" for "e" and U+0301).
    @Test("appUserMismatch: a verified CustomerInfo about another user is a tampering failure in the SDK, down to the id's bytes")
    func appUserMismatch() async throws {
        let directory = try makeTemporaryDirectory("countersign-mismatch")
        defer { try? FileManager.default.removeItem(at: directory) }
        var logger = Logger(label: "test")
        logger.logLevel = .error
        let keys = try SigningKeyRing(mode: .managed(dataDirectory: directory), now: { Date() }, logger: logger)
        let answered = [("me", "victim"), ("\u{212A}ate", "Kate"), ("jose\u{301}", "jos\u{E9}")]
        let router = Router(context: ServerRequestContext.self)
        router.group().add(middleware: ResponseSigning(keys: keys, endpoint: SignedEndpoint(authenticated: true), now: { Date() }))
            .group(context: SignedRequestContext.self).get("/v1/subscribers/:id") { request, context in
                let asked = request.uri.path.split(separator: "/").last.flatMap { String($0).removingPercentEncoding } ?? ""
                let other = answered.first { AppUserID.same($0.0, asked) }?.1 ?? "victim"
                let info = SubscriberResponse(
                    appUserId: other, firstSeen: Date(), lastSeen: Date(), entitlements: CustomerEntitlements(), requestDate: Date())
                return try context.respond(to: request, with: SignedAnswer.customerInfo(info))
            }
        try await Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: logger).test(.live) { client in
            for ((index, (user, _)), mode) in answered.enumerated().flatMap({ pair in
                [EntitlementVerificationMode.informational, .enforced].map { (pair, $0) }
            }) {
                let place = "\(index)-\(mode)"
                let store = try TestStore(
                    serverURL: URL(string: "http://127.0.0.1:\(client.port!)")!, apiKey: "cs_pub_test",
                    rootPublicKeys: [keys.managedRootPublicKey!.rawRepresentation.base64EncodedString()],
                    directory: directory.appendingPathComponent("store-\(place)"))
                var configuration = Configuration(
                    apiKey: "cs_pub_test", appUserID: user, serverURL: URL(string: "http://127.0.0.1:\(client.port!)")!,
                    rootPublicKeys: [keys.managedRootPublicKey!.rawRepresentation.base64EncodedString()],
                    store: store, storageDirectory: directory.appendingPathComponent("sdk-\(place)"))
                configuration.entitlementVerificationMode = mode
                configuration.reportsVerificationFailures = false
                let purchases = try Purchases(configuration: configuration)
                if mode == .enforced {
                    do {
                        _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                        Issue.record("a CustomerInfo about another user than \(user.unicodeScalars.map(\.value)) was accepted")
                    } catch let PurchasesError.signatureVerificationFailed(_, statusCode, reason) {
                        #expect(statusCode == 200 && reason == .appUserMismatch, "\(place)")
                    }
                } else {
                    let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                    #expect(info.entitlements.verification == .failed, "\(place)")
                    #expect(info.verificationFailure == .appUserMismatch, "\(place)")
                    #expect(VerificationFailure.appUserMismatch.category == .tampering)
                }
                await #expect(throws: PurchasesError.self) { try await purchases.customerInfo(fetchPolicy: .fromCacheOnly) }
            }
        }
    }

    // MARK: 2. Reserved ids

    @Test("reservedIds: internal-looking ids are refused everywhere; the SDK's anonymous ids are not")
    func reservedIds() {
        for id in [
            "$CSDeleted", "$csDeleted", "$RCAnonymousID:0123456789ABCDEF0123456789abcdef", "$RCAnonymousID:abc", "$CSAnonymousID:",
            "$CSAnonymousID:a b", "$rc",
        ] {
            #expect(ReservedAppUserID.isReserved(id), "\(id)")
        }
        for id in ["$CSAnonymousID:\(UUID().uuidString.lowercased())", "$CSAnonymousID:x", "alice", "$", "$C", "CS$", "＄CS"] {
            #expect(!ReservedAppUserID.isReserved(id), "\(id)")
        }
        // The anonymous prefix is matched on bytes: a combining mark after it makes an id that is
        // neither anonymous nor free to use (its first bytes are still "$CS").
        #expect(!ReservedAppUserID.isAnonymous("$CSAnonymousID:\u{301}ab") && ReservedAppUserID.isReserved("$CSAnonymousID:\u{301}ab"))
        #expect(AppUserID.same("alice", "alice") && !AppUserID.same("jos\u{E9}", "jose\u{301}") && !AppUserID.same("Kate", "\u{212A}ate"))
    }

    // MARK: 4. Production works

    @Test(
        "productionWorks: Production transactions and renewal infos carry no appAppleId and verify; notifications are checked; Production without appAppleId is refused as a configuration",
        arguments: [true, false])
    func productionWorks(withAppAppleId: Bool) async throws {
        let ca = try TestStoreCA.create(name: "apple-like")
        var configuration = SignedDataVerifier.Configuration(
            anchors: [TrustAnchor(certificate: ca.root, environments: [.production])], bundleId: "com.example.demo",
            appAppleId: withAppAppleId ? 1_234_567_890 : nil, environments: [.production]
        )
        configuration.now = { Date() }
        guard withAppAppleId else {
            // As Apple's library: a Production verifier without the app's Apple ID cannot exist.
            #expect(throws: SignedDataVerifier.ConfigurationError.self) { _ = try SignedDataVerifier(configuration: configuration) }
            return
        }
        let verifier = try SignedDataVerifier(configuration: configuration)
        var purchase = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: "com.example.demo")
        purchase.environment = .production
        let (jws, payload) = try ca.mintTransaction(purchase)
        #expect(try await verifier.verify(jws, as: TransactionPayload.self).transactionId == payload.transactionId)
        let renewal = try ca.sign(
            RenewalInfoPayload(originalTransactionId: payload.transactionId!, productId: "pro_monthly", environment: .production, signedDate: Date()))
        #expect(try await verifier.verify(renewal, as: RenewalInfoPayload.self).originalTransactionId == payload.transactionId)
        for (appAppleId, accepted) in [(Int64(1_234_567_890), true), (Int64(42), false)] {
            let data = NotificationPayload.NotificationData(bundleId: "com.example.demo", environment: .production, appAppleId: appAppleId)
            let notification = try ca.sign(
                NotificationPayload(notificationType: .test, notificationUUID: UUID().uuidString, data: data, signedDate: Date()))
            do {
                _ = try await verifier.verify(notification, as: NotificationPayload.self)
                #expect(accepted, "another app's notification was accepted")
            } catch {
                #expect(!accepted)
                #expect(error.status == .invalidAppIdentifier)
            }
        }
    }

    @Test("reviewSandbox: an app that takes Production data but not Sandbox is warned about at start (App Review and TestFlight buy in the sandbox)")
    func reviewSandbox() {
        var app = AppConfiguration.makeDemo()
        app.appAppleId = 1_234_567_890
        for (environments, warned) in [(["Production"], true), (["Production", "Sandbox"], false), (["Sandbox"], false), (["TestStore"], false)] {
            app.environments = environments
            let warnings = CountersignServer.configurationWarnings(DeploymentConfiguration(apps: [app]))
            #expect(warnings.contains { $0.contains("'\(app.id)' accepts Production but not Sandbox") } == warned, "\(environments)")
        }
    }

    // MARK: 5. Signed refusals

    @Test("signedRefusals: error answers of signed endpoints are signed and verify")
    func signedRefusals() async throws {
        try await ReceiptTests.withHarness(.sqlite, transferBehavior: .keepWithOriginal) { harness in
            let (jws, _) = try harness.mint("lifetime", type: .nonConsumable)
            #expect(try await harness.post(user: "u1", jws: jws).status == 200)
            for (json, code) in [
                (["app_user_id": "u2", "fetch_token": jws], APIErrorCode.purchaseOwnedByAnotherUser),
                (["app_user_id": "u2", "fetch_token": "a.b.c"], .invalidStoreSignature),
            ] {
                let answer = try await harness.signed(.post, "/v1/receipts", json: json, paramKeys: ParamKeys.receipt)
                #expect(answer.reply.code == code.rawValue)
                #expect(answer.outcome == .verified, "\(code)")
            }
        }
    }

    // MARK: 6. Keys

    @Test("keys: past the intermediate's expiry the server refuses (503, code, metric) rather than sign with it; the rotation service rotates")
    func keys() async throws {
        let directory = try makeTemporaryDirectory("countersign-keys")
        defer { try? FileManager.default.removeItem(at: directory) }
        let clock = ManualClock(Date())
        var configuration = ServerConfiguration(dataDirectory: directory)
        configuration.now = { clock.now }
        configuration.keyCheckInterval = .milliseconds(50)
        try await LiveServer.run(configuration, logLevel: .critical) { server, client in
            let first = server.keys.currentSigner.key.certificate
            // 25 days on: inside the renewal window, the service issues a new key by itself.
            clock.now = clock.now.addingTimeInterval(25 * 86_400)
            _ = try await waitUntil { server.keys.currentSigner.key.certificate != first }
            #expect(server.keys.currentSigner.key.certificate != first, "the rotation service issued a new intermediate")
            // The root gone (rotation cannot issue another key) and far beyond the last key's expiry:
            // refused, never signed with an expired key.
            try FileManager.default.removeItem(at: directory.appendingPathComponent("keys/root.key"))
            clock.now = clock.now.addingTimeInterval(400 * 86_400)
            try await Task.sleep(for: .milliseconds(20))
            let reply = try await client.execute(uri: "/v1/health", method: .get) { response in
                (Int(response.status.code), response.headers[SignatureHeader.signature], Data(response.body.readableBytesView))
            }
            #expect(reply.0 == 503)
            #expect(reply.1 == nil)
            #expect(try JSONDecoder().decode(APIError.self, from: reply.2).code == APIErrorCode.signingKeyExpired.rawValue)
            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            #expect(metrics.contains("countersign_signing_refused_total"))
        }
    }

    // MARK: 7. Telemetry

    @Test("telemetry: each app's reports are rate limited (429) and counted")
    func telemetry() async throws {
        let limiter = RateLimiter(perSecond: 0.001, burst: 2, now: { Date() })
        #expect(limiter.allow("demo") && limiter.allow("demo"))
        #expect(!limiter.allow("demo"))
        #expect(limiter.allow("other"), "per app")
        #expect(DiagnosticsRoutes.reasons == Set(VerificationFailure.allCases.map(\.rawValue)))
        #expect(ServerMetrics.countedMethods.contains("GET") && !ServerMetrics.countedMethods.contains("BREW"))
    }

    // MARK: 8. Smaller holes

    @Test("smallerHoles: StoreKit Testing data needs a pinned certificate; keys compare in full; /metrics token; database files 0600")
    func smallerHoles() async throws {
        var xcode = SignedDataVerifier.Configuration(anchors: [], bundleId: nil, environments: [.xcode])
        xcode.allowsXcode = true
        #expect(throws: SignedDataVerifier.ConfigurationError.self) { _ = try SignedDataVerifier(configuration: xcode) }
        #expect(APIKeyAuthentication.constantTimeEqual("cs_pub_abc", "cs_pub_abc"))
        #expect(!APIKeyAuthentication.constantTimeEqual("cs_pub_abc", "cs_pub_abd"))
        #expect(!APIKeyAuthentication.constantTimeEqual("cs_pub_abc", "cs_pub_ab"))

        let directory = try makeTemporaryDirectory("countersign-holes")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration(dataDirectory: directory)
        configuration.metricsBearerToken = "metrics-secret"
        try await LiveServer.run(configuration) { server, client in
            #expect(try await client.execute(uri: "/metrics", method: .get) { $0.status } == .unauthorized)
            #expect(try await client.execute(uri: "/metrics", method: .get, headers: [.authorization: "Bearer wrong"]) { $0.status } == .unauthorized)
            #expect(try await client.execute(uri: "/metrics", method: .get, headers: [.authorization: "Bearer metrics-secret"]) { $0.status } == .ok)
            _ = try await server.store.customerInfo(app: server.deployment.apps[0], user: "u1", now: Date())
            for name in ["countersign.sqlite", "countersign.sqlite-wal"] {
                let path = directory.appendingPathComponent(name).path
                let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
                #expect(mode == 0o600, "\(name): \(String(mode ?? 0, radix: 8))")
            }
        }
    }

    // MARK: 9. Lenient decoding

    @Test("lenientDecoding: a CustomerInfo with only what identifies it decodes; optional fields may be missing, unknown ones are ignored")
    func lenientDecoding() throws {
        let body = Data(
            #"{"request_date_ms":1700000000000,"subscriber":{"original_app_user_id":"u1","future_field":{"x":1},"entitlements":{"pro":{"product_identifier":"lifetime"}},"subscriptions":{"pro_monthly":{"expires_date":"2099-01-01T00:00:00Z"}},"non_subscriptions":{"lifetime":[{}]}}}"#
                .utf8)
        let info = try CustomerInfo(answer: body, verification: .verified, failure: nil, now: Date())
        #expect(info.originalAppUserId == "u1")
        #expect(info.entitlements["pro"]?.isActive == true)
        #expect(info.entitlements["pro"]?.store == .unknownStore, "no store named: RevenueCat's unknownStore")
        #expect(info.activeSubscriptions == ["pro_monthly"])
        #expect(throws: DecodingError.self) {
            try CustomerInfo(answer: Data(#"{"request_date_ms":1,"subscriber":{}}"#.utf8), verification: .verified, failure: nil, now: Date())
        }
    }
}
