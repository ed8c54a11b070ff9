import CountersignCharts
import CountersignCore
import CountersignServerCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// `GET /v1/admin/charts/{chart}` (secret key): a revenue chart of the app as JSON, or with
/// `format=csv` as the dashboard's CSV download, for teams that chart elsewhere
/// (docs/dashboard.md, "Revenue charts").
extension AdminRoutes {
    func addChartRoutes(to router: RouterGroup<ServerRequestContext>) {
        route(router, .get, "/v1/admin/charts/:chart") { app, request, context in
            let query = ChartOutput.query(request)
            let time = now()
            let chart = try ChartRequest(
                chart: context.parameters.get("chart") ?? "", query: query, today: ChartDay(milliseconds: time.epochMilliseconds))
            let series = try await chart.series(app: app, store: store, now: time)
            switch query["format"] ?? "json" {
            case "json":
                return Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(bytes: ChartOutput.json(series, app: app, filter: chart.filter))))
            case "csv":
                return ChartOutput.csvResponse(series, app: app.id)
            default:
                throw APIError(.invalidField, "format must be json or csv")
            }
        }
    }
}
