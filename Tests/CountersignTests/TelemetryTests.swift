import CountersignCore
import CountersignProxy
import CountersignTesting
import Foundation
import Hummingbird
import HummingbirdTesting
import Testing

@testable import Countersign

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Verification-failure telemetry, end to end: SDK → server → admin API and /metrics.
@Suite("Verification-failure telemetry")
struct TelemetryTests {
    @Test("a proxy attack run makes the counts by reason appear in the admin API and /metrics once flushed")
    func countsAppear() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .informational, user: "reported", storage: "telemetry") { configuration in
                configuration.appVersion = "3.1.4"
            }
            harness.proxy.attack = .stripSignature
            for _ in 0..<3 {
                #expect(try await purchases.customerInfo(fetchPolicy: .fetchCurrent).verificationFailure == .missingSignature)
            }
            // The reports are sent in the background; flushing sends them now and waits for the answer.
            await purchases.flushDiagnostics()
            let secret = harness.app.secretApiKeys[0]
            func adminCount() async throws -> Int {
                var request = URLRequest(url: harness.serverURL.appendingPathComponent("v1/admin/diagnostics/verification_failures"))
                request.setValue("Bearer \(secret)", forHTTPHeaderField: "Authorization")
                let (data, _) = try await URLSession.shared.data(for: request)
                let counts = (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["counts"] as? [[String: Any]] ?? []
                // Counted under the SDK's version and the app's.
                return counts.filter {
                    $0["reason"] as? String == "missingSignature" && $0["mode"] as? String == "informational"
                        && $0["sdk_version"] as? String == CountersignSDK.version && $0["app_version"] as? String == "3.1.4"
                }
                .compactMap { $0["failure_count"] as? Int }.reduce(0, +)
            }
            func metricsCount() async throws -> Int? {
                let (metrics, _) = try await URLSession.shared.data(from: harness.serverURL.appendingPathComponent("metrics"))
                let line = String(decoding: metrics, as: UTF8.self).split(separator: "\n").first {
                    $0.hasPrefix(#"countersign_verification_failures_reported_total{app="demo",reason="missingSignature",mode="informational"}"#)
                }
                return line.flatMap { Int($0.split(separator: " ").last ?? "") }
            }
            // A report still on its way may land between two reads (the database is written
            // before the metric): the two must agree once the admin count stops moving.
            var counted = 0
            var metric: Int?
            _ = try await waitUntil(interval: .milliseconds(100)) {
                counted = try await adminCount()
                metric = try await metricsCount()
                return try await adminCount() == counted && metric == counted
            }
            // Three CustomerInfo answers, plus the product mapping fetched after each.
            #expect(counted >= 3)
            #expect(metric == counted)
        }
    }

    @Test("reporting never delays customerInfo(): calls complete while the diagnostics endpoint hangs")
    func reportingDoesNotBlock() async throws {
        try await SDKHarness.run { harness in
            let received = FailureLog()
            let released = OnceFlag()
            let router = Router()
            router.post("/v1/diagnostics/verification_failures") { _, _ -> HTTPResponse.Status in
                received.add(VerificationFailureEvent(path: "", statusCode: 0, reason: .malformedBody, mode: .enforced, appUserID: ""))
                // Hang until the test is done (at most 30 s).
                for _ in 0..<600 where !released.isClaimed { try await Task.sleep(for: .milliseconds(50)) }
                return .accepted
            }
            try await Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0))).test(.live) { hanging in
                let purchases = try harness.purchases(mode: .informational, user: "patient", storage: "hanging") { configuration in
                    configuration.diagnosticsURL = URL(string: "http://127.0.0.1:\(hanging.port!)")!
                    configuration.diagnosticsBatchDelay = .zero
                }
                harness.proxy.attack = .grantEntitlement
                _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                // Wait until a report is stuck in the hanging endpoint, then keep calling.
                let deadline = Date().addingTimeInterval(10)
                while received.all.isEmpty && Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
                #expect(!received.all.isEmpty)
                for _ in 0..<5 {
                    #expect(try await purchases.customerInfo(fetchPolicy: .fetchCurrent).verificationFailure == .payloadMismatch)
                }
                _ = released.claim()
            }
        }
    }
}
