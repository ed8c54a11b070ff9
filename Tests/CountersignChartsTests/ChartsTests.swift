import Testing

@testable import CountersignCharts

/// Each chart against the examples and FAQ answers of RevenueCat's chart documentation (the page
/// named in each test), from records alone.
@Suite("Revenue charts, definition by definition")
struct ChartsTests {
    static let day: Int64 = 86_400_000
    /// 2026-03-01, a Sunday.
    static let march = ChartDay("2026-03-01")!.startMs

    static func subscription(
        _ id: String, product: String = "monthly", start: Int64, days: Int64 = 30, price: Int64? = 8_000, currency: String? = "USD",
        trial: Bool = false, chain: String? = nil, revoked: Int64? = nil, family: Bool = false, willRenew: Bool? = nil,
        grace: Int64? = nil, owner: String? = nil, firstSeen: Int64? = nil
    ) -> ChartTransaction {
        ChartTransaction(
            transactionId: id, originalTransactionId: chain ?? id, productId: product, kind: .autoRenewable, environment: "Production",
            purchaseMs: start, expiresMs: start + days * day, revokedMs: revoked, periodType: trial ? "trial" : "normal",
            isFamilyShared: family, priceMilliunits: trial ? 0 : price, currency: currency, gracePeriodEndMs: grace, willRenew: willRenew,
            ownerFirstSeenMs: firstSeen, owner: owner)
    }

    static func settings(now: Int64, rates: [String: Double] = [:], periods: [String: String] = ["monthly": "P1M", "yearly": "P1Y"])
        -> ChartSettings
    {
        ChartSettings(usdPerUnit: rates, commission: 0.3, productPeriods: periods, nowMs: now)
    }

    static func chart(
        _ kind: ChartKind, _ transactions: [ChartTransaction], customers: [Int64] = [], from: String = "2026-03-01", to: String = "2026-03-31",
        resolution: ChartResolution = .month, now: Int64 = march + 40 * day, rates: [String: Double] = [:]
    ) -> [[Double?]] {
        let range = ChartRange(from: ChartDay(from)!, to: ChartDay(to)!, resolution: resolution)
        return kind.series(
            transactions: transactions, customersFirstSeenMs: customers, range: range, filter: ChartFilter(),
            settings: settings(now: now, rates: rates)
        ).rows.map(\.values)
    }

    // MARK: MRR (monthly-recurring-revenue-mrr-chart.md)

    @Test("MRR: $8 a month counts $8, $120 a year counts $10 (RevenueCat's two examples)")
    func mrrExamples() {
        let rows = Self.chart(
            .mrr,
            [
                Self.subscription("m", start: Self.march + Self.day, days: 31, price: 8_000),
                Self.subscription("y", product: "yearly", start: Self.march + 2 * Self.day, days: 365, price: 120_000),
            ])
        #expect(rows == [[18.0, 2, 0]])
    }

    @Test("MRR: every duration of RevenueCat's normalisation table")
    func mrrTable() {
        let table: [(String, Double)] = [
            ("P1D", 30), ("P3D", 10), ("P1W", 4), ("P2W", 2), ("P4W", 1), ("P1M", 1), ("P2M", 0.5), ("P3M", 1.0 / 3), ("P6M", 1.0 / 6),
            ("P1Y", 1.0 / 12),
        ]
        for (period, factor) in table { #expect(MonthlyFactor.of(iso8601: period) == factor, "\(period)") }
        // A product without a configured period is measured from its transaction's length.
        #expect(MonthlyFactor.of(product: "p", bucket: MonthlyFactor.bucket(lengthMs: 7 * Self.day), periods: [:]) == 4)
        #expect(MonthlyFactor.of(product: "p", bucket: MonthlyFactor.bucket(lengthMs: 366 * Self.day), periods: [:]) == 1.0 / 12)
        #expect(MonthlyFactor.of(product: "p", bucket: MonthlyFactor.bucket(lengthMs: 366 * Self.day), periods: ["p": "P1W"]) == 4)
        #expect(MonthlyFactor.of(iso8601: "P0M") == nil && MonthlyFactor.of(iso8601: "1M") == nil && MonthlyFactor.of(iso8601: "P1H") == nil)
    }

    @Test("MRR leaves out non-renewing subscriptions and one-time purchases; a price without a rate is counted apart, never guessed")
    func mrrExclusions() {
        var lifetime = Self.subscription("l", start: Self.march, days: 1000)
        lifetime.kind = .nonConsumable
        var season = Self.subscription("s", start: Self.march, days: 90)
        season.kind = .nonRenewing
        let euros = Self.subscription("e", start: Self.march, days: 31, price: 9_990, currency: "EUR")
        #expect(Self.chart(.mrr, [lifetime, season, euros]) == [[0, 1, 1]])
        #expect(Self.chart(.mrr, [lifetime, season, euros], rates: ["EUR": 1.1]) == [[10.99, 1, 0]])
    }

    // MARK: Active subscriptions and trials (active-subscriptions-chart.md, active-trials-chart.md)

    @Test("Active subscriptions: a cancelled one counts until it expires, a grace period extends it, family sharing never counts")
    func activeSubscriptions() {
        let now = Self.march + 40 * Self.day
        let cancelled = Self.subscription("c", start: Self.march + 20 * Self.day, willRenew: false)  // ends April 20th
        let expired = Self.subscription("x", start: Self.march - 25 * Self.day)  // ended March 6th
        let inGrace = Self.subscription("g", start: Self.march, days: 30, grace: Self.march + 32 * Self.day)  // March 31st, grace to April 2nd
        let shared = Self.subscription("f", start: Self.march + 10 * Self.day, family: true)
        let rows = Self.chart(
            .activeSubscriptions, [cancelled, expired, inGrace, shared], from: "2026-03-01", to: "2026-03-31", resolution: .month, now: now)
        #expect(rows == [[2]])
        // Daily: the expired one counts up to its last day.
        let daily = Self.chart(.activeSubscriptions, [expired], from: "2026-03-04", to: "2026-03-07", resolution: .day, now: now)
        #expect(daily == [[1], [1], [0], [0]])
    }

    @Test("Active subscriptions: one customer's two subscriptions count twice; renewals of one count once")
    func activeSubscriptionsCountSubscriptions() {
        let first = Self.subscription("a1", start: Self.march, days: 15)
        let renewal = Self.subscription("a2", start: Self.march + 15 * Self.day, days: 30, chain: "a1")
        let other = Self.subscription("b", product: "yearly", start: Self.march + 5 * Self.day, days: 365)
        #expect(Self.chart(.activeSubscriptions, [first, renewal, other]) == [[2]])
    }

    @Test("Active trials: an unexpired trial counts whatever its auto-renew status; paid subscriptions do not")
    func activeTrials() {
        let trial = Self.subscription("t", start: Self.march + 28 * Self.day, days: 7, trial: true, willRenew: false)
        let paid = Self.subscription("p", start: Self.march + 28 * Self.day)
        #expect(Self.chart(.activeTrials, [trial, paid]) == [[1]])
        #expect(Self.chart(.activeSubscriptions, [trial, paid]) == [[1]])
    }

    // MARK: Revenue and refunds (revenue-chart.md, refund-rate-chart.md)

    @Test("Revenue: a refund is taken from the period the transaction was in; one-time purchases count; proceeds less the commission")
    func revenue() {
        let refunded = Self.subscription("r", start: Self.march + 3 * Self.day, revoked: Self.march + 45 * Self.day)
        let kept = Self.subscription("k", start: Self.march + 4 * Self.day, price: 9_990)
        var coins = Self.subscription("c", start: Self.march + 5 * Self.day, price: 990)
        coins.kind = .consumable
        let trial = Self.subscription("t", start: Self.march + 6 * Self.day, trial: true)
        let rows = Self.chart(.revenue, [refunded, kept, coins, trial], from: "2026-03-01", to: "2026-04-30", now: Self.march + 50 * Self.day)
        // March: 9.99 + 0.99; the refund, made in April, leaves March's revenue and adds nothing to April's.
        #expect(rows == [[10.98, 7.69, 2, 0], [0, 0, 0, 0]])
    }

    @Test("Revenue: a prorated refund (Apple's revocationPercentage) takes only its share, and still counts as refunded")
    func proratedRefund() {
        var prorated = Self.subscription("p", start: Self.march + 3 * Self.day, price: 10_000, revoked: Self.march + 10 * Self.day)
        prorated.revocationPercentage = 40_000  // 40 %
        var full = Self.subscription("f", start: Self.march + 4 * Self.day, price: 10_000, revoked: Self.march + 10 * Self.day)
        full.revocationPercentage = 100_000
        var hostile = Self.subscription("h", start: Self.march + 5 * Self.day, price: 10_000, revoked: Self.march + 10 * Self.day)
        hostile.revocationPercentage = -5  // no share: refunded in full
        #expect(Self.chart(.revenue, [prorated, full, hostile]) == [[6, 4.2, 1, 0]])
        #expect(Self.chart(.refunds, [prorated, full, hostile]) == [[3, 3, 1]])
    }

    @Test("Filters: product, environment, store and country each keep only their transactions")
    func filters() {
        var french = Self.subscription("fr", start: Self.march + Self.day)
        french.country = "FR"
        var american = Self.subscription("us", start: Self.march + Self.day, price: 2_000)
        american.country = "US"
        american.environment = "TestStore"
        let range = ChartRange(from: ChartDay("2026-03-01")!, to: ChartDay("2026-03-31")!, resolution: .month)
        func revenue(_ filter: ChartFilter) -> Double? {
            ChartKind.revenue.series(
                transactions: [french, american], customersFirstSeenMs: [], range: range, filter: filter,
                settings: Self.settings(now: Self.march + 40 * Self.day)
            ).rows[0].values[0]
        }
        #expect(revenue(ChartFilter()) == 10)
        #expect(revenue(ChartFilter(country: "FR")) == 8 && revenue(ChartFilter(country: "US")) == 2 && revenue(ChartFilter(country: "DE")) == 0)
        #expect(revenue(ChartFilter(store: "test_store")) == 2 && revenue(ChartFilter(environment: "Production")) == 8)
        #expect(revenue(ChartFilter(product: "yearly")) == 0)
    }

    @Test("Proceeds: the commission of the purchase's day, as the Small Business Program is joined and left")
    func commissionByDate() {
        let before = Self.subscription("a", start: Self.march + 2 * Self.day, price: 10_000)
        let during = Self.subscription("b", start: Self.march + 12 * Self.day, price: 10_000)
        let after = Self.subscription("c", start: Self.march + 22 * Self.day, price: 10_000)
        var settings = Self.settings(now: Self.march + 40 * Self.day)
        settings.commissionChanges = [(Self.march + 10 * Self.day, 0.15), (Self.march + 20 * Self.day, 0.3)]
        let range = ChartRange(from: ChartDay("2026-03-01")!, to: ChartDay("2026-03-31")!, resolution: .month)
        let rows = ChartKind.revenue.series(
            transactions: [before, during, after], customersFirstSeenMs: [], range: range, filter: ChartFilter(), settings: settings
        ).rows
        // 7 + 8.50 + 7.
        #expect(rows[0].values == [30, 22.5, 3, 0])
    }

    @Test("Exchange rates by day: a price takes its day's table, a snapshot its instant's; a currency missing from that day's table is missing")
    func ratesByDay() {
        let early = Self.subscription("a", start: Self.march + 2 * Self.day, price: 10_000, currency: "EUR")
        let late = Self.subscription("b", start: Self.march + 12 * Self.day, price: 10_000, currency: "EUR")
        let pounds = Self.subscription("c", start: Self.march + 13 * Self.day, price: 10_000, currency: "GBP")
        var settings = Self.settings(now: Self.march + 40 * Self.day)
        // EUR at 1.0 (and GBP at 1.25) from March 1st; EUR at 2.0 from March 10th, GBP not in it.
        settings.rateTables = [(Self.march, ["EUR": 1.0, "GBP": 1.25]), (Self.march + 9 * Self.day, ["EUR": 2.0])]
        let range = ChartRange(from: ChartDay("2026-03-01")!, to: ChartDay("2026-03-31")!, resolution: .month)
        let revenue = ChartKind.revenue.series(
            transactions: [early, late, pounds], customersFirstSeenMs: [], range: range, filter: ChartFilter(), settings: settings
        ).rows
        // 10 × 1.0 + 10 × 2.0; the pound purchase is on a day whose table has no pound.
        #expect(revenue[0].values == [30, 21, 3, 1])
        // At the month's last instant both euro subscriptions are active, at that day's rate.
        let mrr = ChartKind.mrr.series(
            transactions: [early, late, pounds], customersFirstSeenMs: [], range: range, filter: ChartFilter(), settings: settings
        ).rows
        #expect(mrr[0].values == [40, 3, 1])
        // Before the first table, the first applies.
        settings.rateTables = [(Self.march + 20 * Self.day, ["EUR": 1.5])]
        let before = ChartKind.revenue.series(
            transactions: [early], customersFirstSeenMs: [], range: range, filter: ChartFilter(), settings: settings)
        #expect(before.rows[0].values == [15, 10.5, 1, 0])
    }

    @Test("Refund rate: trials are not transactions; the refunded count where the transaction was")
    func refunds() {
        let refunded = Self.subscription("r", start: Self.march + 3 * Self.day, revoked: Self.march + 45 * Self.day)
        let kept = Self.subscription("k", start: Self.march + 4 * Self.day)
        let trial = Self.subscription("t", start: Self.march + 6 * Self.day, trial: true, revoked: Self.march + 7 * Self.day)
        #expect(Self.chart(.refunds, [refunded, kept, trial]) == [[2, 1, 0.5]])
        #expect(Self.chart(.refunds, []) == [[0, 0, nil]])
    }

    // MARK: Churn (churn-chart.md)

    @Test("Churn: expiries in the period over actives at its start; a cancellation is not churn until it expires; a resubscription is negative churn")
    func churn() {
        let now = Self.march + 60 * Self.day
        // Active at March 1st, expires March 10th: churned in March.
        let lapsed = Self.subscription("l", start: Self.march - 20 * Self.day)
        // Bought March 7th, cancelled, expires April 6th: not churned in March.
        let cancelled = Self.subscription("c", start: Self.march + 6 * Self.day, willRenew: false)
        // Active at March 1st, renews on March 15th with no gap.
        let renewing = Self.subscription("n1", start: Self.march - 15 * Self.day)
        let renewed = Self.subscription("n2", start: Self.march + 15 * Self.day, chain: "n1")
        // Expired in February, resubscribed March 20th.
        let gone = Self.subscription("b1", start: Self.march - 50 * Self.day)
        let back = Self.subscription("b2", start: Self.march + 19 * Self.day, chain: "b1")
        let rows = Self.chart(.churn, [lapsed, cancelled, renewing, renewed, gone, back], now: now)
        // Actives at March 1st: lapsed and renewing (cancelled starts March 7th). Churned: lapsed.
        // Resubscribed: b. Rate (1 - 1) / 2.
        #expect(rows == [[2, 1, 1, 0]])
    }

    // MARK: Trial conversion and new customers (trial-conversion-chart.md, new-customers-chart.md)

    @Test("Trial conversion: cohorted by first sight; converted, pending and abandoned add up to the trials; a refund undoes a conversion")
    func trialConversion() {
        let now = Self.march + 33 * Self.day
        let seen = Self.march + 2 * Self.day
        // Converted: a trial, then a paid renewal in the same subscription.
        let convertedTrial = Self.subscription("a1", start: seen, days: 7, trial: true, owner: "a", firstSeen: seen)
        let convertedPaid = Self.subscription("a2", start: seen + 7 * Self.day, chain: "a1", owner: "a", firstSeen: seen)
        // Refunded after converting: abandoned.
        let refundedTrial = Self.subscription("b1", start: seen, days: 7, trial: true, owner: "b", firstSeen: seen)
        let refundedPaid = Self.subscription("b2", start: seen + 7 * Self.day, chain: "b1", revoked: seen + 8 * Self.day, owner: "b", firstSeen: seen)
        // Pending: the trial runs past now with auto-renew on. Abandoned: the same with it off.
        let pending = Self.subscription("c", start: now - Self.day, days: 7, trial: true, owner: "c", firstSeen: seen)
        let turnedOff = Self.subscription("d", start: now - Self.day, days: 7, trial: true, willRenew: false, owner: "d", firstSeen: seen)
        // First seen in February: another cohort.
        let earlier = Self.subscription("e", start: seen, days: 7, trial: true, owner: "e", firstSeen: Self.march - 3 * Self.day)
        let customers = [seen, seen, seen, seen, seen, seen + Self.day, Self.march - 3 * Self.day]
        let rows = Self.chart(
            .trialConversion, [convertedTrial, convertedPaid, refundedTrial, refundedPaid, pending, turnedOff, earlier], customers: customers,
            now: now)
        #expect(rows == [[6, 4, 1, 1, 2, 4.0 / 6, 0.25]])
    }

    @Test("New customers: each customer in the period it was first seen in, by day, Monday-to-Sunday week and month")
    func newCustomers() {
        let customers = [0, 1, 1, 7, 9, 31].map { Self.march + $0 * Self.day + 3_600_000 }
        #expect(Self.chart(.newCustomers, [], customers: customers, from: "2026-03-01", to: "2026-03-03", resolution: .day) == [[1], [2], [0]])
        // Weeks of March 2026 from the one holding March 1st (a Sunday): Feb 23, Mar 2, 9, 16, 23, 30.
        #expect(
            Self.chart(.newCustomers, [], customers: customers, from: "2026-03-01", to: "2026-03-31", resolution: .week)
                == [[1], [3], [1], [0], [0], [1]])
        #expect(
            Self.chart(
                .newCustomers, [], customers: customers, from: "2026-03-01", to: "2026-04-30", resolution: .month, now: Self.march + 90 * Self.day)
                == [[5], [1]])
    }

    // MARK: Periods, order and hostile numbers

    @Test("Days: real dates only; weeks start on Monday; months end where the calendar ends them")
    func days() {
        #expect(ChartDay("2026-02-29") == nil && ChartDay("2024-02-29") != nil && ChartDay("2026-13-01") == nil && ChartDay("1969-12-31") == nil)
        #expect(ChartDay("2026-3-01") == nil && ChartDay("+026-03-01") == nil && ChartDay("2026-03-01T") == nil)
        #expect(ChartDay("2024-02-29")!.description == "2024-02-29")
        #expect(ChartDay(milliseconds: ChartDay("2026-03-04")!.startMs + 86_399_999).description == "2026-03-04")
        let range = ChartRange(from: ChartDay("2026-03-01")!, to: ChartDay("2026-03-09")!, resolution: .week)
        #expect(range.periods.map(\.start.description) == ["2026-02-23", "2026-03-02", "2026-03-09"])
        let months = ChartRange(from: ChartDay("2024-01-31")!, to: ChartDay("2024-03-01")!, resolution: .month)
        #expect(months.periods.map(\.start.description) == ["2024-01-01", "2024-02-01", "2024-03-01"])
        #expect(months.periods[1].endMs - months.periods[1].startMs == 29 * Self.day)
    }

    @Test("A chart is a function of the records: the same in any order, as late and out-of-order notifications leave them")
    func orderFree() {
        var records: [ChartTransaction] = []
        for index in 0..<40 {
            let start = Self.march + Int64(index % 9) * Self.day
            records.append(
                Self.subscription(
                    "s\(index)", start: start, days: Int64(3 + index % 5), trial: index % 4 == 0, owner: "u\(index % 7)", firstSeen: start))
        }
        var shuffled = records
        var generator = SystemRandomNumberGenerator()
        shuffled.shuffle(using: &generator)
        for kind in ChartKind.allCases {
            #expect(Self.chart(kind, records, customers: [Self.march]) == Self.chart(kind, shuffled, customers: [Self.march]), "\(kind)")
        }
    }

    @Test("Prices at the limits of Int64 are not money, and sums of them saturate: no chart traps")
    func hostileNumbers() {
        let huge = (0..<3).map { Self.subscription("h\($0)", start: Self.march + Self.day, price: .max) }
        #expect(Self.chart(.revenue, huge) == [[0, 0, 3, 3]])
        let large = (0..<20_000).map { Self.subscription("l\($0)", start: Self.march + Self.day, price: 999_999_999_999) }
        let rows = Self.chart(.revenue, large)
        #expect(rows[0][2] == 20_000 && rows[0][0]! > 0)
        let negative = Self.subscription("n", start: Self.march + Self.day, price: .min)
        #expect(Self.chart(.mrr, [negative]) == [[0, 1, 1]])
        let forever = Self.subscription("f", start: .max - 10, days: 0)
        for kind in ChartKind.allCases { _ = Self.chart(kind, [forever, negative]) }
    }
}
