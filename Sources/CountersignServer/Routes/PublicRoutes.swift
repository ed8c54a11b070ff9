import CountersignAppStore
import CountersignCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird

/// The endpoints apps call with their public API key; every answer is signed (docs/wire-format.md).
///
/// - `GET /v1/subscribers/{app_user_id}`: CustomerInfo (cacheable: `X-ETag`, signed 304s).
/// - `POST /v1/receipts`: record a purchase, answer CustomerInfo with `purchase_status`.
/// - `POST /v1/subscribers/identify`: logIn; an anonymous user's purchases merge into the new one.
/// - `POST /v1/subscribers/{app_user_id}/attributes`: subscriber attributes, a batch at a time.
/// - `POST /v1/subscribers/{app_user_id}/intro_eligibility`: introductory offer eligibility.
/// - `POST /v1/subscribers/{app_user_id}/promotional_offer`: a promotional offer signed with the
///   app's In-App Purchase key.
/// - `GET /v1/subscribers/{app_user_id}/offerings`, `GET /v1/product_entitlement_mapping`: the
///   catalogue, static and cacheable (the mapping is what the SDK computes offline entitlements with).
/// - The test store, for apps that list TestStore (StoreKit's part, served to any platform):
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

    /// The body of `POST /v1/test_store/purchases`.
    /// Also the body of `POST /v1/test_store/purchase_requests` (Ask to Buy).
    struct TestPurchaseRequest: Decodable {
        var appUserId: String
        var productId: String
        var appAccountToken: String?
        /// The test store account (a device's Apple ID) the purchase goes to; its other devices
        /// hear it through the account's transactions.
        var storeAccount: String?
        /// A promotional offer the server signed (``promotionalOffer``), as StoreKit's purchase
        /// option carries it: the test store checks it as the App Store does.
        var promotionalOfferIdentifier: String?
        var promotionalOfferKeyIdentifier: String?
        var promotionalOfferNonce: String?
        var promotionalOfferTimestamp: String?
        var promotionalOfferSignature: String?

        enum CodingKeys: String, CodingKey {
            case appUserId = "app_user_id", productId = "product_id", appAccountToken = "app_account_token", storeAccount = "store_account"
            case promotionalOfferIdentifier = "promotional_offer_identifier"
            case promotionalOfferKeyIdentifier = "promotional_offer_key_identifier"
            case promotionalOfferNonce = "promotional_offer_nonce"
            case promotionalOfferTimestamp = "promotional_offer_timestamp"
            case promotionalOfferSignature = "promotional_offer_signature"
        }

        /// The offer's fields in the order they are sent and hashed.
        var promotionalOfferFields: [(String, String)] {
            [
                ("promotional_offer_identifier", promotionalOfferIdentifier), ("promotional_offer_key_identifier", promotionalOfferKeyIdentifier),
                ("promotional_offer_nonce", promotionalOfferNonce), ("promotional_offer_timestamp", promotionalOfferTimestamp),
                ("promotional_offer_signature", promotionalOfferSignature),
            ].compactMap { name, value in value.map { (name, $0) } }
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
        post(routes, "/v1/receipts", ReceiptRequest.self, receipts)
        post(routes, "/v1/subscribers/identify", IdentifyRequest.self, identify)
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

    private func customerInfo(_ app: AppConfiguration, _: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
        let user = try AppUserIDRules.validated(context.parameters.get("app_user_id") ?? "", percentEncoded: true)
        // An alias answers as its customer (RevenueCat's aliases).
        var info = try await store.customerInfo(app: app, user: user, now: context.now)
        // A backend reading with the secret key also gets the attributes, as RevenueCat answers it.
        if Self.holdsSecretKey(app, context) {
            info.subscriber.subscriberAttributes = try await store.attributes(app: app.id, user: user)
        }
        return SignedAnswer.customerInfo(info, requestedAs: user)
    }

    private func offerings(_ app: AppConfiguration, _: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
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

    private func productEntitlementMapping(_ app: AppConfiguration, _: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
        let mapping = Dictionary(
            uniqueKeysWithValues: app.products.map { ($0.id, MappingAnswer.Product(productIdentifier: $0.id, entitlements: $0.entitlements)) })
        return try SignedAnswer.json(MappingAnswer(productEntitlementMapping: mapping), cacheable: true)
    }

    private func receipts(_ app: AppConfiguration, _ receipt: ReceiptRequest, _ context: SignedRequestContext) async throws -> SignedAnswer {
        let user = try AppUserIDRules.validated(receipt.appUserId, percentEncoded: false)
        if let offering = receipt.presentedOfferingIdentifier,
            offering.isEmpty || offering.unicodeScalars.count > 200
                || offering.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        {
            throw APIError(.invalidField, "presented_offering_identifier must be 1 to 200 characters without control characters")
        }
        // Before the purchase, so its events carry them.
        try await storeAttributes(receipt.attributes, app: app, user: user, context: context)
        let status: PurchaseStatus
        let info: SubscriberResponse
        do {
            if Self.isLegacyReceipt(receipt.fetchToken) {
                status = try await recordLegacyReceipt(receipt.fetchToken, app: app, poster: user, now: context.now)
                info = try await store.customerInfo(app: app, user: user, now: context.now)
            } else {
                var transaction = try await verify(receipt.fetchToken, app: app)
                transaction.presentedOfferingId = receipt.presentedOfferingIdentifier
                (status, info) = try await store.recordAndRead(transaction, app: app, poster: user, now: context.now)
            }
        } catch let error as APIError {
            metrics.recordPurchase(app: app.id, outcome: String(error.code))
            if error.code == APIErrorCode.signedDateAhead.rawValue { ServerClock.warnBehind(context.logger, detail: error.message) }
            throw error
        }
        metrics.recordPurchase(app: app.id, outcome: status.rawValue)
        if status == .boundToAnotherUser {
            throw APIError(.purchaseBoundToAnotherUser, "this purchase carries another user's app account token and stays with that user")
        }
        return SignedAnswer.customerInfo(info, requestedAs: user, member: "purchase_status", string: status.rawValue)
    }

    /// Stores the attributes a purchase carried, for the poster (whatever becomes of the
    /// purchase); a purchase is never refused for them: the ones the rules refuse are left out
    /// and logged.
    private func storeAttributes(
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

    private func identify(_ app: AppConfiguration, _ identify: IdentifyRequest, _ context: SignedRequestContext) async throws -> SignedAnswer {
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

    private func setAttributes(_ app: AppConfiguration, _ body: SubscriberAttributesBody, _ context: SignedRequestContext) async throws
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

    private func introEligibility(_ app: AppConfiguration, _ body: IntroEligibilityRequest, _ context: SignedRequestContext) async throws
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

    private func promotionalOffer(_ app: AppConfiguration, _ body: PromotionalOfferRequest, _ context: SignedRequestContext) async throws
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

    private func testStorePurchase(_ app: AppConfiguration, _ request: TestPurchaseRequest, _ context: SignedRequestContext) async throws
        -> SignedAnswer
    {
        let testStore = try testStore(for: app)
        let user = try AppUserIDRules.validated(request.appUserId, percentEncoded: false)
        let token = try Self.appAccountToken(request.appAccountToken)
        let account = try request.storeAccount.map(Self.storeAccount)
        let time = context.now
        guard let product = app.product(request.productId) else { throw Self.unknownProduct(request.productId, app: app) }
        let offer = try promotionalOffer(in: request, product: product, app: app, token: token, now: time)
        // A customer's first subscription in a group gets the introductory offer, as App Store
        // does, unless a promotional offer is redeemed.
        var eligible = false
        if offer == nil {
            eligible = try await store.introductoryOfferEligibility(app: app, user: user, products: [product])[product.id] == .eligible
        }
        guard
            let (jws, payload) = try testStore.mintPurchase(
                of: product.id, for: app, appAccountToken: token, purchaseDate: time,
                withIntroductoryOffer: eligible, promotionalOffer: offer)
        else { throw Self.unknownProduct(request.productId, app: app) }
        let transactionId = payload.transactionId ?? ""
        if let account {
            try await store.appendToFeed(
                app: app.id, account: account, transactionId: transactionId,
                originalTransactionId: payload.originalTransactionId ?? transactionId, signedTransaction: jws, now: time)
        }
        return try SignedAnswer.json(
            TestPurchaseAnswer(signedTransaction: jws, transactionId: transactionId, productId: product.id), cacheable: false)
    }

    /// The promotional offer a test-store purchase redeems, checked as the App Store checks
    /// StoreKit's purchase option: one of the product's offers, signed with the app's In-App
    /// Purchase key over Apple's fields (bundle id, key id, product, offer, app account token,
    /// nonce, timestamp) within the last 24 hours. Nil when the purchase names none; 422 (4207)
    /// for one the App Store would refuse.
    private func promotionalOffer(
        in request: TestPurchaseRequest, product: AppConfiguration.Product, app: AppConfiguration, token: UUID?, now: Date
    ) throws -> String? {
        let fields = request.promotionalOfferFields
        guard !fields.isEmpty else { return nil }
        guard fields.count == 5, let offer = request.promotionalOfferIdentifier, let keyId = request.promotionalOfferKeyIdentifier,
            let nonce = request.promotionalOfferNonce.flatMap(UUID.init(uuidString:)),
            let timestamp = request.promotionalOfferTimestamp.flatMap(Int64.init), let signature = request.promotionalOfferSignature
        else {
            throw APIError(
                .invalidField, "a promotional offer needs all five promotional_offer_* fields, the nonce a UUID and the timestamp milliseconds")
        }
        guard let signer = offerSigners[app.id], product.promotionalOffers?.contains(offer) == true, keyId == signer.keyId,
            let token
        else {
            throw APIError(
                .promotionalOfferUnavailable, "product '\(product.id)' has no promotional offer '\(offer.prefix(100))' signed with this app's key")
        }
        // The timestamp is the client's number: compared without arithmetic on it (a distance
        // of `now - timestamp` overflows for a timestamp near Int64.min and stops the process).
        let time = now.epochMilliseconds
        guard timestamp >= time - 86_400_000, timestamp <= time + 86_400_000,
            signer.isValidV1(signature: signature, productId: product.id, offerId: offer, appAccountToken: token, nonce: nonce, timestamp: timestamp)
        else {
            throw APIError(.promotionalOfferUnavailable, "the promotional offer's signature does not verify or is older than 24 hours")
        }
        return offer
    }

    private func testStorePurchaseRequest(_ app: AppConfiguration, _ request: TestPurchaseRequest, _ context: SignedRequestContext) async throws
        -> SignedAnswer
    {
        _ = try testStore(for: app)
        _ = try AppUserIDRules.validated(request.appUserId, percentEncoded: false)
        let token = try Self.appAccountToken(request.appAccountToken)
        guard let account = try request.storeAccount.map(Self.storeAccount) else {
            throw APIError(.invalidField, "an Ask-to-Buy purchase needs the store_account its approval goes to")
        }
        guard app.product(request.productId) != nil else { throw Self.unknownProduct(request.productId, app: app) }
        let pending = try await store.addPending(
            app: app.id, account: account, productId: request.productId,
            appAccountToken: token?.uuidString.lowercased(), now: context.now)
        return try SignedAnswer.json(
            TestStorePendingAnswer(pendingId: pending.pendingId, productId: pending.productId),
            status: .accepted, cacheable: false)
    }

    private func testStoreTransactions(_ app: AppConfiguration, _ request: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
        _ = try testStore(for: app)
        let account = try Self.storeAccount(context.parameters.get("store_account")?.removingPercentEncoding ?? "")
        var after: Int64 = 0
        if let text = request.uri.queryParameters.get("after") {
            guard let value = Int64(text), value >= 0 else { throw APIError(.invalidField, "after must be a sequence number (0 or more)") }
            after = value
        }
        let entries = try await store.feed(app: app.id, account: account, after: after, limit: 100)
        return try SignedAnswer.json(
            TestStoreFeed(transactions: entries.map { .init(sequence: $0.sequence, signedTransaction: $0.signedTransaction) }),
            cacheable: false)
    }

    private func testStoreProducts(_ app: AppConfiguration, _: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
        _ = try testStore(for: app)
        return try SignedAnswer.json(
            TestStoreProducts(
                products: app.products.map { product in
                    var listed = TestStoreProducts.Product(
                        identifier: product.id, type: product.type.rawValue, displayName: product.displayName ?? product.id,
                        description: product.description ?? "", price: product.price ?? "0", currency: product.currency ?? "USD",
                        subscriptionPeriod: product.subscriptionPeriod, subscriptionGroup: product.subscriptionGroup,
                        introductoryOffer: product.introductoryOffer
                    )
                    listed.promotionalOffers = product.promotionalOffers
                    return listed
                }), cacheable: true)
    }

    /// The test store, for an app that lists TestStore (the public and the admin test-store
    /// routes both ask here).
    static func testStore(_ testStore: TestStoreCA?, for app: AppConfiguration) throws(APIError) -> TestStoreCA {
        guard let testStore, app.environments.contains(AppStoreEnvironment.testStore.rawValue) else {
            throw APIError(.testStoreNotEnabled, "app '\(app.id)' does not accept TestStore purchases")
        }
        return testStore
    }

    private func testStore(for app: AppConfiguration) throws(APIError) -> TestStoreCA {
        try Self.testStore(testStore, for: app)
    }

    static func unknownProduct(_ id: String, app: AppConfiguration) -> APIError {
        APIError(.unknownProduct, "product '\(id.prefix(100))' is not configured for app '\(app.id)'")
    }

    static func appAccountToken(_ text: String?) throws(APIError) -> UUID? {
        guard let text else { return nil }
        guard let uuid = UUID(uuidString: text) else { throw APIError(.invalidField, "app_account_token must be a UUID") }
        return uuid
    }

    /// Test store account names: 1 to 64 letters, digits, `-`, `_` or `.`.
    static func storeAccount(_ text: String) throws(APIError) -> String {
        guard (1...64).contains(text.utf8.count),
            text.utf8.allSatisfy({
                $0 < 0x80
                    && (Character(Unicode.Scalar($0)).isLetter || Character(Unicode.Scalar($0)).isNumber || $0 == 0x2D || $0 == 0x5F || $0 == 0x2E)
            })
        else { throw APIError(.invalidField, "store_account must be 1 to 64 ASCII letters, digits, '-', '_' or '.'") }
        return text
    }

    /// A signed GET (the group's middleware checked the request, found the app, and signs).
    /// `acceptsSecretKey`: the app's secret key opens it too, as RevenueCat's
    /// `GET /v1/subscribers/{id}` is read by backends with theirs (the answer is the same).
    private func get(
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
    private static func app(
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

    /// Verifies a signed transaction for `app`, mapping store errors to API errors.
    /// A JWS is three base64url parts joined by dots; a legacy receipt is standard base64,
    /// which has no dot. So the two cannot be taken for each other.
    static func isLegacyReceipt(_ token: String) -> Bool {
        var token = token
        // A JWS's first dot follows its header, certificate chain and all (about 3 KB): `memchr`
        // over the bytes, where `contains` goes byte by byte.
        return token.withUTF8 { bytes in
            guard let start = bytes.baseAddress else { return true }
            return memchr(start, Int32(UInt8(ascii: ".")), bytes.count) == nil
        }
    }

    /// Records every transaction of the customer a legacy receipt belongs to (the receipt
    /// verified, then the history fetched from the App Store Server API and verified, see
    /// ``StoreServerAPI/transactions(inLegacyReceipt:app:)``); the status is that of the
    /// receipt's own transaction. Each is recorded as if posted, except that a legacy receipt
    /// never moves a chain another user owns, whatever the app's transfer behaviour (409): the
    /// receipt names a whole account's history, which is more than its poster shows to hold.
    /// A refusal of any stops the rest.
    private func recordLegacyReceipt(_ receipt: String, app: AppConfiguration, poster: String, now: Date) async throws -> PurchaseStatus {
        let (id, transactions) = try await storeAPI.transactions(inLegacyReceipt: receipt, app: app)
        var keeping = app
        keeping.transferBehavior = .keepWithOriginal
        var status: PurchaseStatus = .alreadyRecorded
        for transaction in transactions {
            let recorded: PurchaseStatus
            do {
                recorded = try await store.record(transaction, app: keeping, poster: poster, now: now)
            } catch let error as APIError where error.code == APIErrorCode.purchaseOwnedByAnotherUser.rawValue {
                throw APIError(
                    .purchaseOwnedByAnotherUser, "a purchase in this legacy receipt belongs to another user, and a legacy receipt never moves one")
            }
            if transaction.transactionId == id || transactions.count == 1 { status = recorded }
        }
        return status
    }

    private func verify(_ jws: String, app: AppConfiguration) async throws -> VerifiedTransaction {
        guard let verifier = verifiers[app.id] else { throw APIError(.internalError, "no store verifier for app '\(app.id)'") }
        let payload: TransactionPayload
        do {
            payload = try await verifier.verify(jws, as: TransactionPayload.self)
        } catch {
            throw APIError(storeRefusal: error, of: "fetch_token")
        }
        return try VerifiedTransaction(jws: jws, payload: payload, app: app)
    }
}

/// A JSON request body with the fields its `X-Post-Params-Hash` covers, taken from the decoded
/// body itself, so the hash and the handler can never read two different values.
protocol PostBody: Decodable, Sendable {
    var postParams: [(String, String?)] { get }
}

extension PublicRoutes.ReceiptRequest: PostBody {
    var postParams: [(String, String?)] { [("app_user_id", appUserId), ("fetch_token", fetchToken)] }
}

extension PublicRoutes.IdentifyRequest: PostBody {
    var postParams: [(String, String?)] { [("app_user_id", appUserId), ("new_app_user_id", newAppUserId)] }
}

/// Attributes are not covered by `X-Post-Params-Hash` (they are not flat string fields); the
/// answer says how many were stored and grants nothing.
extension SubscriberAttributesBody: PostBody {
    var postParams: [(String, String?)] { [] }
}

/// The answer lists every product asked for, so the SDK can tell an answer to its own question.
extension IntroEligibilityRequest: PostBody {
    var postParams: [(String, String?)] { [] }
}

extension PromotionalOfferRequest: PostBody {
    var postParams: [(String, String?)] { [("product_identifier", productIdentifier), ("offer_identifier", offerIdentifier)] }
}

extension PublicRoutes.TestPurchaseRequest: PostBody {
    /// `store_account` is covered when sent (clients from before store accounts hash three fields).
    var postParams: [(String, String?)] {
        [("app_user_id", appUserId), ("product_id", productId), ("app_account_token", appAccountToken)]
            + (storeAccount.map { [("store_account", $0)] } ?? []) + promotionalOfferFields.map { ($0, $1) }
    }
}

/// Decoding of JSON request bodies with errors that tell bad JSON from a bad field.
/// Every body is checked by ``JSONSyntax`` first: a repeated key (after unescaping), invalid
/// UTF-8 or a lone surrogate escape is refused, so no two readers of a body can disagree.
enum JSONBody {
    /// The request's body, collected (413 beyond the limit) and decoded.
    static func body<T: Decodable>(_ type: T.Type, of request: inout Request, context: some RequestContext) async throws(APIError) -> T {
        try decode(T.self, from: try await request.collectBody(context: context))
    }

    /// The body of a signed route, with its `X-Post-Params-Hash` checked against the decoded
    /// fields. Every refusal here is unsigned: the server cannot vouch for a request it could
    /// not read or whose claims do not match it.
    static func signedBody<T: PostBody>(_ type: T.Type, of request: inout Request, context: SignedRequestContext) async throws(UnsignedRefusal) -> T {
        let decoded: T
        do throws(APIError) {
            decoded = try await body(T.self, of: &request, context: context)
        } catch {
            throw UnsignedRefusal(error)
        }
        try context.exchange.checkPostParams(decoded.postParams)
        return decoded
    }

    static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws(APIError) -> T {
        switch JSONSyntax.check(data, topLevel: .object) {
        case nil: break
        case .duplicateKey(let key)?:
            throw APIError(.duplicateJSONKey, "the body repeats the key \"\(key.prefix(64))\" in one object")
        case .malformed?:
            throw APIError(.malformedJSON, "the body must be one JSON object")
        }
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch let error as DecodingError {
            // Foundation answers a number it cannot store in the field's type (1.5 or 1e400 for an
            // integer) with "The given data was not valid JSON." and no path: name the number.
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty, let number = unreadableNumber(in: data) {
                throw APIError(.invalidField, "invalid body: '\(number.path)' must be an integer of at most 64 bits, not \(number.text.prefix(40))")
            }
            throw APIError(.invalidField, "invalid body: \(error.shortDescription)")
        } catch {
            throw APIError(.malformedJSON, "the body is not valid JSON")
        }
    }

    /// The first number of a (syntactically valid) body that is no 64-bit integer, with its path:
    /// no field of a request body takes a fraction.
    static func unreadableNumber(in data: Data) -> (path: String, text: Substring)? {
        func find(_ value: JSONValue, _ path: [String]) -> (path: String, text: Substring)? {
            switch value {
            case .number(let text):
                if Int64(text) != nil { return nil }
                if let double = Double(text), double.rounded() == double, abs(double) < 0x1p63 { return nil }
                return (path.joined(separator: "."), text)
            case .array(let elements):
                return elements.indices.lazy.compactMap { find(elements[$0], path + ["\($0)"]) }.first
            case .object(let members):
                return members.keys.sorted().lazy.compactMap { find(members[$0]!, path + [$0]) }.first
            case .null, .bool, .string:
                return nil
            }
        }
        return (try? JSONValue.parse(data)).flatMap { find($0, []) }
    }
}
