import CountersignTesting
import Foundation
import Testing

/// `countersign client customer-info --json` (docs/cli.md) against a live `countersign serve`,
/// directly and through `countersign proxy --attack grant-entitlement`.
@Suite("client command")
struct ClientCommandTests {
    @Test("customer-info --json: verified directly; failed (informational) and an error (enforced) through a tampering proxy; a purchase verified")
    func customerInfo() throws {
        let directory = try makeTemporaryDirectory("countersign-client")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try BackgroundCommand(
            ["serve", "--data-dir", directory.path, "--port", "0", "--log-level", "error"], waitingFor: "listening on")
        defer { server.stop() }
        let serverURL = "http://127.0.0.1:\(server.port)"
        let proxy = try BackgroundCommand(
            ["proxy", "--listen", "127.0.0.1:0", "--upstream", serverURL, "--attack", "grant-entitlement"], waitingFor: "proxying"
        )
        defer { proxy.stop() }
        let configuration =
            try JSONSerialization.jsonObject(with: Data(contentsOf: directory.appendingPathComponent("countersign.json"))) as! [String: Any]
        let app = (configuration["apps"] as! [[String: Any]])[0]
        let apiKey = (app["publicApiKeys"] as! [String])[0]
        let rootKey = try String(contentsOf: directory.appendingPathComponent("keys/root.pub"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)

        func client(_ command: String, server: String, mode: String, extra: [String] = []) throws -> (status: Int32, json: [String: Any]) {
            let result = try CLIRunner.run(
                [
                    "client", command, "--server", server, "--api-key", apiKey, "--app-user-id", "cli-user",
                    "--root-key", rootKey, "--mode", mode, "--store-server", serverURL, "--json",
                ] + extra)
            let json = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] ?? [:]
            return (result.status, json)
        }

        let honest = try client("customer-info", server: serverURL, mode: "enforced")
        #expect(honest.status == 0)
        #expect(honest.json["verification"] as? String == "verified")
        #expect((honest.json["entitlements"] as? [String: Any])?.isEmpty == true)

        let informational = try client("customer-info", server: "http://127.0.0.1:\(proxy.port)", mode: "informational")
        #expect(informational.status == 0)
        #expect(informational.json["verification"] as? String == "failed")
        #expect(informational.json["reason"] as? String == "payloadMismatch")
        let tamperedPro = (informational.json["entitlements"] as? [String: [String: Any]])?["pro"]
        #expect(tamperedPro?["isActive"] as? Bool == true, "informational delivers the tampered data, marked failed")
        #expect(tamperedPro?["productIdentifier"] as? String == "pro_monthly")

        let enforced = try client("customer-info", server: "http://127.0.0.1:\(proxy.port)", mode: "enforced")
        #expect(enforced.status != 0)
        #expect(enforced.json["entitlements"] == nil)
        let error = enforced.json["error"] as? [String: Any]
        #expect(error?["code"] as? String == "signatureVerificationFailed")
        #expect(error?["reason"] as? String == "payloadMismatch")

        let bought = try client("purchase", server: serverURL, mode: "enforced", extra: ["--product", "lifetime"])
        #expect(bought.status == 0)
        #expect(bought.json["verification"] as? String == "verified")
        let pro = (bought.json["entitlements"] as? [String: [String: Any]])?["pro"]
        #expect(pro?["isActive"] as? Bool == true)
        #expect(pro?["expiresDate"] is NSNull)
    }

    @Test("demo exits 0 and shows the honest purchase verified and the tampering caught in both modes")
    func demo() throws {
        let result = try CLIRunner.run(["demo"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("✓ the honest purchase is verified"))
        #expect(result.stdout.contains("verification: failed (payloadMismatch)"))
        #expect(result.stdout.contains("✓ caught: nothing granted"))
        #expect(result.stdout.contains("Result: the honest purchase verified; the tampering was caught in both modes."))
    }
}
