import CountersignCore
import CountersignTesting
import Foundation
import Testing

@Suite("countersign verify")
struct VerifyCommandTests {
    static let rootKey = TestKeys.root.publicKey.rawRepresentation.base64EncodedString()
    static let at = String(Int(TestKeys.referenceDate.timeIntervalSince1970))

    /// An honest exchange written as raw HTTP files, as a capture tool would save them.
    struct Capture {
        let directory: URL
        var request: URL { directory.appendingPathComponent("request.http") }
        var response: URL { directory.appendingPathComponent("response.http") }

        init(body: Data? = nil, signature: String? = nil, responseText: String? = nil) throws {
            directory = try makeTemporaryDirectory("countersign-cli")
            let exchange = SampleExchange.make()
            let request = """
                GET \(exchange.request.path) HTTP/1.1\r
                Host: localhost:8080\r
                Authorization: Bearer \(exchange.request.authValue)\r
                X-Nonce: \(exchange.request.nonce!.base64EncodedString())\r
                X-Post-Params-Hash: \(exchange.request.postParamsHash!)\r
                X-Headers-Hash: \(exchange.request.headersHash!)\r
                \r

                """
            let responseBody = body ?? exchange.response.body
            let head = """
                HTTP/1.1 200 OK\r
                Content-Type: application/json\r
                Content-Length: \(responseBody.count)\r
                X-Signature: \(signature ?? exchange.response.signature!)\r
                X-Request-Time: \(exchange.response.requestTime!)\r
                X-ETag: \(exchange.response.etag!)\r
                \r

                """
            try Data(request.utf8).write(to: self.request)
            try (responseText.map { Data($0.utf8) } ?? Data(head.utf8) + responseBody).write(to: response)
        }

        func verify(_ extra: [String] = []) throws -> CLIRunner.Result {
            try CLIRunner.run(["verify", "--root-key", VerifyCommandTests.rootKey, "--request", request.path, "--response", response.path] + extra)
        }
    }

    @Test("an honest capture prints verified and exits 0")
    func honest() throws {
        let capture = try Capture()
        defer { try? FileManager.default.removeItem(at: capture.directory) }
        let result = try capture.verify(["--at", Self.at])
        #expect(result.status == 0)
        #expect(result.lines == ["verified"])
    }

    @Test("one body byte changed prints failed: payloadMismatch and exits 1")
    func tamperedBody() throws {
        var body = SampleExchange.body
        body[body.firstIndex(of: UInt8(ascii: "u"))!] = UInt8(ascii: "v")
        let capture = try Capture(body: body)
        defer { try? FileManager.default.removeItem(at: capture.directory) }
        let result = try capture.verify(["--at", Self.at])
        #expect(result.status == 1)
        #expect(result.lines == ["failed: payloadMismatch"])
    }

    @Test("--at sets the clock: after the intermediate's expiry the same capture fails")
    func clock() throws {
        let capture = try Capture()
        defer { try? FileManager.default.removeItem(at: capture.directory) }
        let late = String(Int(TestKeys.intermediate.certificate.expirationDate.timeIntervalSince1970) + 1)
        let result = try capture.verify(["--at", late])
        #expect(result.status == 1)
        #expect(result.lines == ["failed: deviceClockOutsideValidity"])
    }

    @Test("a non-base64 signature is a failed verification with its reason")
    func nonBase64Signature() throws {
        let capture = try Capture(signature: String(repeating: "*", count: 240))
        defer { try? FileManager.default.removeItem(at: capture.directory) }
        let result = try capture.verify(["--at", Self.at])
        #expect(result.status == 1)
        #expect(result.lines == ["failed: malformedSignature"])
    }

    @Test(
        "bad input is one error line and exit 2, never a crash",
        arguments: [
            ("/nonexistent/request.http", rootKey, "error: request file not found: /nonexistent/request.http"),
            (nil, "%%%", "error: --root-key: root key is not valid base64"),
            (nil, "AAAA", "error: --root-key: root key must be 32 bytes, got 3"),
        ])
    func badInput(_ requestPath: String?, _ rootKey: String, _ expected: String) throws {
        let capture = try Capture()
        defer { try? FileManager.default.removeItem(at: capture.directory) }
        let result = try CLIRunner.run([
            "verify", "--root-key", rootKey, "--request", requestPath ?? capture.request.path, "--response", capture.response.path,
        ])
        #expect(result.status == 2)
        #expect(result.lines == [expected])
    }

    @Test(
        "a truncated capture is one error line and exit 2",
        arguments: [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 500\r\nX-Signature: abc\r\n\r\n{\"a\":",
                "error: malformed capture: response: truncated body: Content-Length is 500 but only 5 bytes follow"
            ),
            ("HTTP/1.1 200 OK\r\nX-Signa", "error: malformed capture: response: truncated: the last header line has no line end"),
            ("HTTP/1.1", "error: malformed capture: response: truncated: the start line has no line end"),
        ])
    func truncated(_ responseText: String, _ expected: String) throws {
        let capture = try Capture(responseText: responseText)
        defer { try? FileManager.default.removeItem(at: capture.directory) }
        let result = try capture.verify()
        #expect(result.status == 2)
        #expect(result.lines == [expected])
    }
}
