import CountersignCore
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A ``PurchaseStore`` backed by the server's test store (`/v1/test_store/...`), so the whole SDK runs
/// anywhere, Linux included. Its ledger (which transactions exist, which are finished)
/// lives on disk like StoreKit's. A minted transaction counts as verified on the device only when
/// the server's signed answer carrying it verified against the pinned roots.
///
/// Never ship an app with it: test-store transactions unlock only apps that list TestStore.
public final class TestStore: PurchaseStore, @unchecked Sendable {
    public var isTestStore: Bool { true }

    struct Entry: Codable {
        var transaction: StoreTransaction
        var productType: String
        var finished: Bool
    }

    /// How the test store answers a purchase, as StoreKit Testing lets a developer choose.
    public enum PurchaseOutcome: Sendable {
        /// Sold (the default).
        case succeed
        /// The customer cancels.
        case cancel
        /// The purchase waits for approval (Ask to Buy).
        case pend
    }

    private let backend: Backend
    private let ledgerURL: URL
    private let cursorURL: URL
    private let lock = NSLock()
    private var outcome = PurchaseOutcome.succeed

    /// The test store account this device is signed in to (StoreKit's Apple ID): devices sharing
    /// one hear each other's purchases; a family member's account hears what is shared with it.
    public let storeAccount: String
    /// How often ``transactionUpdates()`` asks the server for the account's new transactions.
    public let pollInterval: Duration

    /// How the next purchases are answered, until set again.
    public var nextPurchaseOutcome: PurchaseOutcome {
        get { lock.withLock { outcome } }
        set { lock.withLock { outcome = newValue } }
    }

    /// - Parameters:
    ///   - storeAccount: the account (1 to 64 letters, digits, `-`, `_`, `.`); nil: one made up
    ///     for this directory on first use and kept there, like a device's Apple ID.
    ///   - pollInterval: how often the account's transactions are asked for while the SDK listens.
    public init(
        serverURL: URL, apiKey: String, rootPublicKeys: [String], directory: URL, storeAccount: String? = nil,
        pollInterval: Duration = .seconds(5), session: URLSession = .shared
    ) throws {
        let verifier: SignatureVerifier
        do {
            verifier = SignatureVerifier(configuration: try SignatureVerifier.Configuration(rootKeysBase64: rootPublicKeys))
        } catch {
            throw PurchasesError.configuration(error.description)
        }
        // Informational: the store keeps a transaction whose answer failed, marked unverified.
        backend = Backend(apiKey: apiKey, serverURL: serverURL, mode: .informational, verifier: verifier, session: session, etags: nil)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        ledgerURL = directory.appendingPathComponent("test-store-ledger.json")
        cursorURL = directory.appendingPathComponent("test-store-cursor.json")
        let accountURL = directory.appendingPathComponent("test-store-account.json")
        if let storeAccount {
            self.storeAccount = storeAccount
        } else if let saved = (try? Data(contentsOf: accountURL)).flatMap({ try? JSONDecoder().decode(String.self, from: $0) }) {
            self.storeAccount = saved
        } else {
            self.storeAccount = "device-" + UUID().uuidString.lowercased()
            try JSONEncoder().encode(self.storeAccount).write(to: accountURL, options: .atomic)
        }
        self.pollInterval = pollInterval
    }

    /// The configured products among `identifiers`, from the server's catalogue (titles,
    /// prices, periods and introductory offers of `countersign.json`).
    public func products(_ identifiers: [String]) async throws -> [StoreProduct] {
        let answer: Backend.Answer
        do {
            answer = try await backend.perform(.get("/v1/test_store/products"))
        } catch {
            throw PurchasesError.purchaseNotCompleted("the test store's catalogue is unavailable: \(error)")
        }
        guard let catalogue = try? JSONDecoder().decode(TestStoreProducts.self, from: answer.body) else {
            throw PurchasesError.malformedAnswer(path: "/v1/test_store/products")
        }
        let wanted = Set(identifiers)
        return catalogue.products.filter { wanted.contains($0.identifier) }.compactMap(StoreProduct.init(testStore:))
    }

    public func purchase(_ productId: String, appUserID: String, appAccountToken: UUID) async throws -> StoreTransaction {
        try await purchase(productId, appUserID: appUserID, appAccountToken: appAccountToken, offer: nil)
    }

    /// Buys with a promotional offer: the test store checks its signature as the App Store
    /// does (and charges the product's price: its catalogue has no offer prices).
    public func purchase(_ productId: String, appUserID: String, appAccountToken: UUID, promotionalOffer: PromotionalOffer) async throws
        -> StoreTransaction
    {
        try await purchase(productId, appUserID: appUserID, appAccountToken: appAccountToken, offer: promotionalOffer)
    }

    private func purchase(_ productId: String, appUserID: String, appAccountToken: UUID, offer: PromotionalOffer?) async throws
        -> StoreTransaction
    {
        var fields = [
            ("app_user_id", appUserID), ("product_id", productId), ("app_account_token", appAccountToken.uuidString),
            ("store_account", storeAccount),
        ]
        if let signed = offer?.signedData {
            fields += [
                ("promotional_offer_identifier", signed.identifier), ("promotional_offer_key_identifier", signed.keyIdentifier),
                ("promotional_offer_nonce", signed.nonce.uuidString.lowercased()), ("promotional_offer_timestamp", String(signed.timestamp)),
                ("promotional_offer_signature", signed.signature),
            ]
        }
        switch nextPurchaseOutcome {
        case .succeed: break
        case .cancel: throw PurchasesError.purchaseCancelled(productId: productId)
        case .pend:
            // Ask to Buy: the request waits on the server; its approval reaches this account's
            // transactions (`POST /v1/admin/test_store/approve`, `countersign store approve`).
            do {
                _ = try await backend.perform(.post("/v1/test_store/purchase_requests", fields))
            } catch {
                throw PurchasesError.purchaseNotCompleted("the test store did not take the request for '\(productId)': \(error)")
            }
            throw PurchasesError.paymentPending(productId: productId)
        }
        let answer: Backend.Answer
        do {
            answer = try await backend.perform(.post("/v1/test_store/purchases", fields))
        } catch PurchasesError.server(_, APIErrorCode.promotionalOfferUnavailable.rawValue?, let message) where offer != nil {
            // As StoreKit refuses an offer it cannot accept (`Product.PurchaseError.invalidOfferSignature`).
            throw StoreFailure.invalidOfferSignature.error(productId: productId, detail: message)
        } catch {
            throw PurchasesError.purchaseNotCompleted("the test store did not sell '\(productId)': \(error)")
        }
        guard let sold = try? JSONDecoder().decode(TestPurchaseAnswer.self, from: answer.body),
            let entry = Self.entry(jws: sold.signedTransaction, verified: answer.verification == .verified)
        else { throw PurchasesError.purchaseNotCompleted("the test store's answer is malformed") }
        try update { $0.append(entry) }
        return entry.transaction
    }

    public func currentEntitlements() async throws -> [StoreTransaction] {
        let now = Date()
        // Like StoreKit: no consumables, the latest transaction of each subscription.
        var latest: [String: StoreTransaction] = [:]
        for entry in ledger() where entry.productType != "Consumable" && entry.transaction.revocationDate == nil {
            let transaction = entry.transaction
            if let expires = transaction.expirationDate, expires <= now { continue }
            if let current = latest[transaction.originalTransactionId], current.purchaseDate >= transaction.purchaseDate { continue }
            latest[transaction.originalTransactionId] = transaction
        }
        return latest.values.sorted { $0.purchaseDate < $1.purchaseDate }
    }

    /// Puts a transaction the store account received outside `purchase` into the ledger,
    /// unfinished, as StoreKit delivers renewals, purchases on another device, Family Sharing
    /// grants and refunds: a signed transaction (for tests and tools; `verified` says whether the
    /// device trusts its signature). A transaction already in the ledger is replaced by the newer
    /// copy (a refund's revocation date, say).
    public func deliver(signedTransaction jws: String, verified: Bool = true) throws {
        guard let entry = Self.entry(jws: jws, verified: verified) else {
            throw PurchasesError.purchaseNotCompleted("not a signed transaction")
        }
        try update { entries in
            entries.removeAll { $0.transaction.transactionId == entry.transaction.transactionId }
            entries.append(entry)
        }
    }

    /// The account's transactions as StoreKit's `Transaction.updates` delivers them: first those
    /// still unfinished on this device (as StoreKit does at launch), then each new one the server
    /// holds for the account, asked for every ``pollInterval``. A transaction already in this
    /// device's ledger (its own purchase) is not delivered again. Answers that fail
    /// verification are delivered marked unverified, as StoreKit marks what it cannot verify.
    ///
    /// The stream polls in its consumer's own task (no task of its own), so cancelling the
    /// consumer ends it at once.
    public func transactionUpdates() -> AsyncStream<StoreTransaction> {
        let waiting = LockedState(ledger().filter { !$0.finished }.map(\.transaction))
        return AsyncStream(unfolding: { [self] in
            while !Task.isCancelled {
                if let next = waiting.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { return next }
                let fresh = (try? await pollAccount()) ?? []
                if fresh.isEmpty {
                    try? await Task.sleep(for: pollInterval)
                } else {
                    waiting.withLock { $0 += fresh }
                }
            }
            return nil
        })
    }

    /// Asks for the account's transactions after the saved cursor; puts the new ones in the
    /// ledger (unfinished) and returns them.
    private func pollAccount() async throws -> [StoreTransaction] {
        let after = lock.withLock { (try? Data(contentsOf: cursorURL)).flatMap { try? JSONDecoder().decode(Int64.self, from: $0) } ?? 0 }
        let path = "/v1/test_store/accounts/\(storeAccount.pathSegmentEncoded)/transactions"
        // In a task of its own, which the listener's cancellation does not reach: cancelling a
        // URLSession request in flight can crash FoundationNetworking on Linux.
        let backend = backend
        let answer = try await Task { try await backend.perform(.get(path, query: "after=\(after)")) }.value
        guard let feed = try? JSONDecoder().decode(TestStoreFeed.self, from: answer.body) else { return [] }
        // The query is not signed: entries at or before the cursor are a replay and are ignored.
        let entries = feed.transactions.filter { $0.sequence > after }.sorted { $0.sequence < $1.sequence }
        // Nothing new: the ledger is not rewritten (another TestStore on the same directory may
        // be writing it, and a rewrite of what was read here would drop its change).
        guard !entries.isEmpty else { return [] }
        var delivered: [StoreTransaction] = []
        try update { ledger in
            for item in entries {
                guard let entry = Self.entry(jws: item.signedTransaction, verified: answer.verification == .verified),
                    !ledger.contains(where: { $0.transaction.jws == item.signedTransaction })
                else { continue }
                ledger.removeAll { $0.transaction.transactionId == entry.transaction.transactionId }
                ledger.append(entry)
                delivered.append(entry.transaction)
            }
        }
        if let last = entries.last?.sequence {
            try lock.withLock { try JSONEncoder().encode(last).write(to: cursorURL, options: .atomic) }
        }
        return delivered
    }

    public func unfinishedTransactions() async throws -> [StoreTransaction] {
        ledger().filter { !$0.finished }.map(\.transaction)
    }

    public func finish(_ transaction: StoreTransaction) async throws {
        try update { entries in
            for index in entries.indices where entries[index].transaction.transactionId == transaction.transactionId {
                entries[index].finished = true
            }
        }
    }

    private func ledger() -> [Entry] {
        lock.withLock {
            (try? Data(contentsOf: ledgerURL)).flatMap { try? JSONDecoder().decode([Entry].self, from: $0) } ?? []
        }
    }

    private func update(_ change: (inout [Entry]) -> Void) throws {
        try lock.withLock {
            var entries = (try? Data(contentsOf: ledgerURL)).flatMap { try? JSONDecoder().decode([Entry].self, from: $0) } ?? []
            change(&entries)
            try JSONEncoder().encode(entries).write(to: ledgerURL, options: .atomic)
        }
    }

    /// The fields of a signed transaction's payload the device needs (a JWS the test store or
    /// StoreKit signed; its signature is the server's business).
    struct TransactionFields: Decodable {
        var transactionId: String
        var originalTransactionId: String?
        var productId: String
        var type: String?
        var purchaseDate: Double?
        var expiresDate: Double?
        var revocationDate: Double?
    }

    /// Reads what the device needs from a signed transaction's payload.
    static func entry(jws: String, verified: Bool) -> Entry? {
        let segments = jws.split(separator: ".")
        guard segments.count == 3 else { return nil }
        var text = segments[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        guard let data = Data(base64Encoded: text), JSONSyntax.isValid(data, topLevel: .object),
            let payload = try? JSONDecoder().decode(TransactionFields.self, from: data)
        else { return nil }
        let date = { (milliseconds: Double?) in milliseconds.map { Date(timeIntervalSince1970: $0 / 1000) } }
        let transaction = StoreTransaction(
            transactionId: payload.transactionId, originalTransactionId: payload.originalTransactionId ?? payload.transactionId,
            productId: payload.productId, jws: jws, purchaseDate: date(payload.purchaseDate) ?? Date(),
            expirationDate: date(payload.expiresDate), revocationDate: date(payload.revocationDate), isVerified: verified
        )
        return Entry(transaction: transaction, productType: payload.type ?? "", finished: false)
    }
}
