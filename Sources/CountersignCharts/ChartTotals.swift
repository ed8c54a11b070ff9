import Foundation

/// What a chart reads: the events a filter admits, summed by day, product, currency and length
/// (the rest of a key is what filters), up to the last day a chart needs and leaving out every
/// event after now; the pending trials by the day their customers were first seen; and the
/// customers first seen by day (no filter applies to them). Storage keeps these sums as records
/// change; ``init(events:filter:throughDay:nowMs:)`` makes them from the events themselves, the
/// full computation the kept sums are held equal to.
public struct ChartTotals: Sendable {
    public struct Row: Sendable, Hashable {
        public var day: Int64
        public var product: String
        public var currency: String
        public var bucket: Int
        public var metrics: ChartMetrics

        public init(day: Int64, product: String, currency: String, bucket: Int, metrics: ChartMetrics) {
            self.day = day
            self.product = product
            self.currency = currency
            self.bucket = bucket
            self.metrics = metrics
        }
    }

    public var rows: [Row]
    public var pendingByDay: [Int64: Int64]
    public var newCustomersByDay: [Int64: Int64]

    public init(rows: [Row], pendingByDay: [Int64: Int64], newCustomersByDay: [Int64: Int64]) {
        self.rows = rows
        self.pendingByDay = pendingByDay
        self.newCustomersByDay = newCustomersByDay
    }

    /// The sums of `events` (every event of an app) for a chart whose last day is `throughDay`.
    public init(events: [ChartEvent], filter: ChartFilter, throughDay: Int64, nowMs: Int64) {
        struct Group: Hashable {
            var day: Int64
            var product: String
            var currency: String
            var bucket: Int
        }
        var sums: [Group: ChartMetrics] = [:]
        var pending: [Int64: Int64] = [:]
        var customers: [Int64: Int64] = [:]
        for event in events where event.atMs <= nowMs && event.key.day <= throughDay {
            if event.chain.isEmpty {
                customers[event.key.day, default: 0] &+= event.metrics[.newCustomers]
                continue
            }
            guard filter.admits(event.key) else { continue }
            let key = event.key
            sums[Group(day: key.day, product: key.product, currency: key.currency, bucket: key.bucket), default: ChartMetrics()] += event.metrics
            if event.isPending(at: nowMs) { pending[key.day, default: 0] &+= 1 }
        }
        rows = sums.map { Row(day: $0.key.day, product: $0.key.product, currency: $0.key.currency, bucket: $0.key.bucket, metrics: $0.value) }
        pendingByDay = pending
        newCustomersByDay = customers
    }
}

extension ChartEvent {
    /// Every event of an app's records: each customer's (the transactions it owns, grouped by
    /// ``ChartTransaction/owner``), each unowned subscription's, and each customer first seen.
    public static func all(_ transactions: [ChartTransaction], customersFirstSeenMs: [Int64]) -> [ChartEvent] {
        var units: [String: [ChartTransaction]] = [:]
        for transaction in transactions {
            units[transaction.owner.map { "customer " + $0 } ?? "chain " + transaction.originalTransactionId, default: []].append(transaction)
        }
        var events = customersFirstSeenMs.map { ChartEvent.customer(firstSeenMs: $0) }
        for unit in units.values {
            events += of(unit, firstSeenMs: unit[0].owner == nil ? nil : unit[0].ownerFirstSeenMs)
        }
        return events
    }
}

/// A period's sums: those of its days, before it (the running sums at its start, by product,
/// currency and length) and at its end.
struct PeriodSums {
    struct Line: Hashable {
        var product: String
        var currency: String
        var bucket: Int
    }

    var days: Range<Int64>
    /// The day of the instant a snapshot is of: the period's last, or today's while it runs.
    var snapshotDay: Int64
    var during: [ChartTotals.Row] = []
    var before: [Line: ChartMetrics]
    var after: [Line: ChartMetrics] = [:]

    var start: ChartMetrics { before.values.reduce(into: ChartMetrics()) { $0 += $1 } }
    var sum: ChartMetrics { during.reduce(into: ChartMetrics()) { $0 += $1.metrics } }
    var end: ChartMetrics { after.values.reduce(into: ChartMetrics()) { $0 += $1 } }

    /// The sum of `byDay` over the period's days.
    func sum(_ byDay: [Int64: Int64]) -> Int64 { byDay.reduce(0) { days.contains($1.key) ? $0 &+ $1.value : $0 } }
}

extension ChartKind {
    /// The chart for the periods of `range` from `totals`.
    public func series(_ totals: ChartTotals, range: ChartRange, settings: ChartSettings) -> ChartSeries {
        let rows = totals.rows.sorted { $0.day < $1.day }
        let today = ChartDay(milliseconds: settings.nowMs).daysSince1970
        var next = 0
        var before: [PeriodSums.Line: ChartMetrics] = [:]
        var points: [ChartSeries.Row] = []
        for period in range.periods {
            let days = period.start.daysSince1970..<ChartDay(milliseconds: period.endMs).daysSince1970
            var sums = PeriodSums(days: days, snapshotDay: min(days.upperBound - 1, today), before: before)
            while next < rows.count && rows[next].day < sums.days.upperBound {
                let row = rows[next]
                let line = PeriodSums.Line(product: row.product, currency: row.currency, bucket: row.bucket)
                if row.day < sums.days.lowerBound { sums.before[line, default: ChartMetrics()] += row.metrics } else { sums.during.append(row) }
                next += 1
            }
            sums.after = sums.before
            for row in sums.during {
                sums.after[PeriodSums.Line(product: row.product, currency: row.currency, bucket: row.bucket), default: ChartMetrics()] += row.metrics
            }
            before = sums.after
            // A period not begun has no values.
            let values = period.startMs > settings.nowMs ? columns.map { _ in nil } : point(sums, totals, settings)
            points.append(ChartSeries.Row(period: period.start, values: values))
        }
        return ChartSeries(kind: self, range: range, rows: points)
    }

    /// One period's values, in the order of ``columns``.
    func point(_ sums: PeriodSums, _ totals: ChartTotals, _ settings: ChartSettings) -> [Double?] {
        let (start, sum, end) = (sums.start, sums.sum, sums.end)
        switch self {
        case .revenue: return Self.revenue(sums.during, sum, settings)
        case .refunds: return [Double(sum[.bought]), Double(sum[.refunded]), Self.rate(sum[.refunded], sum[.bought])]
        case .mrr:
            var micros: Int64 = 0
            var priced: Int64 = 0
            for (line, metrics) in sums.after {
                let factor = MonthlyFactor.of(product: line.product, bucket: line.bucket, periods: settings.productPeriods)
                guard let amount = settings.usdMicros(metrics[.paidMilliDelta], line.currency, onDay: sums.snapshotDay, times: factor) else {
                    continue
                }
                micros &+= amount
                priced &+= metrics[.paidPricedDelta]
            }
            return [Self.dollars(micros), Double(end[.paidDelta]), Double(end[.paidDelta] &- priced)]
        case .activeSubscriptions: return [Double(end[.paidDelta])]
        case .activeTrials: return [Double(end[.trialDelta])]
        case .newCustomers: return [Double(sums.sum(totals.newCustomersByDay))]
        case .churn:
            let (active, churned, back) = (start[.paidDelta], sum[.churned], sum[.resubscribed])
            return [Double(active), Double(churned), Double(back), Self.rate(churned &- back, active)]
        case .trialConversion:
            let (customers, trials, converted) = (sums.sum(totals.newCustomersByDay), sum[.trials], sum[.converted])
            let pending = sums.sum(totals.pendingByDay)
            return [
                Double(customers), Double(trials), Double(converted), Double(pending), Double(trials &- converted &- pending),
                Self.rate(trials, customers), Self.rate(converted, trials),
            ]
        }
    }

    /// Revenue and proceeds of a period's days: each day's kept prices in each currency
    /// converted at once (and the day's commission taken), then added; how many were kept, and
    /// how many of those have no price in dollars.
    static func revenue(_ during: [ChartTotals.Row], _ sum: ChartMetrics, _ settings: ChartSettings) -> [Double?] {
        struct DayCurrency: Hashable {
            var day: Int64
            var currency: String
        }
        var milliunits: [DayCurrency: Int64] = [:]
        var priced: Int64 = 0
        for row in during where settings.rate(row.currency, onDay: row.day) != nil {
            milliunits[DayCurrency(day: row.day, currency: row.currency), default: 0] &+= row.metrics[.keptMilli]
            priced &+= row.metrics[.keptPriced]
        }
        var revenue: Int64 = 0
        var proceeds: Int64 = 0
        for (group, amount) in milliunits {
            guard let micros = settings.usdMicros(amount, group.currency, onDay: group.day) else { continue }
            revenue &+= micros
            proceeds &+= settings.proceeds(micros, at: ChartDay(daysSince1970: group.day).startMs)
        }
        return [dollars(revenue), dollars(proceeds), Double(sum[.kept]), Double(sum[.kept] &- priced)]
    }
}
