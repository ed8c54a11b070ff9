import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import CountersignAppStore

@Suite("App Store payload decoding")
struct JSONValueDecoderTests {
    static func both<T: Decodable & Equatable>(_ type: T.Type, _ data: Data) throws -> (fast: T, foundation: T) {
        (try AppStoreJSON.decode(type, from: data), try AppStoreJSON.makeDecoder().decode(type, from: data))
    }

    @Test("decodes Apple's model fixtures exactly as Foundation's JSONDecoder does")
    func agreesWithFoundationOnFixtures() throws {
        let models = AppleVectors.directory.appendingPathComponent("models")
        var checked = 0
        for (file, kind) in [
            ("signedTransaction.json", 0), ("signedTransactionWithRevocation.json", 0), ("signedRenewalInfo.json", 1),
            ("signedNotification.json", 2), ("signedSummaryNotification.json", 2), ("signedExternalPurchaseTokenNotification.json", 2),
            ("signedConsumptionRequestNotification.json", 2), ("appTransaction.json", 3),
        ] {
            let data = try Data(contentsOf: models.appendingPathComponent(file))
            switch kind {
            case 0:
                let r = try Self.both(TransactionPayload.self, data)
                #expect(r.fast == r.foundation, "\(file)")
                #expect(try TransactionPayload.decodeFast(from: data) == r.foundation, "\(file)")
            case 1: let r = try Self.both(RenewalInfoPayload.self, data); #expect(r.fast == r.foundation, "\(file)")
            case 2: let r = try Self.both(NotificationPayload.self, data); #expect(r.fast == r.foundation, "\(file)")
            default: let r = try Self.both(AppTransactionPayload.self, data); #expect(r.fast == r.foundation, "\(file)")
            }
            checked += 1
        }
        let transaction = try AppStoreJSON.decode(
            TransactionPayload.self, from: Data(contentsOf: models.appendingPathComponent("signedTransaction.json")))
        #expect(transaction.transactionId == "23456")
        #expect(transaction.purchaseDate == Date(timeIntervalSince1970: 1_698_148_900))
        #expect(checked == 8)
    }

    @Test("escapes, unicode, big integers, fractional dates and nulls")
    func details() throws {
        let json =
            #"{"transactionId":"a\"b\\c\/d\u00e9\ud83d\ude00","appTransactionId":"x","price":9007199254740993,"purchaseDate":1697679936049.7297,"expiresDate":null,"quantity":1e0,"isUpgraded":true}"#
        let payload = try AppStoreJSON.decode(TransactionPayload.self, from: Data(json.utf8))
        #expect(try TransactionPayload.decodeFast(from: Data(json.utf8)) == payload)
        #expect(payload.transactionId == "a\"b\\c/dé😀")
        #expect(payload.price == 9_007_199_254_740_993)
        #expect(payload.expiresDate == nil)
        #expect(payload.quantity == 1)
        #expect(payload.isUpgraded == true)
        #expect(abs(payload.purchaseDate!.timeIntervalSince1970 - 1_697_679_936.0497297) < 0.000001)
    }

    @Test(
        "malformed JSON and wrong types are errors",
        arguments: [
            "", "{", #"{"transactionId":}"#, #"{"transactionId":1}"#, #"{"quantity":"1"}"#, #"{"quantity":1.5}"#,
            #"{"isUpgraded":1}"#, #"{"a":1,}"#, #"{"a":"\x"}"#, #"{"a":"\ud83d"}"#, "[]", #"{"a":01}"#, "{} x",
            // Dates a 64-bit millisecond count cannot hold (the reader keeps a number's text, so
            // these reach the date conversion; FuzzJWS found the 494-digit one).
            #"{"expiresDate":1e300}"#, #"{"purchaseDate":-8640000000000001}"#, "{\"signedDate\":\(String(repeating: "9", count: 494))}",
        ])
    func errors(_ json: String) {
        #expect(throws: DecodingError.self) { _ = try AppStoreJSON.decode(TransactionPayload.self, from: Data(json.utf8)) }
        #expect(throws: DecodingError.self) { _ = try TransactionPayload.decodeFast(from: Data(json.utf8)) }
    }

    /// Found by the FuzzJWS target: the App Store reader read invalid UTF-8 as U+FFFD where the
    /// syntax check refused it (since then the two are one reader).
    static func withBytes(_ bytes: [UInt8]) -> Data {
        Data(#"{"productId":"a"#.utf8) + Data(bytes) + Data(#""}"#.utf8)
    }

    @Test(
        "invalid UTF-8 is refused by both JSON readers alike",
        arguments: [
            withBytes([0x85]), withBytes([0xC3]), withBytes([0xED, 0xA0, 0x80]), withBytes([0xF4, 0x90, 0x80, 0x80]),
        ])
    func invalidUTF8(_ data: Data) {
        #expect(throws: JSONSyntax.Problem.malformed) { try JSONValue.parse(data) }
        #expect(throws: DecodingError.self) { try AppStoreJSON.decode(TransactionPayload.self, from: data) }
        #expect(JSONSyntax.check(data, topLevel: .object) != nil)
    }

    @Test("the fast transaction decoder agrees with JSONDecoder on every minted and real transaction")
    func fastDecoderAgrees() throws {
        let ca = try TestStoreCA.create(name: "decode")
        var payloads: [Data] = []
        for type in [ProductType.autoRenewable, .nonConsumable, .consumable] {
            let (jws, _) = try ca.mintTransaction(.init(productId: "p", type: type, bundleId: "b", appAccountToken: UUID()))
            payloads.append(try CompactJWS(jws).payload())
        }
        for entry in AppleVectors.entries("real_apple_signed") where entry["kind"] as? String == "JWSTransaction" {
            payloads.append(try CompactJWS(AppleVectors.text(entry["file"] as! String)).payload())
        }
        for data in payloads {
            #expect(try TransactionPayload.decodeFast(from: data) == AppStoreJSON.makeDecoder().decode(TransactionPayload.self, from: data))
        }
        #expect(payloads.count >= 3)
    }
}
