import CountersignCharts
import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import Hummingbird

/// A chart as a request asks for it (the admin API's query and the dashboard's): which chart, the
/// days, the resolution and the filters, each checked with a message naming what is wrong.
struct ChartRequest: Sendable, Hashable {
    var kind: ChartKind
    var range: ChartRange
    var filter: ChartFilter

    static let environments = ["Production", "Sandbox", "Xcode", "TestStore", "Stripe", "StripeTest"]
    static let stores = ["app_store", "test_store", "stripe"]

    /// Reads `chart` (a ``ChartKind`` name) and the query: `resolution` (`day`, the default;
    /// `week`, `month`), `from` and `to` (`YYYY-MM-DD`, UTC; by default the 30 days, 12 weeks or
    /// 12 months up to today), `product`, `environment`, `store` and `country`.
    init(chart: String, query: [String: String], today: ChartDay) throws(APIError) {
        guard let kind = ChartKind(rawValue: chart) else {
            throw APIError(.notFound, "no chart '\(chart)'; the charts are \(ChartKind.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let resolution =
            try Self.pick(query["resolution"], "resolution", from: ChartResolution.allCases.map(\.rawValue)).flatMap(
                ChartResolution.init(rawValue:)) ?? .day
        let to = try Self.day(query["to"], "to") ?? today
        let back: Int64 =
            switch resolution {
            case .day: 29
            case .week: 7 * 11
            case .month: 0
            }
        var from = try Self.day(query["from"], "from") ?? ChartDay(daysSince1970: to.daysSince1970 - back)
        if resolution == .month, query["from"] == nil {
            // The month eleven months before `to`'s, from its first day.
            for _ in 0..<11 { from = ChartDay(daysSince1970: from.start(of: .month).daysSince1970 - 1) }
        }
        guard from <= to else { throw APIError(.invalidField, "from (\(from)) must not be after to (\(to))") }
        let range = ChartRange(from: from, to: to, resolution: resolution)
        guard to.daysSince1970 - from.daysSince1970 < Int64(ChartRange.maximumPeriods) else {
            throw APIError(.invalidField, "from and to may be at most \(ChartRange.maximumPeriods) days apart")
        }
        if let product = query["product"], product.isEmpty || product.unicodeScalars.count > 256 {
            throw APIError(.invalidField, "product must be a product id of 1 to 256 characters")
        }
        if let country = query["country"], country.utf8.count != 2 || !country.utf8.allSatisfy({ (65...90).contains($0) }) {
            throw APIError(.invalidField, "country must be an ISO 3166-1 alpha-2 code like US")
        }
        self.kind = kind
        self.range = range
        filter = ChartFilter(
            product: query["product"], environment: try Self.pick(query["environment"], "environment", from: Self.environments),
            store: try Self.pick(query["store"], "store", from: Self.stores), country: query["country"])
    }

    private static func day(_ text: String?, _ name: String) throws(APIError) -> ChartDay? {
        guard let text else { return nil }
        guard let day = ChartDay(text) else { throw APIError(.invalidField, "\(name) must be a day like 2026-11-01 (UTC, 1970 to 9999)") }
        return day
    }

    private static func pick(_ text: String?, _ name: String, from choices: [String]) throws(APIError) -> String? {
        guard let text else { return nil }
        guard choices.contains(text) else { throw APIError(.invalidField, "\(name) must be one of \(choices.joined(separator: ", "))") }
        return text
    }

    /// The chart's points over what `store` holds for `app` at `now`.
    func series(app: AppConfiguration, store: CustomerDatabase, now: Date) async throws -> ChartSeries {
        series(try await Self.totals(app: app, store: store, range: range, filter: filter, now: now), app: app, now: now)
    }

    /// The chart's points over `totals`.
    func series(_ totals: ChartTotals, app: AppConfiguration, now: Date) -> ChartSeries {
        kind.series(totals, range: range, settings: Self.settings(app, now: now))
    }

    /// What every chart of `range` and `filter` reads, read once for as many charts as need it:
    /// the kept sums, first brought up to date with every write made so far.
    static func totals(app: AppConfiguration, store: CustomerDatabase, range: ChartRange, filter: ChartFilter, now: Date) async throws -> ChartTotals
    {
        try await store.refreshChartTotalsFully(now: now)
        return try await store.chartTotals(
            app: app.id, filter: filter, fromDay: range.firstDay, throughDay: range.lastDay, nowMs: now.epochMilliseconds)
    }

    static func settings(_ app: AppConfiguration, now: Date) -> ChartSettings {
        var periods: [String: String] = [:]
        for product in app.products { periods[product.id] = product.subscriptionPeriod }
        var settings = ChartSettings(
            usdPerUnit: [:], commission: app.commissionPercentage ?? AppConfiguration.standardCommission,
            productPeriods: periods, nowMs: now.epochMilliseconds)
        settings.rateTables = app.exchangeRateTables.map { ($0.fromMilliseconds, $0.usdPerUnit) }
        settings.commissionChanges = (app.commissionChanges ?? []).compactMap { change in
            change.fromMilliseconds.map { ($0, change.percentage) }
        }
        return settings
    }
}
