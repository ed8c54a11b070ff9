import Foundation

/// A subscription or offer period, written in configuration as an ISO 8601 duration of one unit
/// (`P3D`, `P1W`, `P1M`, `P2M`, `P3M`, `P6M`, `P1Y`), as App Store Connect offers them.
public struct StorePeriod: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Unit: String, Sendable, Hashable, Codable, CaseIterable {
        case day, week, month, year
    }

    public var value: Int
    public var unit: Unit

    public init(value: Int, unit: Unit) {
        self.value = value
        self.unit = unit
    }

    /// Reads `PnD`, `PnW`, `PnM` or `PnY` with n from 1 to 99; anything else is nil.
    public init?(iso8601 text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count >= 3, bytes.count <= 4, bytes.first == UInt8(ascii: "P"),
            let value = Int(String(decoding: bytes[1..<(bytes.count - 1)], as: UTF8.self)), value >= 1,
            bytes[1] != UInt8(ascii: "+"), bytes[1] != UInt8(ascii: "-")
        else { return nil }
        switch bytes.last {
        case UInt8(ascii: "D"): unit = .day
        case UInt8(ascii: "W"): unit = .week
        case UInt8(ascii: "M"): unit = .month
        case UInt8(ascii: "Y"): unit = .year
        default: return nil
        }
        self.value = value
    }

    public var iso8601: String {
        let letter =
            switch unit {
            case .day: "D"
            case .week: "W"
            case .month: "M"
            case .year: "Y"
            }
        return "P\(value)\(letter)"
    }

    public var description: String { iso8601 }

    /// `times` periods after `start`, by the Gregorian calendar in UTC.
    public func end(from start: Date, times: Int = 1) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let (component, amount): (Calendar.Component, Int) =
            switch unit {
            case .day: (.day, value)
            case .week: (.day, 7 * value)
            case .month: (.month, value)
            case .year: (.year, value)
            }
        return calendar.date(byAdding: component, value: amount * times, to: start) ?? start
    }
}
