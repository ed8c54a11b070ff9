import CountersignAppStore
import CountersignAppStoreServerAPI
import CountersignCore
import CountersignLedger
import CountersignServerCore
import CountersignStorage
import Foundation

/// `countersign import appstore`: the App Store's signed history of each purchase chain that
/// holds imported records (``CustomerDatabase/importedChains(app:)``), and of chains named in a
/// file, fetched through Get Transaction History (every page) and recorded through the posted
/// purchase path: each signed transaction replaces the imported record of the same id, and
/// adds the transactions the export lacked.
///
/// Transactions of other chains in a customer's history are left for their own chain's turn
/// (their owner may be another customer). Imported records of a chain whose complete history
/// does not hold them are marked `not_in_store_history` and no longer asked about.
///
/// Resumable: a chain is done once none of its records waits (each write is its own
/// transaction, and recording a signed copy twice changes nothing), so a run killed at any
/// point and started again asks again only about the chains not yet done. A 429 waits for
/// `Retry-After` (else a growing pause), a 5xx or a lost connection is retried after a growing
/// pause, up to `attempts` times; a chain that still fails is reported and left for the next run.
public struct AppStoreImport: Sendable {
    public struct Options: Sendable {
        public var deliversEvents = false
        /// Tries of one request before its chain is reported failed.
        public var attempts = 6
        /// The first pause after a failure (doubled each time, at most a minute).
        public var pause: TimeInterval = 1
        /// Chains to import beside those holding imported records: original transaction id and
        /// the app user id that owns it.
        public var chains: [(originalTransactionId: String, appUserId: String)] = []

        public init() {}
    }

    public struct Report: Sendable {
        public var chains = 0
        /// Signed transactions recorded: new to the database, replacing an imported record, or
        /// already stored as signed.
        public var added = 0
        public var confirmed = 0
        public var unchanged = 0
        /// Imported records the App Store's history does not hold.
        public var notInStoreHistory = 0
        /// Chains that could not be imported this run (asked again next run).
        public var failures: [String] = []
        /// Chains that met another owner (the app's transfer behaviour decided).
        public var ownership: [String] = []
    }

    let app: AppConfiguration
    let storeAPI: StoreServerAPI
    let store: CustomerDatabase
    let options: Options
    let now: @Sendable () -> Date

    init(app: AppConfiguration, storeAPI: StoreServerAPI, store: CustomerDatabase, options: Options, now: @escaping @Sendable () -> Date) {
        self.app = app
        self.storeAPI = storeAPI
        self.store = store
        self.options = options
        self.now = now
    }

    /// An import for `app` of a server's deployment (its verifiers, In-App Purchase key and
    /// database).
    public init(app: AppConfiguration, server: CountersignServer, options: Options) {
        self.init(app: app, storeAPI: server.storeAPI, store: server.store, options: options, now: server.configuration.now)
    }

    public func run(progress: @escaping @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> Report {
        guard storeAPI.isConfigured(for: app) else {
            throw APIError(.storeAPINotConfigured, "app '\(app.id)' has no In-App Purchase key (inAppPurchaseKey) to ask the App Store with")
        }
        var chains = try await store.importedChains(app: app.id)
        let known = Set(chains.map(\.originalTransactionId))
        let environment = storeAPI.environments(for: app).first ?? AppStoreEnvironment.production.rawValue
        for named in options.chains where !known.contains(named.originalTransactionId) {
            chains.append(
                .init(originalTransactionId: named.originalTransactionId, environment: environment, owner: named.appUserId, unconfirmed: []))
        }
        var report = Report()
        report.chains = chains.count
        progress(0, chains.count)
        for (index, chain) in chains.enumerated() {
            do {
                try await importChain(chain, into: &report)
            } catch {
                report.failures.append("chain \(chain.originalTransactionId): \(error)")
            }
            progress(index + 1, chains.count)
        }
        return report
    }

    func importChain(_ chain: CustomerDatabase.ImportedChain, into report: inout Report) async throws {
        guard let owner = chain.owner else {
            report.failures.append("chain \(chain.originalTransactionId): owned by nobody (its customer was deleted); not asked")
            return
        }
        let client = try await storeAPI.client(for: app, environment: chain.environment)
        var history: [VerifiedTransaction] = []
        var revision: String?
        repeat {
            let page = try await withRetries { () async throws(AppStoreServerAPIError) in
                try await client.transactionHistory(transactionId: chain.originalTransactionId, revision: revision)
            }
            for jws in page.signedTransactions {
                let payload = try await storeAPI.verified(jws, as: TransactionPayload.self, app: app)
                guard payload.originalTransactionId == chain.originalTransactionId else { continue }
                var transaction = try VerifiedTransaction(jws: jws, payload: payload, app: app)
                transaction.origin = .importedHistory(deliversEvents: options.deliversEvents)
                history.append(transaction)
            }
            revision = page.hasMore ? page.revision : nil
        } while revision != nil
        // The chain counts as done once no record of it waits: so the transactions the export
        // lacked are written first, the imported records' replacements after them, and the
        // records Apple does not know are marked last. Killed before the end, the chain still
        // waits and is asked again.
        let (added, replacing) = history.partitioned { chain.unconfirmed.contains($0.transactionId) }
        for transaction in added + replacing {
            let (status, note) = try await store.recordForImport(
                transaction, app: app, poster: owner, chain: chain.originalTransactionId, now: now())
            if let note { report.ownership.append(note) }
            guard let status else { return }  // kept with another owner: so is every transaction of the chain
            switch status {
            case .new: report.added += 1
            case _ where !chain.unconfirmed.contains(transaction.transactionId): report.unchanged += 1
            default: report.confirmed += 1
            }
        }
        let seen = Set(history.map(\.transactionId))
        report.notInStoreHistory += try await store.markNotInStoreHistory(
            app: app.id, chain: chain.originalTransactionId, environment: chain.environment, transactions: chain.unconfirmed.subtracting(seen))
    }

    /// Runs `request`, waiting and trying again after a 429, a 5xx or a lost connection.
    func withRetries<T>(_ request: () async throws(AppStoreServerAPIError) -> T) async throws -> T {
        var pause = options.pause
        for attempt in 1... {
            do {
                return try await request()
            } catch {
                let wait: TimeInterval
                switch error.kind {
                case .rateLimited(let retryAfter): wait = retryAfter ?? pause
                case .server, .transport: wait = pause
                default: throw error
                }
                guard attempt < options.attempts else { throw error }
                try await Task.sleep(for: .milliseconds(Int64(clamping: min(wait, 60) * 1000, to: 0...60_000)))
                pause = min(pause * 2, 60)
            }
        }
        fatalError("unreachable")
    }
}
