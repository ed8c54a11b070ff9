import CountersignAppStore
import CountersignCharts
import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import CountersignServer

/// The revenue charts' pages, read through a signed-in session as a browser reads them.
@Suite("Dashboard: revenue charts")
struct DashboardChartTests {
    @Test("the chart pages draw every chart, list its numbers, and download the admin API's CSV", arguments: TestDatabaseKind.available)
    func pages(_ kind: TestDatabaseKind) async throws {
        try await DashboardTests.withSetup(kind) { setup in
            let browser = setup.browser
            #expect(try await browser.get("/dashboard/charts").status == 303, "no session, no charts")
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)

            var purchase = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: setup.harness.app.bundleId)
            purchase.price = 9_990
            let (jws, _) = try setup.harness.ca.mintTransaction(purchase)
            #expect(try await setup.harness.post(user: "buyer", jws: jws).status == 200)
            // The server's clock, set when it started, moves past the purchase.
            setup.clock.now = Date().addingTimeInterval(60)

            let overview = try await browser.get("/dashboard/charts")
            #expect(overview.status == 200)
            let html = DashboardTests.text(overview)
            #expect(html.components(separatedBy: "<svg class=\"chart\"").count - 1 == ChartKind.allCases.count)
            for kind in ChartKind.allCases { #expect(html.contains(kind.title), "\(kind)") }
            #expect(html.contains("$9.99"), "the MRR card shows the subscription's month")

            let month = try await browser.get("/dashboard/charts/mrr?resolution=month")
            #expect(month.status == 200)
            let page = DashboardTests.text(month)
            #expect(page.contains("<td class=\"number\">$9.99</td>") && page.contains("Download CSV"))
            #expect(page.contains("href=\"/dashboard/charts/mrr?resolution=month&amp;format=csv\""))

            // The form's "all" sends empty fields: no filter.
            #expect(try await browser.get("/dashboard/charts/revenue?product=&environment=&store=&resolution=week").status == 200)

            let query = "?resolution=day&from=2026-01-01&to=2026-01-31"
            let download = try await browser.get("/dashboard/charts/revenue" + query + "&format=csv")
            let api = try await setup.harness.send(.get, "/v1/admin/charts/revenue" + query + "&format=csv", key: setup.harness.secretKey)
            #expect(download.status == 200 && api.status == 200)
            #expect(download.body == api.body, "the dashboard's CSV is the admin API's")
            #expect(download.headers[.contentType] == "text/csv; charset=utf-8")

            let unknown = try await browser.get("/dashboard/charts/ltv")
            #expect(unknown.status == 404 && DashboardTests.text(unknown).contains("no chart &#39;ltv&#39;"))
            let badDay = try await browser.get("/dashboard/charts/mrr?from=2026-13-01")
            #expect(badDay.status == 400 && DashboardTests.text(badDay).contains("from must be a day"))
        }
    }
}
