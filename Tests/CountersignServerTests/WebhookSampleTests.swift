import CountersignAppStore
import CountersignCore
import CountersignTesting
import Foundation
import HTTPTypes
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Our webhook bodies against RevenueCat's own published samples (Tests/Fixtures/revenuecat/
/// webhooks, from RevenueCat's documentation repository), event type by event type: every key of
/// RevenueCat's sample is in ours with the same JSON type, and every key of ours is one
/// RevenueCat documents. The events are made by real purchases, notifications and test-store
/// actions, and caught as delivered over real HTTP.
@Suite("RevenueCat's webhook samples", .serialized)
struct WebhookSampleTests {
    /// Sample keys Countersign does not send, with the reason (docs/webhooks.md, "The body"):
    /// `price_experiments` is the older name of `experiments`, which is sent (empty).
    static let notSent: Set<String> = ["price_experiments"]

    /// Every event field RevenueCat documents (Event Types and Fields: common, subscription
    /// lifecycle and transfer fields).
    static let documented: Set<String> = [
        "type", "id", "app_id", "event_timestamp_ms", "app_user_id", "original_app_user_id", "aliases", "subscriber_attributes",
        "product_id", "entitlement_ids", "entitlement_id", "period_type", "purchased_at_ms", "grace_period_expiration_at_ms",
        "expiration_at_ms", "store", "environment", "is_trial_conversion", "cancel_reason", "expiration_reason", "new_product_id",
        "presented_offering_id", "price", "currency", "price_in_purchased_currency", "tax_percentage", "commission_percentage",
        "takehome_percentage", "transaction_id", "original_transaction_id", "is_family_share", "transferred_from", "transferred_to",
        "country_code", "offer_code", "renewal_number", "experiments", "metadata",
    ]

    /// A JSON value's kind as it is written: `null`, `boolean`, `number`, `string`, `array` or
    /// `object` (JSON has one number type).
    static func kind(_ value: Any) -> String {
        let text = String(decoding: (try? JSONSerialization.data(withJSONObject: value, options: [.fragmentsAllowed])) ?? Data(), as: UTF8.self)
        switch text.first {
        case "n": return "null"
        case "t", "f": return "boolean"
        case "\"": return "string"
        case "[": return "array"
        case "{": return "object"
        default: return "number"
        }
    }

    /// The differences between RevenueCat's sample event and ours: missing keys, keys of another
    /// JSON type (null on either side matches: RevenueCat documents these fields as nullable,
    /// and a sample shows one value), and keys RevenueCat does not document.
    static func differences(sample: [String: Any], ours: [String: Any]) -> [String] {
        var problems: [String] = []
        for (key, value) in sample where !notSent.contains(key) {
            guard let mine = ours[key] else {
                problems.append("missing \(key)")
                continue
            }
            let (theirs, own) = (kind(value), kind(mine))
            if theirs != own, theirs != "null", own != "null" { problems.append("\(key): \(own), RevenueCat's is \(theirs)") }
        }
        for key in ours.keys where !documented.contains(key) { problems.append("undocumented \(key)") }
        return problems.sorted()
    }

    static func sample(_ name: String) throws -> [String: Any] {
        let object = try #require(try JSONSerialization.jsonObject(with: Fixtures.data("revenuecat/webhooks/\(name).json")) as? [String: Any])
        #expect(object["api_version"] as? String == "1.0")
        return try #require(object["event"] as? [String: Any])
    }

    @Test("each event type's delivered body has the keys and JSON types of RevenueCat's sample", arguments: TestDatabaseKind.available)
    func samples(_ kind: TestDatabaseKind) async throws {
        try await WebhookTests.withSetup(kind, attemptTimeout: 20) { setup in
            let harness = setup.harness
            let store = harness.server.store
            // alice used the app anonymously, then logged in; she has an attribute.
            let anonymous = "$RCAnonymousID:8069238d6049ce87cc529853916d624c"
            _ = try await harness.signed(
                .post, "/v1/subscribers/identify", json: ["app_user_id": anonymous, "new_app_user_id": "alice"], paramKeys: ParamKeys.identify)
            _ = try await store.setAttributes(
                app: harness.app.id, user: "alice", ["$email": .init(value: "alice@example.com", updatedAtMs: 1_790_000_000_000)], now: Date())

            var purchase = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId)
            purchase.price = 4_990
            let (jws, original) = try harness.ca.mintTransaction(purchase)
            // INITIAL_PURCHASE, bought from the paywall's "default" offering, with an attribute the
            // SDK had not sent yet and one the rules refuse (left out; the purchase goes through).
            let extra: [String: Any] = [
                "presented_offering_identifier": "default",
                "attributes": [
                    "$mediaSource": ["value": "search", "updated_at_ms": 1_790_000_000_000], "$bogus": ["value": "x", "updated_at_ms": 1],
                ],
            ]
            #expect(try await harness.post(user: "alice", jws: jws, extra: extra).status == 200)
            let chain = try #require(original.originalTransactionId)
            let renewal = try await setup.testStore("renew", ["original_transaction_id": chain])  // RENEWAL
            let renewalId = try #require(renewal["transaction_id"] as? String)
            let current = try #require(try await store.latestSignedTransaction(app: harness.app.id, originalTransactionId: chain))
            let currentPayload = try AppStoreJSON.decode(TransactionPayload.self, from: UnverifiedJWS(current).payload)
            // Copies signed after the stored one, within the five minutes the server allows ahead of
            // its (stopped) clock.
            func copy(_ offset: TimeInterval, _ change: (inout TransactionPayload) -> Void) throws -> String {
                var payload = currentPayload
                change(&payload)
                payload.signedDate = (currentPayload.signedDate ?? setup.clock.now).addingTimeInterval(offset)
                return try harness.ca.sign(payload)
            }
            func renewalInfo(_ offset: TimeInterval, _ change: (inout RenewalInfoPayload) -> Void) -> RenewalInfoPayload {
                var info = RenewalInfoPayload(
                    originalTransactionId: chain, productId: "pro_monthly", environment: .testStore,
                    signedDate: setup.clock.now.addingTimeInterval(offset))
                info.autoRenewStatus = 1
                change(&info)
                return info
            }
            // CANCELLATION (UNSUBSCRIBE), UNCANCELLATION, PRODUCT_CHANGE, BILLING_ISSUE.
            #expect(
                try await ReceiptTests.notify(
                    harness, .didChangeRenewalStatus, subtype: .autoRenewDisabled, renewal: renewalInfo(1) { $0.autoRenewStatus = 0 }) == 200)
            #expect(
                try await ReceiptTests.notify(harness, .didChangeRenewalStatus, subtype: .autoRenewEnabled, renewal: renewalInfo(2) { _ in }) == 200)
            #expect(
                try await ReceiptTests.notify(
                    harness, .didChangeRenewalPref, subtype: .upgrade, renewal: renewalInfo(3) { $0.autoRenewProductId = "pro_yearly" }) == 200)
            #expect(
                try await ReceiptTests.notify(
                    harness, .didFailToRenew, subtype: .gracePeriod,
                    renewal: renewalInfo(4) {
                        $0.isInBillingRetryPeriod = true
                        $0.gracePeriodExpiresDate = Date().addingTimeInterval(6 * 86_400)
                    }) == 200)
            // SUBSCRIPTION_EXTENDED, CANCELLATION (CUSTOMER_SUPPORT), REFUND_REVERSED.
            #expect(
                try await ReceiptTests.notify(
                    harness, .renewalExtended, transaction: try copy(10) { $0.expiresDate = $0.expiresDate?.addingTimeInterval(7 * 86_400) }) == 200)
            _ = try await setup.testStore("refund", ["transaction_id": renewalId])
            let refunded = try #require(try await store.signedTransaction(app: harness.app.id, transactionId: renewalId))
            var reinstated = try AppStoreJSON.decode(TransactionPayload.self, from: UnverifiedJWS(refunded).payload)
            reinstated.revocationDate = nil
            reinstated.revocationReason = nil
            reinstated.signedDate = (reinstated.signedDate ?? Date()).addingTimeInterval(1)
            #expect(try await ReceiptTests.notify(harness, .refundReversed, transaction: try harness.ca.sign(reinstated)) == 200)
            // NON_RENEWING_PURCHASE, TRANSFER, and carol's EXPIRATION.
            var lifetime = TestStoreCA.Purchase(productId: "lifetime", type: .nonConsumable, bundleId: harness.app.bundleId)
            lifetime.price = 49_990
            #expect(try await harness.post(user: "alice", jws: try harness.ca.mintTransaction(lifetime).jws).status == 200)
            #expect(try await harness.post(user: "bob", jws: jws).status == 200)
            let carols = try harness.mint("pro_monthly")
            #expect(try await harness.post(user: "carol", jws: carols.jws).status == 200)
            setup.clock.now = carols.payload.expiresDate!.addingTimeInterval(-1)
            _ = try await store.recordExpirations(apps: [harness.app], now: setup.clock.now)
            setup.clock.now = carols.payload.expiresDate!.addingTimeInterval(1)
            _ = try await store.recordExpirations(apps: [harness.app], now: setup.clock.now)
            try harness.server.keys.rotateIfNeeded()  // a month on, as the rotation service would

            let names = [
                "INITIAL_PURCHASE", "RENEWAL", "CANCELLATION", "CANCELLATION-refund", "UNCANCELLATION", "PRODUCT_CHANGE", "BILLING_ISSUE",
                "SUBSCRIPTION_EXTENDED", "REFUND_REVERSED", "NON_RENEWING_PURCHASE", "EXPIRATION",
            ]
            let received = try await setup.received { received in
                let types = Set(received.compactMap { $0.event["type"] as? String })
                return types.isSuperset(of: names.map { $0.replacingOccurrences(of: "-refund", with: "") } + ["TRANSFER"])
            }.map(\.event)
            for name in names {
                let sample = try Self.sample(name)
                let type = try #require(sample["type"] as? String)
                let ours = try #require(
                    received.first { $0["type"] as? String == type && ($0["cancel_reason"] as? String) == (sample["cancel_reason"] as? String) },
                    "no \(name) was delivered")
                #expect(Self.differences(sample: sample, ours: ours) == [], "\(name)")
            }
            // RevenueCat's samples carry `experiments` on every type, `metadata` on REFUND_REVERSED:
            // a receiver may iterate the list, so it is always there (empty: no experiments here).
            for event in received {
                #expect((event["experiments"] as? [Any])?.isEmpty == true, "\(event["type"] ?? "?") without experiments: []")
                #expect((event["type"] as? String == "REFUND_REVERSED") == event.keys.contains("metadata"))
            }
            #expect(received.contains { $0["type"] as? String == "REFUND_REVERSED" && $0["metadata"] is NSNull })
            // The values RevenueCat's receivers read first.
            let initial = try #require(received.first { $0["type"] as? String == "INITIAL_PURCHASE" })
            #expect(initial["aliases"] as? [String] == [anonymous, "alice"])
            #expect(initial["original_app_user_id"] as? String == anonymous)
            let attributes = try #require(initial["subscriber_attributes"] as? [String: [String: Any]])
            #expect(attributes["$email"]?["value"] as? String == "alice@example.com")
            #expect(attributes["$mediaSource"]?["value"] as? String == "search" && attributes["$bogus"] == nil)
            #expect(initial["presented_offering_id"] as? String == "default")
            // Later events of the purchase name the offering too (stored with it).
            #expect(received.first { $0["type"] as? String == "RENEWAL" }?["presented_offering_id"] is NSNull)
            #expect(received.first { $0["type"] as? String == "EXPIRATION" } != nil)
            #expect(initial["price_in_purchased_currency"] as? Double == 4.99 && initial["price"] as? Double == 4.99)
            #expect(initial["currency"] as? String == "USD" && initial["country_code"] as? String == "US")
            #expect(initial["takehome_percentage"] as? Double == 0.7 && initial["commission_percentage"] as? Double == 0.3)
            #expect(initial["renewal_number"] as? Int == 1)
            let refund = try #require(received.first { $0["cancel_reason"] as? String == "CUSTOMER_SUPPORT" })
            #expect(refund["price_in_purchased_currency"] as? Double == -4.99)
            #expect(received.first { $0["type"] as? String == "RENEWAL" }?["is_trial_conversion"] as? Bool == false)
            #expect(received.first { $0["type"] as? String == "REFUND_REVERSED" }?["renewal_number"] as? Int == 2)
            // RevenueCat's TRANSFER: the two lists, no transaction, no single customer.
            let transfer = try #require(received.first { $0["type"] as? String == "TRANSFER" })
            #expect(
                Set(transfer.keys) == [
                    "app_id", "environment", "event_timestamp_ms", "experiments", "id", "store", "transferred_from", "transferred_to", "type",
                ])
            #expect(transfer["transferred_from"] as? [String] == ["alice"] && transfer["transferred_to"] as? [String] == ["bob"])
        }
    }

    @Test(
        "RevenueCat's backend flow: on a webhook the receiver reads GET /v1/subscribers/{id} with the secret key, signed",
        arguments: TestDatabaseKind.available)
    func backendReadsSubscriber(_ kind: TestDatabaseKind) async throws {
        try await WebhookTests.withSetup(kind, attemptTimeout: 20) { setup in
            let harness = setup.harness
            let (jws, payload) = try harness.mint("pro_monthly")
            let attribute: [String: Any] = ["$email": ["value": "alice@example.com", "updated_at_ms": 1_790_000_000_000]]
            #expect(try await harness.post(user: "alice", jws: jws, extra: ["attributes": attribute]).status == 200)
            let event = try #require(try await setup.received { !$0.isEmpty }.first).event
            let user = try #require(event["app_user_id"] as? String)
            // What a RevenueCat backend does next: the subscriber, read with the secret key.
            let nonce = SignedRequestParts.makeNonce()
            var headers: HTTPFields = [:]
            headers[SignatureHeader.nonce] = nonce.base64EncodedString()
            let path = "/v1/subscribers/\(user.pathSegment)"
            let reply = try await harness.send(.get, path, key: setup.secretKey, headers: headers)
            #expect(reply.status == 200)
            let outcome = SignatureVerifier(rootKeys: [setup.root]).verify(
                request: SignedRequestParts(authValue: setup.secretKey, nonce: nonce, path: path),
                response: ReceivedResponse(
                    statusCode: reply.status, signature: reply.headers[SignatureHeader.signature],
                    requestTime: reply.headers[SignatureHeader.requestTime], etag: reply.headers[SignatureHeader.etag], body: reply.body))
            #expect(outcome == .verified)
            let subscriber = try #require(reply.json["subscriber"] as? [String: Any])
            #expect(subscriber["original_app_user_id"] as? String == "alice")
            let pro = try #require((subscriber["entitlements"] as? [String: Any])?["pro"] as? [String: Any])
            #expect(pro["product_identifier"] as? String == "pro_monthly")
            let subscription = try #require((subscriber["subscriptions"] as? [String: Any])?["pro_monthly"] as? [String: Any])
            #expect(subscription["expires_date"] as? String == WireDate.format(payload.expiresDate!))
            // The secret key's answer carries the attributes, as RevenueCat's does; the app's never.
            let attributes = try #require(subscriber["subscriber_attributes"] as? [String: [String: Any]])
            #expect(attributes["$email"]?["value"] as? String == "alice@example.com")
            #expect(attributes["$email"]?["updated_at_ms"] as? Int64 == 1_790_000_000_000)
            #expect((try await harness.customerInfo("alice")["subscriber"] as? [String: Any])?["subscriber_attributes"] == nil)
            // A key of no app, or a public key of another kind of route, stays refused.
            #expect(try await harness.send(.get, path, key: "cs_sec_unknown").status == 401)
        }
    }
}
