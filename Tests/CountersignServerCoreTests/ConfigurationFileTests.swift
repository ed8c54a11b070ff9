import CountersignCore
import CountersignServerCore
import Foundation
import Testing

/// `countersign.json` is read by the same strict reader as request bodies: what the server acts
/// on is what any other JSON reader of the file would see.
@Suite("Configuration file")
struct ConfigurationFileTests {
    static let app =
        #"{"id":"demo","bundleId":"com.example.demo","environments":["Sandbox"],"products":[],"offerings":[],"publicApiKeys":["cs_pub_a"],"secretApiKeys":["cs_sec_a"],"transferBehavior":"transfer"}"#

    @Test("a configuration reads back what was saved")
    func roundTrip() throws {
        let configuration = try DeploymentConfiguration.decode(Data(#"{"apps":[\#(Self.app)]}"#.utf8), source: "test")
        #expect(configuration.apps.map(\.id) == ["demo"])
        let saved = try JSONEncoder().encode(configuration)
        #expect(try DeploymentConfiguration.decode(saved, source: "saved") == configuration)
    }

    @Test(
        "a key given twice is refused, at any depth and however it is escaped",
        arguments: [
            #"{"apps":[],"apps":[\#(app)]}"#,
            #"{"apps":[{"id":"demo","i\u0064":"other","bundleId":"b","environments":[],"products":[],"offerings":[],"publicApiKeys":[],"secretApiKeys":[]}]}"#,
            #"{"apps":[\#(app.replacingOccurrences(of: #""environments":["Sandbox"]"#, with: #""environments":["Sandbox"],"environments":["Production"]"#))]}"#,
        ])
    func duplicateKeys(_ text: String) {
        #expect {
            _ = try DeploymentConfiguration.decode(Data(text.utf8), source: "countersign.json")
        } throws: { error in
            "\(error)".contains("appears twice")
        }
    }

    @Test(
        "invalid UTF-8 and lone surrogates are refused, not replaced",
        arguments: [
            Data(#"{"apps":[],"x":""#.utf8) + Data([0xFF]) + Data(#""}"#.utf8),
            Data(#"{"apps":[],"x":"\uD800"}"#.utf8),
        ])
    func encodings(_ data: Data) {
        #expect {
            _ = try DeploymentConfiguration.decode(data, source: "countersign.json")
        } throws: { error in
            "\(error)".contains("countersign.json is not a valid configuration")
        }
    }

    static func withCommission(_ changes: String) -> Data {
        Data(
            #"{"apps":[\#(app.replacingOccurrences(of: #""transferBehavior""#, with: #""commissionChanges":\#(changes),"transferBehavior""#))]}"#.utf8
        )
    }

    @Test("commission changes by day: the rate of a purchase's day applies; a bad day, rate or order is refused")
    func commissionChanges() throws {
        let app = try DeploymentConfiguration.decode(
            Self.withCommission(#"[{"from":"2026-01-01","percentage":0.15},{"from":"2026-07-01","percentage":0.3}]"#), source: "test"
        ).apps[0]
        let day: Int64 = 86_400_000
        let january = Int64(1_767_225_600_000)  // 2026-01-01T00:00:00Z
        #expect(app.commission(atMilliseconds: january - 1) == 0.3)
        #expect(app.commission(atMilliseconds: january) == 0.15)
        #expect(app.commission(atMilliseconds: january + 181 * day - 1) == 0.15)
        #expect(app.commission(atMilliseconds: january + 181 * day) == 0.3)
        for (changes, message) in [
            (#"[{"from":"2026-02-30","percentage":0.15}]"#, "must be a day"),
            (#"[{"from":"2026-1-01","percentage":0.15}]"#, "must be a day"),
            (#"[{"from":"2026-01-01","percentage":1.5}]"#, "fraction from 0 to 1"),
            (#"[{"from":"2026-07-01","percentage":0.15},{"from":"2026-01-01","percentage":0.3}]"#, "in order"),
            (#"[{"from":"2026-07-01","percentage":0.15},{"from":"2026-07-01","percentage":0.3}]"#, "in order"),
        ] {
            #expect {
                _ = try DeploymentConfiguration.decode(Self.withCommission(changes), source: "test")
            } throws: { error in
                "\(error)".contains(message)
            }
        }
    }

    static func withRates(_ fields: String) -> Data {
        Data(#"{"apps":[\#(app.replacingOccurrences(of: #""transferBehavior""#, with: #"\#(fields),"transferBehavior""#))]}"#.utf8)
    }

    @Test("exchange rates by day: each table from its day until the next; a bad day, rate or order is refused")
    func exchangeRateHistory() throws {
        let app = try DeploymentConfiguration.decode(
            Self.withRates(
                #""usdExchangeRateHistory":[{"asOf":"2026-01-01","usdPerUnit":{"EUR":1.1,"GBP":1.3}}],"usdExchangeRates":{"asOf":"2026-07-01","usdPerUnit":{"EUR":1.2}}"#
            ), source: "test"
        ).apps[0]
        let january = Int64(1_767_225_600_000)  // 2026-01-01T00:00:00Z
        let july = january + 181 * 86_400_000
        #expect(app.usdPerUnit("EUR", atMilliseconds: january - 1) == 1.1, "before every table, the oldest")
        #expect(app.usdPerUnit("EUR", atMilliseconds: july - 1) == 1.1 && app.usdPerUnit("GBP", atMilliseconds: july - 1) == 1.3)
        #expect(app.usdPerUnit("EUR", atMilliseconds: july) == 1.2)
        #expect(app.usdPerUnit("GBP", atMilliseconds: july) == nil, "missing from the table of its day: missing, not the older rate")
        for (fields, message) in [
            (#""usdExchangeRateHistory":[{"asOf":"2026-13-01","usdPerUnit":{"EUR":1.1}}]"#, "must be a day"),
            (#""usdExchangeRateHistory":[{"asOf":"2026-01-01","usdPerUnit":{"EUR":-1}}]"#, "positive rate"),
            (#""usdExchangeRateHistory":[{"asOf":"2026-01-01","usdPerUnit":{"euro":1}}]"#, "positive rate"),
            (
                #""usdExchangeRateHistory":[{"asOf":"2026-07-01","usdPerUnit":{}}],"usdExchangeRates":{"asOf":"2026-01-01","usdPerUnit":{}}"#,
                "in order"
            ),
            (#""usdExchangeRateHistory":[{"asOf":"2026-07-01","usdPerUnit":{}},{"asOf":"2026-07-01","usdPerUnit":{}}]"#, "in order"),
        ] {
            #expect {
                _ = try DeploymentConfiguration.decode(Self.withRates(fields), source: "test")
            } throws: { error in
                "\(error)".contains(message)
            }
        }
    }
}
