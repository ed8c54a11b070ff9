import Foundation
import Hummingbird

/// Stripe's API as far as the server reads it (`GET /v1/…`): the objects a test sets, by path,
/// as Stripe's API reference shows them, and 404 for anything else. For the lifecycle cases
/// localstripe (the stand-in `scripts/stripe-check.py` runs) cannot put a subscription into: a
/// renewal, a failed payment, a refunded charge of an invoice, a dispute.
public actor StripeAPIStandIn {
    private var objects: [String: String] = [:]

    public init() {}

    /// Serves `json` at `path` (`/v1/subscriptions/sub_1`) from now on.
    public func set(_ path: String, _ json: String) { objects[path] = json }

    private func object(_ path: String) -> String? { objects[path] }

    public nonisolated func makeApplication() -> some ApplicationProtocol {
        let router = Router()
        router.get("/v1/**") { request, _ -> Response in
            let json = await self.object(request.uri.path)
            let body = json ?? #"{"error":{"type":"invalid_request_error","message":"No such object"}}"#
            return Response(
                status: json == nil ? .notFound : .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        return Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
    }

    /// A subscription of `price_monthly` (999 US cents a month) for `user` (its metadata's
    /// `app_user_id`; none when nil, as bought on the web without one), of customer
    /// `cus_<user or id>`, test mode, as Stripe's API reference shows one; `created` is its
    /// `start_date` (its first period's start; `start` when nil).
    public static func subscription(
        _ id: String, user: String?, status: String = "active", start: Date, end: Date, created: Date? = nil, price: String = "price_monthly",
        amount: Int = 999
    ) -> String {
        """
        {"id":"\(id)","object":"subscription","customer":"cus_\(user ?? id)","status":"\(status)","cancel_at_period_end":false,
         "current_period_start":\(Int(start.timeIntervalSince1970)),"current_period_end":\(Int(end.timeIntervalSince1970)),
         "start_date":\(Int((created ?? start).timeIntervalSince1970)),"livemode":false,"metadata":{\(user.map { #""app_user_id":"\#($0)""# } ?? "")},
         "items":{"object":"list","data":[{"id":"si_\(id)","price":{"id":"\(price)","product":"prod_\(price)","unit_amount":\(amount),"currency":"usd"}}]}}
        """
    }

    /// A customer with `email`, served at `/v1/customers/<id>`.
    public static func customer(_ id: String, email: String) -> String {
        #"{"id":"\#(id)","object":"customer","email":"\#(email)","livemode":false}"#
    }
}
