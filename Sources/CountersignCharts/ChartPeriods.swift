import Foundation

/// How long one point of a chart is: a day, a week (Monday to Sunday) or a calendar month, in UTC.
public enum ChartResolution: String, Sendable, Hashable, CaseIterable {
    case day, week, month
}

/// A day in UTC as days since 1970-01-01, read and written as `YYYY-MM-DD`.
public struct ChartDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var daysSince1970: Int64

    public init(daysSince1970: Int64) {
        self.daysSince1970 = daysSince1970
    }

    /// `YYYY-MM-DD` with a real month and day, years 1970 to 9999; nil for anything else.
    public init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 10, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-") else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), (1970...9999).contains(year),
            (1...12).contains(month), day >= 1, day <= Self.length(ofMonth: month, year: year)
        else { return nil }
        self.init(year: year, month: month, day: day)
    }

    /// The day of a civil date (the proleptic Gregorian calendar).
    init(year: Int64, month: Int64, day: Int64) {
        let shifted = month <= 2 ? year - 1 : year
        let era = (shifted >= 0 ? shifted : shifted - 399) / 400
        let yearOfEra = shifted - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        daysSince1970 = era * 146_097 + dayOfEra - 719_468
    }

    /// The day `milliseconds` since 1970 falls on.
    public init(milliseconds: Int64) {
        daysSince1970 = milliseconds >= 0 ? milliseconds / 86_400_000 : (milliseconds + 1) / 86_400_000 - 1
    }

    var civil: (year: Int64, month: Int64, day: Int64) {
        let shifted = daysSince1970 + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    static func length(ofMonth month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    public var startMs: Int64 { daysSince1970 * 86_400_000 }

    public var description: String {
        let (year, month, day) = civil
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(year)-\(two(month))-\(two(day))"
    }

    public static func < (a: Self, b: Self) -> Bool { a.daysSince1970 < b.daysSince1970 }

    /// The first day of the period of `resolution` this day is in.
    public func start(of resolution: ChartResolution) -> ChartDay {
        switch resolution {
        case .day: return self
        case .week:
            // 1970-01-01 was a Thursday: Monday is 3 days before it.
            let sinceMonday = ((daysSince1970 + 3) % 7 + 7) % 7
            return ChartDay(daysSince1970: daysSince1970 - sinceMonday)
        case .month:
            let (year, month, _) = civil
            return ChartDay(year: year, month: month, day: 1)
        }
    }

    /// The first day of the next period of `resolution` (this day must start one).
    public func next(_ resolution: ChartResolution) -> ChartDay {
        switch resolution {
        case .day: return ChartDay(daysSince1970: daysSince1970 + 1)
        case .week: return ChartDay(daysSince1970: daysSince1970 + 7)
        case .month:
            let (year, month, _) = civil
            return month == 12 ? ChartDay(year: year + 1, month: 1, day: 1) : ChartDay(year: year, month: month + 1, day: 1)
        }
    }
}

/// One point's time span: `[startMs, endMs)`.
public struct ChartPeriod: Sendable, Hashable {
    public var start: ChartDay
    public var startMs: Int64
    public var endMs: Int64
}

/// The periods of a chart: those of `resolution` from the one holding `from` to the one holding
/// `to`, whole (a week or month is never cut at the range's edges).
public struct ChartRange: Sendable, Hashable {
    public var from: ChartDay
    public var to: ChartDay
    public var resolution: ChartResolution

    /// At most this many points a chart (ten years of days).
    public static let maximumPeriods = 3_660

    public init(from: ChartDay, to: ChartDay, resolution: ChartResolution) {
        self.from = from
        self.to = to
        self.resolution = resolution
    }

    /// The first day of the first period.
    public var firstDay: Int64 { from.start(of: resolution).daysSince1970 }

    /// The last day of the last period.
    public var lastDay: Int64 { periods.last.map { ChartDay(milliseconds: $0.endMs).daysSince1970 - 1 } ?? from.daysSince1970 }

    public var periods: [ChartPeriod] {
        var periods: [ChartPeriod] = []
        var day = from.start(of: resolution)
        while day <= to && periods.count < Self.maximumPeriods {
            let next = day.next(resolution)
            periods.append(ChartPeriod(start: day, startMs: day.startMs, endMs: next.startMs))
            day = next
        }
        return periods
    }
}
