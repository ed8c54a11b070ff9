import Foundation
import SwiftASN1

/// Reads a transaction id out of a legacy App Store receipt, placing **no trust** in it.
///
/// Legacy receipts (a PKCS#7 app receipt, or the older per-transaction "purchase-info" text)
/// are not verified here: the id is only a lookup key for fetching the signed transaction from
/// the App Store Server API, which is what the server then trusts.
public enum LegacyReceipt {
    public struct FormatError: Error, CustomStringConvertible, Hashable {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    /// The first in-app transaction id in a base64 receipt, or nil when it holds no purchase.
    public static func transactionId(fromBase64 text: String) throws(FormatError) -> String? {
        let compact = text.filter { !$0.isWhitespace }
        guard let data = Data(base64Encoded: compact), !data.isEmpty else {
            throw FormatError("receipt is not base64")
        }
        if data.first == 0x30 {
            return try transactionIds(fromPKCS7: [UInt8](data)).first
        }
        if let text = String(data: data, encoding: .utf8), text.contains("\"purchase-info\"") {
            return try transactionId(fromPurchaseInfo: text)
        }
        throw FormatError("receipt is neither a PKCS#7 app receipt nor a purchase-info transaction receipt")
    }

    /// All in-app transaction ids (field 1703 of each in-app record, field 17) of a PKCS#7
    /// receipt, read with swift-asn1's BER parser (Xcode writes BER with indefinite lengths and
    /// constructed strings; Apple's servers write DER).
    static func transactionIds(fromPKCS7 bytes: [UInt8]) throws(FormatError) -> [String] {
        let contentInfo = try parse(bytes[...], "PKCS#7 receipt")
        // ContentInfo { contentType, [0] SignedData { version, digests, encapContentInfo { type, [0] content } } }
        guard let signedData = children(contentInfo).dropFirst().first.flatMap({ children($0).first }),
              let encapsulated = children(signedData).dropFirst(2).first,
              let explicitContent = children(encapsulated).dropFirst().first,
              let content = children(explicitContent).first
        else { throw FormatError("PKCS#7 receipt has no signed content") }
        var ids: [String] = []
        for (type, value) in try attributes(in: octets(content)) where type == 17 {
            for (innerType, innerValue) in try attributes(in: value) where innerType == 1703 {
                let id = String(decoding: octets(try parse(innerValue[...], "in-app transaction id")), as: UTF8.self)
                // An empty id would be a lookup for nothing at the App Store Server API.
                guard !id.isEmpty else { throw FormatError("in-app transaction id is empty") }
                ids.append(id)
            }
        }
        return ids
    }

    /// The `(type, value)` pairs of a receipt attribute set: `SET OF SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`.
    private static func attributes(in bytes: [UInt8]) throws(FormatError) -> [(Int, [UInt8])] {
        children(try parse(bytes[...], "receipt attribute set")).compactMap { attribute in
            let fields = children(attribute)
            guard fields.count >= 3, fields[0].identifier == .integer, case .primitive(let type) = fields[0].content, type.count <= 4 else {
                return nil
            }
            return (type.reduce(0) { $0 << 8 | Int($1) }, octets(fields[2]))
        }
    }

    private static func parse(_ bytes: ArraySlice<UInt8>, _ what: String) throws(FormatError) -> ASN1Node {
        do {
            return try BER.parse(bytes)
        } catch {
            throw FormatError("\(what) is not BER: \(error)")
        }
    }

    private static func children(_ node: ASN1Node) -> [ASN1Node] {
        guard case .constructed(let nodes) = node.content else { return [] }
        return Array(nodes)
    }

    /// The bytes of a string, joining the pieces of a constructed (BER) one.
    private static func octets(_ node: ASN1Node) -> [UInt8] {
        switch node.content {
        case .primitive(let bytes): Array(bytes)
        case .constructed(let pieces): pieces.flatMap(octets)
        }
    }

    /// The `"transaction-id"` inside the base64 `"purchase-info"` of an old transaction receipt.
    static func transactionId(fromPurchaseInfo text: String) throws(FormatError) -> String? {
        guard let encoded = quotedValue(of: "purchase-info", in: text),
              let decoded = Data(base64Encoded: encoded).flatMap({ String(data: $0, encoding: .utf8) })
        else { throw FormatError("purchase-info is missing or not base64") }
        guard let id = quotedValue(of: "transaction-id", in: decoded) else { return nil }
        guard !id.isEmpty else { throw FormatError("transaction-id is empty") }
        return id
    }

    /// The value of `"key" = "value";` in NeXTSTEP property-list text.
    private static func quotedValue(of key: String, in text: String) -> String? {
        guard let keyRange = text.range(of: "\"\(key)\"") else { return nil }
        let rest = text[keyRange.upperBound...].drop { $0 == " " || $0 == "=" || $0 == "\t" }
        guard rest.first == "\"", let end = rest.dropFirst().firstIndex(of: "\"") else { return nil }
        return String(rest[rest.index(after: rest.startIndex)..<end])
    }
}
