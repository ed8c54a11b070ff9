import CountersignAppStore
import CountersignAppStoreServerAPI
import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignStorage
import Foundation
import Logging
import NIOConcurrencyHelpers

/// The App Store Server API for the apps with an In-App Purchase key: what the server asks
/// Apple when it cannot wait for a notification (a subscription past its expiry with no word, a
/// billing retry, an admin's refresh) or when an older app posts a legacy receipt.
///
/// Everything Apple answers is signed data and goes through the app's verifier like a posted
/// purchase; nothing is trusted for having come over this connection.
public final class StoreServerAPI: Sendable {
    struct Key: Sendable {
        var pem: String
        var keyId: String
        var issuerId: String
        var bundleId: String
    }

    private let keys: [String: Key]
    private let overrideURL: String?
    private let verifiers: [String: SignedDataVerifier]
    private let store: CustomerDatabase
    private let now: @Sendable () -> Date
    private let logger: Logger
    /// Clients by app and base URL, made on first use.
    private let clients = NIOLockedValueBox<[String: AppStoreServerAPIClient]>([:])
    /// Legacy receipts that reach the App Store Server API, per app (nil: no limit).
    private let lookups: RateLimiter?

    init(
        deployment: DeploymentConfiguration, dataDirectory: URL, verifiers: [String: SignedDataVerifier], store: CustomerDatabase,
        lookupRate: RateLimitSettings.Rate?, now: @escaping @Sendable () -> Date, logger: Logger
    ) throws {
        lookups = lookupRate.map { RateLimiter($0, now: now) }
        var keys: [String: Key] = [:]
        for app in deployment.apps {
            guard let configured = app.inAppPurchaseKey, let (pem, _) = try PromotionalOfferSigner.keyPEM(for: app, dataDirectory: dataDirectory)
            else { continue }
            keys[app.id] = Key(pem: pem, keyId: configured.keyId, issuerId: configured.issuerId, bundleId: app.bundleId)
        }
        self.keys = keys
        overrideURL = deployment.appStoreServerAPIURL
        self.verifiers = verifiers
        self.store = store
        self.now = now
        self.logger = logger
        if let overrideURL { logger.warning("appStoreServerAPIURL sends App Store Server API calls to \(overrideURL) (testing only)") }
    }

    /// Whether the app can ask the App Store Server API.
    func isConfigured(for app: AppConfiguration) -> Bool { keys[app.id] != nil }

    /// The app's In-App Purchase key; a 422 (code 4211) saying what needed it when there is none.
    private func inAppPurchaseKey(of app: AppConfiguration, needed purpose: String) throws(APIError) -> Key {
        guard let key = keys[app.id] else {
            throw APIError(
                .storeAPINotConfigured,
                "\(purpose), and app '\(app.id)' has no In-App Purchase key (inAppPurchaseKey in countersign.json) to ask the App Store Server API with"
            )
        }
        return key
    }

    /// The client for `environment`'s host (or the configured stand-in).
    func client(for app: AppConfiguration, environment: String) async throws(APIError) -> AppStoreServerAPIClient {
        let key = try inAppPurchaseKey(of: app, needed: "the App Store must be asked")
        let url =
            overrideURL
            ?? (environment == AppStoreEnvironment.production.rawValue
                ? AppStoreServerAPIClient.Configuration.productionURL : AppStoreServerAPIClient.Configuration.sandboxURL)
        let name = app.id + "\u{0}" + url
        if let known = clients.withLockedValue({ $0[name] }) { return known }
        var configuration = AppStoreServerAPIClient.Configuration(
            baseURL: url, privateKeyPEM: key.pem, keyId: key.keyId, issuerId: key.issuerId,
            bundleId: key.bundleId)
        configuration.now = now
        let made: AppStoreServerAPIClient
        do {
            made = try await AppStoreServerAPIClient(configuration: configuration)
        } catch {
            throw APIError(.storeAPIFailed, "the In-App Purchase key of app '\(app.id)' cannot sign App Store Server API tokens")
        }
        return clients.withLockedValue { clients in
            if let raced = clients[name] { return raced }
            clients[name] = made
            return made
        }
    }

    /// The environments to ask, in order, for data of unknown environment: Production first
    /// (where real purchases are), then Sandbox, as Apple advises; one when a stand-in is set.
    func environments(for app: AppConfiguration) -> [String] {
        if overrideURL != nil { return [app.environments.first ?? AppStoreEnvironment.production.rawValue] }
        let listed = [AppStoreEnvironment.production.rawValue, AppStoreEnvironment.sandbox.rawValue].filter(app.environments.contains)
        return listed.isEmpty ? [AppStoreEnvironment.sandbox.rawValue] : listed
    }

    /// Verifies App Store signed data with the app's verifier.
    func verified<T: AppStoreSignedPayload>(_ jws: String, as type: T.Type, app: AppConfiguration) async throws -> T {
        guard let verifier = verifiers[app.id] else { throw APIError(.internalError, "no store verifier for app '\(app.id)'") }
        do {
            return try await verifier.verify(jws, as: type)
        } catch {
            throw APIError(storeRefusal: error, of: "the App Store Server API's answer")
        }
    }

    static func failure(_ error: AppStoreServerAPIError) -> APIError {
        APIError(.storeAPIFailed, "the App Store Server API did not answer usefully: \(error.message)")
    }

    // MARK: Reconciliation

    /// Asks Get All Subscription Statuses for each chain and applies what it says (the latest
    /// transaction and renewal state of each subscription it lists), with the events that makes:
    /// a renewal or a refund that no notification brought is found here. Returns how many
    /// subscriptions were applied.
    @discardableResult
    func refresh(app: AppConfiguration, chains: [(chain: String, environment: String)]) async throws -> Int {
        _ = try inAppPurchaseKey(of: app, needed: "a refresh asks the App Store")
        var applied = 0
        var asked = Set<String>()
        // The test store's purchases are not Apple's to answer for (unless a stand-in plays Apple).
        for (chain, environment) in chains
        where !asked.contains(chain)
            && (environment != AppStoreEnvironment.testStore.rawValue || overrideURL != nil)
        {
            let answer: StatusResponse
            do {
                answer = try await client(for: app, environment: environment).subscriptionStatuses(transactionId: chain)
            } catch let error as AppStoreServerAPIError {
                if error.kind == .notFound { continue }
                throw Self.failure(error)
            }
            for group in answer.data {
                for last in group.lastTransactions {
                    if let id = last.originalTransactionId { asked.insert(id) }
                    var transaction: VerifiedTransaction?
                    if let jws = last.signedTransactionInfo {
                        transaction = try VerifiedTransaction(
                            jws: jws, payload: try await verified(jws, as: TransactionPayload.self, app: app), app: app)
                    }
                    var renewal: RenewalInfoPayload?
                    if let jws = last.signedRenewalInfo {
                        renewal = try await verified(jws, as: RenewalInfoPayload.self, app: app)
                    }
                    try await store.applyStoreState(transaction: transaction, renewal: renewal, app: app, now: now())
                    applied += 1
                }
            }
            asked.insert(chain)
        }
        return applied
    }

    // MARK: Legacy receipts

    /// The signed transactions behind a legacy receipt: the receipt verified (its signature
    /// chains to Apple's root, its bundle id is the app's; ``AppReceiptVerifier``), then the
    /// customer's whole history fetched and each transaction verified. Refused with 422 when the
    /// app does not accept legacy receipts or has no In-App Purchase key, 400 for a receipt that
    /// cannot be read, 422 for one the App Store did not sign for this app, 429 past the app's
    /// rate of App Store Server API lookups.
    func transactions(inLegacyReceipt text: String, app: AppConfiguration) async throws -> (
        receiptTransaction: String, transactions: [VerifiedTransaction]
    ) {
        guard app.legacyReceipts == true else {
            throw APIError(
                .legacyReceiptsDisabled,
                "fetch_token is a legacy receipt, and app '\(app.id)' does not accept them (legacyReceipts in countersign.json)")
        }
        _ = try inAppPurchaseKey(of: app, needed: "fetch_token is a legacy receipt")
        guard let verifier = verifiers[app.id] else { throw APIError(.internalError, "no store verifier for app '\(app.id)'") }
        var receiptVerifier = AppReceiptVerifier(anchors: AppReceiptVerifier.anchors(for: verifier.configuration.anchors), bundleId: app.bundleId)
        receiptVerifier.now = now
        let receipt: AppReceipt
        do {
            receipt = try await receiptVerifier.verify(base64: text)
        } catch {
            switch error.kind {
            case .malformed:
                throw APIError(.invalidField, "fetch_token is neither a signed transaction nor a readable legacy receipt: \(error.description)")
            case .untrusted:
                throw APIError(.invalidStoreSignature, "fetch_token is a legacy receipt the App Store did not sign: \(error.description)")
            case .wrongApp: throw APIError(.wrongApp, "fetch_token is a legacy receipt of another app: \(error.description)")
            }
        }
        guard let id = receipt.transactionIds.first else {
            throw APIError(.invalidField, "fetch_token is a legacy receipt without any in-app purchase")
        }
        // Only a receipt the App Store signed spends the app's App Store Server API rate.
        if let wait = lookups?.admit(app.id) {
            throw APIError(.rateLimited, "too many legacy receipts for app '\(app.id)' at once; try again later", retryAfter: wait)
        }
        for environment in environments(for: app) {
            do {
                let signed = try await client(for: app, environment: environment).allTransactions(transactionId: id)
                var transactions: [VerifiedTransaction] = []
                for jws in signed {
                    transactions.append(
                        try VerifiedTransaction(jws: jws, payload: try await verified(jws, as: TransactionPayload.self, app: app), app: app))
                }
                return (id, transactions)
            } catch let error as AppStoreServerAPIError where error.kind == .notFound {
                continue  // Production says not found: try Sandbox
            } catch let error as AppStoreServerAPIError {
                throw Self.failure(error)
            }
        }
        throw APIError(.invalidStoreSignature, "the App Store does not know the legacy receipt's transaction")
    }
}
