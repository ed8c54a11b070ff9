import CountersignAppStore
import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// RevenueCat's `period_type` and `ownership_type` of each subscription, from the recorded
/// transaction's offer and ownership, over real HTTP on both databases.
@Suite("Period and ownership types")
struct PeriodAndOwnershipTests {
    static func subscription(_ json: [String: Any], _ product: String) -> [String: Any]? {
        ((json["subscriber"] as? [String: Any])?["subscriptions"] as? [String: Any])?[product] as? [String: Any]
    }

    @Test("a free trial is trial, a discounted intro is intro, a family-shared purchase is FAMILY_SHARED", arguments: TestDatabaseKind.available)
    func periodAndOwnership(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            var trial = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId)
            trial.introductoryOffer = "FREE_TRIAL"
            let trialAnswer = try await harness.post(user: "trial", jws: try harness.ca.mintTransaction(trial).jws)
            #expect(Self.subscription(trialAnswer.json, "pro_monthly")?["period_type"] as? String == "trial")
            #expect(Self.subscription(trialAnswer.json, "pro_monthly")?["ownership_type"] as? String == "PURCHASED")

            var intro = trial
            intro.introductoryOffer = "PAY_AS_YOU_GO"
            let introAnswer = try await harness.post(user: "intro", jws: try harness.ca.mintTransaction(intro).jws)
            #expect(Self.subscription(introAnswer.json, "pro_monthly")?["period_type"] as? String == "intro")

            var shared = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId)
            shared.ownershipType = .familyShared
            _ = try await harness.post(user: "family", jws: try harness.ca.mintTransaction(shared).jws)
            let family = try await harness.customerInfo("family")
            #expect(Self.subscription(family, "pro_monthly")?["ownership_type"] as? String == "FAMILY_SHARED")
            #expect(Self.subscription(family, "pro_monthly")?["period_type"] as? String == "normal")
        }
    }

    @Test(
        "the period type follows Apple's offer fields",
        arguments: [
            (nil as Int?, nil as String?, "normal"), (1, "FREE_TRIAL", "trial"), (1, "PAY_AS_YOU_GO", "intro"), (1, "PAY_UP_FRONT", "intro"),
            (3, "FREE_TRIAL", "trial"), (3, "PAY_UP_FRONT", "normal"), (2, "PAY_AS_YOU_GO", "normal"),
        ])
    func periodTypes(_ offerType: Int?, _ discount: String?, _ expected: String) {
        var payload = TransactionPayload(
            transactionId: "1", originalTransactionId: "1", bundleId: "b", productId: "p", purchaseDate: Date(),
            type: .autoRenewable, environment: .sandbox, signedDate: Date()
        )
        payload.offerType = offerType
        payload.offerDiscountType = discount
        #expect(payload.periodType == expected)
    }
}
