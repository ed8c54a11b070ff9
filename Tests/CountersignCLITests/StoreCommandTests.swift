import CountersignTesting
import Foundation
import Testing

@Suite("countersign store")
struct StoreCommandTests {
    @Test("store purchase mints a JWS that store verify accepts with the deployment's root, printing its payload")
    func purchaseThenVerify() throws {
        let directory = try makeTemporaryDirectory("countersign-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let minted = try CLIRunner.run(["store", "purchase", "--data-dir", directory.path, "--product", "lifetime", "--app-user-id", "u1"])
        #expect(minted.status == 0, "\(minted.stderr)")
        let file = directory.appendingPathComponent("t.jws")
        try Data(minted.stdout.utf8).write(to: file)
        let root = directory.appendingPathComponent("test-store/root.pem").path
        let now = String(Int(Date().timeIntervalSince1970))

        let verified = try CLIRunner.run(["store", "verify", file.path, "--root", root, "--at", now, "--bundle-id", "com.example.demo"])
        #expect(verified.status == 0, "\(verified.stdout)")
        let payload = try JSONSerialization.jsonObject(with: Data(verified.stdout.utf8)) as? [String: Any]
        #expect(payload?["productId"] as? String == "lifetime")
        #expect(payload?["environment"] as? String == "TestStore")
        #expect(payload?["type"] as? String == "Non-Consumable")
        #expect((payload?["appAccountToken"] as? String)?.count == 36)

        let wrongBundle = try CLIRunner.run(["store", "verify", file.path, "--root", root, "--at", now, "--bundle-id", "com.other"])
        #expect(wrongBundle.status == 1)
        #expect(wrongBundle.lines == ["error: INVALID_APP_IDENTIFIER (bundle-id): bundleId 'com.example.demo' is not 'com.other'"])

        let againstApple = try CLIRunner.run(["store", "verify", file.path, "--at", now])
        #expect(againstApple.status == 1)
        #expect(againstApple.lines.first?.hasPrefix("error: VERIFICATION_FAILURE (untrusted-chain): ") == true)

        // One payload character changed.
        var parts = minted.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ".").map(String.init)
        let index = parts[1].index(parts[1].startIndex, offsetBy: 20)
        parts[1].replaceSubrange(index...index, with: parts[1][index] == "A" ? "B" : "A")
        try Data(parts.joined(separator: ".").utf8).write(to: file)
        let tampered = try CLIRunner.run(["store", "verify", file.path, "--root", root, "--at", now])
        #expect(tampered.status == 1)
        #expect(tampered.lines.count == 1)
        #expect(tampered.lines.first?.hasPrefix("error: ") == true)
    }

    @Test(
        "store verify on malformed input says VERIFICATION_FAILURE (malformed-jws); Production without an app Apple ID, unknown products and missing files are errors"
    )
    func badInput() throws {
        let directory = try makeTemporaryDirectory("countersign-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("bad.jws")
        try Data("a.b.c".utf8).write(to: file)
        let result = try CLIRunner.run(["store", "verify", file.path])
        #expect(result.status == 1)
        #expect(result.lines == ["error: VERIFICATION_FAILURE (malformed-jws): the header segment is not base64url"])

        // Apple's library refuses to be configured for Production without the app's Apple ID.
        let production = try CLIRunner.run(["store", "verify", file.path, "--environment", "Production"])
        #expect(production.status == 2)
        #expect(production.lines.first?.hasPrefix("error: configuration: appAppleId is required") == true)
        #expect(production.lines.first?.contains("App Store Connect") == true)

        let missing = try CLIRunner.run(["store", "verify", "/nonexistent.jws"])
        #expect(missing.status == 2)
        #expect(missing.lines == ["error: JWS file not found: /nonexistent.jws"])

        let unknown = try CLIRunner.run(["store", "purchase", "--data-dir", directory.path, "--product", "nope"])
        #expect(unknown.status == 2)
        #expect(unknown.lines == ["error: product 'nope' is not configured for app 'demo' (known: pro_monthly, lifetime, coins_100)"])
    }

    @Test("serve will not start with an app that accepts Production without its appAppleId, and says where to find it")
    func productionNeedsAppAppleId() throws {
        let directory = try makeTemporaryDirectory("countersign-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let configuration =
            #"{"apps":[{"id":"shop","bundleId":"com.example.shop","publicApiKeys":["pk_x"],"secretApiKeys":["sk_x"],"environments":["Production"],"transferBehavior":"transfer","products":[],"offerings":[]}]}"#
        try Data(configuration.utf8).write(to: directory.appendingPathComponent("countersign.json"))
        let serve = try CLIRunner.run(["serve", "--data-dir", directory.path, "--port", "0"])
        #expect(serve.status == 2)
        #expect(serve.lines.last?.contains("app 'shop': appAppleId is required") == true, "\(serve.lines)")
        #expect(serve.lines.last?.contains("App Store Connect") == true)
        // Nothing was created for a server that never started.
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("keys").path))
    }

    @Test("serve and import refuse dashboard and database settings out of range, naming the option")
    func dashboardSettingsChecked() throws {
        let directory = try makeTemporaryDirectory("countersign-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        for (option, value) in [
            ("--dashboard-session-seconds", "5"), ("--dashboard-cache-seconds", "100000"),
            ("--database-connections", "1"), ("--database-connections", "5000"),
        ] {
            let serve = try CLIRunner.run(["serve", "--data-dir", directory.path, "--port", "0", option, value])
            #expect(serve.status != 0, "\(option) \(value)")
            #expect(serve.lines.contains { $0.contains(option) }, "\(serve.lines)")
        }
        // The imports share serve's storage options, and their checks.
        let importing = try CLIRunner.run([
            "import", "revenuecat", "--data-dir", directory.path, "--transactions", "/nonexistent.csv", "--database-connections", "1",
        ])
        #expect(importing.status != 0)
        #expect(importing.lines.contains { $0.contains("--database-connections must be 2 to 1000") }, "\(importing.lines)")
    }
}
