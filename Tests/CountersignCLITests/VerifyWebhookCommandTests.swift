import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Testing

@Suite("countersign verify-webhook")
struct VerifyWebhookCommandTests {
    static let rootKey = TestKeys.root.publicKey.rawRepresentation.base64EncodedString()
    static let at = String(Int(TestKeys.referenceDate.timeIntervalSince1970))
    static let body = Data(#"{"api_version":"1.0","event":{"id":"A1","type":"TEST","app_id":"demo"}}"#.utf8)
    static let url = "https://backend.example/hooks/countersign"

    /// A delivery signed by the test intermediate, written as raw HTTP; `edit` changes the text.
    static func capture(
        path: String = "/hooks/countersign", extraHeader: String = "", body: Data = body,
        edit: (String) -> String = { $0 }
    ) throws -> URL {
        let time = String(Int64(TestKeys.referenceDate.timeIntervalSince1970 * 1000))
        let signature = try ResponseSigner(key: TestKeys.intermediate).signature(
            request: WebhookSignature.requestParts(appId: "demo", url: Self.url)!, response: SignedResponseParts(requestTime: time, body: Self.body)
        )
        let head = """
            POST \(path)?source=countersign HTTP/1.1\r
            Host: backend.example\r
            Content-Type: application/json\r
            Content-Length: \(body.count)\r
            X-Signature: \(signature)\r
            X-Request-Time: \(time)\r
            \(extraHeader)\r

            """
        let file = try makeTemporaryDirectory("countersign-webhook").appendingPathComponent("delivery.http")
        try (Data(edit(head).utf8) + body).write(to: file)
        return file
    }

    static func run(_ file: URL, appId: String = "demo", url: String = url) throws -> CLIRunner.Result {
        try CLIRunner.run(["verify-webhook", "--root-key", rootKey, "--request", file.path, "--at", at, "--app-id", appId, "--url", url])
    }

    @Test("an honest delivery verifies (the query is not part of the signed path)")
    func honest() throws {
        let result = try Self.run(try Self.capture())
        #expect(result.status == 0 && result.stdout == "verified\n", "\(result.lines)")
    }

    @Test("each signed part changed fails with exit 1")
    func tampered() throws {
        for file in [
            try Self.capture(body: Data(#"{"api_version":"1.0","event":{"id":"A2","type":"TEST","app_id":"demo"}}"#.utf8)),
            try Self.capture { $0.replacingOccurrences(of: "X-Request-Time: 1", with: "X-Request-Time: 2") },
        ] {
            let result = try Self.run(file)
            #expect(result.status == 1 && result.stdout.hasPrefix("failed: "), "\(result.lines)")
        }
        // The same delivery checked by another receiver: another path, host or app.
        for (app, url) in [
            ("demo", "https://backend.example/hooks/other"), ("demo", "https://evil.example/hooks/countersign"),
            ("other", Self.url),
        ] {
            let result = try Self.run(try Self.capture(), appId: app, url: url)
            #expect(result.status == 1 && result.stdout.hasPrefix("failed: "), "\(result.lines)")
        }
    }

    @Test("unreadable or ambiguous captures exit 2")
    func unreadable() throws {
        let doubled = try Self.capture(extraHeader: "X-Request-Time: 1\r")
        let get = try Self.capture { $0.replacingOccurrences(of: "POST ", with: "GET ") }
        for file in [doubled, get] {
            let result = try Self.run(file)
            #expect(result.status == 2 && result.stderr.hasPrefix("error: "), "\(result.lines)")
        }
    }
}
