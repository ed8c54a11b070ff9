import Foundation

/// An unsigned PKCS#7 "receipt" naming any transaction: what the forger of finding 1 posts.
public enum LegacyReceiptForgery {
    /// ContentInfo { signedData, [0] SignedData { version, digests, { data, [0] OCTET STRING
    /// { SET { bundle id (2), creation date (12), in-app record (17) { SET { 1703 } } } } },
    /// signerInfos {} } }: well-formed, signed by nobody.
    public static func unsigned(transactionId: String, bundleId: String) -> Data {
        func tlv(_ tag: UInt8, _ body: [UInt8]) -> [UInt8] {
            let length: [UInt8] = body.count < 0x80 ? [UInt8(body.count)] : [0x82, UInt8(body.count >> 8), UInt8(body.count & 0xFF)]
            return [tag] + length + body
        }
        func attribute(_ type: Int, _ value: [UInt8]) -> [UInt8] {
            tlv(0x30, tlv(0x02, [UInt8(type >> 8), UInt8(type & 0xFF)]) + tlv(0x02, [1]) + tlv(0x04, value))
        }
        let data = tlv(0x06, [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01])
        let signedDataType = tlv(0x06, [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02])
        let payload = tlv(
            0x31,
            attribute(2, tlv(0x0C, Array(bundleId.utf8))) + attribute(12, tlv(0x16, Array("2026-01-01T00:00:00Z".utf8)))
                + attribute(17, tlv(0x31, attribute(1703, tlv(0x0C, Array(transactionId.utf8))))))
        let signedData = tlv(0x30, tlv(0x02, [1]) + tlv(0x31, []) + tlv(0x30, data + tlv(0xA0, tlv(0x04, payload))) + tlv(0x31, []))
        return Data(tlv(0x30, signedDataType + tlv(0xA0, signedData)))
    }
}
