import Foundation

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

    /// All in-app transaction ids (field 1703 of each in-app record, field 17) of a PKCS#7 receipt.
    static func transactionIds(fromPKCS7 bytes: [UInt8]) throws(FormatError) -> [String] {
        var reader = BERReader(bytes: bytes[...])
        let contentInfo = try reader.readNode()
        // ContentInfo { contentType, [0] SignedData { version, digests, encapContentInfo { type, [0] content } } }
        guard let signedData = contentInfo.children.dropFirst().first?.children.first,
              let encapsulated = signedData.children.dropFirst(2).first,
              let explicitContent = encapsulated.children.dropFirst().first,
              let content = explicitContent.children.first
        else { throw FormatError("PKCS#7 receipt has no signed content") }
        var ids: [String] = []
        for (type, value) in try attributes(in: content.octets) where type == 17 {
            for (innerType, innerValue) in try attributes(in: value) where innerType == 1703 {
                var string = BERReader(bytes: innerValue[...])
                ids.append(String(decoding: try string.readNode().octets, as: UTF8.self))
            }
        }
        return ids
    }

    /// The `(type, value)` pairs of a receipt attribute set: `SET OF SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`.
    private static func attributes(in bytes: [UInt8]) throws(FormatError) -> [(Int, [UInt8])] {
        var reader = BERReader(bytes: bytes[...])
        let set = try reader.readNode()
        return set.children.compactMap { attribute in
            guard attribute.children.count >= 3, attribute.children[0].tag == 0x02 else { return nil }
            let type = attribute.children[0].octets.reduce(0) { $0 << 8 | Int($1) }
            return (type, attribute.children[2].octets)
        }
    }

    /// The `"transaction-id"` inside the base64 `"purchase-info"` of an old transaction receipt.
    static func transactionId(fromPurchaseInfo text: String) throws(FormatError) -> String? {
        guard let encoded = quotedValue(of: "purchase-info", in: text),
              let decoded = Data(base64Encoded: encoded).flatMap({ String(data: $0, encoding: .utf8) })
        else { throw FormatError("purchase-info is missing or not base64") }
        return quotedValue(of: "transaction-id", in: decoded)
    }

    /// The value of `"key" = "value";` in NeXTSTEP property-list text.
    private static func quotedValue(of key: String, in text: String) -> String? {
        guard let keyRange = text.range(of: "\"\(key)\"") else { return nil }
        let rest = text[keyRange.upperBound...].drop { $0 == " " || $0 == "=" || $0 == "\t" }
        guard rest.first == "\"", let end = rest.dropFirst().firstIndex(of: "\"") else { return nil }
        return String(rest[rest.index(after: rest.startIndex)..<end])
    }
}

/// A minimal BER reader: definite and indefinite lengths, constructed strings. Enough to walk a
/// receipt (Xcode writes BER with indefinite lengths; Apple's servers write DER).
struct BERReader {
    struct Node {
        var tag: UInt8
        var constructed: Bool
        var content: ArraySlice<UInt8>
        var children: [Node]

        /// The bytes of a string node, joining the pieces of a constructed one.
        var octets: [UInt8] {
            constructed ? children.flatMap(\.octets) : Array(content)
        }
    }

    var bytes: ArraySlice<UInt8>
    private var depth = 0

    init(bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
    }

    mutating func readNode() throws(LegacyReceipt.FormatError) -> Node {
        guard depth < 32 else { throw .init("receipt nests too deeply") }
        guard let identifier = bytes.popFirst() else { throw .init("receipt ends inside an element") }
        guard identifier & 0x1F != 0x1F else { throw .init("receipt uses a multi-byte tag") }
        let constructed = identifier & 0x20 != 0
        guard let first = bytes.popFirst() else { throw .init("receipt ends inside a length") }
        if first == 0x80 {
            guard constructed else { throw .init("indefinite length on a primitive element") }
            var children: [Node] = []
            depth += 1
            defer { depth -= 1 }
            while !(bytes.count >= 2 && bytes[bytes.startIndex] == 0 && bytes[bytes.startIndex + 1] == 0) {
                guard !bytes.isEmpty else { throw .init("receipt ends before an end-of-contents marker") }
                children.append(try readNode())
            }
            bytes = bytes.dropFirst(2)
            return Node(tag: identifier & 0x1F, constructed: true, content: [], children: children)
        }
        var length = Int(first)
        if first & 0x80 != 0 {
            let count = Int(first & 0x7F)
            guard count <= 4, bytes.count >= count else { throw .init("receipt has an unreadable length") }
            length = bytes.prefix(count).reduce(0) { $0 << 8 | Int($1) }
            bytes = bytes.dropFirst(count)
        }
        guard bytes.count >= length else { throw .init("receipt element is longer than the data left") }
        let content = bytes.prefix(length)
        bytes = bytes.dropFirst(length)
        guard constructed else { return Node(tag: identifier & 0x1F, constructed: false, content: content, children: []) }
        var inner = BERReader(bytes: content)
        inner.depth = depth + 1
        var children: [Node] = []
        while !inner.bytes.isEmpty { children.append(try inner.readNode()) }
        return Node(tag: identifier & 0x1F, constructed: true, content: content, children: children)
    }
}
