import CountersignCore
import Foundation

/// A redemption link of a web purchase (`<scheme>://redeem_web_purchase?redemption_token=…`),
/// as RevenueCat's `WebPurchaseRedemption`: made from the URL the app was opened with
/// (``Purchases/parseAsWebPurchaseRedemption(_:)`` or `url.asWebPurchaseRedemption`), then
/// redeemed with ``Purchases/redeemWebPurchase(_:)``.
public struct WebPurchaseRedemption: Sendable, Hashable {
    /// The link's one-time token.
    public let redemptionToken: String
}

/// How a redemption ended, RevenueCat's `WebPurchaseRedemptionResult` case for case.
public enum WebPurchaseRedemptionResult: Sendable {
    /// Redeemed: the purchase is the current user's, and this is their CustomerInfo.
    case success(_ customerInfo: CustomerInfo)
    /// Anything else that went wrong (offline, an answer that failed verification in enforced
    /// mode, the server's refusal for another reason).
    case error(_ error: PurchasesError)
    /// Not a token the server made, or one this user used already: a link works once.
    case invalidToken
    /// The link was redeemed by another app user, or the purchase stays with another user.
    case purchaseBelongsToOtherUser
    /// The link is past its hour; the buyer's email, obfuscated, says where to get a new one.
    case expired(_ obfuscatedEmail: String)
}

extension URL {
    /// The redemption link this URL is, if it is one (RevenueCat's `asWebPurchaseRedemption`).
    public var asWebPurchaseRedemption: WebPurchaseRedemption? { Purchases.parseAsWebPurchaseRedemption(self) }
}

extension Purchases {
    /// The redemption link `url` is: host `redeem_web_purchase` and a non-empty
    /// `redemption_token` in its query, whatever its scheme (as RevenueCat's parser reads it).
    public static func parseAsWebPurchaseRedemption(_ url: URL) -> WebPurchaseRedemption? {
        guard url.host == "redeem_web_purchase",
            let token = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems?.first(where: { $0.name == "redemption_token" })?
                .value,
            !token.trimmingCharacters(in: .whitespaces).isEmpty
        else { return nil }
        return WebPurchaseRedemption(redemptionToken: token)
    }

    /// Redeems a web purchase's link for the current app user (RevenueCat's `redeemWebPurchase`):
    /// `POST /v1/subscribers/redeem_purchase`. The answer is checked as every CustomerInfo is (a
    /// nonce, the signature, the user it is about), and on success cached and delivered as one.
    /// Never throws: each outcome is a ``WebPurchaseRedemptionResult`` case. Not sent again after
    /// a lost answer: a link works once, so a second try would read as used.
    public func redeemWebPurchase(_ redemption: WebPurchaseRedemption) async -> WebPurchaseRedemptionResult {
        let user = appUserID
        let path = "/v1/subscribers/redeem_purchase"
        do {
            let answer = try await backend.performAllowingRefusal(
                .post(path, [("app_user_id", user), ("redemption_token", redemption.redemptionToken)]))
            if let refusal = answer.refusal {
                let body = try? JSONDecoder().decode(APIError.self, from: answer.body)
                switch body.flatMap({ APIErrorCode(rawValue: $0.code) }) {
                case .invalidWebRedemptionToken?: return .invalidToken
                case .purchaseBelongsToOtherUser?: return .purchaseBelongsToOtherUser
                case .expiredWebRedemptionToken?:
                    // As RevenueCat's SDK: an expiry that names no email is an error.
                    guard let email = body?.purchaseRedemptionErrorInfo?.obfuscatedEmail else { return .error(refusal) }
                    return .expired(email)
                default: return .error(refusal)
                }
            }
            let info = try remember(answer, path: path, user: user)
            deliver(info, force: true)
            return .success(info)
        } catch let error as PurchasesError {
            return .error(error)
        } catch {
            return .error(.offline("\(error)"))
        }
    }

    /// ``redeemWebPurchase(_:)`` with RevenueCat's completion, on the main actor: the
    /// CustomerInfo, or an error whose ``PurchasesError/errorCode`` says which case it was
    /// (`invalidWebPurchaseToken`, `purchaseBelongsToOtherUser`, `expiredWebPurchaseToken`, whose
    /// message names the obfuscated email).
    public func redeemWebPurchase(
        webPurchaseRedemption: WebPurchaseRedemption, completion: @escaping @Sendable (CustomerInfo?, (any Error)?) -> Void
    ) {
        Task { @MainActor in
            switch await self.redeemWebPurchase(webPurchaseRedemption) {
            case .success(let info): completion(info, nil)
            case .error(let error): completion(nil, error)
            case .invalidToken:
                completion(
                    nil, PurchasesError.server(statusCode: 403, code: APIErrorCode.invalidWebRedemptionToken.rawValue, message: "invalid token"))
            case .purchaseBelongsToOtherUser:
                completion(
                    nil,
                    PurchasesError.server(
                        statusCode: 403, code: APIErrorCode.purchaseBelongsToOtherUser.rawValue, message: "the purchase belongs to another user"))
            case .expired(let email):
                completion(
                    nil,
                    PurchasesError.server(
                        statusCode: 403, code: APIErrorCode.expiredWebRedemptionToken.rawValue,
                        message: "the link has expired; a new one goes to \(email)"))
            }
        }
    }
}
