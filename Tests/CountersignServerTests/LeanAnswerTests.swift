import CountersignCore
import Foundation
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// Answers the server writes without `JSONEncoder` are the bytes `JSONEncoder` would write.
@Suite("Lean answers")
struct LeanAnswerTests {
    @Test("the health answer's lean JSON equals its Codable form, with and without warnings")
    func health() throws {
        let answers = [
            HealthAnswer(status: "ok", intermediateExpires: "2026-12-01T00:00:00Z", intermediateDaysLeft: 8, warnings: []),
            HealthAnswer(
                status: "degraded", intermediateExpires: "2026-11-24T10:00:00Z", intermediateDaysLeft: 0,
                warnings: ["intermediate key expires in 0 days", "a \"quoted\" / \\ warning\n"]),
            HealthAnswer(status: "ok", intermediateExpires: "", intermediateDaysLeft: -3, warnings: ["x"]),
        ]
        for answer in answers {
            #expect(Data(answer.leanJSON()) == (try WireJSON.encode(answer)))
        }
    }

    @Test("a CustomerInfo answer's body is the Codable form and its ETag covers the subscriber alone")
    func customerInfoAnswer() throws {
        let entitlements = EntitlementRules.evaluate(
            purchases: [], statuses: [], grants: [], products: [], at: Date(timeIntervalSince1970: 1_800_000_000))
        let info = SubscriberResponse(
            appUserId: "user \"1\"/é", firstSeen: Date(timeIntervalSince1970: 1_700_000_000.25),
            lastSeen: Date(timeIntervalSince1970: 1_800_000_000), entitlements: entitlements,
            requestDate: Date(timeIntervalSince1970: 1_800_000_000.999)
        )
        let answer = SignedAnswer.customerInfo(info)
        #expect(answer.body == (try WireJSON.encode(info)))
        var subscriber = try WireJSON.encode(info.subscriber)
        subscriber.removeLast()
        #expect(answer.etagSource == subscriber)
        #expect(answer.cacheable)
    }

    @Test("receipt and logIn answers (CustomerInfo with one more member) are their Codable form")
    func customerInfoWithMember() throws {
        let entitlements = EntitlementRules.evaluate(
            purchases: [], statuses: [], grants: [], products: [], at: Date(timeIntervalSince1970: 1_800_000_000))
        let info = SubscriberResponse(
            appUserId: "ü\\\"x", firstSeen: Date(timeIntervalSince1970: 1_700_000_000), lastSeen: Date(timeIntervalSince1970: 1_800_000_000),
            entitlements: entitlements, requestDate: Date(timeIntervalSince1970: 1_800_000_000.5)
        )
        for status in [PurchaseStatus.new, .alreadyRecorded, .transferred, .boundToAnotherUser] {
            let answer = SignedAnswer.customerInfo(info, member: "purchase_status", string: status.rawValue)
            let codable = PublicRoutes.CustomerInfoAnswer(customerInfo: info, extraKey: "purchase_status", extra: status)
            #expect(answer.body == (try WireJSON.encode(codable)))
            #expect(!answer.cacheable)
        }
        for created in [true, false] {
            let answer = SignedAnswer.customerInfo(info, status: created ? .created : .ok, member: "created", bool: created)
            let codable = PublicRoutes.CustomerInfoAnswer(customerInfo: info, extraKey: "created", extra: created)
            #expect(answer.body == (try WireJSON.encode(codable)))
            #expect(answer.status == (created ? .created : .ok))
        }
    }
}
