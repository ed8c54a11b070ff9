import CountersignAppStore
import CountersignAppStoreServerAPI
import Foundation
import Hummingbird
import JWTKit

/// A local stand-in for the App Store Server API, answering with data signed by a test store CA.
///
/// It checks bearer tokens as Apple does (ES256 with the In-App Purchase Key, audience
/// `appstoreconnect-v1`, the app's bundle id, not expired) and can be told to rate-limit.
public actor AppStoreServerStandIn {
    public let ca: TestStoreCA
    public let bundleId: String
    /// History pages hold this many transactions, so tests see pagination.
    public let pageSize = 2
    private let keys: JWTKeyCollection
    private var transactions: [(payload: TransactionPayload, jws: String)] = []
    private var rateLimited: (remaining: Int, retryAfter: Int) = (0, 0)
    private var failing = 0
    private var delay: Duration = .zero
    public private(set) var requestCount = 0
    /// The consumption information sent, by transaction id, in the order it came.
    public private(set) var consumptionAnswers: [(transactionId: String, body: ConsumptionRequest)] = []

    public init(ca: TestStoreCA, bundleId: String, apiKeyPEM: String) async throws {
        self.ca = ca
        self.bundleId = bundleId
        keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PrivateKey(pem: apiKeyPEM).publicKey)
    }

    /// Mints a transaction the stand-in will answer for, signed now (as Apple signs what the API
    /// returns when it is asked, whenever the purchase was made).
    @discardableResult
    public func add(_ purchase: TestStoreCA.Purchase) throws -> TransactionPayload {
        let (jws, payload) = try ca.mintTransaction(purchase, signedDate: Date())
        transactions.append((payload, jws))
        return payload
    }

    /// The signed copy the stand-in holds of a transaction.
    public func signed(_ transactionId: String) -> String? {
        find(transactionId)?.jws
    }

    /// Apple refunds a transaction: its stored copy is replaced by one with a revocation date.
    public func refund(_ transactionId: String) throws {
        guard let index = transactions.firstIndex(where: { $0.payload.transactionId == transactionId }) else { return }
        let refunded = try ca.mintRefund(of: transactions[index].payload, now: Date())
        transactions[index] = (refunded.payload, refunded.jws)
    }

    /// Answers the next `count` requests with 429 and `Retry-After: retryAfter`.
    public func rateLimitNext(_ count: Int, retryAfter: Int) {
        rateLimited = (count, retryAfter)
    }

    /// Answers the next `count` lookups with a 500, as Apple's servers sometimes do.
    public func failNext(_ count: Int) {
        failing = count
    }

    /// Waits this long before answering each lookup (a slow network, for tests that stop a
    /// client midway).
    public func answerAfter(_ delay: Duration) {
        self.delay = delay
    }

    /// The Hummingbird application serving the stand-in.
    public nonisolated func makeApplication() -> some ApplicationProtocol {
        let router = Router()
        router.get("/inApps/v1/transactions/:id") { request, context in
            try await self.answer(request, context) { id in try await self.transactionInfo(id) }
        }
        router.get("/inApps/v2/history/:id") { request, context in
            try await self.answer(request, context) { id in
                try await self.history(id, revision: request.uri.queryParameters.get("revision"))
            }
        }
        router.get("/inApps/v1/subscriptions/:id") { request, context in
            try await self.answer(request, context) { id in try await self.statuses(id) }
        }
        router.put("/inApps/v2/transactions/consumption/:id") { request, context in
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            return try await self.consumption(
                id: context.parameters.get("id") ?? "", body: Data(body.readableBytesView), authorization: request.headers[.authorization])
        }
        return Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
    }

    private nonisolated func answer(
        _ request: Request, _ context: some RequestContext, _ body: @Sendable (String) async throws -> Data?
    ) async throws -> Response {
        if let limited = await takeRateLimit() {
            return Self.response(
                .tooManyRequests, APIErrorBody(errorCode: 4_290_000, errorMessage: "Rate limit exceeded."), headers: [.retryAfter: "\(limited)"])
        }
        try await Task.sleep(for: await delay)
        if await takeFailure() {
            return Self.response(.internalServerError, APIErrorBody(errorCode: 5_000_000, errorMessage: "An unknown error occurred."))
        }
        guard await isAuthorized(request.headers[.authorization]) else {
            return Response(status: .unauthorized)
        }
        let id = context.parameters.get("id") ?? ""
        guard let data = try await body(id) else {
            return Self.response(.notFound, APIErrorBody(errorCode: 4_040_010, errorMessage: "Transaction id not found."))
        }
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// Send Consumption Information as Apple answers it: 202 for a known transaction with a
    /// valid body, 400 for a body Apple refuses (consent other than true, a value out of its set),
    /// 404 for an unknown transaction.
    private func consumption(id: String, body: Data, authorization: String?) async throws -> Response {
        if let limited = takeRateLimit() {
            return Self.response(
                .tooManyRequests, APIErrorBody(errorCode: 4_290_000, errorMessage: "Rate limit exceeded."), headers: [.retryAfter: "\(limited)"])
        }
        guard await isAuthorized(authorization) else { return Response(status: .unauthorized) }
        guard let sent = try? JSONDecoder().decode(ConsumptionRequest.self, from: body), sent.customerConsented,
            Self.deliveryStatuses.contains(sent.deliveryStatus),
            sent.refundPreference.map(Self.refundPreferences.contains) ?? true,
            sent.consumptionPercentage.map((0...100_000).contains) ?? true
        else {
            return Self.response(.badRequest, APIErrorBody(errorCode: 4_000_000, errorMessage: "Invalid request."))
        }
        guard find(id) != nil else {
            return Self.response(.notFound, APIErrorBody(errorCode: 4_040_010, errorMessage: "Transaction id not found."))
        }
        consumptionAnswers.append((id, sent))
        return Response(status: .accepted)
    }

    static let deliveryStatuses: Set = [
        "DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE", "UNDELIVERED_OTHER",
    ]
    static let refundPreferences: Set = ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"]

    private static func response(_ status: HTTPResponse.Status, _ body: APIErrorBody, headers: HTTPFields = [:]) -> Response {
        var fields = headers
        fields[.contentType] = "application/json"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: try! JSONEncoder().encode(body))))
    }

    private func takeRateLimit() -> Int? {
        requestCount += 1
        guard rateLimited.remaining > 0 else { return nil }
        rateLimited.remaining -= 1
        return rateLimited.retryAfter
    }

    private func takeFailure() -> Bool {
        guard failing > 0 else { return false }
        failing -= 1
        return true
    }

    private func isAuthorized(_ header: String?) async -> Bool {
        guard let header, header.hasPrefix("Bearer ") else { return false }
        guard let claims = try? await keys.verify(String(header.dropFirst(7)), as: AppStoreServerAPIClaims.self) else { return false }
        return claims.bid == bundleId && !claims.iss.value.isEmpty
    }

    private func find(_ id: String) -> (payload: TransactionPayload, jws: String)? {
        transactions.first { $0.payload.transactionId == id }
    }

    private func transactionInfo(_ id: String) throws -> Data? {
        guard let found = find(id) else { return nil }
        return try JSONEncoder().encode(TransactionInfoResponse(signedTransactionInfo: found.jws))
    }

    /// The customer's history: here, every transaction of the same purchase chain, in pages.
    private func history(_ id: String, revision: String?) throws -> Data? {
        guard let found = find(id) else { return nil }
        let chain = transactions.filter { $0.payload.originalTransactionId == found.payload.originalTransactionId }
        let start = revision.flatMap(Int.init) ?? 0
        let page = chain.dropFirst(start).prefix(pageSize)
        let next = start + page.count
        return try JSONEncoder().encode(
            HistoryResponse(
                revision: String(next), hasMore: next < chain.count, bundleId: bundleId, environment: .testStore,
                signedTransactions: page.map(\.jws)
            ))
    }

    /// The latest transaction of each purchase chain, with a renewal info, grouped by subscription group.
    private func statuses(_ id: String) throws -> Data? {
        guard find(id) != nil else { return nil }
        let now = Date()
        var latest: [String: (payload: TransactionPayload, jws: String)] = [:]
        for transaction in transactions where transaction.payload.expiresDate != nil {
            let key = transaction.payload.originalTransactionId ?? ""
            if (latest[key]?.payload.purchaseDate ?? .distantPast) <= (transaction.payload.purchaseDate ?? .distantPast) {
                latest[key] = transaction
            }
        }
        let last = try latest.values.sorted { ($0.payload.originalTransactionId ?? "") < ($1.payload.originalTransactionId ?? "") }.map { item in
            let renewal = try ca.sign(
                RenewalInfoPayload(
                    originalTransactionId: item.payload.originalTransactionId ?? "", productId: item.payload.productId ?? "",
                    environment: .testStore, signedDate: now
                ))
            let active = (item.payload.expiresDate ?? .distantPast) > now
            return StatusResponse.LastTransaction(
                status: active ? 1 : 2, originalTransactionId: item.payload.originalTransactionId,
                signedTransactionInfo: item.jws, signedRenewalInfo: renewal
            )
        }
        return try JSONEncoder().encode(
            StatusResponse(
                environment: .testStore, bundleId: bundleId,
                data: [StatusResponse.SubscriptionGroup(subscriptionGroupIdentifier: "default", lastTransactions: last)]
            ))
    }
}
