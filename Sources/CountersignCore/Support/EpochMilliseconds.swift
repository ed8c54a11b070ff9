import Foundation

/// Times as the wire and the database write them: whole milliseconds since 1970-01-01 UTC. A
/// date becomes milliseconds rounded down (a time never moves later by being written), and
/// milliseconds become a date exactly.
extension Date {
    /// Whole milliseconds since 1970, rounded down.
    public var epochMilliseconds: Int64 { Int64((timeIntervalSince1970 * 1000).rounded(.down)) }

    public init(epochMilliseconds: Int64) {
        self.init(timeIntervalSince1970: TimeInterval(epochMilliseconds) / 1000)
    }
}
