import CountersignCore
import CountersignServerCore
import Foundation
import Hummingbird

/// `POST /v1/admin/stripe/redemption_links`: the team's web backend, with the app's secret key,
/// asks for a redemption link of a web purchase made without an app user id (body
/// `{"fetch_token": "sub_…"}` or a Checkout Session's `cs_…`), to show on its success page or
/// send by email. 201 with the link, its token and its expiry (``StripeWeb/RedemptionLink``).
extension AdminRoutes {
    struct RedemptionLinkRequest: Decodable {
        var fetchToken: String

        enum CodingKeys: String, CodingKey {
            case fetchToken = "fetch_token"
        }
    }

    func addStripeRoutes(to router: RouterGroup<ServerRequestContext>) {
        route(router, .post, "/v1/admin/stripe/redemption_links") { app, request, context in
            var request = request
            let body = try await JSONBody.body(RedemptionLinkRequest.self, of: &request, context: context)
            let link = try await stripe.makeRedemptionLink(for: body.fetchToken, app: app, now: now())
            context.logger.info("redemption link made", metadata: ["app": "\(app.id)", "subscription": "\(link.subscriptionId)"])
            return try await Self.json(link, status: .created)
        }
    }
}
