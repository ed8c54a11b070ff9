import CountersignAppStore
import CountersignTesting
import Foundation
import Testing

/// The legacy receipt reader (swift-asn1's BER parser underneath) on broken input: an error that
/// says what is wrong, never a crash or a made-up id.
@Suite("Legacy receipts")
struct LegacyReceiptTests {
    static let real = String(decoding: Fixtures.data("apple/legacy-receipts/sandbox-app-receipt-real.b64"), as: UTF8.self)

    @Test("the real Sandbox receipt gives its transaction id, with or without line breaks in the base64")
    func real() throws {
        #expect(try LegacyReceipt.transactionId(fromBase64: Self.real) == "2000000909538865")
        let wrapped = Self.real.trimmingCharacters(in: .whitespacesAndNewlines).enumerated()
            .map { $0.offset > 0 && $0.offset % 76 == 0 ? "\n\($0.element)" : "\($0.element)" }.joined()
        #expect(try LegacyReceipt.transactionId(fromBase64: wrapped) == "2000000909538865")
    }

    @Test("broken receipts are refused with what is wrong", arguments: [
        ("not base64 at all", "not base64"),
        (Data([0x30, 0x82, 0xFF, 0xFF, 0x01]).base64EncodedString(), "is not BER"),
        (Data([0x30, 0x80, 0x02, 0x01, 0x01]).base64EncodedString(), "is not BER"),
        (Data([0x30, 0x03, 0x02, 0x01, 0x01]).base64EncodedString(), "has no signed content"),
        (Data([0x30]).base64EncodedString(), "is not BER"),
        (Data("plain text".utf8).base64EncodedString(), "neither a PKCS#7 app receipt"),
    ])
    func broken(_ base64: String, _ expected: String) {
        #expect {
            _ = try LegacyReceipt.transactionId(fromBase64: base64)
        } throws: { error in
            (error as? LegacyReceipt.FormatError)?.description.contains(expected) == true
        }
    }

    @Test("a truncated real receipt is refused, at every length")
    func truncated() {
        let bytes = Data(base64Encoded: Self.real.trimmingCharacters(in: .whitespacesAndNewlines))!
        var refused = 0
        for length in stride(from: 1, to: bytes.count, by: 97) {
            #expect(throws: LegacyReceipt.FormatError.self) {
                _ = try LegacyReceipt.transactionId(fromBase64: bytes.prefix(length).base64EncodedString())
            }
            refused += 1
        }
        #expect(refused > 40)
    }

    @Test("deeply nested BER is refused, not recursed into without bound")
    func deepNesting() {
        let depth = 200
        let nested = Data(Array(repeating: [UInt8]([0x30, 0x80]), count: depth).flatMap { $0 } + Array(repeating: 0, count: depth * 2))
        #expect(throws: LegacyReceipt.FormatError.self) {
            _ = try LegacyReceipt.transactionId(fromBase64: nested.base64EncodedString())
        }
    }

    @Test("an empty transaction id is refused, in a PKCS#7 receipt and in a purchase-info receipt")
    func emptyTransactionId() throws {
        for id in ["", "2000000909538865"] {
            let pkcs7 = Self.pkcs7Receipt(transactionId: id).base64EncodedString()
            let plist = "{ \"transaction-id\" = \"\(id)\"; }"
            let purchaseInfo = Data("{ \"purchase-info\" = \"\(Data(plist.utf8).base64EncodedString())\"; }".utf8).base64EncodedString()
            for receipt in [pkcs7, purchaseInfo] {
                if id.isEmpty {
                    #expect {
                        _ = try LegacyReceipt.transactionId(fromBase64: receipt)
                    } throws: { error in
                        (error as? LegacyReceipt.FormatError)?.description.contains("is empty") == true
                    }
                } else {
                    #expect(try LegacyReceipt.transactionId(fromBase64: receipt) == id)
                }
            }
        }
    }

    /// A minimal DER receipt: ContentInfo { type, [0] SignedData { version, digests,
    /// { type, [0] OCTET STRING { SET { in-app record (17) { SET { field 1703: UTF8String } } } } } } }.
    static func pkcs7Receipt(transactionId: String) -> Data {
        func tlv(_ tag: UInt8, _ body: [UInt8]) -> [UInt8] {
            precondition(body.count < 0x1_0000)
            let length: [UInt8] = body.count < 0x80 ? [UInt8(body.count)] : [0x82, UInt8(body.count >> 8), UInt8(body.count & 0xFF)]
            return [tag] + length + body
        }
        func attribute(_ type: Int, _ value: [UInt8]) -> [UInt8] {
            tlv(0x30, tlv(0x02, [UInt8(type >> 8), UInt8(type & 0xFF)]) + tlv(0x02, [1]) + tlv(0x04, value))
        }
        let oid = tlv(0x06, [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01])
        let inApp = tlv(0x31, attribute(1703, tlv(0x0C, Array(transactionId.utf8))))
        let payload = tlv(0x31, attribute(17, inApp))
        let encapsulated = tlv(0x30, oid + tlv(0xA0, tlv(0x04, payload)))
        let signedData = tlv(0x30, tlv(0x02, [1]) + tlv(0x31, []) + encapsulated)
        return Data(tlv(0x30, oid + tlv(0xA0, signedData)))
    }
}
