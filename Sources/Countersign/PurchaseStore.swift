import Foundation

/// A store transaction as the SDK sees it.
public struct StoreTransaction: Sendable, Hashable, Codable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    /// The signed transaction (JWS) the server verifies.
    public var jws: String
    public var purchaseDate: Date
    /// Nil for non-subscriptions.
    public var expirationDate: Date?
    public var revocationDate: Date?
    /// Whether the store verified the transaction on the device (StoreKit 2's
    /// `VerificationResult.verified`); only verified transactions count offline.
    public var isVerified: Bool

    /// RevenueCat's names.
    public var transactionIdentifier: String { transactionId }
    public var productIdentifier: String { productId }

    public init(
        transactionId: String, originalTransactionId: String, productId: String, jws: String, purchaseDate: Date,
        expirationDate: Date? = nil, revocationDate: Date? = nil, isVerified: Bool
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.jws = jws
        self.purchaseDate = purchaseDate
        self.expirationDate = expirationDate
        self.revocationDate = revocationDate
        self.isVerified = isVerified
    }
}

/// What the SDK needs from a store: StoreKit 2 on Apple platforms, the test store anywhere.
public protocol PurchaseStore: Sendable {
    /// The products the store knows among `identifiers` (unknown ones are left out).
    func products(_ identifiers: [String]) async throws -> [StoreProduct]
    /// Buys `productId`; `appAccountToken` binds the transaction to the app user.
    func purchase(_ productId: String, appUserID: String, appAccountToken: UUID) async throws -> StoreTransaction
    /// Buys `productId` redeeming a promotional offer the server signed (the store checks the
    /// signature). Stores that take none refuse it rather than charge the full price.
    func purchase(_ productId: String, appUserID: String, appAccountToken: UUID, promotionalOffer: PromotionalOffer) async throws
        -> StoreTransaction
    /// The transactions that currently entitle the user (StoreKit's `currentEntitlements`).
    func currentEntitlements() async throws -> [StoreTransaction]
    /// Transactions not finished yet (StoreKit's `unfinished`).
    func unfinishedTransactions() async throws -> [StoreTransaction]
    func finish(_ transaction: StoreTransaction) async throws
    /// Transactions that reach the account outside ``purchase(_:appUserID:appAccountToken:)``
    /// (StoreKit's `Transaction.updates`): renewals, refunds, approved Ask-to-Buy purchases,
    /// Family Sharing grants, purchases on another device. The SDK listens from `configure` on.
    func transactionUpdates() -> AsyncStream<StoreTransaction>
    /// Whether purchases are test-store purchases (the SDK warns loudly).
    var isTestStore: Bool { get }
}

extension PurchaseStore {
    public var isTestStore: Bool { false }

    public func purchase(_ productId: String, appUserID: String, appAccountToken: UUID, promotionalOffer: PromotionalOffer) async throws
        -> StoreTransaction
    {
        throw PurchasesError.store(.invalidOfferIdentifier, detail: "this store takes no promotional offers")
    }

    /// A store that never hears of transactions outside its own purchases.
    public func transactionUpdates() -> AsyncStream<StoreTransaction> { AsyncStream { $0.finish() } }
}
