import CountersignCore
import Foundation

/// A request and its answer captured as raw HTTP, turned into what the verifier needs.
public struct CapturedExchange: Sendable, Hashable {
    public var request: SignedRequestParts
    public var response: ReceivedResponse

    public init(request: SignedRequestParts, response: ReceivedResponse) {
        self.request = request
        self.response = response
    }

    /// Reads the signed parts out of a captured request and response.
    ///
    /// - Parameter apiKey: overrides the request's bearer value (for captures with the key redacted).
    public init(request requestData: Data, response responseData: Data, apiKey: String? = nil) throws(HTTPMessageError) {
        let requestMessage: HTTPMessage
        let responseMessage: HTTPMessage
        do { requestMessage = try HTTPMessage(parsing: requestData) } catch {
            throw HTTPMessageError("request: \(error.message)")
        }
        do { responseMessage = try HTTPMessage(parsing: responseData) } catch {
            throw HTTPMessageError("response: \(error.message)")
        }
        request = try Self.requestParts(requestMessage, apiKey: apiKey)
        response = try Self.received(responseMessage)
    }

    static func requestParts(_ message: HTTPMessage, apiKey: String?) throws(HTTPMessageError) -> SignedRequestParts {
        let parts = message.startLine.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/") else {
            throw HTTPMessageError("request: start line is not 'METHOD TARGET HTTP/1.1'")
        }
        let path = try requestPath(String(parts[1]))
        var nonce: Data?
        if let value = message[header: WireHeader.nonce] {
            guard let raw = SignedRequestParts.nonce(header: value) else {
                throw HTTPMessageError("request: X-Nonce is not base64 of \(SignedRequestParts.nonceCount) bytes")
            }
            nonce = raw
        }
        var authValue = apiKey ?? ""
        if apiKey == nil, let authorization = message[header: "Authorization"] {
            guard authorization.lowercased().hasPrefix("bearer ") else {
                throw HTTPMessageError("request: Authorization is not 'Bearer <key>'")
            }
            authValue = String(authorization.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
        }
        return SignedRequestParts(
            authValue: authValue,
            nonce: nonce,
            path: path,
            postParamsHash: message[header: WireHeader.postParamsHash],
            headersHash: message[header: WireHeader.headersHash],
            acceptsPolicy: message[header: WireHeader.acceptPolicy] == "1"
        )
    }

    /// The path of a request target as sent, without query or fragment; absolute-form targets
    /// (`http://host/path`) give their path.
    static func requestPath(_ target: String) throws(HTTPMessageError) -> String {
        var path = Substring(target)
        if let scheme = path.range(of: "://") {
            let afterScheme = path[scheme.upperBound...]
            path = afterScheme.firstIndex(of: "/").map { afterScheme[$0...] } ?? "/"
        }
        if let query = path.firstIndex(where: { $0 == "?" || $0 == "#" }) { path = path[..<query] }
        guard path.hasPrefix("/") else { throw HTTPMessageError("request: target '\(target.prefix(40))' is not a path") }
        return String(path)
    }

    static func received(_ message: HTTPMessage) throws(HTTPMessageError) -> ReceivedResponse {
        let parts = message.startLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/"), parts[1].count == 3, let status = Int(parts[1]) else {
            throw HTTPMessageError("response: status line is not 'HTTP/1.1 CODE REASON'")
        }
        if let encoding = message[header: "Content-Encoding"], encoding.lowercased() != "identity" {
            throw HTTPMessageError("response: body is \(encoding)-encoded; capture it uncompressed")
        }
        return ReceivedResponse(
            statusCode: status,
            signature: try message.single(header: WireHeader.signature, in: "response"),
            requestTime: try message.single(header: WireHeader.requestTime, in: "response"),
            etag: try message.single(header: WireHeader.etag, in: "response"),
            policy: try message.single(header: WireHeader.policy, in: "response"),
            body: message.body
        )
    }
}

/// A webhook delivery captured as raw HTTP (`POST`, headers, body), turned into what the
/// verifier needs: the signature, request time and body as an answer's. The request parts
/// come from the receiver's own app id and URL (``WebhookSignature/requestParts(appId:url:)``).
public struct CapturedWebhook: Sendable, Hashable {
    /// The path the delivery was posted to (not itself proof of anything: the signature binds the
    /// receiver's configured URL, see ``WebhookSignature``).
    public var path: String
    public var delivery: ReceivedResponse

    public init(request data: Data) throws(HTTPMessageError) {
        let message = try HTTPMessage(parsing: data)
        let parts = message.startLine.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3, parts[0] == "POST", parts[2].hasPrefix("HTTP/") else {
            throw HTTPMessageError("request: start line is not 'POST TARGET HTTP/1.1'")
        }
        if let encoding = message[header: "Content-Encoding"], encoding.lowercased() != "identity" {
            throw HTTPMessageError("request: body is \(encoding)-encoded; capture it uncompressed")
        }
        path = try CapturedExchange.requestPath(String(parts[1]))
        delivery = ReceivedResponse(
            statusCode: 200,
            signature: try message.single(header: WireHeader.signature, in: "request"),
            requestTime: try message.single(header: WireHeader.requestTime, in: "request"),
            etag: nil,
            body: message.body
        )
    }
}

extension HTTPMessage {
    /// A signed header's value; two of them are refused rather than one picked, since another
    /// reader (one that joins repeated headers with commas, say) would read something else.
    func single(header name: String, in what: String) throws(HTTPMessageError) -> String? {
        let values = headers.filter { $0.name.caseInsensitiveCompare(name) == .orderedSame }
        guard values.count <= 1 else { throw HTTPMessageError("\(what): \(name) appears \(values.count) times") }
        return values.first?.value
    }
}
