import CountersignCharts
import CountersignCore
import CountersignServerCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The revenue charts' pages: `/dashboard/charts`, every chart small with its latest figure, and
/// `/dashboard/charts/{chart}`, one chart with its numbers as a table and a CSV download (the admin
/// API's CSV, byte for byte). Both take the admin API's query (docs/dashboard.md, "Revenue charts").
extension DashboardRoutes {
    func addChartPages(to router: ServerRouter) {
        page(router, .get, "/dashboard/charts") { signedIn, _, request in
            try await chartsPage(signedIn, query: ChartOutput.query(request, droppingEmpty: true))
        }
        page(router, .get, "/dashboard/charts/:chart") { signedIn, _, request in
            try await chartPage(
                signedIn, chart: request.uri.path.split(separator: "/").last.map(String.init) ?? "",
                query: ChartOutput.query(request, droppingEmpty: true))
        }
    }

    /// The column a chart's bars draw and its card shows.
    static func headline(_ kind: ChartKind) -> Int {
        switch kind {
        case .churn: 3
        case .refunds: 2
        case .trialConversion: 6
        default: 0
        }
    }

    /// One value as a person reads it: dollars with a sign, rates as a percentage.
    static func display(_ value: Double?, _ unit: ChartColumn.Unit) -> String {
        guard let value, let text = ChartOutput.text(value, unit) else { return "–" }
        switch unit {
        case .count: return text
        case .usd: return "$" + text
        case .rate: return String(format: "%.1f %%", value * 100)
        }
    }

    static let explanations: [ChartKind: String] = [
        .revenue: "What paid transactions bought in each period brought in, less those refunded since; proceeds are after the store's commission.",
        .mrr: "Every active paid subscription at the period's end, its price normalised to a month (a year counts 1/12, a week ×4).",
        .activeSubscriptions: "Paid, unexpired subscriptions at the period's end, cancelled or not.",
        .activeTrials: "Unexpired free trials at the period's end, whatever their auto-renew status.",
        .newCustomers: "Customers first seen in the period (an app user id merged into another is not a customer of its own).",
        .churn: "Paid subscriptions that expired in the period, less those that came back, over those active at its start.",
        .refunds: "Paid transactions bought in the period and the share of them refunded since.",
        .trialConversion:
            "Customers first seen in the period, the share that started a free trial, and of those the share that became paying (pending and abandoned make up the rest).",
    ]

    func chartsPage(_ signedIn: SignedIn, query: [String: String]) async throws -> Response {
        let request = try ChartRequest(chart: ChartKind.revenue.rawValue, query: query, today: today())
        let time = now()
        let totals = try await ChartRequest.totals(app: signedIn.app, store: store, range: request.range, filter: request.filter, now: time)
        let cards: [[String: Any]] = ChartKind.allCases.map { kind in
            var one = request
            one.kind = kind
            let series = one.series(totals, app: signedIn.app, now: time)
            let column = kind.columns[Self.headline(kind)]
            return [
                "title": kind.title, "link": "/dashboard/charts/\(kind.rawValue)" + Self.queryString(query),
                "latest": Self.display(series.rows.last(where: { $0.values[Self.headline(kind)] != nil })?.values[Self.headline(kind)], column.unit),
                "svg": svg(series),
            ]
        }
        return try render("charts", signedIn, title: "Revenue charts", section: "charts", form(signedIn, request).merging(["cards": cards]) { $1 })
    }

    func chartPage(_ signedIn: SignedIn, chart: String, query: [String: String]) async throws -> Response {
        let request = try ChartRequest(chart: chart, query: query, today: today())
        let series = try await request.series(app: signedIn.app, store: store, now: now())
        if query["format"] == "csv" {
            var headers: HTTPFields = [:]
            DashboardHeaders.apply(to: &headers)
            return ChartOutput.csvResponse(series, app: signedIn.app.id, headers: headers)
        }
        let columns = series.kind.columns
        let rows: [[String: Any]] = series.rows.reversed().map { row in
            ["period": row.period.description, "cells": zip(row.values, columns).map { ["value": Self.display($0, $1.unit)] }]
        }
        var values = form(signedIn, request)
        values["chartTitle"] = series.kind.title
        values["explanation"] = Self.explanations[series.kind] ?? ""
        values["svg"] = svg(series)
        values["columns"] = columns.map { ["name": $0.name.replacingOccurrences(of: "_", with: " ")] }
        values["rows"] = rows
        values["csv"] = "/dashboard/charts/\(series.kind.rawValue)" + Self.queryString(query.merging(["format": "csv"]) { $1 })
        values["version"] = ChartKind.definitionsVersion
        return try render("chart", signedIn, title: series.kind.title, section: "charts", values)
    }

    private func today() -> ChartDay { ChartDay(milliseconds: now().epochMilliseconds) }

    private func svg(_ series: ChartSeries) -> String {
        let index = Self.headline(series.kind)
        let column = series.kind.columns[index]
        return SVGChart.bars(
            series.rows.map { ($0.period.description, $0.values[index]) }, title: "\(series.kind.title) by \(series.range.resolution.rawValue)",
            style: "chart-\(series.kind.rawValue)"
        ) { Self.display($0, column.unit) }
    }

    /// The filter form's values: what the request asked, and the app's products to pick from.
    private func form(_ signedIn: SignedIn, _ request: ChartRequest) -> [String: Any] {
        func options(_ choices: [String], _ chosen: String?) -> [[String: Any]] {
            [["value": "", "label": "all", "selected": chosen == nil]] + choices.map { ["value": $0, "label": $0, "selected": $0 == chosen] }
        }
        return [
            "from": request.range.from.description, "to": request.range.to.description,
            "resolutions": ChartResolution.allCases.map { ["value": $0.rawValue, "selected": $0 == request.range.resolution] },
            "products": options(signedIn.app.products.map(\.id), request.filter.product),
            "environments": options(ChartRequest.environments, request.filter.environment),
            "stores": options(ChartRequest.stores, request.filter.store), "country": request.filter.country ?? "",
            "ratesAsOf": signedIn.app.usdExchangeRates?.asOf ?? "",
        ]
    }

    /// `?name=value&…` of the query's chart parameters, sorted, percent-encoded; empty for none.
    static func queryString(_ query: [String: String]) -> String {
        let names = ["resolution", "from", "to", "product", "environment", "store", "country", "format"]
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let pairs = names.compactMap { name -> String? in
            guard let value = query[name], !value.isEmpty else { return nil }
            return name + "=" + (value.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")
        }
        return pairs.isEmpty ? "" : "?" + pairs.joined(separator: "&")
    }
}
