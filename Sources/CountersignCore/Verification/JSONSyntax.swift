import Foundation

/// A strict RFC 8259 syntax check, without building any values.
///
/// Two parsers must never read one body two ways, so besides the grammar this refuses what
/// parsers disagree on: a key repeated in one object (compared after unescaping, so `"a\u005fb"`
/// repeats `"a_b"`; one parser keeps the first, another the last), invalid UTF-8, and `\u`
/// escapes that name a lone surrogate. Leading and trailing JSON whitespace (including the
/// trailing newline servers commonly send) is allowed.
public enum JSONSyntax {
    public enum TopLevel: Sendable { case object, anyValue }

    /// Why a body was refused.
    public enum Problem: Error, Sendable, Hashable, CustomStringConvertible {
        /// Not JSON (or not the promised top-level kind, or text parsers would read differently).
        case malformed
        /// A key appears twice in one object; the payload is the key, unescaped.
        case duplicateKey(String)

        public var description: String {
            switch self {
            case .malformed: "not well-formed JSON"
            case .duplicateKey(let key): "the key \"\(key.prefix(64))\" appears twice in one object"
            }
        }
    }

    public static func isValid(_ data: Data, topLevel: TopLevel) -> Bool {
        check(data, topLevel: topLevel) == nil
    }

    /// Nil when `data` is well-formed JSON of the promised kind, else what is wrong with it.
    public static func check(_ data: Data, topLevel: TopLevel) -> Problem? {
        data.withUnsafeBytes { raw in
            var scanner = Scanner(bytes: raw.bindMemory(to: UInt8.self))
            scanner.skipWhitespace()
            if topLevel == .object && scanner.peek != UInt8(ascii: "{") { return .malformed }
            guard scanner.value(depth: 0) else { return scanner.problem ?? .malformed }
            scanner.skipWhitespace()
            return scanner.isAtEnd ? nil : .malformed
        }
    }

    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0
        var problem: Problem?
        static let maximumDepth = 512

        var isAtEnd: Bool { index == bytes.count }
        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while let byte = peek, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
        }

        mutating func consume(_ byte: UInt8) -> Bool {
            guard peek == byte else { return false }
            index += 1
            return true
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count else { return false }
            for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { return false }
            index += count
            return true
        }

        mutating func value(depth: Int) -> Bool {
            guard depth < Self.maximumDepth, let byte = peek else { return false }
            switch byte {
            case UInt8(ascii: "{"): return object(depth: depth + 1)
            case UInt8(ascii: "["): return array(depth: depth + 1)
            case UInt8(ascii: "\""): return string(into: nil)
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            default: return number()
            }
        }

        mutating func object(depth: Int) -> Bool {
            index += 1
            skipWhitespace()
            if consume(UInt8(ascii: "}")) { return true }
            // Keys as unescaped UTF-8, in a set: a hostile body with thousands of keys must not
            // cost a quadratic scan.
            var keys: Set<[UInt8]> = []
            while true {
                skipWhitespace()
                var key: [UInt8] = []
                guard string(into: &key) else { return false }
                guard keys.insert(key).inserted else {
                    problem = .duplicateKey(String(decoding: key, as: UTF8.self))
                    return false
                }
                skipWhitespace()
                guard consume(UInt8(ascii: ":")) else { return false }
                skipWhitespace()
                guard value(depth: depth) else { return false }
                skipWhitespace()
                if consume(UInt8(ascii: "}")) { return true }
                guard consume(UInt8(ascii: ",")) else { return false }
            }
        }

        mutating func array(depth: Int) -> Bool {
            index += 1
            skipWhitespace()
            if consume(UInt8(ascii: "]")) { return true }
            while true {
                skipWhitespace()
                guard value(depth: depth) else { return false }
                skipWhitespace()
                if consume(UInt8(ascii: "]")) { return true }
                guard consume(UInt8(ascii: ",")) else { return false }
            }
        }

        /// Scans a string; with `decoded`, appends its unescaped UTF-8 there.
        mutating func string(into decoded: UnsafeMutablePointer<[UInt8]>?) -> Bool {
            guard consume(UInt8(ascii: "\"")) else { return false }
            while let byte = peek {
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return true
                case UInt8(ascii: "\\"):
                    guard let escaped = peek else { return false }
                    index += 1
                    let simple: UInt8? = switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): escaped
                    case UInt8(ascii: "b"): 0x08
                    case UInt8(ascii: "f"): 0x0C
                    case UInt8(ascii: "n"): 0x0A
                    case UInt8(ascii: "r"): 0x0D
                    case UInt8(ascii: "t"): 0x09
                    default: nil
                    }
                    if let simple {
                        decoded?.pointee.append(simple)
                        continue
                    }
                    guard escaped == UInt8(ascii: "u"), let unit = hex4() else { return false }
                    var scalarValue = UInt32(unit)
                    if (0xD800...0xDBFF).contains(unit) {
                        // A high surrogate must be followed by an escaped low one.
                        guard consume(UInt8(ascii: "\\")), consume(UInt8(ascii: "u")), let low = hex4(), (0xDC00...0xDFFF).contains(low) else { return false }
                        scalarValue = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(unit) {
                        return false
                    }
                    if let decoded, let scalar = Unicode.Scalar(scalarValue) {
                        decoded.pointee.append(contentsOf: Array(String(Character(scalar)).utf8))
                    }
                case 0x00..<0x20:
                    return false
                case 0x20..<0x80:
                    decoded?.pointee.append(byte)
                default:
                    guard let end = utf8Sequence(startingWith: byte) else { return false }
                    decoded?.pointee.append(contentsOf: bytes[(index - 1)..<end])
                    index = end
                }
            }
            return false
        }

        /// Validates one multi-byte UTF-8 sequence whose lead byte was just consumed; returns the
        /// index after it (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
        func utf8Sequence(startingWith lead: UInt8) -> Int? {
            let count: Int
            var second: ClosedRange<UInt8> = 0x80...0xBF
            switch lead {
            case 0xC2...0xDF: count = 1
            case 0xE0: count = 2; second = 0xA0...0xBF
            case 0xE1...0xEC, 0xEE...0xEF: count = 2
            case 0xED: count = 2; second = 0x80...0x9F
            case 0xF0: count = 3; second = 0x90...0xBF
            case 0xF1...0xF3: count = 3
            case 0xF4: count = 3; second = 0x80...0x8F
            default: return nil
            }
            guard bytes.count - index >= count, second.contains(bytes[index]) else { return nil }
            for offset in 1..<count where !(0x80...0xBF).contains(bytes[index + offset]) { return nil }
            return index + count
        }

        mutating func hex4() -> UInt16? {
            guard bytes.count - index >= 4 else { return nil }
            var value: UInt16 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt8
                switch byte {
                case 0x30...0x39: digit = byte - 0x30
                case 0x41...0x46: digit = byte - 0x41 + 10
                case 0x61...0x66: digit = byte - 0x61 + 10
                default: return nil
                }
                value = value << 4 | UInt16(digit)
                index += 1
            }
            return value
        }

        mutating func number() -> Bool {
            _ = consume(UInt8(ascii: "-"))
            if consume(UInt8(ascii: "0")) {
                // No leading zeros.
            } else {
                guard digits() else { return false }
            }
            if consume(UInt8(ascii: ".")) { guard digits() else { return false } }
            if consume(UInt8(ascii: "e")) || consume(UInt8(ascii: "E")) {
                if !consume(UInt8(ascii: "+")) { _ = consume(UInt8(ascii: "-")) }
                guard digits() else { return false }
            }
            return true
        }

        mutating func digits() -> Bool {
            let start = index
            while let byte = peek, (0x30...0x39).contains(byte) { index += 1 }
            return index > start
        }
    }
}
