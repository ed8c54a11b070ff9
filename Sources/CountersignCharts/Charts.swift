import Foundation

/// The charts, each as RevenueCat's chart documentation defines it (docs/dashboard.md, "Revenue
/// charts", says which definition each follows and where ours differs).
public enum ChartKind: String, Sendable, Hashable, CaseIterable {
    case revenue
    case mrr
    case activeSubscriptions = "active_subscriptions"
    case activeTrials = "active_trials"
    case newCustomers = "new_customers"
    case churn
    case refunds
    case trialConversion = "trial_conversion"

    /// The version of the definitions: it changes whenever a chart would give another number for
    /// the same records, so a saved CSV says which rules made it.
    public static let definitionsVersion = 1

    public var title: String {
        switch self {
        case .revenue: "Revenue"
        case .mrr: "Monthly recurring revenue"
        case .activeSubscriptions: "Active subscriptions"
        case .activeTrials: "Active trials"
        case .newCustomers: "New customers"
        case .churn: "Churn"
        case .refunds: "Refunds"
        case .trialConversion: "Trial conversion"
        }
    }

    /// The columns after `period`, in order.
    public var columns: [ChartColumn] {
        switch self {
        case .revenue:
            [.init("revenue_usd", .usd), .init("proceeds_usd", .usd), .init("transactions", .count), .init("unpriced_transactions", .count)]
        case .mrr: [.init("mrr_usd", .usd), .init("active_subscriptions", .count), .init("unpriced_subscriptions", .count)]
        case .activeSubscriptions: [.init("active_subscriptions", .count)]
        case .activeTrials: [.init("active_trials", .count)]
        case .newCustomers: [.init("new_customers", .count)]
        case .churn:
            [.init("actives", .count), .init("churned", .count), .init("resubscribed", .count), .init("churn_rate", .rate)]
        case .refunds: [.init("transactions", .count), .init("refunded", .count), .init("refund_rate", .rate)]
        case .trialConversion:
            [
                .init("new_customers", .count), .init("trials", .count), .init("converted", .count), .init("pending", .count),
                .init("abandoned", .count), .init("start_rate", .rate), .init("conversion_rate", .rate),
            ]
        }
    }

    /// Whether the chart reads customers (first sight) besides transactions.
    public var readsCustomers: Bool { self == .newCustomers || self == .trialConversion }
}

/// A column of a chart and how its numbers are written.
public struct ChartColumn: Sendable, Hashable {
    public enum Unit: String, Sendable, Hashable {
        /// A whole number.
        case count
        /// US dollars, rounded to the cent.
        case usd
        /// A fraction from 0 (four decimals); empty when its denominator is 0.
        case rate
    }

    public var name: String
    public var unit: Unit

    public init(_ name: String, _ unit: Unit) {
        self.name = name
        self.unit = unit
    }
}

/// A chart's points: one row per period, its values in the order of ``ChartKind/columns``
/// (nil: no value, a rate over nothing or a period that has not begun).
public struct ChartSeries: Sendable, Hashable {
    public struct Row: Sendable, Hashable {
        public var period: ChartDay
        public var values: [Double?]
    }

    public var kind: ChartKind
    public var range: ChartRange
    public var rows: [Row]
}

extension ChartKind {
    /// The chart over `transactions` (and `customersFirstSeenMs`, the first sight of each
    /// customer, for the charts that count customers), for the periods of `range`.
    public func series(
        transactions all: [ChartTransaction], customersFirstSeenMs: [Int64], range: ChartRange, filter: ChartFilter, settings: ChartSettings
    ) -> ChartSeries {
        let transactions = all.filter(filter.admits)
        let periods = range.periods
        let values: [[Double?]]
        switch self {
        case .revenue, .refunds:
            let bought = transactions.filter(\.isPaid).sorted { $0.purchaseMs < $1.purchaseMs }
            let dates = bought.map(\.purchaseMs)
            values = periods.map { period in
                let slice = bought[SpanIndex.count(dates, below: period.startMs)..<SpanIndex.count(dates, below: period.endMs)]
                return self == .refunds ? Self.refunds(slice) : Self.revenue(slice, settings)
            }
        case .mrr, .activeSubscriptions, .activeTrials:
            values = Self.snapshots(self, transactions, periods, settings)
        case .newCustomers:
            let firstSeen = customersFirstSeenMs.sorted()
            values = periods.map { period in [Double(Self.count(firstSeen, from: period.startMs, to: period.endMs))] }
        case .churn:
            values = Self.churn(Coverage(transactions).merged(transactions.filter(\.isPaid)), periods, nowMs: settings.nowMs)
        case .trialConversion:
            values = Self.trialConversion(transactions, customersFirstSeenMs: customersFirstSeenMs.sorted(), periods, settings)
        }
        // A period not begun has no values.
        let rows = zip(periods, values).map { period, values in
            ChartSeries.Row(period: period.start, values: period.startMs > settings.nowMs ? values.map { _ in nil } : values)
        }
        return ChartSeries(kind: self, range: range, rows: rows)
    }

    /// How many of the sorted `instants` fall in `[from, to)`.
    static func count(_ instants: [Int64], from: Int64, to: Int64) -> Int {
        SpanIndex.count(instants, below: to) - SpanIndex.count(instants, below: from)
    }

    /// From purchase to expiry in milliseconds (at most `Int64.max`).
    static func length(of transaction: ChartTransaction) -> Int64 {
        let (length, overflow) = (transaction.expiresMs ?? transaction.purchaseMs).subtractingReportingOverflow(transaction.purchaseMs)
        return overflow ? .max : length
    }

    static func rate(_ part: Int, _ whole: Int) -> Double? { whole == 0 ? nil : Double(part) / Double(whole) }

    /// Dollars of micro-dollars, rounded to the cent (half away from zero).
    static func dollars(_ micros: Int64) -> Double { (Double(micros) / 10_000).rounded() / 100 }

    /// The paid transactions bought in a period, less those refunded in full since (one refunded
    /// in part keeps the part it kept): their revenue, its proceeds, how many, and how many of
    /// them have no known price in dollars.
    static func revenue(_ bought: ArraySlice<ChartTransaction>, _ settings: ChartSettings) -> [Double?] {
        var revenue: Int64 = 0
        var proceeds: Int64 = 0
        var kept = 0
        var unpriced = 0
        for transaction in bought where transaction.keptShare > 0 {
            kept += 1
            guard let micros = settings.usdMicros(transaction, times: transaction.keptShare) else {
                unpriced += 1
                continue
            }
            revenue = revenue.saturatingPlus(micros)
            proceeds = proceeds.saturatingPlus(settings.proceeds(micros, at: transaction.purchaseMs))
        }
        return [dollars(revenue), dollars(proceeds), Double(kept), Double(unpriced)]
    }

    /// The paid transactions bought in a period and how many of them were refunded since.
    static func refunds(_ bought: ArraySlice<ChartTransaction>) -> [Double?] {
        let refunded = bought.count(where: \.isRefunded)
        return [Double(bought.count), Double(refunded), rate(refunded, bought.count)]
    }

    /// Active subscriptions, active trials or MRR at each period's last instant (now, in the
    /// period under way; nothing for a period not begun).
    static func snapshots(_ kind: ChartKind, _ transactions: [ChartTransaction], _ periods: [ChartPeriod], _ settings: ChartSettings) -> [[Double?]] {
        let counted = transactions.filter { kind == .activeTrials ? $0.isTrial && !$0.isFamilyShared : $0.isPaid }
        let coverage = Coverage(transactions)
        var spans: [(span: Coverage.Span, value: Int64)] = []
        var unpriced: [(span: Coverage.Span, value: Int64)] = []
        for transaction in counted {
            guard let span = coverage.span(transaction) else { continue }
            guard kind == .mrr else {
                spans.append((span, 1))
                continue
            }
            let factor =
                settings.productPeriods[transaction.productId].flatMap(MonthlyFactor.of(iso8601:))
                ?? MonthlyFactor.of(lengthMs: Self.length(of: transaction))
            if let micros = settings.usdMicros(transaction, times: factor) { spans.append((span, micros)) } else { unpriced.append((span, 1)) }
        }
        let index = SpanIndex(spans)
        let unpricedIndex = SpanIndex(unpriced)
        return periods.map { period in
            let instant = min(period.endMs - 1, settings.nowMs)
            let (count, total) = index.at(instant)
            guard kind == .mrr else { return [Double(count)] }
            let missing = unpricedIndex.at(instant).count
            return [dollars(total), Double(count + missing), Double(missing)]
        }
    }

    /// For each period: paid subscriptions active at its start, expiries in it (up to now),
    /// resubscriptions after an expiry, and the churn rate, (expiries less resubscriptions) over
    /// the actives at the start. A subscription that expires twice in one period counts twice, as
    /// does its coming back.
    static func churn(_ merged: [String: [Coverage.Span]], _ periods: [ChartPeriod], nowMs: Int64) -> [[Double?]] {
        let spans = merged.values.flatMap { $0 }
        let actives = SpanIndex(spans.map { ($0, 1) })
        let ends = spans.map(\.end).sorted()
        let comebacks = merged.values.flatMap { $0.dropFirst().map(\.start) }.sorted()
        return periods.map { period in
            let active = actives.at(period.startMs).count
            // An expiry at the period's first instant was the period before's: the span held its last.
            let churned = SpanIndex.count(ends, atMost: min(period.endMs, nowMs)) - SpanIndex.count(ends, atMost: period.startMs)
            let resubscribed = count(comebacks, from: period.startMs, to: period.endMs)
            return [Double(active), Double(churned), Double(resubscribed), rate(churned - resubscribed, active)]
        }
    }
}
