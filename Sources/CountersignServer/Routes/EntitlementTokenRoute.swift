import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import Hummingbird

/// `POST /v1/subscribers/{app_user_id}/entitlement_token`: a short-lived token of what the
/// customer is entitled to, for the app's own backend (docs/entitlement-tokens.md). Signed by the
/// intermediate that signs the answer, so the token and its answer share one chain.
extension PublicRoutes {
    /// The body: the backend the token is for, one of the app's configured audiences.
    struct EntitlementTokenRequest: PostBody {
        var audience: String

        var postParams: [(String, String?)] { [("audience", audience)] }
    }

    struct EntitlementTokenAnswer: Encodable {
        var token: String
        var expiresAtMs: Int64

        enum CodingKeys: String, CodingKey {
            case token, expiresAtMs = "expires_at_ms"
        }
    }

    func entitlementToken(_ app: AppConfiguration, _ body: EntitlementTokenRequest, _ context: SignedRequestContext) async throws
        -> SignedAnswer
    {
        let user = try AppUserIDRules.validated(context.parameters.get("app_user_id") ?? "", percentEncoded: true)
        guard let settings = app.entitlementTokens else {
            throw APIError(.entitlementTokensUnavailable, "app '\(app.id)' issues no entitlement tokens (entitlementTokens in countersign.json)")
        }
        guard settings.audiences.contains(body.audience) else {
            throw APIError(
                .entitlementTokensUnavailable, "audience '\(body.audience.prefix(100))' is not one of app '\(app.id)''s entitlementTokens.audiences")
        }
        let now = context.now
        let info = try await store.customerInfo(app: app, user: user, now: now)
        let key = context.exchange.signer.key
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        // An entitlement ending within this second is ended for the token (exp is whole seconds).
        let entitlements = EntitlementToken.activeEntitlements(of: info.subscriber, at: now).filter { entitlement in
            entitlement.expiresMilliseconds.map { $0 / 1000 > issuedAt } ?? true
        }
        let claims = EntitlementToken.Claims(
            issuer: issuer, subject: user, audience: body.audience, app: app.id, entitlements: entitlements, issuedAt: issuedAt,
            expiresAt: EntitlementToken.expiry(
                issuedAt: issuedAt, lifetime: settings.lifetime, entitlements: entitlements, intermediate: key.certificate),
            id: UUID().uuidString.lowercased())
        metrics.recordEntitlementToken()
        return try SignedAnswer.json(
            EntitlementTokenAnswer(token: try EntitlementToken.sign(claims, with: key), expiresAtMs: claims.expiresAt * 1000), cacheable: false)
    }
}
