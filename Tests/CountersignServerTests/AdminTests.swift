import CountersignAppStore
import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// The admin API over real HTTP: secret keys only; lookups, promotional grants, deletion, keys.
@Suite("Admin API")
struct AdminTests {
    static func grant(_ harness: ReceiptTests.Harness, _ user: String, _ body: [String: Any], entitlement: String = "pro") async throws -> Reply {
        try await harness.send(
            .post, "/v1/admin/customers/\(user)/entitlements/\(entitlement)/promotional", key: harness.secretKey,
            body: try JSONSerialization.data(withJSONObject: body))
    }

    @Test("lookup lists the customer's transactions; an unknown customer is a 404 and is not created", arguments: TestDatabaseKind.available)
    func lookup(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let (jws, payload) = try harness.mint("pro_monthly")
            _ = try await harness.post(user: "u1", jws: jws)
            let found = try await harness.send(.get, "/v1/admin/customers/u1", key: harness.secretKey)
            #expect(found.status == 200)
            #expect(found.headers[SignatureHeader.signature] == nil)
            let transactions = found.json["transactions"] as? [[String: Any]] ?? []
            #expect(transactions.map { $0["transaction_id"] as? String } == [payload.transactionId])
            #expect(((found.json["customer_info"] as? [String: Any]).map { ReceiptTests.entitlement($0, "pro") } ?? nil) != nil)

            let before = try await harness.snapshot()
            let missing = try await harness.send(.get, "/v1/admin/customers/nobody", key: harness.secretKey)
            #expect(missing.status == 404)
            #expect(missing.code == APIErrorCode.notFound.rawValue)
            #expect(try await harness.snapshot() == before)

            let info = try await harness.send(.get, "/v1/admin/customers/u1/customer_info", key: harness.secretKey)
            #expect(info.status == 200)
            #expect(ReceiptTests.entitlement(info.json, "pro") != nil)
        }
    }

    @Test("a weekly promotional grant unlocks pro in the signed CustomerInfo until revoked", arguments: TestDatabaseKind.available)
    func grantAndRevoke(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let granted = try await Self.grant(harness, "u7", ["duration": "weekly"])
            #expect(granted.status == 201)
            let info = try await harness.customerInfo("u7")
            #expect(ReceiptTests.isActive(info, "pro"))
            let pro = try #require(ReceiptTests.entitlement(info, "pro"))
            #expect(pro["product_identifier"] as? String == "rc_promo_pro_weekly")  // RevenueCat's name
            let expires = try #require(WireDate.parse(pro["expires_date"] as? String ?? ""))
            #expect(abs(expires.timeIntervalSinceNow - 7 * 86_400) < 120)

            let revoked = try await harness.send(.post, "/v1/admin/customers/u7/entitlements/pro/revoke_promotionals", key: harness.secretKey)
            #expect(revoked.status == 200)
            #expect(!ReceiptTests.isActive(try await harness.customerInfo("u7"), "pro"))

            #expect(try await Self.grant(harness, "u8", ["duration": "lifetime"]).status == 201)
            let lifetime = try #require(ReceiptTests.entitlement(try await harness.customerInfo("u8"), "pro"))
            #expect(lifetime["expires_date"] is NSNull, "a lifetime grant never expires: RevenueCat writes null")
            #expect(lifetime["product_identifier"] as? String == "rc_promo_pro_lifetime")
        }
    }

    @Test(
        "RevenueCat's REST API with the secret key: promotional grants, their revocation and deletion at RevenueCat's paths and answers",
        arguments: TestDatabaseKind.available)
    func revenueCatPaths(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let granted = try await harness.send(
                .post, "/v1/subscribers/u9/entitlements/pro/promotional", key: harness.secretKey,
                body: try JSONSerialization.data(withJSONObject: ["duration": "monthly"]), headers: [.contentType: "application/json"])
            #expect(granted.status == 201)
            // RevenueCat answers a grant with the subscriber.
            #expect((granted.json["subscriber"] as? [String: Any])?["original_app_user_id"] as? String == "u9")
            #expect(ReceiptTests.isActive(granted.json, "pro"))
            #expect(ReceiptTests.isActive(try await harness.customerInfo("u9"), "pro"))
            // RevenueCat lists a grant as a subscription of store `promotional` named rc_promo_….
            let promotional = Self.subscriptions(granted.json)["rc_promo_pro_monthly"]
            #expect(promotional?["store"] as? String == "promotional")
            #expect(promotional?["is_sandbox"] as? Bool == false)
            #expect(promotional?["price"] is NSNull && promotional?["unsubscribe_detected_at"] is NSNull)
            // What a purchase cost, from its signed transaction: `price` {amount, currency}.
            var coins = TestStoreCA.Purchase(productId: "coins_100", type: .consumable, bundleId: harness.app.bundleId)
            coins.price = 12_990
            coins.currency = "EUR"
            let bought = try await harness.post(user: "u9", jws: try harness.ca.mintTransaction(coins).jws)
            let paid =
                (((bought.json["subscriber"] as? [String: Any])?["non_subscriptions"] as? [String: Any])?["coins_100"] as? [[String: Any]])?
                .first?["price"] as? [String: Any]
            #expect(paid?["amount"] as? Double == 12.99 && paid?["currency"] as? String == "EUR")
            var monthly = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId)
            monthly.price = 0
            monthly.currency = "JPY"
            _ = try await harness.post(user: "u8", jws: try harness.ca.mintTransaction(monthly).jws)
            let read = try await harness.send(.get, "/v1/subscribers/u8", key: harness.secretKey)
            let subscription = Self.subscriptions(read.json)["pro_monthly"]
            #expect((subscription?["price"] as? [String: Any])?["amount"] as? Double == 0)
            #expect((subscription?["price"] as? [String: Any])?["currency"] as? String == "JPY")
            // A public key opens none of them.
            #expect(
                try await harness.send(.post, "/v1/subscribers/u9/entitlements/pro/revoke_promotionals", key: harness.key).code
                    == APIErrorCode.wrongKeyKind.rawValue)
            #expect(try await harness.send(.delete, "/v1/subscribers/u9", key: harness.key).code == APIErrorCode.wrongKeyKind.rawValue)
            let revoked = try await harness.send(.post, "/v1/subscribers/u9/entitlements/pro/revoke_promotionals", key: harness.secretKey)
            #expect(revoked.status == 200)
            #expect(!ReceiptTests.isActive(revoked.json, "pro"))
            #expect(
                try await harness.send(.post, "/v1/subscribers/nobody/entitlements/pro/revoke_promotionals", key: harness.secretKey).status == 404)
            let deleted = try await harness.send(.delete, "/v1/subscribers/u9", key: harness.secretKey)
            #expect(deleted.status == 200)
            #expect(deleted.json["app_user_id"] as? String == "u9" && deleted.json["deleted"] as? Bool == true)
            #expect(try await harness.send(.get, "/v1/admin/customers/u9", key: harness.secretKey).status == 404)
            #expect(try await harness.send(.delete, "/v1/subscribers/u9", key: harness.secretKey).status == 404)
        }
    }

    static func subscriptions(_ json: [String: Any]) -> [String: [String: Any]] {
        ((json["subscriber"] as? [String: Any])?["subscriptions"] as? [String: [String: Any]]) ?? [:]
    }

    @Test("bad grants are refused and store nothing")
    func badGrants() async throws {
        try await ReceiptTests.withHarness(.sqlite) { harness in
            let before = try await harness.snapshot()
            let cases: [([String: Any], String, APIErrorCode)] = [
                (["duration": "fortnightish"], "pro", .invalidField),
                (["duration": "weekly", "end_time_ms": 1], "pro", .invalidField),
                ([:], "pro", .invalidField),
                (["end_time_ms": 1000], "pro", .invalidField),
                (["duration": 7], "pro", .invalidField),
                (["duration": "weekly"], "gold", .unknownEntitlement),
            ]
            for (body, entitlement, code) in cases {
                let reply = try await Self.grant(harness, "u1", body, entitlement: entitlement)
                #expect(reply.code == code.rawValue, "\(body)")
                #expect(reply.status == code.httpStatus)
            }
            #expect(try await harness.snapshot() == before)
        }
    }

    @Test(
        "deleting a customer removes them; their purchase stays recorded and cannot be claimed under keepWithOriginal",
        arguments: TestDatabaseKind.available)
    func delete(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind, transferBehavior: .keepWithOriginal) { harness in
            let (jws, payload) = try harness.mint("lifetime", type: .nonConsumable)
            _ = try await harness.post(user: "u1", jws: jws)
            let deleted = try await harness.send(.delete, "/v1/admin/customers/u1", key: harness.secretKey)
            #expect(deleted.status == 200)
            #expect(deleted.json["deleted"] as? Bool == true)
            #expect(try await harness.send(.get, "/v1/admin/customers/u1", key: harness.secretKey).status == 404)
            #expect(try await harness.send(.delete, "/v1/admin/customers/u1", key: harness.secretKey).status == 404)
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: payload.transactionId!) == 1)
            #expect(try await harness.post(user: "u2", jws: jws).json["code"] as? Int == APIErrorCode.purchaseOwnedByAnotherUser.rawValue)
        }
    }

    @Test("public keys cannot use the admin API and secret keys cannot use public endpoints")
    func keyKinds() async throws {
        try await ReceiptTests.withHarness(.sqlite) { harness in
            let admin = try await harness.send(.get, "/v1/admin/keys", key: harness.key)
            #expect(admin.status == 403)
            #expect(admin.code == APIErrorCode.wrongKeyKind.rawValue)
            #expect(try await harness.send(.get, "/v1/admin/keys", key: nil).code == APIErrorCode.missingAPIKey.rawValue)
            let status = try await harness.send(.get, "/v1/admin/keys", key: harness.secretKey)
            #expect(status.status == 200)
            #expect(status.json["mode"] as? String == "managed")
            #expect(status.json["root_public_key"] as? String == harness.server.keys.managedRootPublicKey?.rawRepresentation.base64EncodedString())
            #expect((status.json["intermediate_days_left"] as? Double ?? 0) > 20)
            let publicEndpoint = try await harness.send(.get, "/v1/subscribers/u1/offerings", key: harness.secretKey)
            #expect(publicEndpoint.code == APIErrorCode.wrongKeyKind.rawValue)
            // RevenueCat's backends read CustomerInfo with the secret key: it opens that one route.
            let customerInfo = try await harness.send(.get, "/v1/subscribers/u1", key: harness.secretKey)
            #expect(customerInfo.status == 200)
        }
    }
}
