/// An error answer: `{"code": <int>, "message": "..."}` with a stable code per cause. Refused
/// App Store signed data adds `store_status` (Apple's `VerificationStatus` name, as Apple's own
/// library would report it) and `store_reason` (which of our checks refused it).
public struct APIError: Error, Codable, Hashable, Sendable, CustomStringConvertible {
    public var code: Int
    public var message: String
    public var storeStatus: String?
    public var storeReason: String?
    /// Seconds to wait before asking again, sent as `Retry-After` (not in the body).
    public var retryAfter: Int?
    /// Each subscriber attribute a batch could not store, as RevenueCat lists them.
    public var attributeErrors: [AttributeError]?
    /// An expired redemption link's `{"obfuscated_email": …}`: where the buyer's new link goes
    /// (RevenueCat's `purchase_redemption_error_info`, which its SDK reads into `.expired`).
    public var purchaseRedemptionErrorInfo: RedemptionErrorInfo?

    public struct RedemptionErrorInfo: Codable, Hashable, Sendable {
        public var obfuscatedEmail: String

        public init(obfuscatedEmail: String) { self.obfuscatedEmail = obfuscatedEmail }

        enum CodingKeys: String, CodingKey {
            case obfuscatedEmail = "obfuscated_email"
        }
    }

    /// `{"key_name": …, "message": …}`.
    public struct AttributeError: Codable, Hashable, Sendable {
        public var keyName: String
        public var message: String

        public init(keyName: String, message: String) {
            self.keyName = keyName
            self.message = message
        }

        enum CodingKeys: String, CodingKey {
            case keyName = "key_name", message
        }
    }

    public init(
        _ code: APIErrorCode, _ message: String, storeStatus: String? = nil, storeReason: String? = nil, retryAfter: Int? = nil,
        attributeErrors: [AttributeError]? = nil
    ) {
        self.code = code.rawValue
        self.message = message
        self.storeStatus = storeStatus
        self.storeReason = storeReason
        self.retryAfter = retryAfter
        self.attributeErrors = attributeErrors
    }

    enum CodingKeys: String, CodingKey {
        case code, message
        case storeStatus = "store_status"
        case storeReason = "store_reason"
        case attributeErrors = "attribute_errors"
        case purchaseRedemptionErrorInfo = "purchase_redemption_error_info"
    }

    public var description: String { "\(code): \(message)" }
}

/// Stable error codes. The HTTP status goes with the code; the message says what was wrong
/// without echoing secrets or raw input.
public enum APIErrorCode: Int, Sendable, CaseIterable {
    // 400
    /// The request could not be read at all (bad framing, bad encoding).
    case malformedRequest = 4000
    case malformedNonce = 4001
    case postParamsHashMismatch = 4002
    case headersHashMismatch = 4003
    case malformedJSON = 4004
    case invalidField = 4005
    /// A JSON body repeats a key in one object (keys compared after unescaping): parsers
    /// disagree on which copy counts, so the body is refused rather than guessed at.
    case duplicateJSONKey = 4007
    /// The app user id is reserved for the server's own use (`$CS…`/`$RC…`, other than the
    /// SDK's anonymous `$CSAnonymousID:` ids).
    case reservedAppUserId = 4008
    /// Subscriber attributes with a malformed or unknown reserved key, or a value too long or
    /// holding U+0000: the rest of the batch is stored and `attribute_errors` names each one
    /// (as RevenueCat answers); a batch over the size limit stores nothing.
    case invalidSubscriberAttributes = 4009
    case bodyTooLarge = 4013
    // 401 / 403
    case missingAPIKey = 4101
    case invalidAPIKey = 4102
    case wrongKeyKind = 4103
    /// A dashboard form without the session's CSRF token (or the sign-in form's own): refused
    /// before anything is read or changed.
    case csrfRejected = 4104
    /// A dashboard session asked for an app it did not sign in to.
    case appNotInSession = 4105
    // 404 / 409 / 422: purchases
    case notFound = 4404
    case methodNotAllowed = 4405
    case invalidAppUserId = 4006
    case invalidStoreSignature = 4201
    case wrongApp = 4202
    case wrongEnvironment = 4203
    case unknownProduct = 4204
    /// A promotional grant names an entitlement no product of the app unlocks.
    case unknownEntitlement = 4205
    /// The app does not list the TestStore environment, so it cannot mint test purchases.
    case testStoreNotEnabled = 4206
    /// A promotional offer was asked for an app without an In-App Purchase key, or for an offer
    /// the product does not have.
    case promotionalOfferUnavailable = 4207
    case purchaseOwnedByAnotherUser = 4209
    case purchaseBoundToAnotherUser = 4210
    /// The request needs the App Store Server API (a legacy receipt, a refresh) and the app has
    /// no In-App Purchase key configured.
    case storeAPINotConfigured = 4211
    /// `fetch_token` is a legacy receipt and the app does not accept them (`legacyReceipts`).
    case legacyReceiptsDisabled = 4212
    /// The signed data is dated more than five minutes after the server's clock: the server's
    /// clock is likely behind. Posting it later succeeds.
    case signedDateAhead = 4214
    /// An entitlement token was asked of an app that issues none (`entitlementTokens`), or for
    /// an audience it does not list.
    case entitlementTokensUnavailable = 4215
    /// A web purchase was posted (`X-Platform: stripe`) or a Stripe event sent for an app that
    /// does not sell through Stripe (`stripe` in its configuration).
    case stripeNotConfigured = 4220
    /// A Stripe event's `Stripe-Signature` is missing, malformed, outside five minutes of the
    /// server's clock, or made with no secret of the app's.
    case stripeSignatureInvalid = 4221
    /// A Stripe event or object of another Stripe account than the app's.
    case stripeForeignAccount = 4222
    /// A Stripe subscription of a price or product the app's `stripe.products` does not map.
    case stripeProductNotMapped = 4223
    /// Stripe has no such object in the app's account (another account's reads the same way).
    case stripeObjectNotFound = 4224
    /// A web purchase redemption token that is not one the server made, or was used already
    /// by the same app user. RevenueCat's backend code (its SDK answers `.invalidToken`).
    case invalidWebRedemptionToken = 7849
    /// A redemption link used already by another app user, or for a purchase that stays with
    /// another user. RevenueCat's code (`.purchaseBelongsToOtherUser`).
    case purchaseBelongsToOtherUser = 7852
    /// A redemption link past its 60 minutes; `purchase_redemption_error_info` says where a new
    /// one goes. RevenueCat's code (`.expired(obfuscatedEmail)`).
    case expiredWebRedemptionToken = 7853
    /// Too many requests of one kind from one app (telemetry); try again later.
    case rateLimited = 4290
    // 500
    case internalError = 5000
    /// The server has no unexpired intermediate key, so it cannot sign answers; it refuses
    /// rather than answer unsigned or with an expired key.
    case signingKeyExpired = 5031
    /// The App Store Server API could not be asked or answered with an error (rate limited,
    /// down, the key refused); nothing was changed.
    case storeAPIFailed = 5021
    /// Stripe's API could not be reached or answered with an error; nothing was changed.
    case stripeAPIFailed = 5022
    /// The dashboard's templates are not installed beside the server.
    case dashboardUnavailable = 5032
    /// The database is away for now (restarting, failing over, out of connections): ask again
    /// after `Retry-After` (a request repeated is taken once).
    case databaseUnavailable = 5033

    /// Refusals of a posted purchase that are about the transaction itself and that posting it
    /// again cannot change: not signed by the store, another app's, or owned by or bound to
    /// another user. The SDK finishes such a transaction (when the refusal verified) instead of
    /// posting it forever. Everything else leaves the customer's paid transaction unfinished, to
    /// be posted again: the server's clock behind the store's (`signedDateAhead`), its
    /// configuration (an environment or the test store not accepted yet, no In-App Purchase key),
    /// limits, outages.
    public var refusesPurchaseForGood: Bool {
        switch self {
        case .invalidStoreSignature, .wrongApp, .purchaseOwnedByAnotherUser, .purchaseBoundToAnotherUser: true
        default: false
        }
    }

    public var httpStatus: Int {
        switch self {
        case .malformedRequest, .malformedNonce, .postParamsHashMismatch, .headersHashMismatch, .malformedJSON, .invalidField, .invalidAppUserId,
            .duplicateJSONKey, .reservedAppUserId, .invalidSubscriberAttributes:
            400
        case .invalidStoreSignature, .wrongApp, .wrongEnvironment, .unknownProduct, .unknownEntitlement, .promotionalOfferUnavailable,
            .storeAPINotConfigured, .legacyReceiptsDisabled, .signedDateAhead, .entitlementTokensUnavailable, .stripeNotConfigured,
            .stripeForeignAccount, .stripeProductNotMapped, .stripeObjectNotFound:
            422
        case .stripeSignatureInvalid: 400
        case .purchaseOwnedByAnotherUser, .purchaseBoundToAnotherUser: 409
        case .bodyTooLarge: 413
        case .missingAPIKey, .invalidAPIKey: 401
        case .wrongKeyKind, .testStoreNotEnabled, .csrfRejected, .appNotInSession: 403
        case .invalidWebRedemptionToken, .purchaseBelongsToOtherUser, .expiredWebRedemptionToken: 403
        case .notFound: 404
        case .methodNotAllowed: 405
        case .internalError: 500
        case .rateLimited: 429
        case .signingKeyExpired, .dashboardUnavailable, .databaseUnavailable: 503
        case .storeAPIFailed, .stripeAPIFailed: 502
        }
    }
}
