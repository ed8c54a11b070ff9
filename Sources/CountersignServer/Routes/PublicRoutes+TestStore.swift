import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird

/// The test store, for apps that list TestStore: StoreKit's part of a purchase, served to any
/// platform (`POST /v1/test_store/purchases`, `/purchase_requests`, an account's transactions, the
/// catalogue).
extension PublicRoutes {
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

    func testStorePurchase(_ app: AppConfiguration, _ request: TestPurchaseRequest, _ context: SignedRequestContext) async throws
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
    func promotionalOffer(
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

    func testStorePurchaseRequest(_ app: AppConfiguration, _ request: TestPurchaseRequest, _ context: SignedRequestContext) async throws
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

    func testStoreTransactions(_ app: AppConfiguration, _ request: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
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

    func testStoreProducts(_ app: AppConfiguration, _: Request, _ context: SignedRequestContext) async throws -> SignedAnswer {
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

    func testStore(for app: AppConfiguration) throws(APIError) -> TestStoreCA {
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
}

extension PublicRoutes.TestPurchaseRequest: PostBody {
    /// `store_account` is covered when sent (clients from before store accounts hash three fields).
    var postParams: [(String, String?)] {
        [("app_user_id", appUserId), ("product_id", productId), ("app_account_token", appAccountToken)]
            + (storeAccount.map { [("store_account", $0)] } ?? []) + promotionalOfferFields.map { ($0, $1) }
    }
}
