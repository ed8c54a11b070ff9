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

    /// Answers a signature-required request. The request parts are checked first (a malformed
    /// nonce or a hash header that does not match is an unsigned 400: the server never signs a
    /// claim it did not check); after that every answer is signed, error answers included, so a
    /// client can tell the server's refusal from a forged one.
    ///
    /// - Parameters:
    ///   - postParams: the decoded body fields `X-Post-Params-Hash` covers, exactly the values the
    ///     handler acts on; nil for endpoints without a body.
    ///   - apiKey: the bearer value as presented (bound into the signature even if it is refused).
    public func respond(
        to request: Request,
        context: ServerRequestContext,
        endpoint: SignedEndpoint,
        postParams: [(String, String?)]? = nil,
        apiKey: String? = nil,
        handler: () async throws -> SignedAnswer
    ) async throws -> Response {
        let parts: SignedRequestParts
        switch Result(catching: { () throws(APIError) in try requestParts(request, endpoint: endpoint, postParams: postParams, apiKey: apiKey) }) {
        case .success(let checked): parts = checked
        case .failure(let error): return ErrorAnswer.response(error)
        }
        let date = now()
        let signer: ResponseSigner
        do {
            signer = try keys.signer(at: date)
        } catch {
            metrics?.recordSigningRefused()
            context.logger.critical("no unexpired intermediate key: refusing to answer", metadata: ["error": "\(error)"])
            return ErrorAnswer.response(error)
        }
        var answer: SignedAnswer
        do {
            answer = try await handler()
        } catch let error as APIError {
            if let storeStatus = error.storeStatus {
                context.logger.notice("store data refused", metadata: [
                    "store_status": "\(storeStatus)", "store_reason": "\(error.storeReason ?? "")", "code": "\(error.code)",
                ])
            }
            answer = SignedAnswer.error(error)
        } catch {
            // Never echo internals to the client; the log has them, with the request id.
            context.logger.error("request failed", metadata: ["error": "\(String(reflecting: error))"])
            answer = SignedAnswer.error(APIError(.internalError, "internal error; the server log has the details"))
        }
        var etag: String?
        if answer.cacheable && answer.status == .ok {
            let current = SignedAnswer.etag(of: answer.etagSource ?? answer.body)
            etag = current
            if request.headers[SignatureHeader.etag] == current {
                answer = SignedAnswer(status: .notModified, body: Data(), cacheable: true)
            }
        }
        let requestTime = String(Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))
        let signingStart = ThreadCPUTime.nanoseconds()
        let signature = try signer.signature(
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
    func requestParts(_ request: Request, endpoint: SignedEndpoint, postParams: [(String, String?)]?, apiKey: String?) throws(APIError) -> SignedRequestParts {
        var nonce: Data?
        if let value = request.headers[SignatureHeader.nonce] {
            guard let raw = Data(base64Encoded: value), raw.count == SignedRequestParts.nonceCount else {
                throw APIError(.malformedNonce, "X-Nonce must be base64 of 12 random bytes")
            }
            nonce = raw
        }
        if let etag = request.headers[SignatureHeader.etag], !WireHeader.isWellFormedETag(etag) {
            throw APIError(.malformedRequest, "X-ETag must be 16 lowercase hex characters (an ETag this server sent)")
        }
        let postParamsHash = request.headers[SignatureHeader.postParamsHash]
        if let claimed = postParamsHash {
            guard let postParams, FieldsHash.headerValue(postParams) == claimed else {
                throw APIError(.postParamsHashMismatch, "X-Post-Params-Hash does not match the request body")
            }
        }
        let headersHash = request.headers[SignatureHeader.headersHash]
        if let claimed = headersHash {
            let expected = FieldsHash.headerValue([(WireHeader.isSandbox, request.headers[SignatureHeader.isSandbox])])
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

/// Unsigned error answers: for endpoints that are not signed, and for requests whose signed
/// parts could not be checked.
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
