import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignTesting
import Foundation
import HTTPTypes
import Logging
import NIOCore
import Testing

@testable import CountersignServer
@testable import CountersignStorage

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Metrics, request ids, verification-failure telemetry and restarts.
@Suite("Operations")
struct OperationsTests {
    static func metrics(_ harness: ReceiptTests.Harness) async throws -> String {
        String(decoding: try await harness.send(.get, "/metrics", key: nil).body, as: UTF8.self)
    }

    @Test("/metrics counts requests by route pattern and status, signing time and the key's expiry")
    func metrics() async throws {
        try await ReceiptTests.withHarness(.sqlite) { harness in
            _ = try await harness.customerInfo("u1")
            _ = try await harness.customerInfo("u2")
            _ = try await harness.send(.get, "/v1/subscribers/u1", key: "cs_pub_wrong")
            let text = try await Self.metrics(harness)
            #expect(text.contains(#"countersign_http_requests_total{route="/v1/subscribers/{app_user_id}",method="GET",status="200"} 2"#))
            #expect(text.contains(#"countersign_http_requests_total{route="/v1/subscribers/{app_user_id}",method="GET",status="401"} 1"#))
            // Three signed answers: the refusal of the wrong key is signed too.
            #expect(text.contains("countersign_response_signing_seconds_count 3"))
            // User ids never become label values.
            #expect(!text.contains("u2"))
            let expiry = text.split(separator: "\n").first { $0.hasPrefix("countersign_intermediate_key_expiry_seconds ") }
            let seconds = try #require(expiry.flatMap { Double($0.split(separator: " ")[1]) })
            #expect(abs(seconds - harness.server.keys.daysUntilExpiry * 86_400) < 60)
        }
    }

    /// This machine's first IPv4 address that is not loopback (nil when it has none).
    static let outwardAddress: String? = {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return nil }
        defer { freeifaddrs(list) }
        for entry in sequence(first: first, next: { $0.pointee.ifa_next }) {
            guard let address = entry.pointee.ifa_addr, address.pointee.sa_family == sa_family_t(AF_INET) else { continue }
            var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            guard getnameinfo(address, socklen_t(MemoryLayout<sockaddr_in>.size), &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else {
                continue
            }
            let text = String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if !text.hasPrefix("127.") { return text }
        }
        return nil
    }()

    @Test(
        "finding 11: without a metrics token /metrics answers this machine only; with one, the token from anywhere",
        .enabled(if: outwardAddress != nil, "this machine has no address beyond loopback"))
    func metricsBeyondLoopback() async throws {
        let outward = try #require(Self.outwardAddress)
        for token in [nil, "metrics-token-1"] as [String?] {
            try await FreshDatabase.with(.sqlite) { location, directory in
                try DeploymentConfiguration(apps: [.makeDemo()]).save(toDataDirectory: directory)
                var configuration = ServerConfiguration(dataDirectory: directory)
                configuration.database = location
                configuration.host = "0.0.0.0"
                configuration.port = 0
                configuration.metricsBearerToken = token
                // Run as `serve` runs it (the test client's own runner listens on localhost only).
                let server = try await CountersignServer(configuration: configuration, logger: FreshDatabase.logger)
                let bound = AsyncStream<Int>.makeStream()
                let running = Task { try await server.makeApplication { bound.continuation.yield($0) }.runService() }
                defer { running.cancel() }
                var ports = bound.stream.makeAsyncIterator()
                let port = try #require(await ports.next())
                func status(_ host: String, bearer: String?) async throws -> Int {
                    var request = URLRequest(url: URL(string: "http://\(host):\(port)/metrics")!)
                    if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
                    let (_, response) = try await LiveHTTP.session.data(for: request)
                    return (response as! HTTPURLResponse).statusCode
                }
                if let token {
                    #expect(try await status(outward, bearer: token) == 200)
                    #expect(try await status(outward, bearer: nil) == 401)
                    #expect(try await status("127.0.0.1", bearer: "wrong") == 401)
                } else {
                    #expect(try await status("127.0.0.1", bearer: nil) == 200)
                    #expect(try await status(outward, bearer: nil) == 401)
                }
                running.cancel()
                _ = await running.result
            }
        }
    }

    @Test("every answer carries a request id: the caller's when it is a sane token, a fresh one otherwise")
    func requestIds() async throws {
        try await ReceiptTests.withHarness(.sqlite) { harness in
            let name = HTTPField.Name("X-Request-Id")!
            let given = try await harness.send(.get, "/v1/admin/keys", key: harness.secretKey, headers: [name: "trace-42.a_b"])
            #expect(given.headers[name] == "trace-42.a_b")
            let forged = try await harness.send(.get, "/v1/admin/keys", key: harness.secretKey, headers: [name: "x\" level=error"])
            let replaced = try #require(forged.headers[name])
            // Hummingbird's own id: lowercase hex.
            #expect(replaced != "x\" level=error" && replaced.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) })
            let missing = try await harness.send(.get, "/v1/nothing-here", key: nil)
            #expect(missing.headers[name] != nil)
            #expect(missing.code == APIErrorCode.notFound.rawValue)
        }
    }

    @Test("log durations read as milliseconds with two decimals")
    func logDurations() {
        #expect(RequestObservation.milliseconds(.microseconds(1_234)) == "1.23")
        #expect(RequestObservation.milliseconds(.microseconds(1_235)) == "1.24")
        #expect(RequestObservation.milliseconds(.microseconds(50)) == "0.05")
        #expect(RequestObservation.milliseconds(.seconds(2) + .microseconds(7_004)) == "2007.00")
        #expect(RequestObservation.milliseconds(.zero) == "0.00")
    }

    @Test("reported verification failures are counted by reason in the admin API and in /metrics", arguments: TestDatabaseKind.available)
    func telemetry(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let report: [String: Any] = [
                "failures": [
                    ["reason": "payloadMismatch", "path": "/v1/subscribers/u1", "mode": "informational", "sdk_version": "0.1.0", "count": 2],
                    ["reason": "missingSignature", "path": "/v1/subscribers/u1", "mode": "enforced"],
                    ["reason": "payloadMismatch", "path": "/v1/receipts", "mode": "informational"],
                ]
            ]
            let posted = try await harness.send(
                .post, "/v1/diagnostics/verification_failures", key: harness.key,
                body: try JSONSerialization.data(withJSONObject: report))
            #expect(posted.status == 202)
            let counts = try await harness.send(.get, "/v1/admin/diagnostics/verification_failures?days=7", key: harness.secretKey)
            // Counted apart by SDK version (and app version): an empty one is a report without it.
            let rows = (counts.json["counts"] as? [[String: Any]] ?? []).map {
                "\($0["reason"] as? String ?? "")/\($0["mode"] as? String ?? "")/\($0["sdk_version"] as? String ?? "?"): \($0["failure_count"] as? Int ?? -1)"
            }
            #expect(rows == ["missingSignature/enforced/: 1", "payloadMismatch/informational/: 1", "payloadMismatch/informational/0.1.0: 2"])
            let text = try await Self.metrics(harness)
            #expect(text.contains(#"countersign_verification_failures_reported_total{app="demo",reason="payloadMismatch",mode="informational"} 3"#))

            let before = try await harness.snapshot()
            let bad: [[String: Any]] = [
                ["failures": []],
                ["failures": [["reason": "pay load", "path": "/", "mode": "informational"]]],
                ["failures": [["reason": "x", "path": "/", "mode": "paranoid"]]],
                ["failures": [["reason": "x", "path": "/", "mode": "enforced", "count": 0]]],
                ["failures": Array(repeating: ["reason": "x", "path": "/", "mode": "enforced"], count: 101)],
            ]
            for body in bad {
                let reply = try await harness.send(
                    .post, "/v1/diagnostics/verification_failures", key: harness.key,
                    body: try JSONSerialization.data(withJSONObject: body))
                #expect(reply.status == 400)
                #expect(reply.code == APIErrorCode.invalidField.rawValue)
            }
            #expect(try await harness.snapshot() == before)
        }
    }

    /// A server on `location` that is not started: the test runs it, or its storage, itself.
    static func server(_ location: DatabaseLocation, _ directory: URL) async throws -> CountersignServer {
        var configuration = ServerConfiguration(dataDirectory: directory)
        configuration.port = 0
        configuration.database = location
        var logger = Logger(label: "test")
        logger.logLevel = .error
        return try await CountersignServer(configuration: configuration, logger: logger)
    }

    @Test("purchases and grants survive a server restart", arguments: TestDatabaseKind.available)
    func restart(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            let first = try await Self.server(location, directory)
            let app = first.deployment.apps[0]
            let (jws, payload) = try first.testStore!.mintTransaction(.init(productId: "lifetime", type: .nonConsumable, bundleId: app.bundleId))
            let transaction = try VerifiedTransaction(jws: jws, payload: payload, app: app)
            #expect(try await first.store.record(transaction, app: app, poster: "u1", now: Date()) == .new)
            try await first.store.grantPromotional(app: app, user: "u2", entitlement: "pro", expires: nil, now: Date())
            try await first.shutdown()

            let second = try await Self.server(location, directory)
            #expect(second.deployment == first.deployment)
            #expect(try await second.store.customerInfo(app: app, user: "u1", now: Date()).subscriber.entitlements["pro"] != nil)
            #expect(try await second.store.customerInfo(app: app, user: "u2", now: Date()).subscriber.entitlements["pro"] != nil)
            #expect(try await second.store.record(transaction, app: app, poster: "u1", now: Date()) == .alreadyRecorded)
            try await second.shutdown()
        }
    }

    @Test("the database is a service of the application: open while it serves, closed once it stops", arguments: TestDatabaseKind.available)
    func databaseService(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            // Not LiveServer.run: it closes the database itself after the application.
            let server = try await Self.server(location, directory)
            try await server.makeApplication().test(.live) { client in
                let health = try await client.execute(uri: "/v1/health", method: .get) { $0.status }
                #expect(health == .ok)
                #expect(try await server.store.existingCustomerInfo(app: server.deployment.apps[0], user: "nobody", now: Date()) == nil)
            }
            await #expect(throws: (any Error).self, "the database is closed") {
                _ = try await server.store.existingCustomerInfo(app: server.deployment.apps[0], user: "nobody", now: Date())
            }
            try await server.shutdown()
        }
    }

    @Test("the allocator is tuned by serve unless the operator tunes malloc")
    func allocatorTuning() {
        #expect(!AllocatorTuning.apply(environment: ["GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"]))
        #expect(!AllocatorTuning.apply(environment: ["MALLOC_ARENA_MAX": "2"]))
        // Opted out of NIO's executor: nothing installed (this test process keeps its pool).
        #expect(!ServerProcess.prepare(environment: ["COUNTERSIGN_NIO_EXECUTOR": "0", "MALLOC_ARENA_MAX": "2"]))
        #if canImport(Glibc)
        #expect(AllocatorTuning.apply(environment: ["GLIBC_TUNABLES": "glibc.pthread.rseq=0"]))
        #endif
    }

    @Test("serve runs one event loop per CPU its affinity allows when NIO would start more")
    func eventLoopsFollowAffinity() throws {
        #if os(Linux)
        // Setting the mask with pid 0 pins the calling thread only: this test's, until restored.
        let original = try #require(CPUAffinity.current())
        let allowed = try #require(ServerProcess.allowedCPUCount())
        #expect(allowed >= 1 && allowed <= ProcessInfo.processInfo.processorCount)
        // Not pinned below the machine: NIO's own count stands.
        if allowed >= NIOCore.System.coreCount { #expect(ServerProcess.eventLoopCount(environment: [:]) == nil) }
        // Pinned to the first allowed CPU: one loop, unless the operator named a count.
        let first = try #require((0..<original.count * 8).first { original[$0 / 8] & (1 << UInt8($0 % 8)) != 0 })
        var one = [UInt8](repeating: 0, count: original.count)
        one[first / 8] = 1 << UInt8(first % 8)
        try #require(CPUAffinity.set(one))
        defer { CPUAffinity.set(original) }
        #expect(ServerProcess.allowedCPUCount() == 1)
        #expect(ServerProcess.eventLoopCount(environment: [:]) == (NIOCore.System.coreCount > 1 ? 1 : nil))
        #expect(ServerProcess.eventLoopCount(environment: ["NIO_SINGLETON_GROUP_LOOP_COUNT": "2"]) == nil)
        #endif
    }
}
