import CountersignCore
import CountersignServerCore
import Foundation
import Testing

@Suite("Captured HTTP exchanges")
struct CapturedExchangeTests {
    static let request = """
        GET /v1/subscribers/%24CSAnonymousID%3Aabc?fetch=1 HTTP/1.1\r
        Host: localhost:8080\r
        Authorization: Bearer cs_pub_demo\r
        X-Nonce: MTIzNDU2Nzg5MGFi\r
        X-Headers-Hash: X-Is-Sandbox:sha256:b5bea41b6c623f7c09f1bf24dcae58ebab3c0cdd90ad966bc43a45b44867e12b\r
        \r

        """

    @Test("request parts come from the request line and headers")
    func requestParts() throws {
        let response = "HTTP/1.1 200 OK\nContent-Length: 2\nX-Signature: abc\nx-request-time: 123\nX-ETag: 0123456789abcdef\n\n{}"
        let exchange = try CapturedExchange(request: Data(Self.request.utf8), response: Data(response.utf8))
        #expect(exchange.request.path == "/v1/subscribers/%24CSAnonymousID%3Aabc")
        #expect(exchange.request.authValue == "cs_pub_demo")
        #expect(exchange.request.nonce == Data("1234567890ab".utf8))
        #expect(exchange.request.postParamsHash == nil)
        #expect(exchange.request.headersHash?.hasPrefix("X-Is-Sandbox:sha256:") == true)
        #expect(exchange.response.statusCode == 200)
        #expect(exchange.response.signature == "abc")
        #expect(exchange.response.requestTime == "123")
        #expect(exchange.response.body == Data("{}".utf8))
    }

    @Test("a request file may end after its last header line; --api-key overrides the bearer value")
    func requestWithoutBlankLine() throws {
        let request = "GET http://example.com/v1/health HTTP/1.1\nX-Nonce: MTIzNDU2Nzg5MGFi\n"
        let exchange = try CapturedExchange(request: Data(request.utf8), response: Data("HTTP/1.1 304 Not Modified\n\n".utf8), apiKey: "k")
        #expect(exchange.request.path == "/v1/health")
        #expect(exchange.request.authValue == "k")
        #expect(exchange.response.body.isEmpty)
    }

    @Test("chunked bodies are decoded")
    func chunked() throws {
        let response = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;ext=1\r\n\":1}\r\n0\r\n\r\n"
        let exchange = try CapturedExchange(request: Data(Self.request.utf8), response: Data(response.utf8))
        #expect(exchange.response.body == Data(#"{"a":1}"#.utf8))
    }

    @Test(
        "broken captures are errors that say what is wrong",
        arguments: [
            ("", "HTTP/1.1 200 OK\n\n", "request: empty"),
            ("GET /x HTTP/1.1", "HTTP/1.1 200 OK\n\n", "request: truncated: the start line has no line end"),
            ("GET /x HTTP/1.1\nX-Nonce: abc", "HTTP/1.1 200 OK\n\n", "truncated: the last header line"),
            ("GET /x HTTP/1.1\nX-Nonce: abc\n", "HTTP/1.1 200 OK\n\n", "X-Nonce is not base64 of 12 bytes"),
            ("GET /x HTTP/1.1\nX-Nonce: AAAAAAAAAAAAAAAA==\n", "HTTP/1.1 200 OK\n\n", "X-Nonce is not base64 of 12 bytes"),
            ("GET /x\n", "HTTP/1.1 200 OK\n\n", "start line is not"),
            ("GET x HTTP/1.1\n", "HTTP/1.1 200 OK\n\n", "is not a path"),
            ("GET /x HTTP/1.1\nBad Header\n", "HTTP/1.1 200 OK\n\n", "malformed header line"),
            ("GET /x HTTP/1.1\nAuthorization: Basic abc\n", "HTTP/1.1 200 OK\n\n", "Authorization is not 'Bearer <key>'"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nContent-Length: 10\n\n{}", "truncated body: Content-Length is 10 but only 2 bytes follow"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nContent-Length: 1\n\n{}", "body is 2 bytes but Content-Length is 1"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nContent-Length: x\n\n{}", "Content-Length 'x' is not a number"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 OK\n\n", "response: status line is not"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nX-Signature: abc", "response: truncated: the last header line"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nContent-Encoding: gzip\n\nxx", "gzip-encoded"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n5\n{}", "truncated chunked body"),
            // Where a second HTTP parser would read the same bytes differently.
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nContent-Length: +2\n\n{}", "Content-Length '+2' is not a number"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nContent-Length: 2 \u{0B}\n\n{}", "is not a number"),
            (
                "GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\nContent-Length: 2\n\n2\n{}\n0\n\n",
                "both Transfer-Encoding and Content-Length"
            ),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nTransfer-Encoding: gzip, chunked\n\n2\n{}\n0\n\n", "is not supported"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n+2\n{}\n0\n\n", "malformed chunk size '+2'"),
            ("GET /x HTTP/1.1\n", "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n-0\n\n", "malformed chunk size '-0'"),
        ])
    func broken(_ request: String, _ response: String, _ expected: String) {
        #expect {
            _ = try CapturedExchange(request: Data(request.utf8), response: Data(response.utf8))
        } throws: { error in
            "\(error)".contains(expected)
        }
    }
}
