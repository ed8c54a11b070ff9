import CountersignCore
import CountersignStorage
import CountersignTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import CountersignServer

/// What an operator reads before turning enforcement on, the same in the admin API and on the
/// dashboard's verification page: failures by SDK and app version, and the share of customers the
/// verification policy covers (counted here apart, with the rollout's own hash).
@Suite("Verification report")
struct VerificationReportTests {
    static let customers = 2_000

    @Test("failures by SDK and app version, and the policy's coverage, in the admin API and on the dashboard", arguments: TestDatabaseKind.available)
    func report(_ kind: TestDatabaseKind) async throws {
        try await DashboardTests.withSetup(
            kind,
            configure: { app in
                app.verificationPolicy = .init(mode: .enforced, rolloutPercent: 25, minimumSDKVersion: SDKVersion(major: 0, minor: 1, patch: 0))
            }
        ) { setup in
            let harness = setup.harness
            let app = harness.app
            // Customers recorded at first sight, as launches would.
            let users = (0..<Self.customers).map { "launch-\($0)" }
            for user in users { _ = try await harness.server.store.customerInfo(app: app, user: user, now: setup.clock.now) }
            let expectedCovered = users.filter {
                VerificationPolicy.bucket(seed: VerificationPolicy.seed(forApp: app.id), appUserID: $0) < 2_500
            }.count

            // Two releases report failures, as the SDK sends them.
            let reports: [[String: Any]] = [
                [
                    "reason": "payloadMismatch", "path": "/v1/subscribers/{id}", "mode": "informational", "sdk_version": "0.1.0",
                    "app_version": "2.0.0", "count": 7,
                ],
                [
                    "reason": "deviceClockOutsideValidity", "path": "/v1/subscribers/{id}", "mode": "informational", "sdk_version": "0.1.0",
                    "app_version": "2.0.0", "count": 3,
                ],
                [
                    "reason": "missingSignature", "path": "/v1/receipts", "mode": "enforced", "sdk_version": "0.2.0", "app_version": "2.1.0",
                    "count": 4,
                ],
            ]
            let body = try JSONSerialization.data(withJSONObject: ["failures": reports])
            let posted = try await harness.client.execute(
                uri: "/v1/diagnostics/verification_failures", method: .post,
                headers: [.authorization: "Bearer \(app.publicApiKeys[0])", .contentType: "application/json"], body: ByteBuffer(bytes: body)
            ) { Int($0.status.code) }
            #expect(posted == 202)
            // A version that is not one is refused, nothing stored.
            let bad = try JSONSerialization.data(withJSONObject: [
                "failures": [["reason": "payloadMismatch", "path": "/", "mode": "enforced", "app_version": "2.0 <script>"]]
            ])
            let refused = try await harness.client.execute(
                uri: "/v1/diagnostics/verification_failures", method: .post,
                headers: [.authorization: "Bearer \(app.publicApiKeys[0])", .contentType: "application/json"], body: ByteBuffer(bytes: bad)
            ) { Int($0.status.code) }
            #expect(refused == 400)

            let json = try await harness.client.execute(
                uri: "/v1/admin/diagnostics/verification_failures", method: .get, headers: [.authorization: "Bearer \(app.secretApiKeys[0])"]
            ) { try JSONSerialization.jsonObject(with: Data($0.body.readableBytesView)) as? [String: Any] ?? [:] }
            let counts = json["counts"] as? [[String: Any]] ?? []
            #expect(counts.count == 3)
            #expect(
                counts.contains {
                    $0["sdk_version"] as? String == "0.2.0" && $0["app_version"] as? String == "2.1.0" && $0["failure_count"] as? Int == 4
                })
            let versions = json["by_version"] as? [[String: Any]] ?? []
            #expect(versions.count == 2)
            let first = try #require(versions.first)
            #expect(first["sdk_version"] as? String == "0.1.0" && first["app_version"] as? String == "2.0.0")
            #expect(first["tampering"] as? Int == 7 && first["cannot_verify"] as? Int == 3)
            let policy = try #require(json["policy"] as? [String: Any])
            #expect(policy["mode"] as? String == "enforced" && policy["rollout_percent"] as? Double == 25)
            #expect(policy["customers_counted"] as? Int == Self.customers)
            #expect(policy["customers_covered"] as? Int == expectedCovered)
            #expect((450...550).contains(expectedCovered), "the rollout's hash put \(expectedCovered) of 2,000 in a 25 % rollout")

            try await setup.browser.signIn(app.secretApiKeys[0])
            let page = String(decoding: try await setup.browser.get("/dashboard/failures").body, as: UTF8.self)
            #expect(page.contains("It covers <strong>\(expectedCovered)</strong> of the <strong>\(Self.customers)</strong> customers"))
            #expect(page.contains("<strong>25&nbsp;%</strong> of users, on SDK 0.1.0 and later"))
            #expect(page.contains("<tr><td>0.1.0</td><td>2.0.0</td><td class=\"number\">7</td><td class=\"number\">3</td></tr>"))
            #expect(page.contains(#"<code>missingSignature</code></td><td>enforced</td><td>0.2.0</td><td>2.1.0</td><td class="number">4</td>"#))
        }
    }
}
