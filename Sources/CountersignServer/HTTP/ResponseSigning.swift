import CountersignCore
import Foundation
import HTTPTypes
import Hummingbird

/// Wraps the handlers of signature-required endpoints: checks what the request asks the server
/// to vouch for, runs the handler, and signs its answer.
///
/// The server never signs a claim it did not check: a malformed `X-Nonce` or an
/// `X-Post-Params-Hash` / `X-Headers-Hash` that does not match what arrived is a 400.
public struct ResponseSigning: Sendable {
    public let keys: SigningKeyRing
    public let metrics: ServerMetrics?
    public let now: @Sendable () -> Date

    public init(keys: SigningKeyRing, metrics: ServerMetrics? = nil, now: @escaping @Sendable () -> Date = { Date() }) {
        self.keys = keys
        self.metrics = metrics
        self.now = now
    }

    public func respond(
        to request: Request,
        context: ServerRequestContext,
        endpoint: SignedEndpoint,
        body: Data? = nil,
        apiKey: String? = nil,
        handler: () async throws -> SignedAnswer
    ) async throws -> Response {
        let parts: SignedRequestParts
        switch Result(catching: { () throws(APIError) in try requestParts(request, endpoint: endpoint, body: body, apiKey: apiKey) }) {
        case .success(let checked): parts = checked
        case .failure(let error): return ErrorAnswer.response(error)
        }
        var answer: SignedAnswer
        do {
            answer = try await handler()
        } catch let error as APIError {
            return ErrorAnswer.response(error)
        } catch {
            // Never echo internals to the client; the log has them, with the request id.
            context.logger.error("request failed", metadata: ["error": "\(String(reflecting: error))"])
            return ErrorAnswer.response(APIError(.internalError, "internal error; the server log has the details"))
        }
        var etag: String?
        if answer.cacheable && answer.status == .ok {
            let current = SignedAnswer.etag(of: answer.etagSource ?? answer.body)
            etag = current
            if request.headers[SignatureHeader.etag] == current {
                answer = SignedAnswer(status: .notModified, body: Data(), cacheable: true)
            }
        }
        let requestTime = String(Int64((now().timeIntervalSince1970 * 1000).rounded(.down)))
        let signingStart = ThreadCPUTime.nanoseconds()
        let signature = try keys.currentSigner.signature(
            request: parts, response: SignedResponseParts(requestTime: requestTime, etag: etag, body: answer.body)
        )
        metrics?.recordSigning(.nanoseconds(ThreadCPUTime.nanoseconds() - signingStart))
        var headers: HTTPFields = [
            SignatureHeader.signature: signature,
            SignatureHeader.requestTime: requestTime,
        ]
        if let etag { headers[SignatureHeader.etag] = etag }
        if !answer.body.isEmpty { headers[.contentType] = "application/json" }
        return Response(status: answer.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: answer.body)))
    }

    /// The signed request parts, from what the server itself received.
    func requestParts(_ request: Request, endpoint: SignedEndpoint, body: Data?, apiKey: String?) throws(APIError) -> SignedRequestParts {
        var nonce: Data?
        if let value = request.headers[SignatureHeader.nonce] {
            guard let raw = Data(base64Encoded: value), raw.count == SignedRequestParts.nonceCount else {
                throw APIError(.malformedNonce, "X-Nonce must be base64 of 12 random bytes")
            }
            nonce = raw
        }
        let postParamsHash = request.headers[SignatureHeader.postParamsHash]
        if let claimed = postParamsHash {
            guard let keys = endpoint.postParamKeys, let body, let expected = Self.postParamsHash(keys: keys, body: body), expected == claimed else {
                throw APIError(.postParamsHashMismatch, "X-Post-Params-Hash does not match the request body")
            }
        }
        let headersHash = request.headers[SignatureHeader.headersHash]
        if let claimed = headersHash {
            let expected = FieldsHash.headerValue([("X-Is-Sandbox", request.headers[SignatureHeader.isSandbox])])
            guard claimed == expected else {
                throw APIError(.headersHashMismatch, "X-Headers-Hash does not match the X-Is-Sandbox header")
            }
        }
        return SignedRequestParts(
            authValue: endpoint.authenticated ? (apiKey ?? "") : "",
            nonce: nonce,
            path: request.uri.path,
            postParamsHash: postParamsHash,
            headersHash: headersHash
        )
    }

    /// The post-params hash of a JSON body over `keys`; nil when the body is not a JSON object.
    static func postParamsHash(keys: [String], body: Data) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else { return nil }
        return FieldsHash.headerValue(keys.map { key in (key, object[key] as? String) })
    }
}

/// The CPU time the current thread has used. Signing is synchronous, so the difference around
/// it is the CPU it cost, free of the preemption a wall clock would count on a busy server.
enum ThreadCPUTime {
    static func nanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}

/// Unsigned error answers.
public enum ErrorAnswer {
    public static func response(_ error: APIError) -> Response {
        let code = APIErrorCode(rawValue: error.code) ?? .internalError
        let body = (try? WireJSON.encode(error)) ?? Data()
        return Response(
            status: HTTPResponse.Status(code: code.httpStatus),
            headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(bytes: body))
        )
    }
}
