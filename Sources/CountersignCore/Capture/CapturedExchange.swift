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
            guard let raw = Data(base64Encoded: value), raw.count == SignedRequestParts.nonceCount else {
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
            headersHash: message[header: WireHeader.headersHash]
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
            signature: message[header: WireHeader.signature],
            requestTime: message[header: WireHeader.requestTime],
            etag: message[header: WireHeader.etag],
            body: message.body
        )
    }
}
