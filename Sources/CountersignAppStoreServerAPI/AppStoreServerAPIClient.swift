import AsyncHTTPClient
import CountersignAppStore
import Foundation
import NIOCore
import NIOHTTP1

/// A client of the App Store Server API: transaction info, transaction history and subscription
/// statuses. Answers carry signed data; verify it with a ``SignedDataVerifier`` before trusting it.
public final class AppStoreServerAPIClient: Sendable {
    public struct Configuration: Sendable {
        /// `https://api.storekit.itunes.apple.com` (Production) or
        /// `https://api.storekit-sandbox.itunes.apple.com` (Sandbox), or a stand-in for tests.
        public var baseURL: String
        /// The In-App Purchase Key (.p8 file contents, PEM).
        public var privateKeyPEM: String
        public var keyId: String
        public var issuerId: String
        public var bundleId: String
        /// How long a bearer token lives (Apple allows at most an hour).
        public var tokenLifetime: TimeInterval = 20 * 60
        /// Per-request timeout.
        public var timeout: TimeAmount = .seconds(30)
        public var now: @Sendable () -> Date = { Date() }

        public static let productionURL = "https://api.storekit.itunes.apple.com"
        public static let sandboxURL = "https://api.storekit-sandbox.itunes.apple.com"

        public init(baseURL: String, privateKeyPEM: String, keyId: String, issuerId: String, bundleId: String) {
            self.baseURL = baseURL
            self.privateKeyPEM = privateKeyPEM
            self.keyId = keyId
            self.issuerId = issuerId
            self.bundleId = bundleId
        }
    }

    public let configuration: Configuration
    private let httpClient: HTTPClient
    private let tokens: AppStoreServerAPITokenSource

    public init(configuration: Configuration, httpClient: HTTPClient = .shared) async throws {
        self.configuration = configuration
        self.httpClient = httpClient
        tokens = try await AppStoreServerAPITokenSource(
            privateKeyPEM: configuration.privateKeyPEM, keyId: configuration.keyId, issuerId: configuration.issuerId,
            bundleId: configuration.bundleId, lifetime: configuration.tokenLifetime, now: configuration.now
        )
    }

    /// Get Transaction Info: the signed transaction for any transaction id of the customer.
    public func transactionInfo(transactionId: String) async throws(AppStoreServerAPIError) -> TransactionInfoResponse {
        try await get("/inApps/v1/transactions/\(try Self.pathComponent(transactionId))")
    }

    /// Get Transaction History (v2), one page; pass the previous page's `revision` to continue.
    public func transactionHistory(transactionId: String, revision: String? = nil) async throws(AppStoreServerAPIError) -> HistoryResponse {
        var path = "/inApps/v2/history/\(try Self.pathComponent(transactionId))"
        if let revision {
            path += "?revision=\(revision.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed.subtracting(["&", "=", "+"])) ?? revision)"
        }
        return try await get(path)
    }

    /// Every page of the transaction history.
    public func allTransactions(transactionId: String) async throws(AppStoreServerAPIError) -> [String] {
        var transactions: [String] = []
        var revision: String?
        repeat {
            let page = try await transactionHistory(transactionId: transactionId, revision: revision)
            transactions += page.signedTransactions
            guard page.hasMore else { break }
            revision = page.revision
        } while revision != nil
        return transactions
    }

    /// Get All Subscription Statuses for the subscriptions of a transaction's customer.
    public func subscriptionStatuses(transactionId: String) async throws(AppStoreServerAPIError) -> StatusResponse {
        try await get("/inApps/v1/subscriptions/\(try Self.pathComponent(transactionId))")
    }

    /// Send Consumption Information: answers a `CONSUMPTION_REQUEST` about `transactionId` (the
    /// transaction the notification names). Apple answers 202 Accepted.
    public func sendConsumptionInformation(transactionId: String, _ request: ConsumptionRequest) async throws(AppStoreServerAPIError) {
        let body: Data
        do {
            body = try JSONEncoder().encode(request)
        } catch {
            throw AppStoreServerAPIError(.badRequest, message: "the consumption request cannot be encoded")
        }
        _ = try await send(.PUT, "/inApps/v2/transactions/consumption/\(try Self.pathComponent(transactionId))", body: body)
    }

    /// Transaction ids are digits; anything else is refused before it reaches a URL.
    static func pathComponent(_ transactionId: String) throws(AppStoreServerAPIError) -> String {
        guard !transactionId.isEmpty, transactionId.count <= 64, transactionId.allSatisfy(\.isASCII), transactionId.allSatisfy({ $0.isNumber }) else {
            throw AppStoreServerAPIError(.badRequest, message: "transaction id must be digits")
        }
        return transactionId
    }

    private func get<Response: Decodable>(_ path: String) async throws(AppStoreServerAPIError) -> Response {
        let bytes = try await send(.GET, path, body: nil)
        do {
            return try JSONDecoder().decode(Response.self, from: bytes)
        } catch {
            throw AppStoreServerAPIError(.invalidResponse, message: "answer is not a valid \(Response.self)")
        }
    }

    /// Sends one request with a fresh bearer token; the body of a 2xx answer, or the error.
    private func send(_ method: HTTPMethod, _ path: String, body: Data?) async throws(AppStoreServerAPIError) -> Data {
        let token: String
        do {
            token = try await tokens.token()
        } catch {
            throw AppStoreServerAPIError(.unauthorized, message: "cannot sign a bearer token: \(error)")
        }
        var request = HTTPClientRequest(url: configuration.baseURL + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "User-Agent", value: "Countersign")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response: HTTPClientResponse
        let body: ByteBuffer
        do {
            response = try await httpClient.execute(request, timeout: configuration.timeout)
            body = try await response.body.collect(upTo: 8 * 1024 * 1024)
        } catch {
            throw AppStoreServerAPIError(.transport, message: "\(error)")
        }
        let bytes = Data(body.readableBytesView)
        guard response.status.code / 100 == 2 else {
            if response.status == .unauthorized { await tokens.invalidate() }
            throw Self.error(status: response.status, headers: response.headers, body: bytes)
        }
        return bytes
    }

    static func error(status: HTTPResponseStatus, headers: HTTPHeaders, body: Data) -> AppStoreServerAPIError {
        let apiError = try? JSONDecoder().decode(APIErrorBody.self, from: body)
        let message = apiError?.errorMessage ?? "HTTP \(status.code)"
        let kind: AppStoreServerAPIError.Kind
        switch status.code {
        case 400: kind = .badRequest
        case 401: kind = .unauthorized
        case 404: kind = .notFound
        case 429: kind = .rateLimited(retryAfter: headers.first(name: "Retry-After").flatMap(retryAfterSeconds))
        default: kind = .server(status: Int(status.code))
        }
        return AppStoreServerAPIError(kind, apiErrorCode: apiError?.errorCode, message: message)
    }

    /// `Retry-After` as seconds, or as an HTTP date (RFC 9110 section 10.2.3).
    static func retryAfterSeconds(_ value: String) -> TimeInterval? {
        if let seconds = TimeInterval(value.trimmingCharacters(in: .whitespaces)), seconds >= 0 { return seconds }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: value).map { max(0, $0.timeIntervalSinceNow) }
    }
}
