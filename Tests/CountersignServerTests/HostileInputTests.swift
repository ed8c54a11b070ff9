import CountersignAppStore
import CountersignCore
import CountersignTesting
import Foundation
import HTTPTypes
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Malformed and hostile requests: each gets a 4xx with its stable JSON code, and the database
/// is read after each to check that nothing changed.
@Suite("Hostile input")
struct HostileInputTests {
    struct Case: Sendable, CustomStringConvertible {
        var description: String
        var method: HTTPRequest.Method
        var path: String
        var key: KeyChoice
        var headers: [String: String] = [:]
        var body: Data?
        var expected: APIErrorCode

        enum KeyChoice: Sendable { case publicKey, secretKey, none, custom(String) }
    }

    static func json(_ object: Any) -> Data {
        try! JSONSerialization.data(withJSONObject: object)
    }

    static func receipt(_ user: Any, _ token: Any?) -> Data {
        var object: [String: Any] = ["app_user_id": user]
        if let token { object["fetch_token"] = token }
        return json(object)
    }

    /// The cases, built from a harness (they need its signed transactions).
    static func cases(_ harness: ReceiptTests.Harness) throws -> [Case] {
        let (good, _) = try harness.mint("lifetime", type: .nonConsumable)
        let (otherBundle, _) = try harness.mint("lifetime", type: .nonConsumable, bundleId: "com.attacker.app")
        let attacker = try TestStoreCA.create(name: "attacker")
        let (forged, _) = try attacker.mintTransaction(.init(productId: "lifetime", type: .nonConsumable, bundleId: harness.app.bundleId))
        var production = TestStoreCA.Purchase(productId: "lifetime", type: .nonConsumable, bundleId: harness.app.bundleId)
        production.environment = .production
        let (productionJWS, _) = try harness.ca.mintTransaction(production)
        // One character of the payload changed: the signature no longer matches.
        var segments = good.split(separator: ".").map(String.init)
        var payload = Array(segments[1])
        payload[10] = payload[10] == "A" ? "B" : "A"
        segments[1] = String(payload)
        let tampered = segments.joined(separator: ".")
        let noneHeader = Data(#"{"alg":"none"}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        let algNone = ([noneHeader] + good.split(separator: ".").dropFirst().map(String.init)).joined(separator: ".")
        let longId = String(repeating: "x", count: 2_048)
        let nonce = SignedRequestParts.makeNonce().base64EncodedString()

        func post(
            _ description: String, to path: String = "/v1/receipts", _ body: Data?, key: Case.KeyChoice = .publicKey,
            headers: [String: String] = [:], _ expected: APIErrorCode
        ) -> Case {
            Case(description: description, method: .post, path: path, key: key, headers: headers, body: body, expected: expected)
        }
        func get(_ description: String, _ path: String, key: Case.KeyChoice = .publicKey, headers: [String: String] = [:], _ expected: APIErrorCode)
            -> Case
        {
            Case(description: description, method: .get, path: path, key: key, headers: headers, body: nil, expected: expected)
        }
        let grant = "/v1/admin/customers/u1/entitlements/pro/promotional"
        return [
            // Receipts: framing and JSON.
            post("not JSON", Data("{{".utf8), .malformedJSON),
            post("a JSON array", Data("[]".utf8), .malformedJSON),
            post("empty body", Data(), .malformedJSON),
            post("trailing garbage", Data(#"{"app_user_id":"u1","fetch_token":"x"} x"#.utf8), .malformedJSON),
            post("app_user_id is a number", receipt(42, good), .invalidField),
            post("fetch_token missing", receipt("u1", nil), .invalidField),
            post("fetch_token is null", json(["app_user_id": "u1", "fetch_token": NSNull()]), .invalidField),
            post("fetch_token is an object", receipt("u1", ["jws": good]), .invalidField),
            post("oversized body", receipt("u1", String(repeating: "a", count: 70_000)), .bodyTooLarge),
            // One body, one meaning: what a second parser could read differently is refused.
            post(
                "identify: new_app_user_id twice", to: "/v1/subscribers/identify",
                Data(#"{"app_user_id":"$CSAnonymousID:x","new_app_user_id":"victim","new_app_user_id":"me"}"#.utf8), .duplicateJSONKey),
            post(
                "receipt: app_user_id twice, once escaped", Data(#"{"app_user_id":"u1","app\u005fuser_id":"u2","fetch_token":"\#(good)"}"#.utf8),
                .duplicateJSONKey),
            post("receipt: a nested duplicate", Data(#"{"app_user_id":"u1","fetch_token":"\#(good)","x":{"a":1,"a":2}}"#.utf8), .duplicateJSONKey),
            post("receipt: a lone surrogate escape", Data(#"{"app_user_id":"u\ud800","fetch_token":"\#(good)"}"#.utf8), .malformedJSON),
            post("receipt: invalid UTF-8", Data([0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xC0, 0xAF, 0x22, 0x7D]), .malformedJSON),
            // Reserved app user ids.
            get("the deleted customers' id", "/v1/subscribers/%24CSDeleted", .reservedAppUserId),
            get("a $RC id", "/v1/subscribers/%24RCAnonymousID%3Aabc", .reservedAppUserId),
            get("a $cs id in lowercase", "/v1/subscribers/%24csInternal", .reservedAppUserId),
            post(
                "identify into a reserved id", to: "/v1/subscribers/identify",
                json(["app_user_id": "$CSAnonymousID:x", "new_app_user_id": "$CSDeleted"]), .reservedAppUserId),
            post("receipt for a reserved id", receipt("$CSDeleted", good), .reservedAppUserId),
            // Receipts: app user ids.
            post("empty app user id", receipt("", good), .invalidAppUserId),
            post("2 KB app user id", receipt(longId, good), .invalidAppUserId),
            post("NUL in app user id", receipt("u\u{0}1", good), .invalidAppUserId),
            post("newline in app user id", receipt("u1\nlevel=error", good), .invalidAppUserId),
            post("escape in app user id", receipt("u1\u{1B}[2J", good), .invalidAppUserId),
            post("DEL in app user id", receipt("u1\u{7F}", good), .invalidAppUserId),
            post("a C1 control (NEL) in app user id", receipt("u1\u{85}x", good), .invalidAppUserId),
            // Receipts: store data.
            post("JWS for another bundle", receipt("u1", otherBundle), .wrongApp),
            post("JWS from a foreign CA", receipt("u1", forged), .invalidStoreSignature),
            post("JWS with a changed payload", receipt("u1", tampered), .invalidStoreSignature),
            post("JWS with alg none", receipt("u1", algNone), .invalidStoreSignature),
            post("three dots", receipt("u1", "a.b.c"), .invalidStoreSignature),
            post("Production transaction for a test app", receipt("u1", productionJWS), .wrongEnvironment),
            // Receipts: keys and signed headers.
            post("secret key on a public endpoint", receipt("u1", good), key: .secretKey, .wrongKeyKind),
            post("unknown key", receipt("u1", good), key: .custom("Bearer cs_pub_nope"), .invalidAPIKey),
            post("no Authorization", receipt("u1", good), key: .none, .missingAPIKey),
            post("Basic authorization", receipt("u1", good), key: .custom("Basic dTE6cHc="), .missingAPIKey),
            post("nonce not base64", receipt("u1", good), headers: ["X-Nonce": "***"], .malformedNonce),
            post("nonce of 11 bytes", receipt("u1", good), headers: ["X-Nonce": Data(count: 11).base64EncodedString()], .malformedNonce),
            post(
                "post params hash of other values", receipt("u1", good),
                headers: ["X-Post-Params-Hash": FieldsHash.headerValue([("app_user_id", "u2"), ("fetch_token", good)])!], .postParamsHashMismatch),
            post(
                "headers hash without the header", receipt("u1", good),
                headers: ["X-Headers-Hash": FieldsHash.headerValue([("X-Is-Sandbox", "true")])!], .headersHashMismatch),
            // CustomerInfo paths.
            get("NUL in the path id", "/v1/subscribers/%00", .invalidAppUserId),
            get("newline in the path id", "/v1/subscribers/a%0Ab", .invalidAppUserId),
            get("DEL in the path id", "/v1/subscribers/a%7Fb", .invalidAppUserId),
            get("invalid UTF-8 in the path id", "/v1/subscribers/%FF%FE", .invalidAppUserId),
            get("2 KB path id", "/v1/subscribers/\(longId)", .invalidAppUserId),
            get("traversal to a control character", "/v1/subscribers/..%2F..%2F%01", .invalidAppUserId),
            get("unknown sub-resource", "/v1/subscribers/u1/secrets", .notFound),
            get("traversal out of the API", "/v1/subscribers/../../etc/passwd", .notFound),
            get("secret key on offerings", "/v1/subscribers/u1/offerings", key: .secretKey, .wrongKeyKind),
            get("bad nonce on CustomerInfo", "/v1/subscribers/u1", headers: ["X-Nonce": nonce + "AAAA"], .malformedNonce),
            Case(
                description: "a method the endpoint lacks", method: .delete, path: "/v1/receipts", key: .publicKey, body: nil,
                expected: .methodNotAllowed),
            Case(description: "TRACE on the metrics", method: .trace, path: "/metrics", key: .none, body: nil, expected: .methodNotAllowed),
            get("257-character path id", "/v1/subscribers/\(String(repeating: "%C3%A9", count: 257))", .invalidAppUserId),
            get("X-ETag that this server never sends", "/v1/subscribers/u1", headers: ["X-ETag": "W/\"0123456789abcdef\""], .malformedRequest),
            get("X-ETag in upper case", "/v1/subscribers/u1", headers: ["X-ETag": "0123456789ABCDEF"], .malformedRequest),
            get("no Authorization and a bad nonce", "/v1/subscribers/u1", key: .none, headers: ["X-Nonce": "***"], .missingAPIKey),
            // Identify and the test store.
            post(
                "identify into an anonymous id", to: "/v1/subscribers/identify",
                json(["app_user_id": "u1", "new_app_user_id": "$CSAnonymousID:x"]), .invalidAppUserId),
            post("identify without the new id", to: "/v1/subscribers/identify", json(["app_user_id": "u1"]), .invalidField),
            post(
                "identify into a 2 KB id", to: "/v1/subscribers/identify", json(["app_user_id": "u1", "new_app_user_id": longId]), .invalidAppUserId),
            post("test store: unknown product", to: "/v1/test_store/purchases", json(["app_user_id": "u1", "product_id": "gold"]), .unknownProduct),
            post(
                "test store: token not a UUID", to: "/v1/test_store/purchases",
                json(["app_user_id": "u1", "product_id": "lifetime", "app_account_token": "u1"]), .invalidField),
            // Admin.
            post("grant with a public key", to: grant, json(["duration": "weekly"]), .wrongKeyKind),
            post(
                "grant of an unknown entitlement", to: "/v1/admin/customers/u1/entitlements/gold/promotional",
                json(["duration": "weekly"]), key: .secretKey, .unknownEntitlement),
            post("grant with a bad duration", to: grant, json(["duration": "forever-ish"]), key: .secretKey, .invalidField),
            Case(
                description: "delete an unknown customer", method: .delete, path: "/v1/admin/customers/nobody", key: .secretKey, body: nil,
                expected: .notFound),
            get("failure counts for 0 days", "/v1/admin/diagnostics/verification_failures?days=0", key: .secretKey, .invalidField),
            // Notifications and telemetry.
            post("notification not JSON", to: "/v1/notifications/apple", Data("signedPayload=x".utf8), key: .none, .malformedJSON),
            post(
                "notification with a transaction for a payload", to: "/v1/notifications/apple", json(["signedPayload": forged]), key: .none,
                .invalidStoreSignature),
            post(
                "telemetry with a secret key", to: "/v1/diagnostics/verification_failures",
                json(["failures": [["reason": "x", "path": "/", "mode": "enforced"]]]), key: .secretKey, .wrongKeyKind),
            post(
                "telemetry with a made-up reason", to: "/v1/diagnostics/verification_failures",
                json(["failures": [["reason": "ohNo1", "path": "/", "mode": "enforced"]]]), .invalidField),
            post(
                "telemetry with a made-up mode", to: "/v1/diagnostics/verification_failures",
                json(["failures": [["reason": "payloadMismatch", "path": "/", "mode": "paranoid"]]]), .invalidField),
            post(
                "telemetry with a duplicated key", to: "/v1/diagnostics/verification_failures",
                Data(#"{"failures":[],"failures":[{"reason":"payloadMismatch","path":"/","mode":"enforced"}]}"#.utf8), .duplicateJSONKey),
            post(
                "grant with a duplicated key", to: grant, Data(#"{"duration":"weekly","duration":"lifetime"}"#.utf8), key: .secretKey,
                .duplicateJSONKey),
        ]
    }

    @Test("at least 40 hostile requests: each a 4xx with its stable code, none changing the database", arguments: TestDatabaseKind.available)
    func hostileRequests(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            // Something to protect: a customer with a purchase.
            let (jws, _) = try harness.mint("pro_monthly")
            #expect(try await harness.post(user: "u1", jws: jws).status == 200)
            let cases = try Self.cases(harness)
            #expect(cases.count >= 40)
            var checked = 0
            for hostile in cases {
                let before = try await harness.snapshot()
                var headers = HTTPFields()
                for (name, value) in hostile.headers { headers[HTTPField.Name(name)!] = value }
                switch hostile.key {
                case .publicKey: headers[.authorization] = "Bearer \(harness.key)"
                case .secretKey: headers[.authorization] = "Bearer \(harness.secretKey)"
                case .custom(let value): headers[.authorization] = value
                case .none: break
                }
                let reply = try await harness.send(hostile.method, hostile.path, key: nil, body: hostile.body, headers: headers)
                #expect((400..<500).contains(reply.status), "\(hostile)")
                #expect(reply.status == hostile.expected.httpStatus, "\(hostile): status \(reply.status)")
                #expect(reply.code == hostile.expected.rawValue, "\(hostile): \(String(decoding: reply.body, as: UTF8.self))")
                // Unsigned endpoints never sign; signed ones sign their refusals once the request's
                // signed parts are checked (SignedErrorTests verifies those signatures).
                if !hostile.path.hasPrefix("/v1/subscribers") && !hostile.path.hasPrefix("/v1/receipts") && !hostile.path.hasPrefix("/v1/test_store")
                    && !hostile.path.hasPrefix("/v1/product_entitlement_mapping")
                {
                    #expect(reply.headers[SignatureHeader.signature] == nil, "\(hostile): errors of unsigned endpoints are not signed")
                }
                #expect(try await harness.snapshot() == before, "\(hostile) changed the database")
                checked += 1
            }
            print("hostile input (\(kind)): \(checked) requests checked")
        }
    }

    @Test(
        "a fraction or an out-of-range number where an integer belongs is a 400 naming the field, and changes nothing",
        arguments: TestDatabaseKind.available)
    func numbersNamed(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            _ = try await harness.customerInfo("u1")
            for number in ["1.5", "1e400", "99999999999999999999", "-9223372036854775809"] {
                let reply = try await harness.send(
                    .post, "/v1/admin/customers/u1/entitlements/pro/promotional", key: harness.secretKey,
                    body: Data(#"{"end_time_ms": \#(number)}"#.utf8), headers: [.contentType: "application/json"])
                #expect(reply.status == 400 && reply.code == APIErrorCode.invalidField.rawValue, "\(number)")
                #expect(reply.json["message"] as? String == "invalid body: 'end_time_ms' must be an integer of at most 64 bits, not \(number)")
            }
            #expect(ReceiptTests.entitlement(try await harness.customerInfo("u1"), "pro") == nil)
            #expect(JSONBody.unreadableNumber(in: Data(#"{"a":[1,{"b":2.5}],"c":1e3}"#.utf8))?.path == "a.1.b")
            #expect(JSONBody.unreadableNumber(in: Data(#"{"a":-0,"b":1e3,"c":9223372036854775807}"#.utf8)) == nil)
        }
    }

    @Test("a method a path lacks is answered 405 with the methods it takes", arguments: TestDatabaseKind.available)
    func methodNotAllowed(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let reply = try await harness.send(.get, "/v1/receipts", key: harness.key)
            #expect(reply.status == 405)
            #expect(reply.code == APIErrorCode.methodNotAllowed.rawValue)
            #expect(reply.headers[.allow] == "POST")
            let admin = try await harness.send(.put, "/v1/admin/customers/u1", key: harness.secretKey)
            #expect(admin.status == 405)
            #expect(admin.headers[.allow] == "GET, DELETE")
            #expect(try await harness.send(.get, "/v1/nothing-here", key: harness.key).status == 404)
        }
    }

    @Test("app user ids are limited to 256 characters, not bytes, as the OpenAPI document says", arguments: TestDatabaseKind.available)
    func appUserIdLengthInCharacters(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            // 256 two-byte characters: 512 bytes of UTF-8, still one valid id.
            let id = String(repeating: "é", count: 256)
            let (jws, _) = try harness.mint("lifetime", type: .nonConsumable)
            let reply = try await harness.post(user: id, jws: jws)
            #expect(reply.status == 200)
            let info = try await harness.send(.get, "/v1/subscribers/\(id.pathSegment)", key: harness.key)
            #expect(info.status == 200)
            let subscriber = try JSONSerialization.jsonObject(with: info.body) as! [String: Any]
            #expect((subscriber["subscriber"] as! [String: Any])["original_app_user_id"] as? String == id)
        }
    }
}
