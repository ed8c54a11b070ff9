import CountersignCore
import CountersignImportFormats
import CountersignServerCore
import Foundation
import FuzzSupport

/// The program's entry point: libFuzzer runs `fuzzOne` on each input.
@_cdecl("FuzzRevenueCatExport_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

/// The app rows are checked against: the demo app's products, any environment.
private let app: AppConfiguration = {
    var app = AppConfiguration.makeDemo()
    app.environments = ["Production", "Sandbox"]
    return app
}()

/// Input: the bytes of a RevenueCat transactions export, CSV or gzipped (`countersign import
/// revenuecat` reads a file as it is). Nothing may stop the process: every row is a record or a
/// refusal with its line, and every row taken has dates a stored time can hold and a price in
/// range, whose transaction the import would write.
private func fuzzOne(_ input: Data) -> CInt {
    guard let text = try? DelimitedText(input) else { return 0 }
    for record in text.records {
        precondition(record.fields.count == text.columns.count, "a record of another width than its header")
        guard let row = try? RevenueCatExportRow(record, columns: text.columns) else { continue }
        for date in [row.purchased, row.updated] + [row.expires, row.refunded, row.firstSeen].compactMap({ $0 }) {
            precondition(Date.epochMillisecondsRange.contains(date.epochMilliseconds))
            precondition(date.timeIntervalSince1970.isFinite, "a date that is no time")
        }
        if let price = row.priceMilliunits { precondition(price >= 0 && price <= 1_000_000_000_000, "a price out of its range") }
        if let product = app.product(row.productId) { _ = row.transaction(app: app, kind: product.type) }
    }
    return 0
}
