import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignTesting
import Foundation
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Answers the server writes without `JSONEncoder` are the bytes of the committed golden files
/// (`Tests/Fixtures/golden/`, written once from `JSONEncoder`'s output of the same values, sorted
/// keys, no escaped slashes). `COUNTERSIGN_WRITE_GOLDEN=1` writes them again.
@Suite("Lean answers")
struct LeanAnswerTests {
    /// Checks `bytes` against the golden file `name` (or writes it).
    static func expectGolden(_ bytes: Data, _ name: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let path = "golden/" + name
        if ProcessInfo.processInfo.environment["COUNTERSIGN_WRITE_GOLDEN"] == "1" {
            try FileManager.default.createDirectory(at: Fixtures.url("golden"), withIntermediateDirectories: true)
            try bytes.write(to: Fixtures.url(path))
        }
        #expect(bytes == Fixtures.data(path), "\(path) differs", sourceLocation: sourceLocation)
    }

    @Test("the health answer's lean JSON is its golden bytes, with and without warnings")
    func health() throws {
        let answers = [
            HealthAnswer(status: "ok", intermediateExpires: "2026-12-01T00:00:00Z", intermediateDaysLeft: 8, warnings: []),
            HealthAnswer(
                status: "degraded", intermediateExpires: "2026-11-24T10:00:00Z", intermediateDaysLeft: 0,
                warnings: ["intermediate key expires in 0 days", "a \"quoted\" / \\ warning\n"]),
            HealthAnswer(status: "ok", intermediateExpires: "", intermediateDaysLeft: -3, warnings: ["x"]),
        ]
        for (index, answer) in answers.enumerated() {
            try Self.expectGolden(Data(answer.leanJSON()), "health-\(index).json")
        }
    }

    @Test("a CustomerInfo answer's body is its golden bytes and its ETag covers the subscriber alone")
    func customerInfoAnswer() throws {
        // A subscription and a one-time purchase with their prices, one without, and a
        // promotional grant (listed as a subscription of store `promotional`).
        var monthly = PurchaseRecord(
            transactionId: "20", originalTransactionId: "10", productId: "pro.monthly", kind: .autoRenewable, environment: "Production",
            purchaseDate: Date(timeIntervalSince1970: 1_799_000_000), expiresDate: Date(timeIntervalSince1970: 1_801_000_000))
        monthly.price = PaidPrice(currency: "EUR", milliunits: 4_990)
        var coins = PurchaseRecord(
            transactionId: "30", originalTransactionId: "30", productId: "coins", kind: .consumable, environment: "Sandbox",
            purchaseDate: Date(timeIntervalSince1970: 1_790_000_000))
        coins.price = PaidPrice(currency: "JPY", milliunits: 120_000)
        let lifetime = PurchaseRecord(
            transactionId: "40", originalTransactionId: "40", productId: "lifetime", kind: .nonConsumable, environment: "Production",
            purchaseDate: Date(timeIntervalSince1970: 1_780_000_000))
        let grant = PromotionalGrant(
            grantId: "g", entitlement: "pro", startsDate: Date(timeIntervalSince1970: 1_799_500_000),
            expiresDate: Date(timeIntervalSince1970: 1_799_500_000 + 7 * 86_400))
        let entitlements = EntitlementRules.evaluate(
            purchases: [monthly, coins, lifetime], statuses: [], grants: [grant],
            products: [.init(id: "pro.monthly", type: .autoRenewable, entitlements: ["pro"])], at: Date(timeIntervalSince1970: 1_800_000_000))
        let info = SubscriberResponse(
            appUserId: "user \"1\"/é", firstSeen: Date(timeIntervalSince1970: 1_700_000_000.25),
            lastSeen: Date(timeIntervalSince1970: 1_800_000_000), entitlements: entitlements,
            requestDate: Date(timeIntervalSince1970: 1_800_000_000.999)
        )
        let answer = SignedAnswer.customerInfo(info)
        try Self.expectGolden(answer.body, "customer-info.json")
        var subscriber = try WireJSON.encode(info.subscriber)
        subscriber.removeLast()
        #expect(answer.etagSource == subscriber)
        #expect(answer.cacheable)
    }

    @Test("receipt and logIn answers (CustomerInfo with one more member) are their golden bytes")
    func customerInfoWithMember() throws {
        let entitlements = EntitlementRules.evaluate(
            purchases: [], statuses: [], grants: [], products: [], at: Date(timeIntervalSince1970: 1_800_000_000))
        let info = SubscriberResponse(
            appUserId: "ü\\\"x", firstSeen: Date(timeIntervalSince1970: 1_700_000_000), lastSeen: Date(timeIntervalSince1970: 1_800_000_000),
            entitlements: entitlements, requestDate: Date(timeIntervalSince1970: 1_800_000_000.5)
        )
        for status in [PurchaseStatus.new, .alreadyRecorded, .transferred, .boundToAnotherUser] {
            let answer = SignedAnswer.customerInfo(info, member: "purchase_status", string: status.rawValue)
            try Self.expectGolden(answer.body, "receipt-\(status.rawValue).json")
            #expect(!answer.cacheable)
        }
        for created in [true, false] {
            let answer = SignedAnswer.customerInfo(info, status: created ? .created : .ok, member: "created", bool: created)
            try Self.expectGolden(answer.body, "login-created-\(created).json")
            #expect(answer.status == (created ? .created : .ok))
        }
    }
}
