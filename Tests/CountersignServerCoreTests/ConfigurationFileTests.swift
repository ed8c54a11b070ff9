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
}
