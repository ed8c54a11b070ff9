/// When transactions give access: each one from its purchase to its end (its expiry, or the
/// chain's grace period end when it is the chain's newest and the store granted one; a refund or
/// revocation ends it then). Within a subscription a transaction's span ends where the next one's
/// begins, so at any instant at most one transaction of a subscription gives access: the newest.
struct Coverage {
    struct Span: Hashable {
        var start: Int64
        var end: Int64

        func contains(_ instant: Int64) -> Bool { start <= instant && instant < end }
    }

    /// Each auto-renewable transaction's span, by transaction id.
    private(set) var spans: [String: Span] = [:]

    init(_ transactions: [ChartTransaction]) {
        var chains: [String: [ChartTransaction]] = [:]
        for transaction in transactions where transaction.kind == .autoRenewable && transaction.expiresMs != nil {
            chains[transaction.originalTransactionId, default: []].append(transaction)
        }
        for chain in chains.values {
            let ordered = chain.sorted { ($0.purchaseMs, $0.transactionId) < ($1.purchaseMs, $1.transactionId) }
            for (index, transaction) in ordered.enumerated() {
                var end = transaction.expiresMs!
                if index == ordered.count - 1, let grace = transaction.gracePeriodEndMs { end = max(end, grace) }
                if let revoked = transaction.revokedMs { end = min(end, revoked) }
                if index + 1 < ordered.count { end = min(end, ordered[index + 1].purchaseMs) }
                if end > transaction.purchaseMs { spans[transaction.transactionId] = Span(start: transaction.purchaseMs, end: end) }
            }
        }
    }

    func span(_ transaction: ChartTransaction) -> Span? { spans[transaction.transactionId] }

    /// The spans of `transactions` per subscription, joined where one begins when the one before
    /// it ends (a renewal), in order: a gap between two is an expiry, the span after it a
    /// resubscription.
    func merged(_ transactions: [ChartTransaction]) -> [String: [Span]] {
        var bySubscription: [String: [Span]] = [:]
        for transaction in transactions {
            if let span = spans[transaction.transactionId] { bySubscription[transaction.originalTransactionId, default: []].append(span) }
        }
        return bySubscription.mapValues { spans in
            var joined: [Span] = []
            for span in spans.sorted(by: { ($0.start, $0.end) < ($1.start, $1.end) }) {
                if let last = joined.last, span.start <= last.end {
                    joined[joined.count - 1].end = max(last.end, span.end)
                } else {
                    joined.append(span)
                }
            }
            return joined
        }
    }
}

/// Spans with a value each (1 to count them, or micro-dollars), asked how many contain an instant
/// and what their values add up to, in O(log n) an instant: every sum is of integers, so exact.
struct SpanIndex {
    private var starts: [Int64] = []
    private var startTotals: [Int64] = [0]
    private var ends: [Int64] = []
    private var endTotals: [Int64] = [0]

    init(_ spans: [(span: Coverage.Span, value: Int64)]) {
        for (span, value) in spans.sorted(by: { $0.span.start < $1.span.start }) {
            starts.append(span.start)
            startTotals.append(startTotals.last!.saturatingPlus(value))
        }
        for (span, value) in spans.sorted(by: { $0.span.end < $1.span.end }) {
            ends.append(span.end)
            endTotals.append(endTotals.last!.saturatingPlus(value))
        }
    }

    /// How many spans contain `instant`, and the sum of their values.
    func at(_ instant: Int64) -> (count: Int, total: Int64) {
        let started = Self.count(starts, atMost: instant)
        let ended = Self.count(ends, atMost: instant)
        return (started - ended, startTotals[started].saturatingPlus(0 &- endTotals[ended]))
    }

    /// How many of the sorted `values` are at most `limit`.
    static func count(_ values: [Int64], atMost limit: Int64) -> Int { prefix(values) { $0 <= limit } }

    /// How many of the sorted `values` are below `limit`.
    static func count(_ values: [Int64], below limit: Int64) -> Int { prefix(values) { $0 < limit } }

    /// The length of the longest prefix of the sorted `values` that `holds` for (a binary search).
    private static func prefix(_ values: [Int64], _ holds: (Int64) -> Bool) -> Int {
        var low = 0
        var high = values.count
        while low < high {
            let middle = (low + high) / 2
            if holds(values[middle]) { low = middle + 1 } else { high = middle }
        }
        return low
    }
}

extension Int64 {
    /// `self + other`, held at the limits rather than trapping: money sums of hostile records
    /// come out wrong, never stop the server.
    func saturatingPlus(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }
}

/// RevenueCat's normalisation of a subscription's price to a month: a day ×30, a week ×4, a
/// month ×1, a year ×1/12, and multiples of each in proportion (3 days ×10, 2 weeks ×2, 6 months
/// ×1/6).
enum MonthlyFactor {
    /// The factor of an ISO 8601 period (`P1W`, `P1M`, `P1Y`, `P3D`); nil for anything else.
    static func of(iso8601 period: String) -> Double? {
        let bytes = Array(period.utf8)
        guard bytes.count >= 3, bytes.first == UInt8(ascii: "P"), let count = Int(String(decoding: bytes[1..<(bytes.count - 1)], as: UTF8.self)),
            count > 0, count <= 1000
        else { return nil }
        switch bytes.last {
        case UInt8(ascii: "D"): return 30 / Double(count)
        case UInt8(ascii: "W"): return 4 / Double(count)
        case UInt8(ascii: "M"): return 1 / Double(count)
        case UInt8(ascii: "Y"): return 1 / (12 * Double(count))
        default: return nil
        }
    }

    /// The durations of RevenueCat's table in days, each with its factor: a product whose period
    /// is not configured is given the one nearest its transaction's length.
    static let table: [(days: Double, factor: Double)] = [
        (1, 30), (3, 10), (7, 4), (14, 2), (28, 1), (30.44, 1), (60.88, 1.0 / 2), (91.31, 1.0 / 3), (182.62, 1.0 / 6), (365.25, 1.0 / 12),
    ]

    /// The factor for a transaction `milliseconds` long.
    static func of(lengthMs milliseconds: Int64) -> Double {
        let days = Double(milliseconds) / 86_400_000
        return table.min(by: { abs($0.days - days) < abs($1.days - days) })!.factor
    }
}
