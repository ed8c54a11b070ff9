import AsyncHTTPClient
import CountersignCore
import CountersignServerCore
import Foundation
import NIOCore
import NIOHTTP1

/// Reads an app's objects from Stripe's API with its secret key: what the server acts on is
/// always Stripe's own answer, never a client's or an event's copy.
struct StripeClient: Sendable {
    let baseURL: String
    let secretKey: String
    let httpClient: HTTPClient
    static let timeout: TimeAmount = .seconds(15)

    init?(settings: StripeSettings, httpClient: HTTPClient = .shared) {
        guard let key = settings.resolvedSecretKey() else { return nil }
        baseURL = settings.baseURL
        secretKey = key
        self.httpClient = httpClient
    }

    /// A subscription, its price expanded (Stripe's `GET /v1/subscriptions/{id}`).
    func subscription(_ id: String) async throws(APIError) -> Stripe.Subscription {
        try await get("/v1/subscriptions/\(try Self.checked(id, prefix: "sub_"))", "subscription", Stripe.Subscription.self)
    }

    func checkoutSession(_ id: String) async throws(APIError) -> Stripe.CheckoutSession {
        try await get("/v1/checkout/sessions/\(try Self.checked(id, prefix: "cs_"))", "Checkout Session", Stripe.CheckoutSession.self)
    }

    func invoice(_ id: String) async throws(APIError) -> Stripe.Invoice {
        try await get("/v1/invoices/\(try Self.checked(id, prefix: "in_"))", "invoice", Stripe.Invoice.self)
    }

    func charge(_ id: String) async throws(APIError) -> Stripe.Charge {
        try await get("/v1/charges/\(try Self.checked(id, prefix: "ch_"))", "charge", Stripe.Charge.self)
    }

    /// The invoice payments of a payment intent (`GET /v1/invoice_payments`, API versions
    /// 2025-03-31 on, where a charge no longer names its invoice).
    func invoicePayments(paymentIntent id: String) async throws(APIError) -> Stripe.List<Stripe.InvoicePayment> {
        let intent = try Self.checked(id, prefix: "pi_")
        return try await get(
            "/v1/invoice_payments?payment%5Btype%5D=payment_intent&payment%5Bpayment_intent%5D=\(intent)", "invoice payment",
            Stripe.List<Stripe.InvoicePayment>.self)
    }

    func customer(_ id: String) async throws(APIError) -> Stripe.Customer {
        try await get("/v1/customers/\(try Self.checked(id, prefix: "cus_"))", "customer", Stripe.Customer.self)
    }

    /// `id` when it is a Stripe id of the kind `prefix` names (so it is safe in a path).
    static func checked(_ id: String, prefix: String) throws(APIError) -> String {
        guard id.hasPrefix(prefix), id.utf8.count > prefix.utf8.count, StripeSettings.isToken(id) else {
            throw APIError(.invalidField, "'\(id.prefix(64))' is not a Stripe \(prefix)… id")
        }
        return id
    }

    private func get<T: Decodable>(_ path: String, _ kind: String, _ type: T.Type) async throws(APIError) -> T {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .GET
        request.headers.add(name: "Authorization", value: "Bearer \(secretKey)")
        request.headers.add(name: "User-Agent", value: "Countersign")
        let status: HTTPResponseStatus
        let body: ByteBuffer
        do {
            let response = try await httpClient.execute(request, timeout: Self.timeout)
            status = response.status
            body = try await response.body.collect(upTo: 4 * 1024 * 1024)
        } catch {
            throw APIError(.stripeAPIFailed, "Stripe's API could not be reached: \(error)")
        }
        switch status.code {
        case 200..<300:
            do {
                return try Stripe.decoder().decode(T.self, from: Data(body.readableBytesView))
            } catch {
                throw APIError(.stripeAPIFailed, "Stripe's answer to GET \(path) could not be read: \(error)")
            }
        case 404:
            // Another account's object reads as missing with this account's key.
            throw APIError(.stripeObjectNotFound, "Stripe has no \(kind) \(path.split(separator: "/").last ?? "") in this app's account")
        default:
            throw APIError(.stripeAPIFailed, "Stripe answered GET \(path) with HTTP \(status.code)")
        }
    }
}
