import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignStorage
import Foundation
import Hummingbird

/// The App Store's part for test-store purchases, driven by the app's backend, a test or
/// `countersign store` (secret key). Each change is signed by the test store and lands in the
/// transactions of the store account concerned, where a running SDK hears it as StoreKit's
/// `Transaction.updates` would deliver it:
///
/// - `POST /v1/admin/test_store/renew` `{"original_transaction_id"}`: the subscription renews
///   (recorded at once for its owner, as a `DID_RENEW` notification would be).
/// - `POST /v1/admin/test_store/refund` `{"transaction_id", "revocation_percentage"?}`: App Store
///   refunds it, all of it or the share given in thousandths of a percent (Apple's prorated
///   refund: 40000 gives back 40 %), recorded at once as a `REFUND` notification.
/// - `POST /v1/admin/test_store/approve` `{"store_account", "pending_id"?}`: Ask to Buy approved;
///   the purchase reaches the account (the app records it when it hears it).
/// - `POST /v1/admin/test_store/share` `{"transaction_id", "store_account"}`: Family Sharing
///   grants the purchase to a family member's account.
/// - `POST /v1/admin/test_store/purchase` `{"store_account", "product_id", "app_user_id"?}`: a
///   purchase made on another device signed in to the same account.
extension AdminRoutes {
    struct TestStoreRequest: Decodable {
        var originalTransactionId: String?
        var transactionId: String?
        var storeAccount: String?
        var pendingId: String?
        var productId: String?
        var appUserId: String?
        var revocationPercentage: Int64?

        enum CodingKeys: String, CodingKey {
            case originalTransactionId = "original_transaction_id", transactionId = "transaction_id", storeAccount = "store_account"
            case pendingId = "pending_id", productId = "product_id", appUserId = "app_user_id"
            case revocationPercentage = "revocation_percentage"
        }

        func required(_ value: String?, _ name: String) throws(APIError) -> String {
            guard let value, !value.isEmpty else { throw APIError(.invalidField, "\(name) is required") }
            return value
        }
    }

    /// What a test-store change made: each transaction and the account it went to.
    struct TestStoreChange: Encodable {
        struct Transaction: Encodable {
            var transactionId: String
            var originalTransactionId: String
            var productId: String
            var storeAccount: String?
            var expiresDateMs: Int64?
            var revocationDateMs: Int64?
            var signedTransaction: String

            enum CodingKeys: String, CodingKey {
                case transactionId = "transaction_id", originalTransactionId = "original_transaction_id", productId = "product_id"
                case storeAccount = "store_account", expiresDateMs = "expires_date_ms", revocationDateMs = "revocation_date_ms"
                case signedTransaction = "signed_transaction"
            }
        }

        var transactions: [Transaction]
    }

    func addTestStoreRoutes(to router: RouterGroup<ServerRequestContext>) {
        testStoreRoute(router, "renew", renew)
        testStoreRoute(router, "refund", refund)
        testStoreRoute(router, "approve", approve)
        testStoreRoute(router, "share", share)
        testStoreRoute(router, "purchase", purchaseForAccount)
    }

    private func renew(_ app: AppConfiguration, _ ca: TestStoreCA, _ request: TestStoreRequest) async throws -> [TestStoreChange.Transaction] {
        let chain = try request.required(request.originalTransactionId, "original_transaction_id")
        let latest = try await storedTransaction(app: app) { try await store.latestSignedTransaction(app: app.id, originalTransactionId: chain) }
        guard latest.payload.type == .autoRenewable, let productId = latest.payload.productId else {
            throw APIError(.invalidField, "only auto-renewable subscriptions renew")
        }
        let period = app.product(productId)?.subscriptionPeriod.flatMap(StorePeriod.init(iso8601:)) ?? StorePeriod(value: 1, unit: .month)
        let time = now()
        let renewal = try ca.mintRenewal(of: latest.payload, period: period, now: time)
        try await store.applyStoreTransaction(try VerifiedTransaction(jws: renewal.jws, payload: renewal.payload, app: app), app: app, now: time)
        let account = try await store.feedAccount(app: app.id, originalTransactionId: chain)
        return [try await deliver(renewal, to: account, app: app, now: time)]
    }

    private func refund(_ app: AppConfiguration, _ ca: TestStoreCA, _ request: TestStoreRequest) async throws -> [TestStoreChange.Transaction] {
        let id = try request.required(request.transactionId, "transaction_id")
        let stored = try await storedTransaction(app: app) { try await store.signedTransaction(app: app.id, transactionId: id) }
        if let share = request.revocationPercentage, !(1...100_000).contains(share) {
            throw APIError(.invalidField, "revocation_percentage must be 1 to 100000 (thousandths of a percent)")
        }
        let time = now()
        let refund = try ca.mintRefund(of: stored.payload, percentage: request.revocationPercentage, now: time)
        try await store.applyStoreTransaction(try VerifiedTransaction(jws: refund.jws, payload: refund.payload, app: app), app: app, now: time)
        let account = try await store.feedAccount(app: app.id, originalTransactionId: refund.payload.originalTransactionId ?? id)
        return [try await deliver(refund, to: account, app: app, now: time)]
    }

    private func approve(_ app: AppConfiguration, _ ca: TestStoreCA, _ request: TestStoreRequest) async throws -> [TestStoreChange.Transaction] {
        let account = try PublicRoutes.storeAccount(try request.required(request.storeAccount, "store_account"))
        let pending = try await store.takePending(app: app.id, account: account, pendingId: request.pendingId)
        guard !pending.isEmpty else { throw APIError(.notFound, "no purchase of account '\(account)' waits for approval") }
        let time = now()
        var made: [TestStoreChange.Transaction] = []
        for purchase in pending {
            guard
                let minted = try ca.mintPurchase(
                    of: purchase.productId, for: app, appAccountToken: purchase.appAccountToken.flatMap(UUID.init(uuidString:)),
                    purchaseDate: time)
            else { throw PublicRoutes.unknownProduct(purchase.productId, app: app) }
            made.append(try await deliver(minted, to: account, app: app, now: time))
        }
        return made
    }

    private func share(_ app: AppConfiguration, _ ca: TestStoreCA, _ request: TestStoreRequest) async throws -> [TestStoreChange.Transaction] {
        let id = try request.required(request.transactionId, "transaction_id")
        let member = try PublicRoutes.storeAccount(try request.required(request.storeAccount, "store_account"))
        let stored = try await storedTransaction(app: app) { try await store.signedTransaction(app: app.id, transactionId: id) }
        guard stored.payload.type != .consumable else { throw APIError(.invalidField, "consumables cannot be shared with a family") }
        let time = now()
        return [try await deliver(try ca.mintFamilyShare(of: stored.payload, now: time), to: member, app: app, now: time)]
    }

    private func purchaseForAccount(_ app: AppConfiguration, _ ca: TestStoreCA, _ request: TestStoreRequest) async throws -> [TestStoreChange
        .Transaction]
    {
        let account = try PublicRoutes.storeAccount(try request.required(request.storeAccount, "store_account"))
        let productId = try request.required(request.productId, "product_id")
        let token = try request.appUserId.map { user throws(APIError) in
            AppAccountToken.forAppUserID(try AppUserIDRules.validated(user, percentEncoded: false))
        }
        let time = now()
        guard let minted = try ca.mintPurchase(of: productId, for: app, appAccountToken: token, purchaseDate: time) else {
            throw PublicRoutes.unknownProduct(productId, app: app)
        }
        return [try await deliver(minted, to: account, app: app, now: time)]
    }

    /// A test-store admin route: the app must list TestStore; the body is one JSON object.
    private func testStoreRoute(
        _ router: RouterGroup<ServerRequestContext>, _ action: String,
        _ handler: @escaping @Sendable (AppConfiguration, TestStoreCA, TestStoreRequest) async throws -> [TestStoreChange.Transaction]
    ) {
        route(router, .post, RouterPath("/v1/admin/test_store/" + action)) { app, request, context in
            let testStore = try PublicRoutes.testStore(testStore, for: app)
            var request = request
            let body = try await JSONBody.body(TestStoreRequest.self, of: &request, context: context)
            let made = try await handler(app, testStore, body)
            context.logger.info("test store \(action)", metadata: ["app": "\(app.id)", "transactions": "\(made.count)"])
            return try await Self.json(TestStoreChange(transactions: made))
        }
    }

    /// A transaction the server holds for `app`, read back through the app's verifier.
    private func storedTransaction(app: AppConfiguration, _ read: () async throws -> String?) async throws -> (
        jws: String, payload: TransactionPayload
    ) {
        guard let jws = try await read() else { throw APIError(.notFound, "no transaction with that id is recorded for app '\(app.id)'") }
        guard let verifier = verifiers[app.id] else { throw APIError(.internalError, "no store verifier for app '\(app.id)'") }
        let payload: TransactionPayload
        do {
            payload = try await verifier.verify(jws, as: TransactionPayload.self)
        } catch {
            throw APIError(storeRefusal: error, of: "the stored transaction")
        }
        guard payload.environment == .testStore else {
            throw APIError(
                .wrongEnvironment,
                "only test-store transactions can be changed by the test store (this one is \(payload.environment?.rawValue ?? "unknown"))")
        }
        return (jws, payload)
    }

    /// Puts a minted transaction in `account`'s transactions (when there is an account).
    private func deliver(_ minted: (jws: String, payload: TransactionPayload), to account: String?, app: AppConfiguration, now: Date) async throws
        -> TestStoreChange.Transaction
    {
        let id = minted.payload.transactionId ?? ""
        let chain = minted.payload.originalTransactionId ?? id
        if let account {
            try await store.appendToFeed(
                app: app.id, account: account, transactionId: id, originalTransactionId: chain, signedTransaction: minted.jws, now: now)
        }
        return TestStoreChange.Transaction(
            transactionId: id, originalTransactionId: chain, productId: minted.payload.productId ?? "", storeAccount: account,
            expiresDateMs: minted.payload.expiresDate.map(\.epochMilliseconds),
            revocationDateMs: minted.payload.revocationDate.map(\.epochMilliseconds), signedTransaction: minted.jws
        )
    }
}
