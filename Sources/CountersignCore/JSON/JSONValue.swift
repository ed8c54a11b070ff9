import Foundation

/// A parsed JSON document. Numbers keep their text so 64-bit integers stay exact.
public indirect enum JSONValue: Sendable {
    case null
    case bool(Bool)
    case number(Substring)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue {
    /// Parses one JSON document with the strict rules of ``JSONSyntax``: a key repeated in an
    /// object, invalid UTF-8, a lone surrogate escape or nesting deeper than 512 is refused.
    public static func parse(_ data: Data) throws(JSONSyntax.Problem) -> JSONValue {
        try JSONParser.parse(data)
    }

    /// Parses a document that must be one JSON object (anything else is `.malformed`).
    public static func parseObject(_ data: Data) throws(JSONSyntax.Problem) -> [String: JSONValue] {
        guard case .object(let members) = try parse(data) else { throw .malformed }
        return members
    }
}

/// The one JSON reader of the project: a strict RFC 8259 parser into ``JSONValue`` that also
/// refuses what two parsers could read two ways (see ``JSONSyntax``).
struct JSONParser {

    private let bytes: [UInt8]
    private let text: String
    private var index = 0
    // As deep as JSONSyntax reads (and Python reads at least as deep): the two must agree.
    private static let maximumDepth = 512

    static func parse(_ data: Data) throws(JSONSyntax.Problem) -> JSONValue {
        // Invalid UTF-8 is refused rather than read as U+FFFD (found by the FuzzJWS target when
        // this parser and a separate syntax scanner disagreed).
        guard String(validating: data, as: UTF8.self) != nil else { throw .malformed }
        var parser = JSONParser(bytes: [UInt8](data))
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == parser.bytes.count else { throw .malformed }
        return value
    }

    private init(bytes: [UInt8]) {
        self.bytes = bytes
        text = String(decoding: bytes, as: UTF8.self)
    }

    private var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipWhitespace() {
        while let byte = peek, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
    }

    private mutating func expect(_ byte: UInt8) throws(JSONSyntax.Problem) {
        guard peek == byte else { throw .malformed }
        index += 1
    }

    private mutating func literal(_ word: String, _ value: JSONValue) throws(JSONSyntax.Problem) -> JSONValue {
        for byte in word.utf8 { try expect(byte) }
        return value
    }

    private mutating func value(depth: Int) throws(JSONSyntax.Problem) -> JSONValue {
        guard depth < Self.maximumDepth, let byte = peek else { throw .malformed }
        switch byte {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "n"): return try literal("null", .null)
        default: return try number()
        }
    }

    private mutating func object(depth: Int) throws(JSONSyntax.Problem) -> JSONValue {
        index += 1
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if peek == UInt8(ascii: "}") { index += 1; return .object(members) }
        while true {
            skipWhitespace()
            let key = try string()
            skipWhitespace()
            try expect(UInt8(ascii: ":"))
            skipWhitespace()
            // A repeated key is refused: one parser keeps the first value, another the last.
            if members.updateValue(try value(depth: depth), forKey: key) != nil { throw .duplicateKey(key) }
            skipWhitespace()
            if peek == UInt8(ascii: "}") { index += 1; return .object(members) }
            try expect(UInt8(ascii: ","))
        }
    }

    private mutating func array(depth: Int) throws(JSONSyntax.Problem) -> JSONValue {
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if peek == UInt8(ascii: "]") { index += 1; return .array(elements) }
        while true {
            skipWhitespace()
            elements.append(try value(depth: depth))
            skipWhitespace()
            if peek == UInt8(ascii: "]") { index += 1; return .array(elements) }
            try expect(UInt8(ascii: ","))
        }
    }

    private mutating func string() throws(JSONSyntax.Problem) -> String {
        try expect(UInt8(ascii: "\""))
        let start = index
        // Fast path: no escapes.
        while let byte = peek, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") {
            guard byte >= 0x20 else { throw .malformed }
            index += 1
        }
        guard let stop = peek else { throw .malformed }
        var result = String(decoding: bytes[start..<index], as: UTF8.self)
        if stop == UInt8(ascii: "\"") { index += 1; return result }
        var scalars = [UInt8]()
        while let byte = peek {
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                result += String(decoding: scalars, as: UTF8.self)
                return result
            case UInt8(ascii: "\\"):
                guard let escaped = peek else { throw .malformed }
                index += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(escaped)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code) {
                        try expect(UInt8(ascii: "\\"))
                        try expect(UInt8(ascii: "u"))
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw .malformed }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw .malformed }
                    scalars.append(contentsOf: Array(String(Character(scalar)).utf8))
                default:
                    throw .malformed
                }
            case 0x00..<0x20:
                throw .malformed
            default:
                scalars.append(byte)
            }
        }
        throw .malformed
    }

    private mutating func hex4() throws(JSONSyntax.Problem) -> UInt32 {
        var code: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = peek else { throw .malformed }
            let digit: UInt8
            switch byte {
            case 0x30...0x39: digit = byte - 0x30
            case 0x41...0x46: digit = byte - 0x41 + 10
            case 0x61...0x66: digit = byte - 0x61 + 10
            default: throw .malformed
            }
            code = code << 4 | UInt32(digit)
            index += 1
        }
        return code
    }

    private mutating func number() throws(JSONSyntax.Problem) -> JSONValue {
        let start = index
        if peek == UInt8(ascii: "-") { index += 1 }
        if peek == UInt8(ascii: "0") {
            index += 1
        } else {
            try digits()
        }
        if peek == UInt8(ascii: ".") { index += 1; try digits() }
        if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
            index += 1
            if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
            try digits()
        }
        // The bytes are ASCII, so byte offsets are valid UTF-8 offsets into `text`.
        let utf8 = text.utf8
        return .number(Substring(utf8[utf8.index(utf8.startIndex, offsetBy: start)..<utf8.index(utf8.startIndex, offsetBy: index)]))
    }

    private mutating func digits() throws(JSONSyntax.Problem) {
        let start = index
        while let byte = peek, (0x30...0x39).contains(byte) { index += 1 }
        guard index > start else { throw .malformed }
    }
}
