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

    /// The line of ``table`` nearest a transaction `milliseconds` long.
    static func bucket(lengthMs milliseconds: Int64) -> Int {
        let days = Double(milliseconds) / 86_400_000
        return table.indices.min(by: { abs(table[$0].days - days) < abs(table[$1].days - days) })!
    }

    /// The factor of a subscription of `product` whose length is nearest line `bucket`: the
    /// product's configured period when it has one.
    static func of(product: String, bucket: Int, periods: [String: String]) -> Double {
        periods[product].flatMap(of(iso8601:)) ?? table[table.indices.contains(bucket) ? bucket : 4].factor
    }
}
