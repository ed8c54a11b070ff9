import CountersignCharts
import CountersignServerCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// A chart written out: as JSON for the admin API and as CSV for the download, with the same
/// numbers (counts whole, dollars to the cent, rates to four decimals, nothing where there is no
/// value).
enum ChartOutput {
    /// One value as both formats write it; nil for no value.
    static func text(_ value: Double?, _ unit: ChartColumn.Unit) -> String? {
        guard let value, value.isFinite else { return nil }
        switch unit {
        case .count: return String(Int64(value))
        case .usd: return String(format: "%.2f", value)
        case .rate: return String(format: "%.4f", value)
        }
    }

    /// The CSV as a download named after the app, the chart and its range.
    static func csvResponse(_ series: ChartSeries, app: String, headers extra: HTTPFields = [:]) -> Response {
        let name = "\(app)-\(series.kind.rawValue)-\(series.range.resolution.rawValue)-\(series.range.from)-\(series.range.to).csv"
        var headers: HTTPFields = [.contentType: "text/csv; charset=utf-8", .contentDisposition: "attachment; filename=\"\(name)\""]
        headers.append(contentsOf: extra)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: csv(series))))
    }

    /// A request's query as the chart routes read it: each name once (the first), a field left
    /// empty dropped when `droppingEmpty` (the dashboard form's "all").
    static func query(_ request: Request, droppingEmpty: Bool = false) -> [String: String] {
        Dictionary(
            request.uri.queryParameters.filter { !droppingEmpty || !$0.value.isEmpty }.map { (String($0.key), String($0.value)) },
            uniquingKeysWith: { first, _ in first })
    }

    /// `period,<columns…>` and a line a period.
    static func csv(_ series: ChartSeries) -> String {
        let columns = series.kind.columns
        var lines = [(["period"] + columns.map(\.name)).joined(separator: ",")]
        for row in series.rows {
            lines.append(([row.period.description] + zip(row.values, columns).map { text($0, $1.unit) ?? "" }).joined(separator: ","))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The chart's definition, range, filters and money settings, then a point a period with
    /// each column by name (null where there is no value).
    static func json(_ series: ChartSeries, app: AppConfiguration, filter: ChartFilter) -> [UInt8] {
        var json = LeanJSONWriter(capacity: 256 + 96 * series.rows.count)
        func member(_ name: String, _ value: String?) {
            json.string(name)
            json.raw(":")
            if let value { json.string(value) } else { json.raw("null") }
        }
        json.raw("{")
        member("chart", series.kind.rawValue)
        json.raw(",")
        member("title", series.kind.title)
        json.raw(#","definitions_version":"#)
        json.integer(Int64(ChartKind.definitionsVersion))
        json.raw(",")
        member("resolution", series.range.resolution.rawValue)
        json.raw(",")
        member("from", series.range.from.description)
        json.raw(",")
        member("to", series.range.to.description)
        json.raw(#","filters":{"#)
        member("product", filter.product)
        json.raw(",")
        member("environment", filter.environment)
        json.raw(",")
        member("store", filter.store)
        json.raw(",")
        member("country", filter.country)
        json.raw(#"},"currency":"USD","#)
        member("rates_as_of", app.usdExchangeRates?.asOf)
        json.raw(#","commission":"#)
        json.append(contentsOf: Array(String(app.commissionPercentage ?? AppConfiguration.standardCommission).utf8))
        json.raw(#","points":["#)
        let columns = series.kind.columns
        for (index, row) in series.rows.enumerated() {
            json.raw(index == 0 ? "{" : ",{")
            member("period", row.period.description)
            for (value, column) in zip(row.values, columns) {
                json.raw(",")
                json.string(column.name)
                json.raw(":")
                json.append(contentsOf: Array((text(value, column.unit) ?? "null").utf8))
            }
            json.raw("}")
        }
        json.raw("]}")
        return json.bytes
    }
}
