import CountersignCore
import Foundation

/// One value of an offering's metadata in `countersign.json`: any JSON, as RevenueCat's offering
/// metadata is (a string, a number, a boolean, null, an array or an object of them), sent to the
/// SDK as written (its `Offering.metadata` and `getMetadataValue(for:)`).
public indirect enum MetadataValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number without a fraction or exponent that fits 64 bits, kept exact.
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([MetadataValue])
    case object([String: MetadataValue])
}

extension MetadataValue: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            guard value.isFinite else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "a metadata number must be finite")
            }
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([MetadataValue].self) {
            self = .array(value)
        } else if let value = try? container.decode([String: MetadataValue].self) {
            self = .object(value)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

extension MetadataValue: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
}
