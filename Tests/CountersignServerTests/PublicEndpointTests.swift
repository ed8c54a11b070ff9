import CountersignAppStore
import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// The catalogue, logIn and test-store endpoints, over real HTTP, on both databases.
@Suite("Offerings, product mapping, identify and the test store endpoint")
struct PublicEndpointTests {
    typealias Harness = ReceiptTests.Harness

    @Test(
        "offerings and the product→entitlement mapping are signed, cacheable, and answered 304 for a matching ETag",
        arguments: TestDatabaseKind.available)
    func catalogue(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let offerings = try await harness.signed(.get, "/v1/subscribers/u1/offerings")
            #expect(offerings.reply.status == 200)
            #expect(offerings.outcome == .verified)
            #expect(offerings.reply.json["current_offering_id"] as? String == "default")
            let packages = ((offerings.reply.json["offerings"] as? [[String: Any]])?.first?["packages"] as? [[String: Any]]) ?? []
            #expect(packages.compactMap { $0["platform_product_identifier"] as? String } == ["pro_monthly", "lifetime"])

            let mapping = try await harness.signed(.get, "/v1/product_entitlement_mapping")
            #expect(mapping.outcome == .verified)
            let products = mapping.reply.json["product_entitlement_mapping"] as? [String: [String: Any]]
            #expect(products?["pro_monthly"]?["entitlements"] as? [String] == ["pro"])
            #expect(products?["coins_100"]?["entitlements"] as? [String] == [])

            let etag = try #require(mapping.reply.headers[SignatureHeader.etag])
            let cached = try await harness.signed(.get, "/v1/product_entitlement_mapping", etag: etag)
            #expect(cached.reply.status == 304)
            #expect(cached.reply.body.isEmpty)
            #expect(cached.outcome == .verified)
        }
    }

    @Test(
        "CustomerInfo: the body is the plain encoding; a matching ETag gets a signed 304 after the request date moved",
        arguments: TestDatabaseKind.available)
    func customerInfoETag(_ kind: TestDatabaseKind) async throws {
        let clock = ManualClock(Date())
        try await ReceiptTests.withHarness(kind, clock: clock) { harness in
            let (jws, _) = try harness.mint("pro_monthly")
            #expect(try await harness.post(user: "u1", jws: jws).status == 200)
            let first = try await harness.signed(.get, "/v1/subscribers/u1")
            #expect(first.outcome == .verified)
            let info = try JSONDecoder().decode(SubscriberResponse.self, from: first.reply.body)
            #expect(first.reply.body == (try WireJSON.encode(info)))
            let etag = try #require(first.reply.headers[SignatureHeader.etag])

            clock.now += 2  // the next answer has another request_date
            let cached = try await harness.signed(.get, "/v1/subscribers/u1", etag: etag)
            #expect(cached.reply.status == 304)
            #expect(cached.outcome == .verified)

            // A change to the customer changes the ETag: a full signed 200.
            let (other, _) = try harness.mint("lifetime", type: .nonConsumable)
            #expect(try await harness.post(user: "u1", jws: other).status == 200)
            let changed = try await harness.signed(.get, "/v1/subscribers/u1", etag: etag)
            #expect(changed.reply.status == 200)
            #expect(changed.outcome == .verified)
            #expect(changed.reply.headers[SignatureHeader.etag] != etag)
        }
    }

    @Test("identify merges an anonymous user's purchase into the new user: 201 the first time, 200 after", arguments: TestDatabaseKind.available)
    func identifyMergesAnonymous(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let anonymous = "$CSAnonymousID:\(UUID().uuidString)"
            let (jws, _) = try harness.mint("pro_monthly")
            #expect(try await harness.post(user: anonymous, jws: jws).status == 200)

            let body = ["app_user_id": anonymous, "new_app_user_id": "known"]
            let first = try await harness.signed(.post, "/v1/subscribers/identify", json: body, paramKeys: ParamKeys.identify)
            #expect(first.reply.status == 201)
            #expect(first.outcome == .verified)
            #expect(first.reply.json["created"] as? Bool == true)
            #expect(ReceiptTests.entitlement(first.reply.json, "pro") != nil)
            // The anonymous id is now an alias of the customer: it answers as them (RevenueCat's
            // aliases; IdentityTests holds the rest of the rule).
            let merged = try await harness.customerInfo(anonymous)
            #expect(ReceiptTests.entitlement(merged, "pro") != nil)
            // RevenueCat's `original_app_user_id`: the customer's first id, the anonymous one.
            #expect((merged["subscriber"] as? [String: Any])?["original_app_user_id"] as? String == anonymous)

            let again = try await harness.signed(.post, "/v1/subscribers/identify", json: body, paramKeys: ParamKeys.identify)
            #expect(again.reply.status == 200)
            #expect(again.reply.json["created"] as? Bool == false)
            #expect(ReceiptTests.entitlement(again.reply.json, "pro") != nil)
        }
    }

    @Test("identify from one known user to another moves nothing", arguments: TestDatabaseKind.available)
    func identifyBetweenKnownUsers(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let (jws, _) = try harness.mint("lifetime", type: .nonConsumable)
            #expect(try await harness.post(user: "alice", jws: jws).status == 200)
            let body = ["app_user_id": "alice", "new_app_user_id": "bob"]
            let answer = try await harness.signed(.post, "/v1/subscribers/identify", json: body, paramKeys: ParamKeys.identify)
            #expect(answer.reply.status == 201)
            #expect(ReceiptTests.entitlement(answer.reply.json, "pro") == nil)
            #expect(ReceiptTests.entitlement(try await harness.customerInfo("alice"), "pro") != nil)
        }
    }

    @Test("the test store endpoint mints a transaction the receipts endpoint accepts", arguments: TestDatabaseKind.available)
    func testStorePurchase(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let token = AppAccountToken.forAppUserID("u1").uuidString
            let minted = try await harness.signed(
                .post, "/v1/test_store/purchases", json: ["app_user_id": "u1", "product_id": "pro_monthly", "app_account_token": token],
                paramKeys: ParamKeys.testPurchase
            )
            #expect(minted.reply.status == 200)
            #expect(minted.outcome == .verified)
            let jws = try #require(minted.reply.json["signed_transaction"] as? String)
            let posted = try await harness.post(user: "u1", jws: jws)
            #expect(posted.json["purchase_status"] as? String == "new")
            #expect(ReceiptTests.entitlement(posted.json, "pro") != nil)
            // The token binds it: another user posting it does not get it.
            #expect(try await harness.post(user: "u2", jws: jws).json["code"] as? Int == APIErrorCode.purchaseBoundToAnotherUser.rawValue)
        }
    }

    @Test("an app without TestStore cannot mint test purchases (403)")
    func testStoreDisabled() async throws {
        try await ReceiptTests.withHarness(.sqlite, environments: ["Sandbox"]) { harness in
            let minted = try await harness.signed(
                .post, "/v1/test_store/purchases", json: ["app_user_id": "u1", "product_id": "pro_monthly"],
                paramKeys: ParamKeys.testPurchase
            )
            #expect(minted.reply.status == 403)
            #expect(minted.reply.code == APIErrorCode.testStoreNotEnabled.rawValue)
        }
    }
}
