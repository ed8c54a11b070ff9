import CountersignServerCore
import CountersignTesting
import Foundation
import Testing

@testable import CountersignCore

/// The lean CustomerInfo writer against Foundation's `JSONEncoder` (the Codable form the client
/// and every earlier answer use): byte for byte, on random customers whose strings carry what
/// an encoder may treat differently.
@Suite("Lean JSON")
struct LeanJSONTests {
    /// Strings that probe escaping and key order: quotes, backslashes, every C0 control, DEL,
    /// slashes, U+2028, combining marks, characters outside the BMP, keys that sort differently
    /// by bytes, by UTF-16 and by Swift's `String` order ("é" precomposed and decomposed, U+FF61
    /// against an emoji, "a10" against "a9", upper against lower case).
    static let awkward: [String] = [
        "pro", "Pro", "PRO", "a9", "a10", "_x", "x.y", "premium_monthly", "com.example.pro.yearly",
        "\u{E9}", "e\u{301}", "f", "\u{C5}", "A\u{30A}", "\u{FF61}", "😀", "日本語", "",
        "quote\"d", "back\\slash", "a/b", "line\nbreak", "tab\t", "\u{0}nul", "\u{1F}unit", "\u{7F}del", "\u{2028}sep",
        "\u{8}\u{C}\r", "ünïcödé/\"\\",
    ]

    static func randomString(_ random: inout SeededGenerator) -> String {
        if Bool.random(using: &random) { return awkward.randomElement(using: &random)! }
        let scalars = (0..<Int.random(in: 0...12, using: &random)).map { _ -> Character in
            switch Int.random(in: 0..<4, using: &random) {
            case 0: Character(Unicode.Scalar(UInt8.random(in: 0...0x7F, using: &random)))
            case 1: Character(Unicode.Scalar(UInt32.random(in: 0x80...0xD7FF, using: &random))!)
            case 2: Character(Unicode.Scalar(UInt32.random(in: 0xE000...0xFFFD, using: &random))!)
            default: Character(Unicode.Scalar(UInt32.random(in: 0x10000...0x10FFFF, using: &random)) ?? "x")
            }
        }
        return String(scalars)
    }

    static func randomResponse(_ random: inout SeededGenerator) -> SubscriberResponse {
        func maybe(_ random: inout SeededGenerator) -> String? { Bool.random(using: &random) ? randomString(&random) : nil }
        /// Prices as the server makes them (thousandths, refunds negative, up to a billion).
        func price(_ random: inout SeededGenerator) -> SubscriberResponse.Price? {
            guard Bool.random(using: &random) else { return nil }
            let milliunits: Int64 = [0, 990, 4_990, 12_000, -25, 1, 999_999_999_999].randomElement(using: &random)!
            return .init(
                PaidPrice(
                    currency: randomString(&random),
                    milliunits: Bool.random(using: &random) ? milliunits : .random(in: -1_000_000...1_000_000_000_000, using: &random)))
        }
        var entitlements: [String: SubscriberResponse.Entitlement] = [:]
        for _ in 0..<Int.random(in: 0...5, using: &random) {
            entitlements[randomString(&random)] = .init(
                expiresDate: maybe(&random), gracePeriodExpiresDate: maybe(&random),
                productIdentifier: randomString(&random), purchaseDate: randomString(&random)
            )
        }
        var subscriptions: [String: SubscriberResponse.Subscription] = [:]
        for _ in 0..<Int.random(in: 0...5, using: &random) {
            subscriptions[randomString(&random)] = .init(
                expiresDate: maybe(&random), purchaseDate: randomString(&random), originalPurchaseDate: randomString(&random),
                periodType: randomString(&random), store: randomString(&random), isSandbox: Bool.random(using: &random),
                unsubscribeDetectedAt: maybe(&random), billingIssuesDetectedAt: maybe(&random),
                gracePeriodExpiresDate: maybe(&random), refundedAt: maybe(&random), ownershipType: maybe(&random),
                storeTransactionId: maybe(&random), displayName: maybe(&random), price: price(&random)
            )
        }
        var nonSubscriptions: [String: [SubscriberResponse.NonSubscription]] = [:]
        for _ in 0..<Int.random(in: 0...4, using: &random) {
            nonSubscriptions[randomString(&random)] = (0..<Int.random(in: 0...3, using: &random)).map { _ in
                .init(
                    id: randomString(&random), purchaseDate: randomString(&random), store: randomString(&random),
                    isSandbox: Bool.random(using: &random), price: price(&random), originalPurchaseDate: maybe(&random))
            }
        }
        var attributes: [String: SubscriberAttributeValue]?
        if Bool.random(using: &random) {
            attributes = [:]
            for _ in 0..<Int.random(in: 0...4, using: &random) {
                attributes?[randomString(&random)] = .init(
                    value: maybe(&random), updatedAtMs: Int64.random(in: 0...9_000_000_000_000, using: &random))
            }
        }
        return SubscriberResponse(
            requestDate: randomString(&random),
            requestDateMs: Int64.random(in: -1_000_000_000_000...9_000_000_000_000_000, using: &random),
            subscriber: .init(
                entitlements: entitlements, subscriptions: subscriptions, nonSubscriptions: nonSubscriptions,
                firstSeen: randomString(&random), lastSeen: randomString(&random), originalAppUserId: randomString(&random),
                managementUrl: maybe(&random), originalPurchaseDate: maybe(&random), originalApplicationVersion: maybe(&random),
                subscriberAttributes: attributes
            )
        )
    }

    @Test("the lean CustomerInfo writer gives JSONEncoder's bytes for 3,000 random customers with awkward strings")
    func leanEqualsCodable() throws {
        var random = SeededGenerator(seed: 0x1EA4_0001)
        var differing = 0
        for index in 0..<3_000 {
            let response = Self.randomResponse(&random)
            let codable = try WireJSON.encode(response)
            let lean = Data(response.leanJSON())
            if lean != codable {
                differing += 1
                if differing <= 3 {
                    Issue.record(
                        "case \(index): lean \(String(decoding: lean, as: UTF8.self)) vs codable \(String(decoding: codable, as: UTF8.self))")
                }
            }
            // The subscriber alone is the ETag's source: the same bytes as its Codable form.
            var subscriber = try WireJSON.encode(response.subscriber)
            subscriber.removeLast()
            #expect(Data(response.subscriber.leanJSON()) == subscriber)
        }
        #expect(differing == 0)
    }

    @Test("an answer built from evaluated entitlements reads back equal through the client's decoder")
    func roundTrip() throws {
        var random = SeededGenerator(seed: 0x1EA4_0002)
        for _ in 0..<200 {
            let response = Self.randomResponse(&random)
            let decoded = try JSONDecoder().decode(SubscriberResponse.self, from: Data(response.leanJSON()))
            // Equal apart from what the lenient decoder fills in (nothing here: every field is set).
            #expect(decoded.subscriber.originalAppUserId == response.subscriber.originalAppUserId)
            #expect(decoded.subscriber.entitlements == response.subscriber.entitlements)
            #expect(decoded.subscriber.subscriptions == response.subscriber.subscriptions)
            #expect(decoded.requestDateMs == response.requestDateMs)
        }
    }

    @Test("the hand-written ISO 8601 dates equal Foundation's from year 1 to 9999, fractions and negatives included")
    func datesEqualFoundation() {
        var random = SeededGenerator(seed: 0x1EA4_0003)
        // Year 1 to 9999, whole and fractional seconds, both sides of 1970, and day boundaries.
        var samples: [Double] = [0, -0.5, -1, 86_399.999, 86_400, -86_400, -86_401, 951_782_400, 4_107_542_400, 253_402_300_799]
        for _ in 0..<20_000 {
            samples.append(Double.random(in: -62_135_596_800...253_402_300_799, using: &random))
            samples.append(Double(Int64.random(in: 0...4_102_444_800, using: &random)))
        }
        var differing = 0
        for seconds in samples {
            let date = Date(timeIntervalSince1970: seconds)
            let expected = Date(timeIntervalSince1970: seconds.rounded(.down)).formatted(.iso8601)
            if WireDate.format(date) != expected {
                differing += 1
                if differing <= 3 { Issue.record("\(seconds): \(WireDate.format(date)) vs \(expected)") }
            }
        }
        #expect(differing == 0)
    }
}
