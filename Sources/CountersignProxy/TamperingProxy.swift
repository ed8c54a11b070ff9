import AsyncHTTPClient
import CountersignCore
import CountersignServerCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1

/// A real HTTP proxy in front of a Countersign server that tampers with answers the way
/// on-device piracy tools do. It exists to prove, from the attacker's side, that every such
/// answer is caught: `countersign proxy` runs it, the attack-matrix tests drive the SDK through it.
public final class TamperingProxy: Sendable {
    public enum Attack: String, Sendable, CaseIterable {
        /// Forward untouched.
        case none
        /// Rewrite the body to add an active entitlement (signature left as it was).
        case grantEntitlement = "grant-entitlement"
        /// Remove `X-Signature`.
        case stripSignature = "strip-signature"
        /// Cut `X-Signature` in half.
        case truncateSignature = "truncate-signature"
        /// Answer with a signed answer recorded for an earlier request (another nonce).
        case replay
        /// Answer a CustomerInfo request with another user's signed answer (same nonce).
        case crossUser = "cross-user"
        /// Forward to the same resource under another spelling of its path; the server signs
        /// the path it received, not the one the client sent.
        case swapPath = "swap-path"
        /// Move a digit from `X-Request-Time` into `X-ETag` (or the body): the signed bytes stay
        /// the same, the parts do not.
        case digitShift = "digit-shift"
        /// Grant the entitlement and re-sign with the attacker's own root and intermediate.
        case foreignRoot = "foreign-root"
        /// Grant the entitlement and sign with an intermediate of the real root that has expired.
        case expiredIntermediate = "expired-intermediate"
        /// Answer 304 with a made-up ETag where the server answered 200.
        case forge304 = "forge-304"
        /// Answer 503, to push the client to its offline path.
        case serverDown = "server-down"
        /// Remove `X-Request-Time`.
        case dropRequestTime = "drop-request-time"
        /// Answer every request with an unsigned `422 {"code": 4201}` (the server's "not a valid
        /// signed transaction"), to make the SDK give up on, and finish, a real purchase.
        case forgeRefusal = "forge-refusal"
        /// Re-sign the answer, untouched, with a stolen intermediate of the real root (one still
        /// valid) and a request time in 2286: to push a device's verified-time floor past every
        /// genuine answer.
        case futureTime = "future-time"
        /// Take `X-Accept-Verification-Policy` off the request, so the server signs its answer
        /// without the policy: to keep a client on the mode it was built with.
        case stripPolicy = "strip-policy"
        /// Rewrite the answer's `X-Verification-Policy` to withdraw the policy (`none`), or, where
        /// the app has none, to state one that covers no user.
        case forgePolicy = "forge-policy"
        /// Answer the next requests (``Configuration/unavailableCount``, reset whenever the attack
        /// is set) with 503 or 429 (``Configuration/unavailableStatus``), then forward: a server
        /// that hiccups, for the SDK's retries.
        case unavailable
    }

    public struct Configuration: Sendable {
        public var upstream: URL
        public var attack: Attack
        /// The entitlement `grant-entitlement`, `foreign-root` and `expired-intermediate` add.
        public var entitlement = "pro"
        /// Whose answer `cross-user` serves.
        public var otherUser = "paying-user"
        /// An expired intermediate of the real root (private key included), for
        /// `expired-intermediate`; without one that attack signs with a made-up expired key.
        public var expiredIntermediate: IntermediateSigningKey?
        /// A valid intermediate of the real root (private key included), as if stolen from the
        /// server, for `future-time`; without one that attack signs with the attacker's own.
        public var stolenIntermediate: IntermediateSigningKey?
        /// For `unavailable`: how many requests are refused, and with which status (503 or 429).
        public var unavailableCount = 2
        public var unavailableStatus = 503

        public init(upstream: URL, attack: Attack) {
            self.upstream = upstream
            self.attack = attack
        }
    }

    private let state: State
    public let upstream: URL
    /// The attacker's own root (for `foreign-root`).
    public let attackerRoot: RootSigningKey
    private let attackerSigner: ResponseSigner
    private let expiredSigner: ResponseSigner
    private let stolenSigner: ResponseSigner
    private let entitlement: String
    private let otherUser: String

    public init(configuration: Configuration) throws {
        upstream = configuration.upstream
        state = State(attack: configuration.attack, unavailable: (configuration.unavailableCount, configuration.unavailableStatus))
        attackerRoot = RootSigningKey()
        attackerSigner = ResponseSigner(key: try attackerRoot.issueIntermediate(validForDays: 30))
        let expired =
            try configuration.expiredIntermediate
            ?? attackerRoot.issueIntermediate(expirationDays: UInt32(Date().timeIntervalSince1970 / 86_400) - 2)
        expiredSigner = ResponseSigner(key: expired)
        stolenSigner = configuration.stolenIntermediate.map { ResponseSigner(key: $0) } ?? attackerSigner
        entitlement = configuration.entitlement
        otherUser = configuration.otherUser
    }

    /// Switches to `unavailable`: the next `count` requests get `status` (503 or 429).
    public func failNext(_ count: Int, status: Int = 503) {
        state.setUnavailable(count: count, status: status)
    }

    /// The attack in force; tests switch it between requests.
    public var attack: Attack {
        get { state.attack }
        set { state.attack = newValue }
    }

    public func makeApplication(
        host: String, port: Int, logger: Logger? = nil, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let router = Router()
        for method in [HTTPRequest.Method.get, .post, .put, .delete, .patch] {
            router.on("**", method: method) { request, context in
                try await self.handle(request, context: context)
            }
        }
        var defaultLogger = Logger(label: "countersign.proxy")
        defaultLogger.logLevel = .warning
        let logger = logger ?? defaultLogger
        return Application(
            router: router,
            configuration: .init(address: .hostname(host, port: port), serverName: "CountersignProxy"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger
        )
    }

    /// A request the proxy saw (what the client sent).
    public struct SeenRequest: Sendable, Hashable {
        public var method: String
        public var path: String
        /// The `X-ETag` the client sent, if any.
        public var etag: String?
        /// The status of the answer before any tampering.
        public var upstreamStatus: Int
    }

    /// Every request seen so far, oldest first.
    public var seenRequests: [SeenRequest] { state.seen }

    /// An upstream answer, or one the proxy made up.
    struct Answer {
        var status: HTTPResponse.Status
        var headers: HTTPFields
        var body: Data
    }

    func handle(_ request: Request, context: some RequestContext) async throws -> Response {
        var request = request
        let body = Data(try await request.collectBody(upTo: 1 << 20).readableBytesView)
        let path = request.uri.path
        var answer: Answer
        let attack = state.attack
        do {
            switch attack {
            case .serverDown:
                answer = Answer(
                    status: .serviceUnavailable, headers: [.contentType: "application/json"],
                    body: Data(#"{"code":5030,"message":"service unavailable"}"#.utf8))
            case .unavailable where state.takeUnavailable():
                answer =
                    state.unavailableStatus == 429
                    ? Answer(
                        status: .tooManyRequests, headers: [.contentType: "application/json"],
                        body: Data(#"{"code":4290,"message":"too many requests"}"#.utf8))
                    : Answer(
                        status: .serviceUnavailable, headers: [.contentType: "application/json"],
                        body: Data(#"{"code":5030,"message":"service unavailable"}"#.utf8))
            case .forgeRefusal:
                answer = Answer(
                    status: .unprocessableContent, headers: [.contentType: "application/json"],
                    body: Data(#"{"code":4201,"message":"fetch_token is not a valid signed transaction"}"#.utf8))
            case .replay:
                if let recorded = state.recorded(path) {
                    answer = recorded
                } else {
                    // The attacker's own earlier request: another nonce.
                    var headers = request.headers
                    headers[Self.nonce] = SignedRequestParts.makeNonce().base64EncodedString()
                    answer = try await forward(request.method, request.uri.description, headers: headers, body: body)
                    state.record(answer, for: path)
                }
            case .crossUser where request.method == .get && Self.isCustomerInfoPath(path):
                answer = try await forward(
                    .get, "/v1/subscribers/\(otherUser.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? otherUser)",
                    headers: request.headers, body: body)
            case .forge304:
                // The server is asked without the client's ETag, so it answers a full 200 (as it would
                // for a changed customer); the proxy turns that into a 304 to keep the client on its cache.
                var headers = request.headers
                headers[Self.etag] = nil
                answer = try await forward(request.method, request.uri.description, headers: headers, body: body)
            case .swapPath where path.hasPrefix("/v1/subscribers/"):
                answer = try await forward(
                    request.method, Self.respelled(path) + (request.uri.query.map { "?" + $0 } ?? ""), headers: request.headers, body: body)
            case .stripPolicy:
                var headers = request.headers
                headers[Self.acceptPolicy] = nil
                answer = try await forward(request.method, request.uri.description, headers: headers, body: body)
            default:
                answer = try await forward(request.method, request.uri.description, headers: request.headers, body: body)
            }
        } catch {
            // An upstream that is down or answers nonsense: a 502, never a crash of the proxy.
            answer = Answer(
                status: .badGateway, headers: [.contentType: "application/json"],
                body: Data(#"{"code":5020,"message":"upstream failed"}"#.utf8))
        }
        state.log(SeenRequest(method: request.method.rawValue, path: path, etag: request.headers[Self.etag], upstreamStatus: Int(answer.status.code)))
        if answer.status.code < 300 || answer.status == .notModified {
            try tamper(&answer, attack: attack, request: request)
        }
        var headers = answer.headers
        headers[.contentLength] = nil
        headers[.transferEncoding] = nil
        headers[.connection] = nil
        return Response(status: answer.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: answer.body)))
    }

    func tamper(_ answer: inout Answer, attack: Attack, request: Request) throws {
        switch attack {
        case .none, .replay, .crossUser, .swapPath, .serverDown, .forgeRefusal, .unavailable, .stripPolicy:
            break
        case .forgePolicy:
            guard let policy = answer.headers[Self.policy] else { return }
            answer.headers[Self.policy] = policy == "none" ? "mode=informational;rollout=0;sdk=0.0.0;seed=0000000000000000;expires=1" : "none"
        case .grantEntitlement:
            answer.body = grantingEntitlement(answer.body)
        case .stripSignature:
            answer.headers[Self.signature] = nil
        case .truncateSignature:
            if let signature = answer.headers[Self.signature] { answer.headers[Self.signature] = String(signature.prefix(signature.count / 2)) }
        case .dropRequestTime:
            answer.headers[Self.requestTime] = nil
        case .digitShift:
            // Only a request time ending in a digit can be shifted; anything else is left as it came.
            guard var time = answer.headers[Self.requestTime], let digit = time.popLast(), let byte = digit.asciiValue,
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            else { return }
            answer.headers[Self.requestTime] = time
            if let etag = answer.headers[Self.etag] {
                answer.headers[Self.etag] = String(digit) + etag
            } else {
                answer.body = Data([byte]) + answer.body
            }
        case .foreignRoot, .expiredIntermediate:
            answer.body = grantingEntitlement(answer.body)
            let signer = attack == .foreignRoot ? attackerSigner : expiredSigner
            try resign(&answer, with: signer, request: request)
        case .futureTime:
            // The largest request time a client accepts (16 digits) is far past any expiry; 2286 will do.
            try resign(&answer, with: stolenSigner, request: request, requestTime: "9999999999999", keepingETag: true)
        case .forge304:
            var headers = answer.headers
            headers[Self.etag] = (0..<16).map { _ in String("0123456789abcdef".randomElement()!) }.joined()
            headers[.contentType] = nil
            answer = Answer(status: .notModified, headers: headers, body: Data())
        }
    }

    /// Signs `answer` for the request the client sent, as an attacker holding `signer` would.
    /// `keepingETag`: the body is the server's, so its `X-ETag` (a 304's included) still names it.
    func resign(_ answer: inout Answer, with signer: ResponseSigner, request: Request, requestTime: String? = nil, keepingETag: Bool = false) throws {
        let bearer = request.headers[.authorization].map { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : $0 } ?? ""
        let parts = SignedRequestParts(
            authValue: request.uri.path == "/v1/health" ? "" : bearer,
            nonce: request.headers[Self.nonce].flatMap { Data(base64Encoded: $0) },
            path: request.uri.path,
            postParamsHash: request.headers[Self.postParamsHash],
            headersHash: request.headers[Self.headersHash],
            acceptsPolicy: request.headers[Self.acceptPolicy] == "1"
        )
        let requestTime = requestTime ?? String(Date().epochMilliseconds)
        let etag = keepingETag ? answer.headers[Self.etag] : answer.headers[Self.etag] == nil ? nil : String(SHA256Hex.of(answer.body).prefix(16))
        answer.headers[Self.requestTime] = requestTime
        answer.headers[Self.etag] = etag
        answer.headers[Self.signature] = try signer.signature(
            request: parts,
            response: SignedResponseParts(
                requestTime: requestTime, etag: etag, policy: parts.acceptsPolicy ? answer.headers[Self.policy] : nil, body: answer.body)
        )
    }

    /// The body with `entitlement` active until 2099 and the subscription behind it, as the
    /// attackers' scripts write them (a CustomerInfo answer); other bodies as they were.
    func grantingEntitlement(_ body: Data) -> Data {
        guard var object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
            var subscriber = object["subscriber"] as? [String: Any]
        else { return body }
        var entitlements = subscriber["entitlements"] as? [String: Any] ?? [:]
        entitlements[entitlement] = [
            "expires_date": "2099-01-01T00:00:00Z", "product_identifier": "pro_monthly", "purchase_date": "2026-01-01T00:00:00Z",
        ]
        subscriber["entitlements"] = entitlements
        var subscriptions = subscriber["subscriptions"] as? [String: Any] ?? [:]
        subscriptions["pro_monthly"] = [
            "expires_date": "2099-01-01T00:00:00Z", "purchase_date": "2026-01-01T00:00:00Z",
            "original_purchase_date": "2026-01-01T00:00:00Z", "period_type": "normal", "store": "app_store", "is_sandbox": false,
        ]
        subscriber["subscriptions"] = subscriptions
        object["subscriber"] = subscriber
        return (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? body
    }

    func forward(_ method: HTTPRequest.Method, _ pathAndQuery: String, headers: HTTPFields, body: Data) async throws -> Answer {
        var upstreamRequest = HTTPClientRequest(url: upstream.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + pathAndQuery)
        upstreamRequest.method = HTTPMethod(rawValue: method.rawValue)
        for field in headers where ![.contentLength, .connection, .transferEncoding].contains(field.name) && field.name.canonicalName != "host" {
            upstreamRequest.headers.add(name: field.name.rawName, value: field.value)
        }
        if !body.isEmpty { upstreamRequest.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(upstreamRequest, timeout: .seconds(30))
        var fields = HTTPFields()
        for header in response.headers {
            if let name = HTTPField.Name(header.name) { fields.append(HTTPField(name: name, value: header.value)) }
        }
        let data = Data(try await response.body.collect(upTo: 1 << 22).readableBytesView)
        return Answer(status: HTTPResponse.Status(code: Int(response.status.code)), headers: fields, body: data)
    }

    static func isCustomerInfoPath(_ path: String) -> Bool {
        let parts = path.split(separator: "/")
        return parts.count == 3 && parts[0] == "v1" && parts[1] == "subscribers" && parts[2] != "identify"
    }

    /// `/v1/subscribers/u1` → `/v1/subscribers/%75%31`: the same user, another spelling.
    static func respelled(_ path: String) -> String {
        var parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 4, let id = parts[3].removingPercentEncoding else { return path }
        parts[3] = id.utf8.map { String(format: "%%%02X", $0) }.joined()
        return parts.joined(separator: "/")
    }

    static let signature = HTTPField.Name(WireHeader.signature)!
    static let requestTime = HTTPField.Name(WireHeader.requestTime)!
    static let etag = HTTPField.Name(WireHeader.etag)!
    static let nonce = HTTPField.Name(WireHeader.nonce)!
    static let acceptPolicy = HTTPField.Name(WireHeader.acceptPolicy)!
    static let policy = HTTPField.Name(WireHeader.policy)!
    static let postParamsHash = HTTPField.Name(WireHeader.postParamsHash)!
    static let headersHash = HTTPField.Name(WireHeader.headersHash)!

    /// The attack in force and the answers recorded for `replay`.
    final class State: @unchecked Sendable {
        private let lock = NSLock()
        private var current: Attack
        private var answers: [String: Answer] = [:]
        private var requests: [SeenRequest] = []
        private var unavailable: (count: Int, status: Int)
        private var unavailableLeft: Int

        init(attack: Attack, unavailable: (count: Int, status: Int)) {
            current = attack
            self.unavailable = unavailable
            unavailableLeft = unavailable.count
        }

        var attack: Attack {
            get { lock.withLock { current } }
            set {
                lock.withLock {
                    current = newValue; answers = [:]; unavailableLeft = unavailable.count
                }
            }
        }

        var unavailableStatus: Int { lock.withLock { unavailable.status } }

        /// Whether this request is one of those `unavailable` refuses (counting it).
        func takeUnavailable() -> Bool {
            lock.withLock {
                guard unavailableLeft > 0 else { return false }
                unavailableLeft -= 1
                return true
            }
        }

        func setUnavailable(count: Int, status: Int) {
            lock.withLock {
                unavailable = (count, status); unavailableLeft = count; current = .unavailable; answers = [:]
            }
        }

        func recorded(_ path: String) -> Answer? { lock.withLock { answers[path] } }
        func log(_ request: SeenRequest) { lock.withLock { requests.append(request) } }
        var seen: [SeenRequest] { lock.withLock { requests } }
        func record(_ answer: Answer, for path: String) { lock.withLock { answers[path] = answer } }
    }
}
