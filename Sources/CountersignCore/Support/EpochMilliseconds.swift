import Foundation

/// Times as the wire and the database write them: whole milliseconds since 1970-01-01 UTC. A
/// date becomes milliseconds rounded down (a time never moves later by being written), and
/// milliseconds become a date exactly.
///
/// Both conversions are total. Swift stops the process on a `Double` → integer conversion out of
/// range, and a date can come from outside (a request's `end_time_ms`, a signed transaction, an
/// import file): a date beyond ``Date/epochMillisecondsRange`` (ECMAScript's range of time
/// values, about ±275,000 years) is written as that range's nearest end, and an undefined one
/// (NaN) as 0. Inside the range the difference of any two times fits in 64 bits, so time
/// arithmetic on written times cannot overflow either.
extension Date {
    /// ±8.64e15 ms: every time a reader (JavaScript's `Date`, PostgreSQL's `timestamptz`'s
    /// neighbourhood, a 64-bit subtraction) can take.
    public static let epochMillisecondsRange: ClosedRange<Int64> = -8_640_000_000_000_000...8_640_000_000_000_000

    /// The latest time a request may name (9999-12-31T23:59:59.999Z): beyond it a time is refused
    /// at parse time (RFC 3339 and RevenueCat's datetimes have four-digit years).
    public static let latestRequestMilliseconds: Int64 = 253_402_300_799_999

    /// Whole milliseconds since 1970, rounded down; clamped to ``epochMillisecondsRange``.
    public var epochMilliseconds: Int64 {
        Int64(clamping: (timeIntervalSince1970 * 1000).rounded(.down), to: Self.epochMillisecondsRange)
    }

    public init(epochMilliseconds: Int64) {
        self.init(timeIntervalSince1970: TimeInterval(epochMilliseconds) / 1000)
    }
}

extension Int64 {
    /// `value` as an integer within `range` (by default every `Int64`): the nearest end beyond
    /// it, 0 (or the range's nearest end to 0) for NaN. Never traps, where `Int64(value)` stops
    /// the process for a value out of range.
    public init(clamping value: Double, to range: ClosedRange<Int64> = .min ... .max) {
        guard !value.isNaN else {
            self = Swift.min(Swift.max(0, range.lowerBound), range.upperBound)
            return
        }
        // Double(Int64.max) is 2⁶³, the first value beyond it: `>=` keeps it out.
        if value >= Double(range.upperBound) {
            self = range.upperBound
        } else if value <= Double(range.lowerBound) {
            self = range.lowerBound
        } else {
            self = Swift.min(Swift.max(Int64(value), range.lowerBound), range.upperBound)
        }
    }
}
