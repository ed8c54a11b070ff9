import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Synchronization

/// The middleware of the signed routes: checks what the request asks the server to vouch for,
/// runs the route, and signs its answer, refusals included.
///
/// The server never signs a claim it did not check: a missing API key (authenticated routes),
/// a malformed `X-Nonce` or `X-ETag`, or an `X-Headers-Hash` that does not match what arrived is
/// an unsigned refusal before the route runs. `X-Post-Params-Hash` is checked against the decoded
/// body by ``JSONBody/signedBody(_:of:context:)`` before the route acts on it; on a request
/// without a body it is refused here. After those checks every answer is signed: the route's
/// ``SignedAnswer`` and any ``APIError`` it throws (an unknown API key, a bad field, a store
/// refusal), so a client can tell the server's refusal from a forged one.
public struct ResponseSigning: RouterMiddleware {
    public typealias Context = ServerRequestContext

    public let keys: SigningKeyRing
    public let endpoint: SignedEndpoint
    public let metrics: ServerMetrics?
    /// The verification policy of each app, stated to clients that ask for it.
    public let policies: PolicyDirectory
    public let now: @Sendable () -> Date

    public init(
        keys: SigningKeyRing, endpoint: SignedEndpoint, metrics: ServerMetrics? = nil, policies: PolicyDirectory = PolicyDirectory(apps: []),
        now: @escaping @Sendable () -> Date
    ) {
        self.keys = keys
        self.endpoint = endpoint
        self.metrics = metrics
        self.policies = policies
        self.now = now
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // Thrown from here: unsigned (RequestObservation writes the error answer).
        let apiKey = endpoint.authenticated ? try APIKeyAuthentication.bearer(request) : nil
        let parts = try requestParts(request, endpoint: endpoint, apiKey: apiKey)
        let date = now()
        let signer: ResponseSigner
        do {
            signer = try keys.signer(at: date)
        } catch {
            metrics?.recordSigningRefused()
            context.logger.critical("no unexpired intermediate key: refusing to answer", metadata: ["error": "\(error)"])
            throw error
        }
        var context = context
        let exchange = SignedExchange(
            parts: parts, apiKey: apiKey, signer: signer, date: date, metrics: metrics,
            postParamsCheck: parts.postParamsHash == nil ? nil : PostParamsCheck(),
            policy: parts.acceptsPolicy ? policies.statement(apiKey: apiKey, at: date).headerValue : nil,
            platform: request.headers[SignedExchange.platformHeader])
        context.signedExchange = exchange
        do {
            return try await next(request, context)
        } catch let refusal as UnsignedRefusal {
            throw refusal
        } catch let error as APIError {
            return try signedRefusal(error, exchange: exchange, request: request, logger: context.logger)
        } catch let refusal as LedgerError {
            return try signedRefusal(APIError(refusal), exchange: exchange, request: request, logger: context.logger)
        } catch {
            return try exchange.response(to: request, answer: SignedAnswer.error(ErrorAnswer.apiError(for: error, logger: context.logger)))
        }
    }

    /// A route's refusal, signed once the route has checked the body's claim.
    private func signedRefusal(_ error: APIError, exchange: SignedExchange, request: Request, logger: Logger) throws -> Response {
        // A refusal before the route checked the body's claim is not signed either.
        guard exchange.claimsChecked else { throw error }
        if let storeStatus = error.storeStatus {
            logger.notice(
                "store data refused",
                metadata: [
                    "store_status": "\(storeStatus)", "store_reason": "\(error.storeReason ?? "")", "code": "\(error.code)",
                ])
        }
        return try exchange.response(to: request, answer: SignedAnswer.error(error))
    }

    /// The signed request parts, from what the server itself received.
    func requestParts(_ request: Request, endpoint: SignedEndpoint, apiKey: String?) throws(APIError) -> SignedRequestParts {
        var nonce: Data?
        if let value = request.headers[SignatureHeader.nonce] {
            guard let raw = SignedRequestParts.nonce(header: value) else {
                throw APIError(.malformedNonce, "X-Nonce must be base64 of 12 random bytes")
            }
            nonce = raw
        }
        if let etag = request.headers[SignatureHeader.etag], !WireHeader.isWellFormedETag(etag) {
            throw APIError(.malformedRequest, "X-ETag must be 16 lowercase hex characters (an ETag this server sent)")
        }
        let postParamsHash = request.headers[SignatureHeader.postParamsHash]
        if postParamsHash != nil, request.method != .post {
            throw APIError(.postParamsHashMismatch, "X-Post-Params-Hash was sent on a request without a body")
        }
        let headersHash = request.headers[SignatureHeader.headersHash]
        if let claimed = headersHash {
            let expected = FieldsHash.headerValue([(WireHeader.isSandbox, request.headers[SignatureHeader.isSandbox])])
            guard claimed == expected else {
                throw APIError(.headersHashMismatch, "X-Headers-Hash does not match the X-Is-Sandbox header")
            }
        }
        var acceptsPolicy = false
        if let value = request.headers[SignatureHeader.acceptPolicy] {
            guard value == "1" else { throw APIError(.malformedRequest, "X-Accept-Verification-Policy must be 1") }
            acceptsPolicy = true
        }
        return SignedRequestParts(
            authValue: endpoint.authenticated ? (apiKey ?? "") : "",
            nonce: nonce,
            path: request.uri.path,
            postParamsHash: postParamsHash,
            headersHash: headersHash,
            acceptsPolicy: acceptsPolicy
        )
    }
}

/// What the signing middleware hands the route in its context: the checked request parts and
/// the signer, so the route's answer is signed over exactly what was checked.
public struct SignedExchange: Sendable {
    let parts: SignedRequestParts
    /// The bearer key as presented (nil on unauthenticated routes).
    let apiKey: String?
    let signer: ResponseSigner
    let date: Date
    let metrics: ServerMetrics?
    /// Present when the request claims an `X-Post-Params-Hash`: whether the route checked it.
    let postParamsCheck: PostParamsCheck?
    /// The `X-Verification-Policy` value, when the client asked for it.
    let policy: String?
    /// `X-Platform` (RevenueCat's: `stripe` for a web purchase posted to `/v1/receipts`).
    var platform: String? = nil

    static let platformHeader = HTTPField.Name("X-Platform")!

    /// Whether every claim of the request has been checked, so an answer may be signed over it.
    var claimsChecked: Bool { postParamsCheck?.passed.load(ordering: .relaxed) ?? true }

    /// The signed response: `X-Signature`, `X-Request-Time`, and for a cacheable answer `X-ETag`
    /// (a signed, empty 304 when the client's ETag is current).
    func response(to request: Request, answer: SignedAnswer) throws -> Response {
        guard claimsChecked else {
            throw UnsignedRefusal(APIError(.internalError, "the route did not check X-Post-Params-Hash; nothing is signed over it"))
        }
        var answer = answer
        var etag: String?
        if answer.cacheable && answer.status == .ok {
            let current = SignedAnswer.etag(of: answer.etagSource ?? answer.body)
            etag = current
            if request.headers[SignatureHeader.etag] == current {
                answer = SignedAnswer(status: .notModified, body: Data(), cacheable: true)
            }
        }
        let requestTime = String(date.epochMilliseconds)
        // The monotonic clock (read in user space), not the thread's CPU time, which is a
        // system call. Signing is
        // synchronous, so the two differ only when the thread is preempted mid-signature.
        let signingStart = ContinuousClock.now
        let signature = try signer.signature(
            request: parts, response: SignedResponseParts(requestTime: requestTime, etag: etag, policy: policy, body: answer.body)
        )
        metrics?.recordSigning(ContinuousClock.now - signingStart)
        // Appended, not set through the subscript: each name is new, so the setter's search for
        // an earlier field of the name is work for nothing.
        var headers = HTTPFields()
        headers.reserveCapacity(5)
        headers.append(HTTPField(name: SignatureHeader.signature, value: signature))
        headers.append(HTTPField(name: SignatureHeader.requestTime, value: requestTime))
        if let etag { headers.append(HTTPField(name: SignatureHeader.etag, value: etag)) }
        if let policy { headers.append(HTTPField(name: SignatureHeader.policy, value: policy)) }
        if !answer.body.isEmpty { headers.append(HTTPField(name: .contentType, value: "application/json")) }
        if let retryAfter = answer.retryAfter { headers.append(HTTPField(name: .retryAfter, value: String(retryAfter))) }
        return Response(status: answer.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: answer.body)))
    }

    /// Checks `X-Post-Params-Hash`, when sent, against the fields of the decoded body: the very
    /// values the route then acts on. A mismatch is an unsigned refusal.
    func checkPostParams(_ fields: [(String, String?)]) throws(UnsignedRefusal) {
        guard let claimed = parts.postParamsHash else { return }
        guard FieldsHash.headerValue(fields) == claimed else {
            throw UnsignedRefusal(APIError(.postParamsHashMismatch, "X-Post-Params-Hash does not match the request body"))
        }
        postParamsCheck?.passed.store(true, ordering: .relaxed)
    }
}

/// The one mutable bit of an exchange: set by the route when the body matched its hash.
final class PostParamsCheck: Sendable {
    let passed = Atomic<Bool>(false)
}

/// A refusal on a signed route that must not be signed: the request could not be read or does
/// not match its own claims, so there is nothing the server could vouch for.
public struct UnsignedRefusal: Error, Sendable {
    public let error: APIError

    public init(_ error: APIError) {
        self.error = error
    }
}

/// Unsigned error answers: for endpoints that are not signed, and for requests whose signed
/// parts could not be checked.
public enum ErrorAnswer {
    /// Seconds a client is told to wait while the database is away (PostgreSQL restarts in a
    /// few seconds; the SDK retries after `Retry-After`).
    static let databaseRetryAfter = 2

    /// What a client hears of an error that is no ``APIError``: 503 with `Retry-After` when the
    /// database is away for now (``Database/isUnavailable(_:)``), else 500. Never the internals:
    /// the log has them, with the request id.
    static func apiError(for error: any Error, logger: Logger) -> APIError {
        if let refusal = error as? LedgerError { return APIError(refusal) }
        if Database.isUnavailable(error) {
            logger.warning("database unavailable", metadata: ["error": "\(String(reflecting: error))"])
            return APIError(
                .databaseUnavailable, "the database is unavailable for now; try again (a request repeated is taken once)",
                retryAfter: databaseRetryAfter)
        }
        logger.error("request failed", metadata: ["error": "\(String(reflecting: error))"])
        return APIError(.internalError, "internal error; the server log has the details")
    }

    public static func response(_ error: APIError) -> Response {
        let body = (try? WireJSON.encode(error)) ?? Data()
        var headers: HTTPFields = [.contentType: "application/json"]
        if let retryAfter = error.retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(status: error.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}

/// An `APIError` thrown by a route outside the signed group (or before signing starts) is
/// answered unsigned, with its code's status and the JSON error body.
extension APIError: HTTPResponseError {
    public var status: HTTPResponse.Status {
        HTTPResponse.Status(code: (APIErrorCode(rawValue: code) ?? .internalError).httpStatus)
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        ErrorAnswer.response(self)
    }
}

extension UnsignedRefusal: HTTPResponseError {
    public var status: HTTPResponse.Status { error.status }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        ErrorAnswer.response(error)
    }
}

/// Each app's verification policy by the API keys that open it: what the signing middleware
/// states to a client that asks (`X-Accept-Verification-Policy`).
public struct PolicyDirectory: Sendable {
    private let apps: [(keys: [String], id: String, settings: AppConfiguration.VerificationPolicySettings?)]

    public init(apps: [AppConfiguration]) {
        self.apps = apps.map { ($0.publicApiKeys + $0.secretApiKeys, $0.id, $0.verificationPolicy) }
    }

    /// The statement for an answer to `apiKey` signed at `date`: the app's policy, or `none` for
    /// an app without one and for a key no app holds (the answer is then a refusal).
    public func statement(apiKey: String?, at date: Date) -> VerificationPolicy.Statement {
        guard let apiKey, let app = apps.first(where: { APIKeyAuthentication.holds($0.keys, apiKey) }), let settings = app.settings else {
            return .none
        }
        return .policy(settings.policy(app: app.id, at: date))
    }
}
