import CountersignCore
import Foundation

/// Typed reads of one payload field, for hand-written hot-path decoders. `null` reads as nil;
/// a value of the wrong type is an error naming the field.
extension JSONValue {
    private func mismatch(_ key: String, _ expected: String) -> DecodingError {
        .typeMismatch(Any.self, .init(codingPath: [], debugDescription: "'\(key)' is not \(expected)"))
    }

    func string(_ key: String) throws -> String? {
        switch self {
        case .null: return nil
        case .string(let value): return value
        default: throw mismatch(key, "a string")
        }
    }

    func bool(_ key: String) throws -> Bool? {
        switch self {
        case .null: return nil
        case .bool(let value): return value
        default: throw mismatch(key, "a boolean")
        }
    }

    func integer<T: FixedWidthInteger>(_ key: String, as type: T.Type = T.self) throws -> T? {
        switch self {
        case .null: return nil
        case .number(let text):
            if let exact = T(text) { return exact }
            guard let double = Double(text), let exact = T(exactly: double) else { throw mismatch(key, "an integer") }
            return exact
        default: throw mismatch(key, "an integer")
        }
    }

    /// A date in milliseconds since 1970, possibly fractional.
    func date(_ key: String) throws -> Date? {
        switch self {
        case .null: return nil
        case .number(let text):
            guard let milliseconds = Double(text) else { throw mismatch(key, "a number") }
            guard let date = Date(jsonMilliseconds: milliseconds) else { throw mismatch(key, "a date within ±8.64e15 milliseconds") }
            return date
        default: throw mismatch(key, "a date in milliseconds")
        }
    }

    func open<Value: OpenStringValue>(_ key: String, as type: Value.Type = Value.self) throws -> Value? {
        try string(key).map(Value.init(rawValue:))
    }
}

extension Date {
    /// A date from milliseconds since 1970 as App Store JSON carries them; nil when not finite or
    /// beyond ±8.64e15 ms (ECMAScript's range of time values, about ±275,000 years). The reader
    /// keeps a number's text, so `1e300` or a 500-digit integer arrive here; storage writes dates
    /// as 64-bit milliseconds, which such a value would overflow (a trap, not an error).
    init?(jsonMilliseconds milliseconds: Double) {
        guard milliseconds.isFinite, abs(milliseconds) <= 8.64e15 else { return nil }
        self.init(timeIntervalSince1970: milliseconds / 1000)
    }
}
