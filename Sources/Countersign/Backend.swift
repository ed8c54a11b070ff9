import CountersignCore
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Talks to the server: a fresh nonce per request, the post-params hash over what it sends, the
/// signature checked against what it sent (never against anything echoed back), and the ETag
/// rules of docs/sdk.md ("Caching and ETags").
final class Backend: Sendable {
    struct Endpoint: Sendable {
        var method: String
        /// Percent-encoded, exactly as sent and signed.
        var path: String
        /// JSON string fields of the body, in the order `X-Post-Params-Hash` covers them.
        var fields: [(String, String?)] = []
        /// A body that is not string fields (sent as is, without `X-Post-Params-Hash`).
        var jsonBody: Data?
        /// Percent-encoded query, sent after the path; like RevenueCat's, the signature covers the
        /// path only, so answers to queried requests must say what they answer.
        var query: String?
        var usesNonce = true
        var cacheable = false
        /// Safe to send again after a 429, a 5xx or a transport failure: reads, and posts the
        /// server applies once (a store transaction, a logIn).
        var retryable = false

        static func get(_ path: String, query: String? = nil, nonce: Bool = true, cacheable: Bool = false) -> Endpoint {
            Endpoint(method: "GET", path: path, query: query, usesNonce: nonce, cacheable: cacheable, retryable: true)
        }

        static func post(_ path: String, _ fields: [(String, String?)], retryable: Bool = false) -> Endpoint {
            Endpoint(method: "POST", path: path, fields: fields, retryable: retryable)
        }

        static func post(_ path: String, json: Data) -> Endpoint {
            Endpoint(method: "POST", path: path, jsonBody: json)
        }
    }

    struct Answer: Sendable {
        var status: Int
        var body: Data
        var verification: VerificationResult
        var failure: VerificationFailure?

        /// The server's refusal, for a 4xx answer.
        var refusal: PurchasesError? {
            guard (400..<500).contains(status) else { return nil }
            let error = try? JSONDecoder().decode(APIError.self, from: body)
            return PurchasesError.server(statusCode: status, code: error?.code, message: error?.message ?? "HTTP \(status)")
        }
    }

    let apiKey: String
    let serverURL: URL
    /// The mode the app was built with.
    let mode: EntitlementVerificationMode
    /// The verification policy that may raise the built mode (nil: none is asked for, as for the
    /// test store's own backend).
    let policy: VerificationPolicyState?
    /// The current app user id, whom a policy's rollout is judged for.
    let appUserID: @Sendable () -> String
    /// The device clock, by which a policy lapses.
    let now: @Sendable () -> Date
    let verifier: SignatureVerifier?
    let session: URLSession
    let etags: ETagCache?
    /// Raised to the signed request time of every verified answer.
    let timeFloor: VerifiedTimeFloor?
    /// Called for every failed verification (error handler, telemetry).
    let onFailure: @Sendable (String, Int, VerificationFailure) -> Void
    /// Retries of a retryable request, and the first wait (doubled each time, with jitter).
    let retries: Int
    let retryBaseDelay: Duration
    /// How long one request may take.
    let timeout: TimeInterval
    /// Reads under way, by path and query: an identical read asked for meanwhile waits for the
    /// same answer instead of sending another request (as RevenueCat's SDK shares them).
    private let readsInFlight = LockedState<[String: Task<Answer, any Error>]>([:])

    /// - Parameters:
    ///   - verifier: nil when verification is disabled.
    ///   - etags: nil for a backend that caches nothing (the test store's).
    init(
        apiKey: String, serverURL: URL, mode: EntitlementVerificationMode, verifier: SignatureVerifier?, session: URLSession,
        etags: ETagCache?, timeFloor: VerifiedTimeFloor? = nil, retries: Int = 0, retryBaseDelay: Duration = .milliseconds(500),
        timeout: TimeInterval = 30, policy: VerificationPolicyState? = nil, appUserID: @escaping @Sendable () -> String = { "" },
        now: @escaping @Sendable () -> Date = { Date() },
        onFailure: @escaping @Sendable (String, Int, VerificationFailure) -> Void = { _, _, _ in }
    ) {
        self.policy = policy
        self.appUserID = appUserID
        self.now = now
        self.timeFloor = timeFloor
        self.timeout = timeout
        self.retries = retries
        self.retryBaseDelay = retryBaseDelay
        self.apiKey = apiKey
        self.serverURL = serverURL
        self.mode = mode
        self.verifier = mode == .disabled ? nil : verifier
        self.session = session
        self.etags = etags
        self.onFailure = onFailure
    }

    /// The mode answers are judged by now: the built mode, or `enforced` while a verified policy
    /// puts the current user in its rollout.
    var currentMode: EntitlementVerificationMode {
        policy?.mode(for: appUserID(), at: now()) ?? mode
    }

    /// Sends the request and checks the answer. Throws ``PurchasesError/offline(_:)`` for
    /// transport failures, 429 and 5xx (after the retries of a retryable request), ``PurchasesError/server(statusCode:code:message:)`` for 4xx,
    /// and, in enforced mode, ``PurchasesError/signatureVerificationFailed(path:statusCode:reason:)``.
    func perform(_ endpoint: Endpoint) async throws -> Answer {
        let answer = try await performAllowingRefusal(endpoint)
        if let refusal = answer.refusal { throw refusal }
        return answer
    }

    /// Like ``perform(_:)``, but a 4xx refusal comes back as an answer (with its verification)
    /// instead of an error, for callers that act on a refusal only when it verified. A retryable
    /// request is sent again after a 429, a 5xx or a transport failure, up to ``retries`` times.
    func performAllowingRefusal(_ endpoint: Endpoint) async throws -> Answer {
        guard endpoint.method == "GET" else { return try await performWithRetries(endpoint) }
        let key = endpoint.path + (endpoint.query.map { "?" + $0 } ?? "")
        let task = readsInFlight.withLock { reads -> Task<Answer, any Error> in
            if let running = reads[key] { return running }
            let task = Task {
                // Gone from the table as it ends (before its waiters resume): a read asked for
                // after the answer sends a request of its own.
                defer { self.readsInFlight.withLock { _ = $0.removeValue(forKey: key) } }
                return try await self.performWithRetries(endpoint)
            }
            reads[key] = task
            return task
        }
        return try await task.value
    }

    private func performWithRetries(_ endpoint: Endpoint) async throws -> Answer {
        var attempt = 0
        while true {
            do {
                return try await send(endpoint)
            } catch let error as CannotVerify {
                // Asking again at once would be checked by the same clock: not retried.
                throw PurchasesError.offline(error.detail)
            } catch let error as Unavailable {
                guard endpoint.retryable && attempt < retries else { throw PurchasesError.offline(error.detail) }
                try await Task.sleep(for: retryDelay(attempt: attempt, retryAfter: error.retryAfter))
                attempt += 1
                SDKLog.log(.info, "\(endpoint.method) \(endpoint.path): trying again (\(attempt) of \(retries))")
            }
        }
    }

    /// An enforced answer the device cannot check now; callers see it as ``PurchasesError/offline(_:)``.
    struct CannotVerify: Error {
        let detail: String
    }

    /// The server could not answer now (no connection, 429, 5xx), with its `Retry-After` if it
    /// sent one; callers see it as ``PurchasesError/offline(_:)`` once the retries are spent.
    struct Unavailable: Error {
        let detail: String
        var retryAfter: TimeInterval? = nil
    }

    /// The wait before retry `attempt + 1`: the server's `Retry-After` (at most 60 s), else the
    /// base delay doubled per attempt, from half to one and a half times that (jitter, so many
    /// devices do not come back at once).
    func retryDelay(attempt: Int, retryAfter: TimeInterval?) -> Duration {
        if let retryAfter { return .milliseconds(Int64(min(max(retryAfter, 0), 60) * 1000)) }
        let base = Double(retryBaseDelay.components.seconds) + Double(retryBaseDelay.components.attoseconds) / 1e18
        return .milliseconds(Int64(base * Double(1 << min(attempt, 10)) * Double.random(in: 0.5...1.5) * 1000))
    }

    /// `Retry-After` in seconds (the HTTP-date form is not used by this server and is ignored).
    /// The header is not signed: anything on the way may write `nan`, `1e400` or `-5` there, and
    /// such a number converted to an integer would stop the app. Only 0 to 3600 seconds are taken.
    static func retryAfter(_ response: HTTPURLResponse) -> TimeInterval? {
        response.value(forHTTPHeaderField: "Retry-After").flatMap { TimeInterval($0.trimmingCharacters(in: .whitespaces)) }
            .flatMap { (0...3_600).contains($0) ? $0 : nil }
    }

    /// One attempt; `sendETag` false leaves the cached answer's ETag out (the attempt after a
    /// 304 that had nothing to vouch for).
    private func send(_ endpoint: Endpoint, sendETag: Bool = true) async throws -> Answer {
        guard let url = URL(string: serverURL.absoluteString.trimmingSuffix("/") + endpoint.path + (endpoint.query.map { "?" + $0 } ?? "")) else {
            throw PurchasesError.configuration("cannot form a URL from \(serverURL) and \(endpoint.path)")
        }
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalAndRemoteCacheData, timeoutInterval: timeout)
        request.httpMethod = endpoint.method
        request.setValue("Bearer \(apiKey)", forHTTPHeaderField: "Authorization")
        request.setValue("Countersign-SDK/\(CountersignSDK.version)", forHTTPHeaderField: "User-Agent")
        let nonce = endpoint.usesNonce ? SignedRequestParts.makeNonce() : nil
        if let nonce { request.setValue(nonce.base64EncodedString(), forHTTPHeaderField: WireHeader.nonce) }
        // Judged once, before the answer: a policy the answer brings applies from the next request.
        let mode = currentMode
        let acceptsPolicy = verifier != nil && policy != nil
        if acceptsPolicy { request.setValue("1", forHTTPHeaderField: WireHeader.acceptPolicy) }
        var postParamsHash: String?
        if let json = endpoint.jsonBody {
            request.httpBody = json
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        } else if endpoint.method == "POST" {
            var object: [String: String] = [:]
            for case let (key, value?) in endpoint.fields { object[key] = value }
            request.httpBody = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            postParamsHash = FieldsHash.headerValue(endpoint.fields)
            request.setValue(postParamsHash, forHTTPHeaderField: WireHeader.postParamsHash)
        }
        // Only an ETag whose cached answer this mode accepts is sent back.
        let cached = endpoint.cacheable && sendETag ? etags?.entry(for: endpoint.path, acceptable: acceptableCached) : nil
        if let cached { request.setValue(cached.etag, forHTTPHeaderField: WireHeader.etag) }

        let data: Data
        let response: HTTPURLResponse
        do {
            let (received, urlResponse) = try await session.data(for: request)
            guard let http = urlResponse as? HTTPURLResponse else { throw Unavailable(detail: "not an HTTP answer") }
            (data, response) = (received, http)
        } catch let error as Unavailable {
            throw error
        } catch {
            throw Unavailable(detail: error.localizedDescription)
        }
        let status = response.statusCode
        let retryAfter = Self.retryAfter(response)
        // Too many requests and server errors: the server cannot answer now (tried again, then
        // the cache or the device stands in). A forged 429 can only delay, never grant or refuse.
        if status >= 500 || status == 429 {
            throw Unavailable(
                detail: "\(endpoint.path) answered \(status)" + (retryAfter.map { ", retry after \(Int($0))" } ?? ""),
                retryAfter: retryAfter)
        }
        // The server signs its refusals too: they are verified like any answer.
        guard (200..<300).contains(status) || (400..<500).contains(status) || status == 304 else {
            throw PurchasesError.server(statusCode: status, code: nil, message: "unexpected HTTP \(status)")
        }

        var verification = VerificationResult.notRequested
        var failure: VerificationFailure?
        if let verifier {
            let outcome = verifier.verify(
                request: SignedRequestParts(
                    authValue: apiKey, nonce: nonce, path: endpoint.path, postParamsHash: postParamsHash, acceptsPolicy: acceptsPolicy),
                response: ReceivedResponse(
                    statusCode: status,
                    signature: response.value(forHTTPHeaderField: WireHeader.signature),
                    requestTime: response.value(forHTTPHeaderField: WireHeader.requestTime),
                    // A 304 vouches for the ETag this client sent, whatever the answer echoes.
                    etag: status == 304 ? cached?.etag : response.value(forHTTPHeaderField: WireHeader.etag),
                    policy: response.value(forHTTPHeaderField: WireHeader.policy),
                    body: data
                )
            )
            switch outcome {
            case .verified:
                verification = .verified
                if let time = response.value(forHTTPHeaderField: WireHeader.requestTime).flatMap(SignatureVerifier.parseRequestTime) {
                    timeFloor?.raise(to: Date(timeIntervalSince1970: TimeInterval(time) / 1000))
                }
                // Verified with it, so the header is there and in its one spelling.
                if acceptsPolicy, let statement = response.value(forHTTPHeaderField: WireHeader.policy).flatMap(VerificationPolicy.Statement.init) {
                    policy?.record(statement)
                }
            case .failed(let reason):
                verification = .failed
                failure = reason
                onFailure(endpoint.path, status, reason)
                if mode == .enforced && reason.category == .cannotVerify {
                    // Not tampering: the device cannot check the answer now (its clock is outside
                    // the signing key's life). As when the server cannot be reached: the verified
                    // cache or on-device entitlements stand in, nothing is cached, and the next
                    // call checks again.
                    throw CannotVerify(detail: "\(endpoint.path): cannot verify the answer on this device (\(reason.rawValue))")
                }
                if mode == .enforced {
                    throw PurchasesError.signatureVerificationFailed(path: endpoint.path, statusCode: status, reason: reason)
                }
            }
        }

        SDKLog.log(
            .debug, "\(endpoint.method) \(endpoint.path) → \(status), verification: \(failure.map { "failed (\($0.rawValue))" } ?? "\(verification)")"
        )
        if (400..<500).contains(status) {
            return Answer(status: status, body: data, verification: verification, failure: failure)
        }
        if status == 304 {
            // A 304 inherits the cached body and takes its own verification result. With nothing
            // cached to inherit, the request goes again without an ETag, as RevenueCat's
            // ETagManager does; a second such 304 is a malformed answer.
            guard let cached else {
                guard sendETag else { throw PurchasesError.malformedAnswer(path: endpoint.path) }
                SDKLog.log(.warn, "\(endpoint.method) \(endpoint.path) answered 304 with nothing cached; asking again without an ETag")
                return try await send(endpoint, sendETag: false)
            }
            return Answer(status: 200, body: cached.body, verification: verification, failure: failure)
        }
        if endpoint.cacheable, let etag = response.value(forHTTPHeaderField: WireHeader.etag), acceptableCached(verification) {
            etags?.store(ETagCache.Entry(etag: etag, body: data, verification: verification), for: endpoint.path)
        } else if endpoint.cacheable {
            etags?.remove(endpoint.path)
        }
        return Answer(status: status, body: data, verification: verification, failure: failure)
    }

    /// Reports a failure found after the signature checked out (an answer for another user):
    /// the same handler and telemetry as a signature failure; in enforced mode it throws.
    func reportFailure(_ reason: VerificationFailure, path: String, status: Int) throws {
        onFailure(path, status, reason)
        if currentMode == .enforced {
            throw PurchasesError.signatureVerificationFailed(path: path, statusCode: status, reason: reason)
        }
    }

    /// What may be cached and sent back: verified answers, or unverified ones while
    /// verification is disabled.
    @Sendable func acceptableCached(_ verification: VerificationResult) -> Bool {
        mode == .disabled ? verification == .notRequested : verification == .verified
    }
}

extension String {
    func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }

    /// An app user id as one path segment.
    var pathSegmentEncoded: String {
        addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"))
            ?? self
    }
}
