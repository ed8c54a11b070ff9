import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird

/// The endpoints apps call with their public API key; every answer is signed (docs/wire-format.md).
///
/// - `GET /v1/subscribers/{app_user_id}`: CustomerInfo (cacheable: `X-ETag`, signed 304s).
/// - `POST /v1/receipts`: record a purchase, answer CustomerInfo with `purchase_status`
///   (PublicRoutes+Receipts.swift).
/// - `POST /v1/subscribers/identify`: logIn; an anonymous user's purchases merge into the new one.
/// - `POST /v1/subscribers/redeem_purchase`: a web purchase's redemption link, redeemed for the
///   app user (StripeWeb+Redemption.swift).
/// - `POST /v1/subscribers/{app_user_id}/attributes`: subscriber attributes, a batch at a time.
/// - `POST /v1/subscribers/{app_user_id}/intro_eligibility`: introductory offer eligibility.
/// - `POST /v1/subscribers/{app_user_id}/promotional_offer`: a promotional offer signed with the
///   app's In-App Purchase key.
/// - `POST /v1/subscribers/{app_user_id}/entitlement_token`: a token for the app's own backend
///   (EntitlementTokenRoute.swift).
/// - `GET /v1/subscribers/{app_user_id}/offerings`, `GET /v1/product_entitlement_mapping`: the
///   catalogue, static and cacheable (the mapping is what the SDK computes offline entitlements with).
/// - The test store (PublicRoutes+TestStore.swift), for apps that list TestStore (StoreKit's part, served to any platform):
///   `POST /v1/test_store/purchases` mints a transaction, `POST /v1/test_store/purchase_requests`
///   files an Ask-to-Buy request, `GET /v1/test_store/accounts/{account}/transactions` is what an
///   account hears outside its own purchases, `GET /v1/test_store/products` the catalogue.
struct PublicRoutes: Sendable {
    let signing: ResponseSigning
    let authentication: APIKeyAuthentication
    let store: CustomerDatabase
    let verifiers: [String: SignedDataVerifier]
    let testStore: TestStoreCA?
    /// Apps with an In-App Purchase key, by app id.
    let offerSigners: [String: PromotionalOfferSigner]
    /// The App Store Server API (legacy receipts).
    let storeAPI: StoreServerAPI
    let metrics: ServerMetrics
    /// The `iss` of entitlement tokens.
    let issuer: String
    /// Per-address and per-app limits (nil: none).
    let rateLimits: RateLimitSettings?
    /// Web purchases (`X-Platform: stripe`).
    let stripe: StripeWeb
    let now: @Sendable () -> Date

    /// The body of `POST /v1/receipts`.
    struct ReceiptRequest: Decodable {
        var appUserId: String
        var fetchToken: String
        var productId: String?
        /// The offering the paywall showed (RevenueCat's SDK sends it): kept with the purchase,
        /// its webhook events' `presented_offering_id`.
        var presentedOfferingIdentifier: String?
        /// Subscriber attributes sent with the purchase (RevenueCat's SDK sends its unsynced ones).
        var attributes: [String: SubscriberAttributeValue]?

        enum CodingKeys: String, CodingKey {
            case appUserId = "app_user_id", fetchToken = "fetch_token", productId = "product_id"
            case presentedOfferingIdentifier = "presented_offering_identifier", attributes
        }
    }

    /// The body of `POST /v1/subscribers/identify`.
    struct IdentifyRequest: Decodable {
        var appUserId: String
        var newAppUserId: String

        enum CodingKeys: String, CodingKey {
            case appUserId = "app_user_id", newAppUserId = "new_app_user_id"
        }
    }

    /// The body of `POST /v1/subscribers/redeem_purchase` (RevenueCat's web purchase redemption).
    struct RedeemRequest: Decodable {
        var appUserId: String
        var redemptionToken: String

        enum CodingKeys: String, CodingKey {
            case appUserId = "app_user_id", redemptionToken = "redemption_token"
        }
    }

    struct OfferingsAnswer: Encodable {
        struct Offering: Encodable {
            var identifier: String
            var packages: [Package]
            var metadata: [String: MetadataValue]?
        }

        struct Package: Encodable {
            var identifier: String
            var platformProductIdentifier: String

            enum CodingKeys: String, CodingKey {
                case identifier, platformProductIdentifier = "platform_product_identifier"
            }
        }

        var currentOfferingId: String?
        var offerings: [Offering]

        enum CodingKeys: String, CodingKey {
            case currentOfferingId = "current_offering_id", offerings
        }
    }

    struct MappingAnswer: Encodable {
        struct Product: Encodable {
            var productIdentifier: String
            var entitlements: [String]

            enum CodingKeys: String, CodingKey {
                case productIdentifier = "product_identifier", entitlements
            }
        }

        var productEntitlementMapping: [String: Product]

        enum CodingKeys: String, CodingKey {
            case productEntitlementMapping = "product_entitlement_mapping"
        }
    }

    func add(to router: ServerRouter) {
        var signed = router.group()
            .add(middleware: signing)
            .add(middleware: AppAuthentication(authentication: authentication, kind: .publicKey))
        if let rateLimits { signed = signed.add(middleware: PublicRateLimit(rateLimits, now: now)) }
        let routes = signed.group(context: SignedRequestContext.self)
        get(routes, "/v1/subscribers/:app_user_id", acceptsSecretKey: true, customerInfo)
        get(routes, "/v1/subscribers/:app_user_id/offerings", offerings)
        get(routes, "/v1/product_entitlement_mapping", productEntitlementMapping)
        post(routes, "/v1/receipts", ReceiptRequest.self) { app, receipt, context in
            // RevenueCat's contract: the platform the purchase was made on, in a header.
            context.platform?.lowercased() == "stripe" ? try await stripeReceipt(app, receipt, context) : try await receipts(app, receipt, context)
        }
        post(routes, "/v1/subscribers/identify", IdentifyRequest.self, identify)
        post(routes, "/v1/subscribers/redeem_purchase", RedeemRequest.self) { app, body, context in
            let user = try AppUserIDRules.validated(body.appUserId, percentEncoded: false)
            let info = try await stripe.redeem(token: body.redemptionToken, app: app, user: user, now: context.now)
            return SignedAnswer.customerInfo(info, requestedAs: user)
        }
        // A backend sets attributes with its secret key, as RevenueCat's REST API takes them
        // (and only it sets `$appleRefundHandlingPreference`).
        post(routes, "/v1/subscribers/:app_user_id/attributes", acceptsSecretKey: true, SubscriberAttributesBody.self, setAttributes)
        post(routes, "/v1/subscribers/:app_user_id/intro_eligibility", IntroEligibilityRequest.self, introEligibility)
        post(routes, "/v1/subscribers/:app_user_id/promotional_offer", PromotionalOfferRequest.self, promotionalOffer)
        post(routes, "/v1/subscribers/:app_user_id/entitlement_token", EntitlementTokenRequest.self, entitlementToken)
        post(routes, "/v1/test_store/purchases", TestPurchaseRequest.self, testStorePurchase)
        post(routes, "/v1/test_store/purchase_requests", TestPurchaseRequest.self, testStorePurchaseRequest)
        get(routes, "/v1/test_store/accounts/:store_account/transactions", testStoreTransactions)
        get(routes, "/v1/test_store/products", testStoreProducts)
    }

    func customerInfo(_ app: AppConfiguration, _ request: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
        let user = try AppUserIDRules.validated(context.parameters.get("app_user_id") ?? "", percentEncoded: true)
        // An app's first launch: an anonymous id the SDK just made, with no answer cached yet.
        let firstLaunch = request.headers[SignatureHeader.etag] == nil && ReservedAppUserID.isAnonymous(user)
        // An alias answers as its customer (RevenueCat's aliases).
        var info = try await store.customerInfo(app: app, user: user, now: context.now, firstLaunch: firstLaunch)
        // A backend reading with the secret key also gets the attributes, as RevenueCat answers it.
        if Self.holdsSecretKey(app, context) {
            info.subscriber.subscriberAttributes = try await store.attributes(app: app.id, user: user)
        }
        return SignedAnswer.customerInfo(info, requestedAs: user)
    }

    func offerings(_ app: AppConfiguration, _: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
        _ = try AppUserIDRules.validated(context.parameters.get("app_user_id") ?? "", percentEncoded: true)
        let answer = OfferingsAnswer(
            currentOfferingId: app.offerings.first(where: \.isCurrent)?.id,
            offerings: app.offerings.map { offering in
                .init(
                    identifier: offering.id, packages: offering.packages.map { .init(identifier: $0.id, platformProductIdentifier: $0.productId) },
                    metadata: offering.metadata)
            }
        )
        return try SignedAnswer.json(answer, cacheable: true)
    }

    func productEntitlementMapping(_ app: AppConfiguration, _: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
        let mapping = Dictionary(
            uniqueKeysWithValues: app.products.map { ($0.id, MappingAnswer.Product(productIdentifier: $0.id, entitlements: $0.entitlements)) })
        return try SignedAnswer.json(MappingAnswer(productEntitlementMapping: mapping), cacheable: true)
    }

    func storeAttributes(
        _ attributes: [String: SubscriberAttributeValue]?, app: AppConfiguration, user: String, context: SignedRequestContext
    ) async throws {
        guard let attributes, !attributes.isEmpty else { return }
        var valid: [String: CustomerDatabase.AttributeRecord] = [:]
        let secret = Self.holdsSecretKey(app, context)
        for (key, attribute) in attributes.prefix(SubscriberAttributeRules.maximumBatch) {
            if SubscriberAttributeRules.problem(key: key, value: attribute.value, secretKey: secret) == nil, attribute.updatedAtMs > 0 {
                valid[key] = CustomerDatabase.AttributeRecord(value: attribute.value, updatedAtMs: attribute.updatedAtMs)
            }
        }
        if valid.count < attributes.count {
            context.logger.notice("attributes sent with a purchase were left out", metadata: ["count": "\(attributes.count - valid.count)"])
        }
        if !valid.isEmpty { _ = try await store.setAttributes(app: app.id, user: user, valid, now: context.now) }
    }

    func identify(_ app: AppConfiguration, _ identify: IdentifyRequest, _ context: SignedRequestContext) async throws -> SignedAnswer {
        let current = try AppUserIDRules.validated(identify.appUserId, percentEncoded: false)
        let new = try AppUserIDRules.validated(identify.newAppUserId, percentEncoded: false)
        if CustomerDatabase.isAnonymous(new) {
            throw APIError(.invalidAppUserId, "new_app_user_id must be a real user id, not an anonymous one")
        }
        let time = context.now
        let created = try await store.identify(app: app, currentUser: current, newUser: new, now: time)
        let info = try await store.customerInfo(app: app, user: new, now: time)
        // 201 when the user is new, as RevenueCat answers logIn.
        return SignedAnswer.customerInfo(info, requestedAs: new, status: created ? .created : .ok, member: "created", bool: created)
    }

    func setAttributes(_ app: AppConfiguration, _ body: SubscriberAttributesBody, _ context: SignedRequestContext) async throws
        -> SignedAnswer
    {
        let user = try AppUserIDRules.validated(context.parameters.get("app_user_id") ?? "", percentEncoded: true)
        guard body.attributes.count <= SubscriberAttributeRules.maximumBatch else {
            throw APIError(.invalidSubscriberAttributes, "at most \(SubscriberAttributeRules.maximumBatch) attributes per request")
        }
        // As RevenueCat: the valid attributes are stored, each invalid one is named.
        var valid: [String: CustomerDatabase.AttributeRecord] = [:]
        var refused: [APIError.AttributeError] = []
        let secret = Self.holdsSecretKey(app, context)
        for (key, attribute) in body.attributes.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
            let problem =
                SubscriberAttributeRules.problem(key: key, value: attribute.value, secretKey: secret)
                ?? (attribute.updatedAtMs > 0 ? nil : "updated_at_ms of '\(key.prefix(60))' must be a time")
            if let problem {
                refused.append(.init(keyName: String(key.prefix(60)), message: problem))
            } else {
                valid[key] = CustomerDatabase.AttributeRecord(value: attribute.value, updatedAtMs: attribute.updatedAtMs)
            }
        }
        let changed = valid.isEmpty ? 0 : try await store.setAttributes(app: app.id, user: user, valid, now: context.now)
        if !refused.isEmpty {
            throw APIError(
                .invalidSubscriberAttributes,
                "some subscriber attributes could not be stored: \(refused.map(\.message).joined(separator: "; "))", attributeErrors: refused)
        }
        return try SignedAnswer.json(["updated_attributes": changed], cacheable: false)
    }

    func introEligibility(_ app: AppConfiguration, _ body: IntroEligibilityRequest, _ context: SignedRequestContext) async throws
        -> SignedAnswer
    {
        let user = try AppUserIDRules.validated(context.parameters.get("app_user_id") ?? "", percentEncoded: true)
        guard (1...100).contains(body.productIdentifiers.count) else {
            throw APIError(.invalidField, "product_identifiers must list 1 to 100 products")
        }
        let known = body.productIdentifiers.compactMap(app.product)
        var answer = try await store.introductoryOfferEligibility(app: app, user: user, products: known)
        for id in body.productIdentifiers where answer[id] == nil { answer[id] = .unknown }
        return try SignedAnswer.json(IntroEligibilityAnswer(eligibility: answer), cacheable: false)
    }

    func promotionalOffer(_ app: AppConfiguration, _ body: PromotionalOfferRequest, _ context: SignedRequestContext) async throws
        -> SignedAnswer
    {
        let user = try AppUserIDRules.validated(context.parameters.get("app_user_id") ?? "", percentEncoded: true)
        guard let signer = offerSigners[app.id] else {
            throw APIError(.promotionalOfferUnavailable, "app '\(app.id)' has no In-App Purchase key (inAppPurchaseKey in countersign.json)")
        }
        guard let product = app.product(body.productIdentifier), product.type == .autoRenewable else {
            throw APIError(.unknownProduct, "'\(body.productIdentifier.prefix(100))' is not an auto-renewable subscription of app '\(app.id)'")
        }
        guard product.promotionalOffers?.contains(body.offerIdentifier) == true else {
            throw APIError(.promotionalOfferUnavailable, "product '\(product.id)' has no promotional offer '\(body.offerIdentifier.prefix(100))'")
        }
        let time = context.now
        let nonce = UUID()
        let token = AppAccountToken.forAppUserID(user)
        let timestamp = time.epochMilliseconds
        let answer = PromotionalOfferAnswer(
            productIdentifier: product.id, offerIdentifier: body.offerIdentifier, keyIdentifier: signer.keyId,
            nonce: nonce.uuidString.lowercased(), timestamp: timestamp, appAccountToken: token.uuidString.lowercased(),
            signature: try signer.signV1(
                productId: product.id, offerId: body.offerIdentifier, appAccountToken: token, nonce: nonce, timestamp: timestamp),
            jws: try signer.signV2(productId: product.id, offerId: body.offerIdentifier, transactionId: nil, nonce: nonce, issuedAt: time)
        )
        return try SignedAnswer.json(answer, cacheable: false)
    }

    /// A signed GET (the group's middleware checked the request, found the app, and signs).
    /// `acceptsSecretKey`: the app's secret key opens it too, as RevenueCat's
    /// `GET /v1/subscribers/{id}` is read by backends with theirs (the answer is the same).
    func get(
        _ group: RouterGroup<SignedRequestContext>, _ path: RouterPath, acceptsSecretKey: Bool = false,
        _ handler: @escaping @Sendable (AppConfiguration, Request, SignedRequestContext) async throws -> SignedAnswer
    ) {
        let authentication = self.authentication
        group.get(path) { request, context -> Response in
            let app = try Self.app(of: request, context, acceptsSecretKey: acceptsSecretKey, authentication)
            return try context.respond(to: request, with: try await handler(app, request, context))
        }
    }

    /// A signed POST of a JSON body, collected and decoded once, its `X-Post-Params-Hash` checked
    /// against the decoded fields (``JSONBody/signedBody(_:of:context:)``); then the API key's
    /// refusal, if any (signed), and the handler.
    func post<Body: PostBody>(
        _ group: RouterGroup<SignedRequestContext>, _ path: RouterPath, acceptsSecretKey: Bool = false, _ type: Body.Type,
        _ handler: @escaping @Sendable (AppConfiguration, Body, SignedRequestContext) async throws -> SignedAnswer
    ) {
        let authentication = self.authentication
        group.post(path) { request, context -> Response in
            var body = request
            let decoded = try await JSONBody.signedBody(Body.self, of: &body, context: context)
            let app = try Self.app(of: request, context, acceptsSecretKey: acceptsSecretKey, authentication)
            return try context.respond(to: request, with: try await handler(app, decoded, context))
        }
    }

    /// The app the request's public key opens, or with `acceptsSecretKey` its secret key.
    static func app(
        of request: Request, _ context: SignedRequestContext, acceptsSecretKey: Bool, _ authentication: APIKeyAuthentication
    ) throws(APIError) -> AppConfiguration {
        do throws(APIError) {
            return try context.authenticatedApp()
        } catch {
            guard acceptsSecretKey, error.code == APIErrorCode.wrongKeyKind.rawValue else { throw error }
            return try authentication.secretApp(request)
        }
    }

    /// Whether the request carries one of the app's secret keys (a backend's, not an app's).
    static func holdsSecretKey(_ app: AppConfiguration, _ context: SignedRequestContext) -> Bool {
        APIKeyAuthentication.holds(app.secretApiKeys, context.exchange.apiKey ?? "")
    }

}

extension PublicRoutes.ReceiptRequest: PostBody {
    var postParams: [(String, String?)] { [("app_user_id", appUserId), ("fetch_token", fetchToken)] }
}

extension PublicRoutes.RedeemRequest: PostBody {
    var postParams: [(String, String?)] { [("app_user_id", appUserId), ("redemption_token", redemptionToken)] }
}

extension PublicRoutes.IdentifyRequest: PostBody {
    var postParams: [(String, String?)] { [("app_user_id", appUserId), ("new_app_user_id", newAppUserId)] }
}
