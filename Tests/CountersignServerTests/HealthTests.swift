import CountersignCore
import CountersignServer
import CountersignServerCore
import CountersignTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@Suite("Signed health endpoint")
struct HealthTests {
    static func withServer(_ body: @Sendable @escaping (CountersignServer, any TestClientProtocol) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("countersign-server-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await LiveServer.run(ServerConfiguration(dataDirectory: directory), body)
    }

    static func verify(_ response: TestResponse, nonce: Data?, server: CountersignServer, path: String = "/v1/health") -> VerificationOutcome {
        let verifier = SignatureVerifier(rootKeys: [server.keys.managedRootPublicKey!])
        return verifier.verify(
            request: SignedRequestParts(nonce: nonce, path: path),
            response: ReceivedResponse(
                statusCode: Int(response.status.code),
                signature: response.headers[SignatureHeader.signature],
                requestTime: response.headers[SignatureHeader.requestTime],
                etag: response.headers[SignatureHeader.etag],
                body: Data(response.body.readableBytesView)
            )
        )
    }

    @Test("a fresh data directory gets the default configuration, a managed root and root.pub")
    func freshDataDirectory() async throws {
        try await Self.withServer { server, _ in
            let directory = server.configuration.dataDirectory
            let configuration = try #require(try DeploymentConfiguration.load(fromDataDirectory: directory))
            let app = try #require(configuration.apps.first)
            #expect(app.id == "demo" && app.bundleId == "com.example.demo")
            #expect(app.environments == ["TestStore", "Sandbox"])
            #expect(app.products.map(\.id) == ["pro_monthly", "lifetime", "coins_100"])
            #expect(app.publicApiKeys.first?.hasPrefix("cs_pub_") == true)
            let rootPub = try String(contentsOf: directory.appendingPathComponent("keys/root.pub"), encoding: .utf8)
            #expect(
                rootPub.trimmingCharacters(in: .whitespacesAndNewlines) == server.keys.managedRootPublicKey!.rawRepresentation.base64EncodedString())
            #expect(server.keys.daysUntilExpiry > 29)
        }
    }

    @Test("GET /v1/health with a nonce is 200 and signed; the signature verifies against the root")
    func signedHealth() async throws {
        try await Self.withServer { server, client in
            let nonce = SignedRequestParts.makeNonce()
            try await client.execute(uri: "/v1/health", method: .get, headers: [SignatureHeader.nonce: nonce.base64EncodedString()]) { response in
                #expect(response.status == .ok)
                #expect(Self.verify(response, nonce: nonce, server: server) == .verified)
                // Another request's nonce does not verify this answer.
                #expect(Self.verify(response, nonce: SignedRequestParts.makeNonce(), server: server) == .failed(.payloadMismatch))
                let body = try JSONSerialization.jsonObject(with: Data(response.body.readableBytesView)) as? [String: Any]
                #expect(body?["status"] as? String == "ok")
            }
        }
    }

    @Test("a malformed nonce or a headers hash that does not match is a 400 with a stable code")
    func badHeaders() async throws {
        try await Self.withServer { _, client in
            let cases: [([HTTPField], APIErrorCode)] = [
                ([HTTPField(name: SignatureHeader.nonce, value: "not base64")], .malformedNonce),
                ([HTTPField(name: SignatureHeader.nonce, value: Data(count: 11).base64EncodedString())], .malformedNonce),
                ([HTTPField(name: SignatureHeader.nonce, value: SignedRequestParts.makeNonce().base64EncodedString() + "==")], .malformedNonce),
                (
                    [
                        HTTPField(name: SignatureHeader.headersHash, value: "X-Is-Sandbox:sha256:00"),
                        HTTPField(name: SignatureHeader.isSandbox, value: "true"),
                    ], .headersHashMismatch
                ),
                ([HTTPField(name: SignatureHeader.postParamsHash, value: "a:sha256:00")], .postParamsHashMismatch),
            ]
            for (fields, code) in cases {
                let headers = HTTPFields(fields)
                try await client.execute(uri: "/v1/health", method: .get, headers: headers) { response in
                    #expect(response.status.code == code.httpStatus)
                    let error = try JSONDecoder().decode(APIError.self, from: Data(response.body.readableBytesView))
                    #expect(error.code == code.rawValue)
                    #expect(response.headers[SignatureHeader.signature] == nil)
                }
            }
        }
    }

    @Test("a matching headers hash is accepted and bound into the signature")
    func headersHash() async throws {
        try await Self.withServer { server, client in
            let hash = FieldsHash.headerValue([("X-Is-Sandbox", "true")])!
            try await client.execute(
                uri: "/v1/health", method: .get, headers: [SignatureHeader.headersHash: hash, SignatureHeader.isSandbox: "true"]
            ) { response in
                #expect(response.status == .ok)
                let verifier = SignatureVerifier(rootKeys: [server.keys.managedRootPublicKey!])
                let received = ReceivedResponse(
                    statusCode: 200, signature: response.headers[SignatureHeader.signature],
                    requestTime: response.headers[SignatureHeader.requestTime],
                    etag: nil, body: Data(response.body.readableBytesView)
                )
                #expect(verifier.verify(request: SignedRequestParts(path: "/v1/health", headersHash: hash), response: received) == .verified)
                #expect(verifier.verify(request: SignedRequestParts(path: "/v1/health"), response: received) == .failed(.payloadMismatch))
            }
        }
    }

    @Test("restarting on the same data directory keeps the root and the intermediate")
    func restartKeepsKeys() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("countersign-restart-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var logger = Logger(label: "test")
        logger.logLevel = .error
        let first = try await CountersignServer(configuration: ServerConfiguration(dataDirectory: directory), logger: logger)
        try await first.shutdown()
        let second = try await CountersignServer(configuration: ServerConfiguration(dataDirectory: directory), logger: logger)
        try await second.shutdown()
        #expect(first.keys.managedRootPublicKey?.rawRepresentation == second.keys.managedRootPublicKey?.rawRepresentation)
        #expect(first.keys.currentSigner.key.certificate == second.keys.currentSigner.key.certificate)
        #expect(first.deployment == second.deployment)
    }
}
