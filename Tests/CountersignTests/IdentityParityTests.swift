import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import Countersign

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The last RevenueCat API and value gaps of the identity issue, each against the RevenueCat test
/// it follows, and an install that still holds an id merged by logIn, over real HTTP.
@Suite("Identity parity with RevenueCat's SDK")
struct IdentityParityTests {
    // MARK: An alias through the SDK

    @Test(
        "an install that still holds the anonymous id a logIn merged gets the customer's verified entitlements (enforced)",
        arguments: TestDatabaseKind.available)
    func aliasInstall(_ kind: TestDatabaseKind) async throws {
        try await SDKHarness.run(database: kind) { harness in
            let phone = try harness.purchases(mode: .enforced, user: nil, storage: "phone")
            _ = try await phone.purchase(productID: "lifetime")
            let anonymous = phone.appUserID
            #expect(ReservedAppUserID.isAnonymous(anonymous))
            _ = try await phone.logIn("bob")

            // The same id on another install (RevenueCat's id carried over, a backup restored).
            let old = try harness.purchases(mode: .enforced, user: anonymous, storage: "old-install")
            let info = try await old.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(info.entitlements["pro"]?.isActive == true)
            #expect(info.entitlements.verification == .verified)
            // RevenueCat's `originalAppUserId`: bob's first id, the anonymous one he started as.
            #expect(info.originalAppUserId == anonymous)
            #expect(info.verificationFailure == nil)
            // Cached for the alias, it answers again from the cache.
            #expect(try await old.customerInfo(fetchPolicy: .fromCacheOnly).entitlements["pro"]?.isActive == true)
        }
    }

    @Test(
        "from the attacker's side: a purchase post rewritten to a paying customer's alias is answered, signed, for the alias, and refused for the device's user"
    )
    func rewrittenPostToAlias() async throws {
        try await SDKHarness.run { harness in
            // bob pays; his anonymous id is an alias of his.
            let phone = try harness.purchases(mode: .enforced, user: nil, storage: "bob-phone")
            _ = try await phone.purchase(productID: "lifetime")
            let alias = phone.appUserID
            _ = try await phone.logIn("bob")
            // mallory's proxy rewrites her receipt post to name bob's alias: the server signs a
            // genuine answer for that request (the answer's nonce and path are hers).
            let (jws, _) = try harness.server.testStore!.mintTransaction(
                .init(productId: "coins_100", type: .consumable, bundleId: harness.app.bundleId))
            let nonce = SignedRequestParts.makeNonce()
            let hash = try #require(FieldsHash.headerValue([("app_user_id", alias), ("fetch_token", jws)]))
            var request = URLRequest(url: harness.serverURL.appendingPathComponent("v1/receipts"))
            request.httpMethod = "POST"
            request.httpBody = try JSONSerialization.data(withJSONObject: ["app_user_id": alias, "fetch_token": jws])
            request.setValue("Bearer \(harness.apiKey)", forHTTPHeaderField: "Authorization")
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.setValue(nonce.base64EncodedString(), forHTTPHeaderField: WireHeader.nonce)
            request.setValue(hash, forHTTPHeaderField: WireHeader.postParamsHash)
            let (body, response) = try await URLSession.shared.data(for: request)
            let http = try #require(response as? HTTPURLResponse)
            let verifier = SignatureVerifier(rootKeys: [harness.server.keys.managedRootPublicKey!])
            let outcome = verifier.verify(
                request: SignedRequestParts(authValue: harness.apiKey, nonce: nonce, path: "/v1/receipts", postParamsHash: hash),
                response: ReceivedResponse(
                    statusCode: http.statusCode, signature: http.value(forHTTPHeaderField: WireHeader.signature),
                    requestTime: http.value(forHTTPHeaderField: WireHeader.requestTime), etag: nil, body: body))
            #expect(outcome == .verified)
            let info = try CustomerInfo(answer: body, verification: .verified, failure: nil, now: Date())
            #expect(info.originalAppUserId == alias && info.entitlements["pro"]?.isActive == true)
            // The SDK takes it for the alias only: for mallory it is another user's answer.
            #expect(info.answers(for: alias))
            #expect(!info.answers(for: "mallory"))
            #expect(!info.answers(for: "bob-impostor"))
        }
    }

    // MARK: The delegate at launch

    @Test("the delegate's first receivedUpdated at launch, from the cache and then the fetch, comes on the main actor, as RevenueCat's")
    func delegateAtLaunchOnMain() async throws {
        try await SDKHarness.run { harness in
            try await harness.givePro(to: "launcher")
            let first = try harness.purchases(mode: .enforced, user: "launcher", storage: "launcher")
            _ = try await first.customerInfo(fetchPolicy: .fetchCurrent)
            // A new launch on the same storage: the delegate is set as an app's launch sets it.
            DispatchQueue.main.setSpecific(key: SDKBehaviourTests.Received.mainQueueKey, value: true)
            let delegate = SDKBehaviourTests.Received()
            let relaunched = try harness.purchases(mode: .enforced, user: "launcher", storage: "launcher")
            relaunched.delegate = delegate
            #expect(try await waitUntil(limit: .seconds(30)) { !delegate.infos.all.isEmpty })
            _ = try await relaunched.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(delegate.infos.all.first?.entitlements["pro"]?.isActive == true)
            #expect(!delegate.onMain.all.isEmpty && delegate.onMain.all.allSatisfy { $0 }, "\(delegate.onMain.all)")
        }
    }

    // MARK: Offering.getMetadataValue<T: Decodable>(for:)

    /// RevenueCat's `OfferingsTests.testMetadata` values, as an answer of this server would carry them.
    static func metadataOffering() throws -> Offerings.Offering {
        let body = Data(
            """
            {"current_offering_id":"offering_a","offerings":[{"identifier":"offering_a","description":"This is the base offering",
            "packages":[],"metadata":{"int":5,"double":5.5,"boolean":true,"string":"five","optionalInt":null,
            "elements":[{"number":1},{"number":2}],"element":{"number":3},"dictionary":{"string":"five"}}}]}
            """.utf8)
        return try #require(try Offerings(answer: body, verification: .verified, products: [:])["offering_a"])
    }

    struct Element: Decodable, Equatable {
        var number: Int
    }

    @Test("getMetadataValue(for:) without a default, as RevenueCat's OfferingsTests.testMetadata asserts it")
    func metadataWithoutDefault() throws {
        let offering = try Self.metadataOffering()
        #expect(offering.metadata.count == 8)
        let int: Int? = offering.getMetadataValue(for: "int")
        #expect(int == 5)
        let double: Double? = offering.getMetadataValue(for: "double")
        #expect(double == 5.5)
        let bool: Bool? = offering.getMetadataValue(for: "boolean")
        #expect(bool == true)
        let string: String? = offering.getMetadataValue(for: "string")
        #expect(string == "five")
        let elements: [Element]? = offering.getMetadataValue(for: "elements")
        #expect(elements == [.init(number: 1), .init(number: 2)])
        let element: Element? = offering.getMetadataValue(for: "element")
        #expect(element == .init(number: 3))
        let missing: Element? = offering.getMetadataValue(for: "missing")
        #expect(missing == nil)
        #expect((offering.getMetadataValue(for: "dictionary") as Element?) == nil)
        // The form with a default is unchanged.
        #expect(offering.getMetadataValue(for: "int", default: 0) == 5)
        #expect(offering.getMetadataValue(for: "string", default: 5.5) == 5.5)
        let optionalInt: Int? = offering.getMetadataValue(for: "optionalInt", default: nil)
        #expect(optionalInt == nil)
    }

    struct Headline: Decodable, Equatable {
        var text: String
        var appendsLocalizedPrice: Bool
    }

    @Test("metadata of any JSON in countersign.json reaches getMetadataValue(for:) over HTTP, keys from snake case, as RevenueCat's")
    func configuredMetadata() async throws {
        try await SDKHarness.run(configure: { deployment, _ in
            deployment.apps[0].offerings[0].metadata = [
                "headline": .object(["text": "Go Pro", "appends_localized_price": .bool(true)]),
                "bullets": .array(["Sync", "Themes"]), "free_credits": .integer(3), "close_opacity": .number(0.5),
                "subhead": "Unlock everything", "nothing": .null,
            ]
        }) { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "reader", storage: "metadata")
            let offering = try #require(try await purchases.offerings().current)
            let headline: Headline? = offering.getMetadataValue(for: "headline")
            #expect(headline == Headline(text: "Go Pro", appendsLocalizedPrice: true))
            let bullets: [String]? = offering.getMetadataValue(for: "bullets")
            #expect(bullets == ["Sync", "Themes"])
            #expect(offering.getMetadataValue(for: "free_credits", default: 0) == 3)
            // Typed, as an app's property is: in `#expect(… == 0.5)` Swift would read the literal
            // as a Decimal, which a JSON number never is.
            let opacity: Double = offering.getMetadataValue(for: "close_opacity", default: 1.0)
            #expect(opacity == 0.5)
            #expect(offering.getMetadataValue(for: "subhead", default: "") == "Unlock everything")
            #expect(offering.metadata.count == 6)
        }
    }

    // MARK: product_plan_identifier

    /// RevenueCat's `BasicCustomerInfoTests.validSubscriberResponse` (Google Play's `gold` with
    /// base plan `monthly`; two subscriptions without `purchase_date`), as JSON.
    static func basicCustomerInfo() -> Data {
        let yesterday = WireDate.format(Date().addingTimeInterval(-86_400))
        return Data(
            """
            {"request_date":"2018-10-19T02:40:36Z","request_date_ms":1563379533946,"subscriber":{
            "original_app_user_id":"app_user_id","original_application_version":"2083","first_seen":"2019-06-17T16:05:33Z",
            "non_subscriptions":{"onetime_purchase":[{"id":"d6c007ba74","store_transaction_id":"340001090153249","is_sandbox":true,
            "original_purchase_date":"1990-08-30T02:40:36Z","purchase_date":"1990-08-30T02:40:36Z","store":"play_store"}]},
            "subscriptions":{
            "onemonth_freetrial":{"expires_date":"2100-08-30T02:40:36Z","period_type":"normal","is_sandbox":false},
            "gold":{"expires_date":"2100-07-30T02:40:36Z","period_type":"normal","is_sandbox":false,"product_plan_identifier":"monthly",
            "purchase_date":"2018-05-20T06:24:50Z"},
            "onemonth":{"expires_date":"\(yesterday)","period_type":"normal","is_sandbox":false},
            "threemonth_freetrial":{"period_type":"normal","purchase_date":"2018-05-20T06:24:50Z","expires_date":"2018-08-30T02:40:36Z"}},
            "entitlements":{
            "pro":{"expires_date":"2100-08-30T02:40:36Z","product_identifier":"onemonth_freetrial","purchase_date":"2018-10-26T23:17:53Z"},
            "forever_pro":{"expires_date":null,"product_identifier":"onetime_purchase","purchase_date":"1990-08-30T02:40:36Z"}}}}
            """.utf8)
    }

    @Test(
        "a Play Store base plan makes productId:basePlan ids (RevenueCat: BasicCustomerInfoTests.testListActiveSubscriptions, testAllPurchasedProductIdentifier)"
    )
    func productPlanIdentifier() throws {
        let info = try CustomerInfo(answer: Self.basicCustomerInfo(), verification: .notRequested, failure: nil, now: Date())
        #expect(info.activeSubscriptions == ["onemonth_freetrial", "gold:monthly"])
        #expect(
            info.allPurchasedProductIdentifiers == ["onemonth", "onemonth_freetrial", "threemonth_freetrial", "gold:monthly", "onetime_purchase"])
        // RevenueCat: BasicCustomerInfoTests.testParsesExpirationDate.
        #expect(info.expirationDate(forProductIdentifier: "onemonth_freetrial")?.timeIntervalSince1970 == 4_123_276_836)
        #expect(info.entitlements.active.keys.contains("pro"))
        #expect(info.entitlements.active.keys.contains("forever_pro"))
    }

    // MARK: CustomerInfoWithInvalidSubscription

    @Test(
        "a subscription RevenueCat cannot decode fails the answer (RevenueCat: CustomerInfoInvalidDataDecodingTests.testDecodingCustomerInfoWithInvalidSubscriptionFailsToDecode)",
        arguments: [
            #""subscriptions":{"pro":{"purchase_date":"not a date","period_type":"normal","is_sandbox":false}}"#,
            #""subscriptions":{"pro":{"purchase_date":"2018-05-20T06:24:50Z","price":{"currency":"USD"}}}"#,
            #""subscriptions":{"pro":{"purchase_date":"2018-05-20T06:24:50Z","product_plan_identifier":7}}"#,
            #""non_subscriptions":{"coins":[{"id":"a","purchase_date":"2018-05-20T06:24:50Z","is_sandbox":"yes"}]}"#,
            #""subscriptions":{"pro":{"expires_date":"2100-08-30"}}"#,
            #""entitlements":{"pro":{"expires_date":null,"purchase_date":"2018-05-20T06:24:50Z"}}"#,
            #""subscriptions":{"pro":{"purchase_date":"2018-05-20T06:24:50Z","expires_date":1234}}"#,
            #""subscriptions":{"pro":"invalid"}"#,
            #""subscriptions":["pro"]"#,
            #""non_subscriptions":{"coins":[{"id":"a","purchase_date":"yesterday","is_sandbox":true,"store":"app_store"}]}"#,
            #""non_subscriptions":{"coins":{"id":"a"}}"#,
        ])
    func invalidSubscription(_ purchases: String) throws {
        let body =
            Data(
                #"{"request_date":"2018-10-19T02:40:36Z","request_date_ms":1563379533946,"subscriber":{"original_app_user_id":"u","first_seen":"2019-06-17T16:05:33Z","#
                    .utf8) + Data(purchases.utf8) + Data("}}".utf8)
        #expect(throws: (any Error).self) { try CustomerInfo(answer: body, verification: .notRequested, failure: nil, now: Date()) }
    }
}
