import Foundation

/// The numbers the charts add up. Each event of the records carries some of them; a chart is
/// their sum over the days it covers. Sums wrap rather than trap, so subtracting what was added
/// gives back exactly what was there, whatever a hostile record held.
public struct ChartMetrics: Sendable, Hashable {
    public enum Field: Int, CaseIterable, Sendable {
        /// A paid transaction bought, refunded since, and kept (not refunded in full).
        case bought, refunded, kept
        /// Of the kept: how many have a price, and the sum of their kept prices (milliunits).
        case keptPriced, keptMilli
        /// A paid subscription's access starting (+1) or ending (-1): all, those with a price,
        /// and their prices (milliunits).
        case paidDelta, paidPricedDelta, paidMilliDelta
        /// A free trial's access starting or ending.
        case trialDelta
        /// A subscription's access ending with no renewal to follow it; coming back after that.
        case churned, resubscribed
        /// A customer's first free trial (by the day the customer was first seen) and whether
        /// it converted.
        case trials, converted
        /// A customer first seen.
        case newCustomers

        /// The column storage keeps it in.
        public var column: String {
            switch self {
            case .bought: "bought"
            case .refunded: "refunded"
            case .kept: "kept"
            case .keptPriced: "kept_priced"
            case .keptMilli: "kept_milli"
            case .paidDelta: "paid_delta"
            case .paidPricedDelta: "paid_priced_delta"
            case .paidMilliDelta: "paid_milli_delta"
            case .trialDelta: "trial_delta"
            case .churned: "churned"
            case .resubscribed: "resubscribed"
            case .trials: "trials"
            case .converted: "converted"
            case .newCustomers: "new_customers"
            }
        }
    }

    public var values: [Int64]

    public init() {
        values = Array(repeating: 0, count: Field.allCases.count)
    }

    public init(values: [Int64]) {
        precondition(values.count == Field.allCases.count)
        self.values = values
    }

    public subscript(field: Field) -> Int64 {
        get { values[field.rawValue] }
        set { values[field.rawValue] = newValue }
    }

    public var isZero: Bool { values.allSatisfy { $0 == 0 } }

    public static func += (sum: inout Self, other: Self) {
        for index in sum.values.indices { sum.values[index] &+= other.values[index] }
    }

    public static func -= (sum: inout Self, other: Self) {
        for index in sum.values.indices { sum.values[index] &-= other.values[index] }
    }

    public static prefix func - (metrics: Self) -> Self { Self(values: metrics.values.map { 0 &- $0 }) }
}

/// Where an event's numbers are added: its day (UTC) and what the charts filter and convert by.
public struct ChartKey: Sendable, Hashable {
    public var day: Int64
    public var product: String
    public var environment: String
    /// ISO 3166-1 alpha-2; empty when unknown.
    public var country: String
    /// ISO 4217; empty when unknown.
    public var currency: String
    /// Which line of RevenueCat's normalisation table a subscription's length is nearest
    /// (``MonthlyFactor/table``); -1 for events that are not a subscription's access.
    public var bucket: Int

    public init(day: Int64, product: String, environment: String, country: String, currency: String, bucket: Int) {
        self.day = day
        self.product = product
        self.environment = environment
        self.country = country
        self.currency = currency
        self.bucket = bucket
    }

    /// The store, as CustomerInfo names it.
    public var store: String { ChartKey.store(of: environment) }

    /// The store of `environment`: the test store's and Stripe's are their own stores.
    public static func store(of environment: String) -> String {
        switch environment {
        case "TestStore": "test_store"
        case "Stripe", "StripeTest": "stripe"
        default: "app_store"
        }
    }

    /// The environments of `store`.
    public static func environments(of store: String) -> [String] {
        switch store {
        case "test_store": ["TestStore"]
        case "stripe": ["Stripe", "StripeTest"]
        default: []
        }
    }
}

/// One thing that happened in the records, at an instant: a purchase, access beginning or ending,
/// an expiry, a customer first seen. Storage keeps each customer's events, so that when the
/// customer's records change it can take them out of the daily sums and put the new ones in.
public struct ChartEvent: Sendable, Hashable {
    public var atMs: Int64
    /// The subscription (or purchase) it comes from; empty for a customer first seen.
    public var chain: String
    public var key: ChartKey
    public var metrics: ChartMetrics
    /// A first trial neither converted nor given up yet (auto-renew on) counts as pending while
    /// `pendingFromMs <= now < pendingUntilMs`.
    public var pendingFromMs: Int64?
    public var pendingUntilMs: Int64?

    public init(atMs: Int64, chain: String, key: ChartKey, metrics: ChartMetrics, pendingFromMs: Int64? = nil, pendingUntilMs: Int64? = nil) {
        self.atMs = atMs
        self.chain = chain
        self.key = key
        self.metrics = metrics
        self.pendingFromMs = pendingFromMs
        self.pendingUntilMs = pendingUntilMs
    }

    /// A customer first seen at `firstSeenMs`.
    public static func customer(firstSeenMs: Int64) -> ChartEvent {
        var metrics = ChartMetrics()
        metrics[.newCustomers] = 1
        let key = ChartKey(
            day: ChartDay(milliseconds: firstSeenMs).daysSince1970, product: "", environment: "", country: "", currency: "", bucket: -1)
        return ChartEvent(atMs: firstSeenMs, chain: "", key: key, metrics: metrics)
    }

    /// Whether it is a pending trial at `nowMs`.
    public func isPending(at nowMs: Int64) -> Bool {
        guard let from = pendingFromMs, let until = pendingUntilMs else { return false }
        return from <= nowMs && nowMs < until
    }
}

extension ChartTransaction {
    /// The price in milliunits when it is one the charts count as money: a currency, and at most
    /// a billion units either way (no store sells that: a record that says so is not money).
    var countedMilliunits: Int64? {
        guard let milliunits = priceMilliunits, currency?.isEmpty == false, milliunits.magnitude <= 1_000_000_000_000 else { return nil }
        return milliunits
    }

    func key(at instant: Int64, bucket: Int = -1) -> ChartKey {
        ChartKey(
            day: ChartDay(milliseconds: instant).daysSince1970, product: productId, environment: environment, country: country ?? "",
            currency: currency ?? "", bucket: bucket)
    }
}

extension ChartEvent {
    /// The events of one customer's records (every transaction of every subscription and purchase
    /// the customer owns; `firstSeenMs` when first seen), or of one subscription no customer owns
    /// (`firstSeenMs` nil: no trial conversion, which counts customers). A customer's first sight
    /// is an event of its own (``customer(firstSeenMs:)``).
    public static func of(_ transactions: [ChartTransaction], firstSeenMs: Int64?) -> [ChartEvent] {
        let coverage = Coverage(transactions)
        var events: [ChartEvent] = []
        for transaction in transactions {
            let chain = transaction.originalTransactionId
            let milliunits = transaction.countedMilliunits
            if transaction.isPaid {
                var metrics = ChartMetrics()
                metrics[.bought] = 1
                metrics[.refunded] = transaction.isRefunded ? 1 : 0
                if transaction.keptShare > 0 {
                    metrics[.kept] = 1
                    if let milliunits {
                        metrics[.keptPriced] = 1
                        metrics[.keptMilli] = Int64((Double(milliunits) * transaction.keptShare).rounded())
                    }
                }
                events.append(
                    ChartEvent(atMs: transaction.purchaseMs, chain: chain, key: transaction.key(at: transaction.purchaseMs), metrics: metrics))
            }
            guard let span = coverage.span(transaction) else { continue }
            var access = ChartMetrics()
            if transaction.isPaid {
                access[.paidDelta] = 1
                if let milliunits {
                    access[.paidPricedDelta] = 1
                    access[.paidMilliDelta] = milliunits
                }
            }
            if transaction.isTrial && !transaction.isFamilyShared { access[.trialDelta] = 1 }
            guard !access.isZero else { continue }
            let bucket = MonthlyFactor.bucket(lengthMs: ChartKind.length(of: transaction))
            events.append(ChartEvent(atMs: span.start, chain: chain, key: transaction.key(at: span.start, bucket: bucket), metrics: access))
            events.append(ChartEvent(atMs: span.end, chain: chain, key: transaction.key(at: span.end, bucket: bucket), metrics: -access))
        }
        events += churn(transactions, coverage)
        if let firstSeenMs, let trial = trialConversion(transactions, coverage, firstSeenMs: firstSeenMs) { events.append(trial) }
        return events
    }

    /// Each subscription's paid access joined where a renewal follows without a gap: each gap is
    /// an expiry, counted against the transaction whose access ended; each access after a gap a
    /// resubscription, counted for the transaction that began it.
    static func churn(_ transactions: [ChartTransaction], _ coverage: Coverage) -> [ChartEvent] {
        var bySubscription: [String: [(span: Coverage.Span, transaction: ChartTransaction)]] = [:]
        for transaction in transactions where transaction.isPaid {
            if let span = coverage.span(transaction) { bySubscription[transaction.originalTransactionId, default: []].append((span, transaction)) }
        }
        var events: [ChartEvent] = []
        var once = ChartMetrics()
        once[.churned] = 1
        var back = ChartMetrics()
        back[.resubscribed] = 1
        for spans in bySubscription.values {
            let ordered = spans.sorted { ($0.span.start, $0.span.end) < ($1.span.start, $1.span.end) }
            var last = ordered[0]
            for next in ordered.dropFirst() {
                if next.span.start <= last.span.end {
                    if next.span.end > last.span.end { last = next }
                    continue
                }
                events.append(
                    ChartEvent(
                        atMs: last.span.end, chain: last.transaction.originalTransactionId, key: last.transaction.key(at: last.span.end),
                        metrics: once))
                events.append(
                    ChartEvent(
                        atMs: next.span.start, chain: next.transaction.originalTransactionId, key: next.transaction.key(at: next.span.start),
                        metrics: back))
                last = next
            }
            events.append(
                ChartEvent(
                    atMs: last.span.end, chain: last.transaction.originalTransactionId, key: last.transaction.key(at: last.span.end), metrics: once))
        }
        return events
    }

    /// RevenueCat's trial conversion for one customer first seen at `firstSeenMs`: the first free
    /// trial (counted once, for its product), converted by a paid transaction of its subscription
    /// not refunded, pending while unexpired with auto-renew on, abandoned otherwise.
    static func trialConversion(_ transactions: [ChartTransaction], _ coverage: Coverage, firstSeenMs: Int64) -> ChartEvent? {
        let trials = transactions.filter { $0.isTrial && !$0.isFamilyShared }
        guard let trial = trials.min(by: { ($0.purchaseMs, $0.transactionId) < ($1.purchaseMs, $1.transactionId) }) else { return nil }
        let converted = transactions.contains {
            $0.originalTransactionId == trial.originalTransactionId && $0.isPaid && !$0.isRefunded && $0.purchaseMs >= trial.purchaseMs
        }
        var metrics = ChartMetrics()
        metrics[.trials] = 1
        metrics[.converted] = converted ? 1 : 0
        var event = ChartEvent(atMs: firstSeenMs, chain: trial.originalTransactionId, key: trial.key(at: firstSeenMs), metrics: metrics)
        if !converted, trial.willRenew != false, let span = coverage.span(trial) {
            event.pendingFromMs = span.start
            event.pendingUntilMs = span.end
        }
        return event
    }
}
