import CountersignCore
import Foundation

/// An entitlement token held for reuse.
struct EntitlementTokenCache: Sendable {
    var user: String
    var token: String
    var issuedAt: Date
    var expiresAt: Date

    /// Reused until four fifths of its life have passed, so the backend never gets one about to lapse.
    func isFresh(at date: Date) -> Bool {
        date < issuedAt.addingTimeInterval(expiresAt.timeIntervalSince(issuedAt) * 0.8)
    }
}

extension Purchases {
    /// The mode answers are judged by now: the one the app was built with, or `enforced` while
    /// a verification policy from a verified answer puts this user in its rollout (docs/sdk.md,
    /// "Verification policy").
    public var verificationMode: EntitlementVerificationMode { backend.currentMode }

    /// A short-lived token of the current user's entitlements for the app's own backend, which
    /// checks it offline with the root key alone (docs/entitlement-tokens.md). `audience` is one
    /// of the app's `entitlementTokens.audiences`. The same token is handed out again while it is
    /// fresh and the customer's entitlements have not changed.
    ///
    /// None is handed out that did not verify: an answer that failed verification throws
    /// ``PurchasesError/signatureVerificationFailed(path:statusCode:reason:)`` in both verifying
    /// modes (a token cannot carry a `failed` mark the way a CustomerInfo does), and the token
    /// itself must chain to a pinned root and name this user and `audience`, or
    /// ``PurchasesError/malformedAnswer(path:)`` is thrown. With verification disabled the
    /// server's token is handed out as it came; the backend checks it either way.
    public func entitlementToken(audience: String) async throws -> String {
        let user = appUserID
        let now = configuration.now()
        if let cached = state.withLock({ $0.entitlementTokens[audience] }), cached.user == user, cached.isFresh(at: now) {
            return cached.token
        }
        let path = "/v1/subscribers/\(user.pathSegmentEncoded)/entitlement_token"
        let answer = try await backend.perform(.post(path, [("audience", audience)], retryable: true))
        guard let body = try? JSONValue.parseObject(answer.body), case .string(let token)? = body["token"] else {
            throw PurchasesError.malformedAnswer(path: path)
        }
        // A token is a string the app passes on: it cannot carry a `failed` mark, so one from an
        // answer that did not verify is never handed out, in either verifying mode.
        if answer.verification == .failed {
            throw PurchasesError.signatureVerificationFailed(path: path, statusCode: answer.status, reason: answer.failure ?? .payloadMismatch)
        }
        var lifetime: TimeInterval = 60
        if let signatures = backend.verifier {
            // The token must hold on its own too. Its times are the backend's to judge: a device
            // clock a few hours off must not refuse a good token here.
            let verifier = EntitlementTokenVerifier(
                rootKeys: signatures.configuration.rootKeys, audience: audience, leeway: 86_400, now: configuration.now)
            guard let claims = try? verifier.verify(token), claims.subject == user else {
                throw PurchasesError.malformedAnswer(path: path)
            }
            lifetime = TimeInterval(claims.expiresAt - claims.issuedAt)
        }
        // Its life counted from now on the device clock, whatever that clock says the time is.
        let entry = EntitlementTokenCache(user: user, token: token, issuedAt: now, expiresAt: now.addingTimeInterval(lifetime))
        state.withLock { state in
            if state.appUserID == user { state.entitlementTokens[audience] = entry }
        }
        return token
    }
}
