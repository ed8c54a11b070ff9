import Foundation

/// A strict RFC 8259 check.
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
    /// The check is a parse by ``JSONValue/parse(_:)``, the one JSON reader: what it accepts is
    /// exactly what the code that then reads the values sees.
    public static func check(_ data: Data, topLevel: TopLevel) -> Problem? {
        do {
            switch topLevel {
            case .object: _ = try JSONValue.parseObject(data)
            case .anyValue: _ = try JSONValue.parse(data)
            }
            return nil
        } catch {
            return error
        }
    }
}
