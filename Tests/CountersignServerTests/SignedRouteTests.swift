import CountersignCore
import CountersignTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// The signed routes' middleware from the attacker's side: a claim of the request the server
/// did not check is never covered by a signature, whichever check fails first.
@Suite("Signed routes")
struct SignedRouteTests {
    @Test("a POST's body hash is checked before its API key's refusal is signed; a GET never takes one", arguments: TestDatabaseKind.available)
    func claimsBeforeRefusals(_ kind: TestDatabaseKind) async throws {
        try await ReceiptTests.withHarness(kind) { harness in
            let (jws, _) = try harness.mint("pro_monthly")
            let body = try JSONSerialization.data(withJSONObject: ["app_user_id": "u1", "fetch_token": jws])
            let before = try await harness.snapshot()
            for (claimed, expected) in [("u2", APIErrorCode.postParamsHashMismatch), ("u1", .invalidAPIKey)] {
                let nonce = SignedRequestParts.makeNonce()
                let hash = FieldsHash.headerValue([("app_user_id", claimed), ("fetch_token", jws)])!
                var headers: HTTPFields = [.contentType: "application/json"]
                headers[SignatureHeader.nonce] = nonce.base64EncodedString()
                headers[SignatureHeader.postParamsHash] = hash
                let reply = try await harness.send(.post, "/v1/receipts", key: "cs_pub_unknown", body: body, headers: headers)
                #expect(reply.code == expected.rawValue, "\(String(decoding: reply.body, as: UTF8.self))")
                let outcome = SignatureVerifier(rootKeys: [harness.server.keys.managedRootPublicKey!]).verify(
                    request: SignedRequestParts(authValue: "cs_pub_unknown", nonce: nonce, path: "/v1/receipts", postParamsHash: hash),
                    response: ReceivedResponse(
                        statusCode: reply.status, signature: reply.headers[SignatureHeader.signature],
                        requestTime: reply.headers[SignatureHeader.requestTime], etag: reply.headers[SignatureHeader.etag], body: reply.body
                    )
                )
                if expected == .postParamsHashMismatch {
                    // The hash does not match the body: nothing about this request is vouched for.
                    #expect(reply.status == 400)
                    #expect(reply.headers[SignatureHeader.signature] == nil)
                } else {
                    // The hash matches: the refusal of the key is the server's, signed over it.
                    #expect(reply.status == 401)
                    #expect(outcome == .verified)
                }
            }
            var headers = HTTPFields()
            headers[SignatureHeader.postParamsHash] = FieldsHash.headerValue([("app_user_id", "u1")])!
            let get = try await harness.send(.get, "/v1/subscribers/u1", key: harness.key, headers: headers)
            #expect(get.status == 400)
            #expect(get.code == APIErrorCode.postParamsHashMismatch.rawValue)
            #expect(get.headers[SignatureHeader.signature] == nil)
            #expect(try await harness.snapshot() == before)
        }
    }

    /// A route that forgets to check the body against `X-Post-Params-Hash`: the exchange refuses
    /// to sign over the unchecked claim, the answer goes out unsigned as an internal error.
    @Test("a signed route that never checks the body's hash gets no signature over it")
    func uncheckedClaimIsNotSigned() async throws {
        let directory = try makeTemporaryDirectory("countersign-unchecked")
        defer { try? FileManager.default.removeItem(at: directory) }
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let keys = try SigningKeyRing(mode: .managed(dataDirectory: directory), now: { Date() }, logger: logger)
        let router = Router(context: ServerRequestContext.self)
        router.add(middleware: RequestObservation(metrics: ServerMetrics()))
        let signed = router.group().add(middleware: ResponseSigning(keys: keys, endpoint: SignedEndpoint(authenticated: true), now: { Date() }))
            .group(context: SignedRequestContext.self)
        signed.post("/v1/careless") { request, context in
            try context.respond(to: request, with: SignedAnswer(body: Data("{\"granted\":true}".utf8), cacheable: false))
        }
        signed.post("/v1/refusing") { _, _ -> Response in throw APIError(.invalidField, "no") }
        try await Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: logger).test(.live) { client in
            for path in ["/v1/careless", "/v1/refusing"] {
                var headers: HTTPFields = [.authorization: "Bearer cs_pub_test"]
                let plain = try await client.execute(uri: path, method: .post, headers: headers, body: ByteBuffer(string: "{}")) { $0 }
                #expect(plain.headers[SignatureHeader.signature] != nil, "without a claim the answer is signed")
                headers[SignatureHeader.postParamsHash] = FieldsHash.headerValue([("app_user_id", "u1")])!
                let claimed = try await client.execute(uri: path, method: .post, headers: headers, body: ByteBuffer(string: "{}")) { $0 }
                #expect(claimed.headers[SignatureHeader.signature] == nil, "\(path): signed over an unchecked X-Post-Params-Hash")
                #expect(claimed.status == (path == "/v1/careless" ? .internalServerError : .badRequest))
            }
        }
    }
}
