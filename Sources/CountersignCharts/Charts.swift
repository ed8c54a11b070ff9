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
    public static let definitionsVersion = 2

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
    /// The chart over `transactions` (and `customersFirstSeenMs`, the first sight of every
    /// customer) for the periods of `range`: the full computation, from the records themselves.
    public func series(
        transactions: [ChartTransaction], customersFirstSeenMs: [Int64], range: ChartRange, filter: ChartFilter, settings: ChartSettings
    ) -> ChartSeries {
        let totals = ChartTotals(
            events: ChartEvent.all(transactions, customersFirstSeenMs: customersFirstSeenMs), filter: filter, throughDay: range.lastDay,
            nowMs: settings.nowMs)
        return series(totals, range: range, settings: settings)
    }

    /// From purchase to expiry in milliseconds (at most `Int64.max`).
    static func length(of transaction: ChartTransaction) -> Int64 {
        let (length, overflow) = (transaction.expiresMs ?? transaction.purchaseMs).subtractingReportingOverflow(transaction.purchaseMs)
        return overflow ? .max : length
    }

    static func rate(_ part: Int64, _ whole: Int64) -> Double? { whole == 0 ? nil : Double(part) / Double(whole) }

    /// Dollars of micro-dollars, rounded to the cent (half away from zero).
    static func dollars(_ micros: Int64) -> Double { (Double(micros) / 10_000).rounded() / 100 }
}
