import CountersignCharts
import Foundation

/// A customer's chart events as one text value (`chart_units.events`): events separated by
/// U+001E, fields by U+001F, numbers in decimal. Every text field is an id the ledger checked
/// (at most 256 characters, no control characters), so neither separator can occur in one; the
/// value is text on both databases (PostgreSQL's text refuses only U+0000).
enum ChartEventText {
    static let eventSeparator = UInt8(0x1E)
    static let fieldSeparator = UInt8(0x1F)
    /// Fields an event has: at, chain, day, product, environment, country, currency, bucket, the
    /// metrics, pending from, pending until.
    static let fieldCount = 10 + ChartMetrics.Field.allCases.count

    struct Malformed: Error, CustomStringConvertible {
        var description: String { "a stored chart event list is malformed" }
    }

    /// The events in a fixed order (sorted by their text), so the same events always make the
    /// same value and a customer whose events did not change is left alone.
    static func encode(_ events: [ChartEvent]) -> String {
        let field = String(Character(Unicode.Scalar(fieldSeparator)))
        return events.map { event in
            let key = event.key
            let parts =
                [String(event.atMs), event.chain, String(key.day), key.product, key.environment, key.country, key.currency, String(key.bucket)]
                + event.metrics.values.map { $0 == 0 ? "" : String($0) }
                + [event.pendingFromMs.map(String.init) ?? "", event.pendingUntilMs.map(String.init) ?? ""]
            return parts.joined(separator: field)
        }
        .sorted()
        .joined(separator: String(Character(Unicode.Scalar(eventSeparator))))
    }

    static func decode(_ text: String) throws -> [ChartEvent] {
        guard !text.isEmpty else { return [] }
        var events: [ChartEvent] = []
        for record in text.utf8.split(separator: eventSeparator, omittingEmptySubsequences: false) {
            let fields = record.split(separator: fieldSeparator, omittingEmptySubsequences: false)
            guard fields.count == fieldCount else { throw Malformed() }
            func string(_ index: Int) -> String { String(decoding: fields[index], as: UTF8.self) }
            func number(_ index: Int) throws -> Int64 {
                guard let value = Int64(string(index)) else { throw Malformed() }
                return value
            }
            func optional(_ index: Int) throws -> Int64? { fields[index].isEmpty ? nil : try number(index) }
            let key = ChartKey(
                day: try number(2), product: string(3), environment: string(4), country: string(5), currency: string(6),
                bucket: Int(clamping: try number(7)))
            let metrics = try (0..<ChartMetrics.Field.allCases.count).map { try optional(8 + $0) ?? 0 }
            events.append(
                ChartEvent(
                    atMs: try number(0), chain: string(1), key: key, metrics: ChartMetrics(values: metrics),
                    pendingFromMs: try optional(fieldCount - 2), pendingUntilMs: try optional(fieldCount - 1)))
        }
        return events
    }
}
