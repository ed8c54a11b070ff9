import CountersignAppStore
import CountersignCore
import Foundation
import HTTPTypes
import Hummingbird

/// `GET /v1/subscribers/{app_user_id}` and `POST /v1/receipts`: signed CustomerInfo answers.
struct SubscriberRoutes: Sendable {
    let signing: ResponseSigning
    let authentication: APIKeyAuthentication
    let store: PurchaseStore
    let verifiers: [String: SignedDataVerifier]
    let now: @Sendable () -> Date

    /// The body of `POST /v1/receipts`.
    struct ReceiptRequest: Decodable {
        var appUserId: String
        var fetchToken: String
        var productId: String?

        enum CodingKeys: String, CodingKey {
            case appUserId = "app_user_id"
            case fetchToken = "fetch_token"
            case productId = "product_id"
        }
    }

    /// CustomerInfo with what happened to the posted purchase.
    struct ReceiptAnswer: Encodable {
        var customerInfo: SubscriberResponse
        var purchaseStatus: PurchaseStatus

        enum CodingKeys: String, CodingKey {
            case requestDate = "request_date", requestDateMs = "request_date_ms", subscriber, purchaseStatus = "purchase_status"
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(customerInfo.requestDate, forKey: .requestDate)
            try container.encode(customerInfo.requestDateMs, forKey: .requestDateMs)
            try container.encode(customerInfo.subscriber, forKey: .subscriber)
            try container.encode(purchaseStatus, forKey: .purchaseStatus)
        }
    }

    static let receiptParamKeys = ["app_user_id", "fetch_token"]

    func add(to router: Router<ServerRequestContext>) {
        router.get("/v1/subscribers/:app_user_id") { request, context in
            try await authenticated(request, context, endpoint: SignedEndpoint(authenticated: true), body: nil) { app in
                let user = try Self.appUserId(context.parameters.get("app_user_id") ?? "", percentEncoded: true)
                return try SignedAnswer.json(try await store.customerInfo(app: app, user: user, now: now()), cacheable: true)
            }
        }
        router.post("/v1/receipts") { request, context in
            var request = request
            let body: Data
            switch await request.collectBody(context: context) {
            case .success(let collected): body = collected
            case .failure(let error): return ErrorAnswer.response(error)
            }
            let endpoint = SignedEndpoint(authenticated: true, postParamKeys: Self.receiptParamKeys)
            return try await authenticated(request, context, endpoint: endpoint, body: body) { app in
                guard let receipt = try? JSONDecoder().decode(ReceiptRequest.self, from: body) else {
                    throw APIError(.malformedJSON, "body must be a JSON object with string fields app_user_id and fetch_token")
                }
                let user = try Self.appUserId(receipt.appUserId, percentEncoded: false)
                let transaction = try await verify(receipt.fetchToken, app: app)
                let time = now()
                let status = try await store.record(transaction, app: app, poster: user, now: time)
                if status == .boundToAnotherUser {
                    throw APIError(.purchaseBoundToAnotherUser, "this purchase carries another user's app account token and stays with that user")
                }
                let info = try await store.customerInfo(app: app, user: user, now: time)
                return try SignedAnswer.json(ReceiptAnswer(customerInfo: info, purchaseStatus: status), cacheable: false)
            }
        }
    }

    private func authenticated(
        _ request: Request, _ context: ServerRequestContext, endpoint: SignedEndpoint, body: Data?,
        handler: @escaping (AppConfiguration) async throws -> SignedAnswer
    ) async throws -> Response {
        let app: AppConfiguration
        let key: String
        do {
            (app, key) = try authentication.publicApp(request)
        } catch {
            return ErrorAnswer.response(error)
        }
        return try await signing.respond(to: request, context: context, endpoint: endpoint, body: body, apiKey: key) {
            try await handler(app)
        }
    }

    /// Verifies a signed transaction for `app`, mapping store errors to API errors.
    private func verify(_ jws: String, app: AppConfiguration) async throws -> VerifiedTransaction {
        guard let verifier = verifiers[app.id] else { throw APIError(.internalError, "no store verifier for app '\(app.id)'") }
        let payload: TransactionPayload
        do {
            payload = try await verifier.verify(jws, as: TransactionPayload.self)
        } catch {
            switch error.errorClass {
            case .invalidAppIdentifier: throw APIError(.wrongApp, "the transaction is for another app: \(error.reason)")
            case .invalidEnvironment: throw APIError(.wrongEnvironment, "the transaction's environment is not accepted: \(error.reason)")
            case .invalidJWTFormat, .invalidCertificate, .verificationFailure:
                throw APIError(.invalidStoreSignature, "fetch_token is not a valid signed transaction (\(error.errorClass.rawValue))")
            }
        }
        return try VerifiedTransaction(jws: jws, payload: payload, app: app)
    }

    /// App user ids: 1 to 256 bytes of UTF-8 without control characters.
    static func appUserId(_ raw: String, percentEncoded: Bool) throws(APIError) -> String {
        guard let decoded = percentEncoded ? raw.removingPercentEncoding : raw else {
            throw APIError(.invalidAppUserId, "app user id is not valid percent-encoded UTF-8")
        }
        guard (1...256).contains(decoded.utf8.count), !decoded.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw APIError(.invalidAppUserId, "app user id must be 1 to 256 bytes without control characters")
        }
        return decoded
    }
}
