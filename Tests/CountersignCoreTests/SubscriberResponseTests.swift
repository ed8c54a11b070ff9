import CountersignCore
import CountersignServerCore
import Foundation
import Testing

@Suite("Subscriber response")
struct SubscriberResponseTests {
    @Test("has RevenueCat's v1 field names and round-trips through JSON")
    func shape() throws {
        let start = Date(timeIntervalSince1970: 1_767_225_600)
        let purchases = [
            PurchaseRecord(
                transactionId: "1", originalTransactionId: "1", productId: "pro_monthly", kind: .autoRenewable,
                environment: "TestStore", purchaseDate: start, expiresDate: start.addingTimeInterval(30 * 86_400)),
            PurchaseRecord(
                transactionId: "2", originalTransactionId: "2", productId: "coins_100", kind: .consumable,
                environment: "Production", purchaseDate: start),
        ]
        let now = start.addingTimeInterval(86_400 + 0.75)
        let entitlements = EntitlementRules.evaluate(purchases: purchases, products: AppConfiguration.makeDemo().products, at: now)
        let response = SubscriberResponse(appUserId: "u1", firstSeen: start, lastSeen: now, entitlements: entitlements, requestDate: now)
        let data = try WireJSON.encode(response)
        let object = try JSONSerialization.jsonObject(with: data) as! [String: Any]
        #expect(object["request_date"] as? String == "2026-01-02T00:00:00Z")
        #expect(object["request_date_ms"] as? Int == 1_767_312_000_750)
        let subscriber = object["subscriber"] as! [String: Any]
        #expect(subscriber["original_app_user_id"] as? String == "u1")
        let pro = (subscriber["entitlements"] as! [String: Any])["pro"] as! [String: Any]
        #expect(pro["product_identifier"] as? String == "pro_monthly")
        #expect(pro["expires_date"] as? String == "2026-01-31T00:00:00Z")
        let subscription = (subscriber["subscriptions"] as! [String: Any])["pro_monthly"] as! [String: Any]
        #expect(subscription["store"] as? String == "test_store")
        #expect(subscription["is_sandbox"] as? Bool == true)
        let coins = (subscriber["non_subscriptions"] as! [String: Any])["coins_100"] as! [[String: Any]]
        #expect(coins.first?["id"] as? String == "2")
        #expect(coins.first?["is_sandbox"] as? Bool == false)
        #expect(try JSONDecoder().decode(SubscriberResponse.self, from: data) == response)
    }
}
