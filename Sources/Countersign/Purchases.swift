import CountersignCore
import Foundation

/// Receives CustomerInfo updates (the same ones ``Purchases/customerInfoStream`` yields), on the
/// main actor (the main thread), as RevenueCat's delegate does. Not `Sendable`, so an app's existing delegate class conforms as
/// it conforms to RevenueCat's.
public protocol PurchasesDelegate: AnyObject {
    func purchases(_ purchases: Purchases, receivedUpdated customerInfo: CustomerInfo)
}

/// What a purchase answers, as RevenueCat's `PurchaseResultData`.
public typealias PurchaseResultData = (transaction: StoreTransaction?, customerInfo: CustomerInfo, userCancelled: Bool)

/// Where `customerInfo(fetchPolicy:)` may get its answer, as RevenueCat's `CacheFetchPolicy`.
/// The cache is stale after 5 minutes while the app is in the foreground, 25 hours in the
/// background.
public enum CacheFetchPolicy: Sendable {
    /// The cache at once, fresh or stale; a stale one is refreshed in the background. Without a
    /// cache, the server. (RevenueCat's default.)
    case cachedOrFetched
    /// The cache while it is fresh, else the server, waited for (offline: on-device
    /// entitlements, else the error; never the stale cache).
    case notStaleCachedOrFetched
    /// The server (offline: on-device entitlements, else the error; never the cache).
    case fetchCurrent
    /// The cache only.
    case fromCacheOnly
}

/// The SDK's entry point.
///
/// A class, as RevenueCat's is, so code written against RevenueCat's API compiles unchanged:
/// `Purchases.shared.appUserID`, `Purchases.shared.delegate = self` and
/// `for await info in Purchases.shared.customerInfoStream` need no `await`. Its mutable state
/// sits behind one lock, never held across an `await` or a call into app code.
public final class Purchases: @unchecked Sendable {
    /// How long a cached CustomerInfo or offerings stay fresh while the app is in the foreground
    /// (RevenueCat's 5 minutes)…
    public static let cacheFreshness: TimeInterval = 5 * 60
    /// …and while it is in the background (RevenueCat's 25 hours).
    public static let backgroundCacheFreshness: TimeInterval = 25 * 3_600

    public let configuration: Configuration
    public var appUserID: String { state.withLock { $0.appUserID } }
    public var isAnonymous: Bool { ReservedAppUserID.isAnonymous(appUserID) }

    let backend: Backend
    let disk: CacheFiles
    let etags: ETagCache
    let timeFloor: VerifiedTimeFloor
    /// The verification policy from the server's verified answers.
    let policy: VerificationPolicyState
    let reporter: FailureReporter?

    /// Everything that changes after `init`.
    struct State {
        var appUserID: String
        weak var delegate: (any PurchasesDelegate)?
        var continuations: [UUID: AsyncStream<CustomerInfo>.Continuation] = [:]
        var lastDelivered: CustomerInfo?
        /// The background refresh of a stale cache under way, if any (tests await it).
        var backgroundRefresh: Task<Void, Never>?
        /// Store transactions (by their signed form) handled or being handled since launch: one
        /// that arrives both as unfinished and through the updates stream is posted once.
        var handledTransactions: Set<String> = []
        var transactionListener: Task<Void, Never>?
        var attributeSync: Task<Void, Never>?
        /// What configure started: the first launch's post of the store's entitlements and the
        /// CustomerInfo fetch (tests await it).
        var launchWork: Task<Void, Never>?
        /// Products being bought now: a second purchase of one is refused.
        var purchasesInProgress: Set<String> = []
        /// The offerings fetched last, for whom and when.
        var offerings: (offerings: Offerings, user: String, fetchedAt: Date)?
        /// Between ``applicationDidEnterBackground()`` and ``applicationWillEnterForeground()``.
        var isBackgrounded = false
        /// The app lifecycle notifications observed (Apple platforms).
        var lifecycleObservers: [any NSObjectProtocol] = []
        /// Entitlement tokens handed out, by audience, while they are fresh and say what the
        /// last CustomerInfo said (cleared when it changes or the user does).
        var entitlementTokens: [String: EntitlementTokenCache] = [:]
    }

    let state: LockedState<State>

    /// The background refresh of a stale cache under way, if any.
    var backgroundRefresh: Task<Void, Never>? { state.withLock { $0.backgroundRefresh } }
    /// What configure started, if anything.
    var launchWork: Task<Void, Never>? { state.withLock { $0.launchWork } }

    private static let warnedAboutTestStore = OnceFlag()
    private static let sharedLock = NSLock()
    nonisolated(unsafe) private static var sharedInstance: Purchases?

    /// The instance `configure(with:)` made last. As in RevenueCat it is not optional: reading
    /// it before `configure(with:)` is a programming error and stops with a message saying so
    /// (``isConfigured`` tells whether it is safe).
    public static var shared: Purchases {
        guard let instance = sharedLock.withLock({ sharedInstance }) else {
            preconditionFailure("Purchases.shared was read before Purchases.configure(with:) was called")
        }
        return instance
    }

    /// Whether `configure(with:)` has made ``shared``.
    public static var isConfigured: Bool { sharedLock.withLock { sharedInstance != nil } }

    /// Configures the SDK (and ``shared``), as RevenueCat's `configure(with:)`: an unusable
    /// configuration (root keys that are not Ed25519 public keys, storage that cannot be
    /// written) stops with a message saying what is wrong. ``configure(validating:)`` throws instead.
    @discardableResult
    public static func configure(with configuration: Configuration) -> Purchases {
        do {
            return try configure(validating: configuration)
        } catch {
            preconditionFailure("Purchases.configure(with:) cannot use this configuration: \(error)")
        }
    }

    /// Configures the SDK (and ``shared``); throws for unusable root keys or storage.
    @discardableResult
    public static func configure(validating configuration: Configuration) throws -> Purchases {
        let purchases = try Purchases(configuration: configuration)
        sharedLock.withLock { sharedInstance = purchases }
        return purchases
    }

    /// The CustomerInfo cached for the current user, if any (no request).
    public var cachedCustomerInfo: CustomerInfo? { currentCustomerInfo }

    public init(configuration: Configuration) throws {
        self.configuration = configuration
        var verifierConfiguration: SignatureVerifier.Configuration
        do {
            verifierConfiguration = try SignatureVerifier.Configuration(rootKeysBase64: configuration.rootPublicKeys)
        } catch {
            throw PurchasesError.configuration(error.description)
        }
        verifierConfiguration.clockSkewTolerance = configuration.clockSkewTolerance
        verifierConfiguration.now = configuration.now
        do {
            disk = try CacheFiles(directory: configuration.storageDirectory)
        } catch {
            throw PurchasesError.configuration("cannot use \(configuration.storageDirectory.path): \(error)")
        }
        etags = ETagCache(store: disk)
        let timeFloor = VerifiedTimeFloor(store: disk)
        self.timeFloor = timeFloor
        verifierConfiguration.verifiedTimeFloor = { timeFloor.value }
        // Leaving disabled mode: cached answers were never verified, so none may be sent back
        // as an ETag; the next fetch is a full signed 200.
        let previousMode = disk.read(EntitlementVerificationMode.self, "mode.json")
        if previousMode == .disabled && configuration.entitlementVerificationMode != .disabled {
            etags.clear()
        }
        disk.write(configuration.entitlementVerificationMode, "mode.json")

        let user: String
        if let given = configuration.appUserID, !given.isEmpty {
            user = given
        } else if let saved = disk.read(String.self, "app-user-id.json") {
            user = saved
        } else if let carried = RevenueCatIdentity.storedAppUserID(in: configuration.revenueCatDefaults) {
            // The first launch after the move from RevenueCat: the user it knew stays the user.
            user = carried
            SDKLog.log(.info, "kept the app user id RevenueCat's SDK stored on this device")
        } else {
            user = ReservedAppUserID.anonymousPrefix + UUID().uuidString.lowercased()
        }
        disk.write(user, "app-user-id.json")
        let state = LockedState(State(appUserID: user))
        self.state = state

        let reporter =
            configuration.reportsVerificationFailures && configuration.entitlementVerificationMode != .disabled
            ? FailureReporter(configuration: configuration) : nil
        self.reporter = reporter
        let handler = configuration.verificationFailureHandler
        let compiledMode = configuration.entitlementVerificationMode
        let policy = VerificationPolicyState(compiledMode: compiledMode, store: disk)
        self.policy = policy
        let now = configuration.now
        let currentUser: @Sendable () -> String = { state.withLock { $0.appUserID } }
        backend = Backend(
            apiKey: configuration.apiKey, serverURL: configuration.serverURL, mode: compiledMode,
            verifier: SignatureVerifier(configuration: verifierConfiguration), session: configuration.session, etags: etags,
            timeFloor: timeFloor, retries: max(0, configuration.networkRetries), retryBaseDelay: configuration.retryBaseDelay,
            timeout: configuration.networkTimeout, policy: policy, appUserID: currentUser, now: now
        ) { path, status, reason in
            let user = currentUser()
            let mode = policy.mode(for: user, at: now())
            let event = VerificationFailureEvent(path: path, statusCode: status, reason: reason, mode: mode, appUserID: user)
            SDKLog.log(.warn, "signature verification failed for \(path) (\(status)): \(reason.rawValue) [\(mode)]")
            handler?(event)
            reporter?.report(event)
        }
        SDKLog.log(
            .info,
            "configured for \(configuration.serverURL.host ?? configuration.serverURL.absoluteString), verification \(compiledMode), \(user.hasPrefix(ReservedAppUserID.anonymousPrefix) ? "anonymous user" : "named user")"
        )
        if configuration.store.isTestStore && Self.warnedAboutTestStore.claim() {
            FileHandle.standardError.write(
                Data("Countersign: WARNING: running against the TEST STORE. Never ship an app configured with a test-store app or API key.\n".utf8))
        }
        startTransactionListener()
        if configuration.launchRequests {
            startLaunchWork()
            observeAppLifecycle()
        }
    }

    /// At configure, as RevenueCat does: once per device, post the store's current entitlements
    /// (a subscriber who bought under RevenueCat is entitled without Restore); then fetch the
    /// CustomerInfo unless the cache is fresh, for the delegate and the stream, and the offerings.
    private func startLaunchWork() {
        let task = Task { [weak self] in
            guard let self else { return }
            await self.postStoreEntitlementsOnce()
            await self.refreshIfStale()
            // The paywall's offerings, ready before the app asks (and on disk for a later outage).
            _ = try? await self.offerings()
        }
        state.withLock { $0.launchWork = task }
    }

    /// Posts the store's current entitlements the first time this SDK runs on the device (noted
    /// on disk once the server has answered; tried again at the next launch when it could not be
    /// reached).
    private func postStoreEntitlementsOnce() async {
        let marker = "store-entitlements-posted.json"
        guard disk.read(Bool.self, marker) != true else { return }
        do {
            let transactions = try await configuration.store.currentEntitlements()
            if !transactions.isEmpty {
                SDKLog.log(.info, "first launch: recording the \(transactions.count) transaction(s) the store holds")
                _ = try await post(all: transactions)
            }
            disk.write(true, marker)
        } catch PurchasesError.offline(let detail) {
            SDKLog.log(.warn, "first launch: the store's entitlements could not be recorded yet (\(detail)); tried again at the next launch")
        } catch {
            // The server answered and refused (another user's purchase, say): asking again at
            // every launch would change nothing.
            SDKLog.log(.warn, "first launch: the store's entitlements were refused: \(error)")
            disk.write(true, marker)
        }
    }

    /// Called when the app returns to the foreground (on platforms without a lifecycle
    /// notification the SDK hears itself): refreshes a CustomerInfo older than the cache's
    /// freshness, for the delegate and the stream, as RevenueCat does.
    public func applicationWillEnterForeground() {
        state.withLock { $0.isBackgrounded = false }
        Task { [weak self] in await self?.refreshIfStale() }
    }

    /// Called when the app goes to the background (on Apple platforms the SDK hears it itself):
    /// caches stay fresh for 25 hours instead of 5 minutes until it returns, as RevenueCat's.
    public func applicationDidEnterBackground() {
        state.withLock { $0.isBackgrounded = true }
    }

    /// Observes the platform's app lifecycle notifications (``applicationWillEnterForeground()``
    /// and ``applicationDidEnterBackground()``); elsewhere the app calls them.
    func observeAppLifecycle() {
        guard let names = AppLifecycle.notificationNames else { return }
        let center = NotificationCenter.default
        let observers = [
            center.addObserver(forName: names.foreground, object: nil, queue: nil) { [weak self] _ in self?.applicationWillEnterForeground() },
            center.addObserver(forName: names.background, object: nil, queue: nil) { [weak self] _ in self?.applicationDidEnterBackground() },
        ]
        state.withLock { $0.lifecycleObservers = observers }
    }

    /// Fetches the CustomerInfo unless the cache is fresh, and delivers it (a refusal or an
    /// outage leaves the delegate and the stream with what they have).
    private func refreshIfStale() async {
        if let info = try? await customerInfo(fetchPolicy: .notStaleCachedOrFetched) { deliver(info) }
    }

    deinit {
        let (listener, continuations, observers) = state.withLock {
            ($0.transactionListener, Array($0.continuations.values), $0.lifecycleObservers)
        }
        for observer in observers { NotificationCenter.default.removeObserver(observer) }
        listener?.cancel()
        for continuation in continuations { continuation.finish() }
    }

    // MARK: Updates

    /// A new stream of CustomerInfo updates: purchases, restores, syncs, transactions heard from
    /// the store, logIn/logOut and fetches whose answer changed. A new subscriber gets the
    /// current value first, as in RevenueCat.
    public var customerInfoStream: AsyncStream<CustomerInfo> {
        let (stream, continuation) = AsyncStream<CustomerInfo>.makeStream(bufferingPolicy: .bufferingNewest(8))
        let id = UUID()
        let current = currentCustomerInfo
        state.withLock { $0.continuations[id] = continuation }
        if let current { continuation.yield(current) }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    /// Receives every CustomerInfo update; a newly set delegate gets the current value at once
    /// when there is one (as in RevenueCat). Held weakly.
    public var delegate: (any PurchasesDelegate)? {
        get { state.withLock { $0.delegate } }
        set { setDelegate(newValue) }
    }

    /// Sets ``delegate``.
    public func setDelegate(_ delegate: (any PurchasesDelegate)?) {
        state.withLock { $0.delegate = delegate }
        if let delegate, let current = currentCustomerInfo { callOnMain(delegate, with: current) }
    }

    /// The last CustomerInfo delivered for the current user, else the cached one.
    private var currentCustomerInfo: CustomerInfo? {
        let (user, last) = state.withLock { ($0.appUserID, $0.lastDelivered) }
        if let last, last.answers(for: user) { return last }
        return cachedCustomerInfo(for: user)?.info
    }

    /// Sends `info` to the stream and the delegate when it differs from the last one sent, and
    /// only while its user is still the current one (a logIn or logOut during a fetch must not
    /// hand the new user the old user's entitlements).
    func deliver(_ info: CustomerInfo, force: Bool = false) {
        let receivers: (continuations: [AsyncStream<CustomerInfo>.Continuation], delegate: (any PurchasesDelegate)?)? = state.withLock { state in
            guard info.answers(for: state.appUserID) else { return nil }
            if !force, let last = state.lastDelivered, last.sameContent(as: info) { return nil }
            if state.lastDelivered.map({ !$0.sameContent(as: info) }) ?? true { state.entitlementTokens = [:] }
            state.lastDelivered = info
            return (Array(state.continuations.values), state.delegate)
        }
        guard let receivers else { return }
        for continuation in receivers.continuations { continuation.yield(info) }
        if let delegate = receivers.delegate { callOnMain(delegate, with: info) }
    }

    /// Hands `info` to `delegate` on the main actor (the main thread), as RevenueCat calls its
    /// delegate; updates reach it in the order they were delivered.
    private func callOnMain(_ delegate: any PurchasesDelegate, with info: CustomerInfo) {
        let held = UncheckedDelegate(delegate: delegate)
        Task { @MainActor in held.delegate.purchases(self, receivedUpdated: info) }
    }

    // MARK: CustomerInfo

    ///
    /// The answer is for the user who was current when the call began; if a logIn or logOut
    /// happens while it is in flight, it is cached for that user and returned to this caller,
    /// but never delivered to the stream or the delegate as the new user's.
    public func customerInfo(fetchPolicy: CacheFetchPolicy = .cachedOrFetched) async throws -> CustomerInfo {
        let now = configuration.now()
        let user = appUserID
        let cached = cachedCustomerInfo(for: user)
        switch fetchPolicy {
        case .fromCacheOnly:
            guard let cached else { throw PurchasesError.noCachedCustomerInfo }
            return cached.info
        case .cachedOrFetched:
            if let cached {
                if !isFresh(cached.fetchedAt, now: now) { refreshInBackground() }
                return cached.info
            }
        case .notStaleCachedOrFetched:
            if let cached, isFresh(cached.fetchedAt, now: now) { return cached.info }
        case .fetchCurrent:
            break
        }
        // Transactions the store charged but the server has not recorded go first (RevenueCat
        // posts unfinished transactions before every fetch), so the answer includes them.
        await postUnfinishedTransactions()
        do {
            let path = "/v1/subscribers/\(user.pathSegmentEncoded)"
            let answer = try await backend.perform(.get(path, cacheable: true))
            let info = try remember(answer, path: path, user: user)
            deliver(info)
            await refreshMappingIfNeeded()
            return info
        } catch PurchasesError.offline(let detail) {
            // Never the cache here: `cachedOrFetched` answered from it above when it had one, and
            // the other policies asked for a current answer, so, as RevenueCat's, they get
            // on-device entitlements or the error.
            if let offline = try await offlineCustomerInfo(for: user) {
                deliver(offline)
                return offline
            }
            throw PurchasesError.offline(detail)
        }
    }

    /// Posts the store's unfinished transactions not already in hand (each failure logged and
    /// left for the next time). With `purchasesAreCompletedBy == .myApp` the app finishes them.
    private func postUnfinishedTransactions() async {
        guard configuration.purchasesAreCompletedBy == .countersign,
            let unfinished = try? await configuration.store.unfinishedTransactions(), !unfinished.isEmpty
        else { return }
        for transaction in unfinished where state.withLock({ $0.handledTransactions.insert(transaction.jws).inserted }) {
            do {
                _ = try await post(transaction)
            } catch {
                SDKLog.log(.warn, "could not record unfinished transaction \(transaction.transactionId) yet: \(error)")
                _ = state.withLock { $0.handledTransactions.remove(transaction.jws) }
            }
        }
    }

    /// Fetched within ``cacheFreshness`` (``backgroundCacheFreshness`` while the app is in the
    /// background), and not in the future (a clock turned back).
    private func isFresh(_ fetchedAt: Date, now: Date) -> Bool {
        let freshness = state.withLock { $0.isBackgrounded } ? Self.backgroundCacheFreshness : Self.cacheFreshness
        return now.timeIntervalSince(fetchedAt) < freshness && now >= fetchedAt
    }

    /// Fetches the current user's CustomerInfo in the background, one fetch at a time; the
    /// answer reaches the cache, the stream and the delegate as any fetch does.
    private func refreshInBackground() {
        state.withLock { state in
            guard state.backgroundRefresh == nil else { return }
            state.backgroundRefresh = Task {
                _ = try? await self.customerInfo(fetchPolicy: .fetchCurrent)
                self.state.withLock { $0.backgroundRefresh = nil }
            }
        }
    }

    /// Forgets the cached CustomerInfo of the current user; the next call fetches.
    public func invalidateCustomerInfoCache() {
        disk.remove(CacheFiles.fileName("customer-info", appUserID))
    }

    /// The clock entitlements are judged by: the device clock, but never earlier than the latest
    /// signed request time of a verified answer.
    private var referenceNow: Date {
        max(configuration.now(), timeFloor.value ?? .distantPast)
    }

    /// Reads a CustomerInfo answer for `user` and caches it for that user.
    ///
    /// A verified answer about someone else (`original_app_user_id` is not `user`, and the answer
    /// does not say it is for `user` as an alias of that customer) is a signed answer moved from
    /// another request: it fails with ``VerificationFailure/appUserMismatch``
    /// (an error in enforced mode, delivered as `failed` in informational mode).
    func remember(_ answer: Backend.Answer, path: String, user: String) throws -> CustomerInfo {
        let now = referenceNow
        var answer = answer
        var info: CustomerInfo
        do {
            info = try CustomerInfo(answer: answer.body, verification: answer.verification, failure: answer.failure, now: now)
            if !info.answers(for: user) && answer.verification == .verified {
                try backend.reportFailure(.appUserMismatch, path: path, status: answer.status)
                (answer.verification, answer.failure) = (.failed, .appUserMismatch)
                info = try CustomerInfo(answer: answer.body, verification: .failed, failure: .appUserMismatch, now: now)
            }
        } catch let error as PurchasesError {
            throw error
        } catch {
            throw PurchasesError.malformedAnswer(path: path)
        }
        // A failed answer is delivered (informational) but never cached: the next call tries again.
        if answer.verification != .failed {
            disk.write(
                CachedAnswer(body: answer.body, verification: answer.verification, failure: nil, fetchedAt: configuration.now()),
                CacheFiles.fileName("customer-info", user))
        }
        return info
    }

    private func cachedCustomerInfo(for user: String) -> (info: CustomerInfo, fetchedAt: Date)? {
        guard let cached = disk.read(CachedAnswer.self, CacheFiles.fileName("customer-info", user)) else { return nil }
        // Data cached while verification was disabled stays `notRequested` in a verifying mode.
        guard let info = try? CustomerInfo(answer: cached.body, verification: cached.verification, failure: nil, now: referenceNow),
            info.answers(for: user)
        else {
            return nil
        }
        return (info, cached.fetchedAt)
    }

    // MARK: Offline entitlements

    /// Fetches and caches the signed product→entitlement mapping when it is missing or a day old.
    private func refreshMappingIfNeeded() async {
        let now = configuration.now()
        if let cached = disk.read(CachedAnswer.self, "mapping.json"), now.timeIntervalSince(cached.fetchedAt) < 86_400 { return }
        guard let answer = try? await backend.perform(.get("/v1/product_entitlement_mapping", nonce: false, cacheable: true)),
            answer.verification != .failed, (try? ProductEntitlementMapping(answer: answer.body)) != nil
        else { return }
        disk.write(CachedAnswer(body: answer.body, verification: answer.verification, failure: nil, fetchedAt: now), "mapping.json")
    }

    /// Entitlements computed on the device from the store's verified transactions and the
    /// cached signed mapping; nil when either is missing.
    private func offlineCustomerInfo(for user: String) async throws -> CustomerInfo? {
        guard let cached = disk.read(CachedAnswer.self, "mapping.json"), cached.verification.isVerified || cached.verification == .notRequested,
            let mapping = try? ProductEntitlementMapping(answer: cached.body)
        else { return nil }
        let now = configuration.now()
        let transactions = try await configuration.store.currentEntitlements().filter { transaction in
            transaction.isVerified && transaction.revocationDate == nil && (transaction.expirationDate.map { $0 > now } ?? true)
        }
        let verification: VerificationResult = cached.verification == .verified ? .verifiedOnDevice : .notRequested
        var entitlements: [String: EntitlementInfo] = [:]
        for transaction in transactions.sorted(by: { ($0.expirationDate ?? .distantFuture) < ($1.expirationDate ?? .distantFuture) }) {
            for entitlement in mapping.entitlements[transaction.productId] ?? [] {
                entitlements[entitlement] = EntitlementInfo(
                    identifier: entitlement, isActive: true, willRenew: false, periodType: .normal,
                    productIdentifier: transaction.productId, expirationDate: transaction.expirationDate,
                    latestPurchaseDate: transaction.purchaseDate, verification: verification
                )
            }
        }
        return CustomerInfo(
            onDevice: entitlements, verification: verification,
            activeSubscriptions: Set(transactions.filter { $0.expirationDate != nil }.map(\.productId)),
            purchased: Set(transactions.map(\.productId)), appUserID: user, now: now
        )
    }

    // MARK: Identity

    /// Switches to `newAppUserID`; an anonymous user's purchases merge into it on the server.
    @discardableResult
    public func logIn(_ newAppUserID: String) async throws -> (customerInfo: CustomerInfo, created: Bool) {
        guard !newAppUserID.isEmpty, !ReservedAppUserID.isAnonymous(newAppUserID), !ReservedAppUserID.isReserved(newAppUserID) else {
            throw PurchasesError.configuration("logIn needs a real app user id (ids starting with $CS or $RC are reserved)")
        }
        // The current user's unsent attributes go first, as RevenueCat sends them before a switch.
        try? await syncAttributes()
        let answer = try await backend.perform(
            .post(
                "/v1/subscribers/identify", [("app_user_id", appUserID), ("new_app_user_id", newAppUserID)],
                retryable: true))
        let created = (try? JSONDecoder().decode(IdentifyResult.self, from: answer.body))?.created ?? false
        let info = try remember(answer, path: "/v1/subscribers/identify", user: newAppUserID)
        setUser(newAppUserID)
        deliver(info, force: true)
        return (info, created)
    }

    /// Back to a fresh anonymous user.
    @discardableResult
    public func logOut() async throws -> CustomerInfo {
        try? await syncAttributes()
        setUser(ReservedAppUserID.anonymousPrefix + UUID().uuidString.lowercased())
        let info = try await customerInfo(fetchPolicy: .fetchCurrent)
        deliver(info, force: true)
        return info
    }

    private func setUser(_ user: String) {
        state.withLock {
            $0.appUserID = user
            $0.entitlementTokens = [:]
        }
        disk.write(user, "app-user-id.json")
    }

    // MARK: Catalogue

    /// The offerings, as RevenueCat serves them: from memory while fresh (5 minutes), else from
    /// the server; when the server cannot be reached or its answer cannot be read, the last
    /// offerings fetched for this user (in memory, else on disk), so the paywall still loads.
    /// Only verified answers (or, with verification disabled, any) are kept.
    public func offerings() async throws -> Offerings {
        let user = appUserID
        let now = configuration.now()
        if let held = state.withLock({ $0.offerings }), AppUserID.same(held.user, user), isFresh(held.fetchedAt, now: now) {
            return held.offerings
        }
        let file = CacheFiles.fileName("offerings", user)
        do {
            let answer = try await backend.perform(.get("/v1/subscribers/\(user.pathSegmentEncoded)/offerings", nonce: false, cacheable: true))
            let offerings = try await self.offerings(from: answer.body, verification: answer.verification)
            if backend.acceptableCached(answer.verification) {
                state.withLock { $0.offerings = (offerings, user, now) }
                disk.write(CachedAnswer(body: answer.body, verification: answer.verification, failure: nil, fetchedAt: now), file)
            }
            return offerings
        } catch let error as PurchasesError {
            switch error {
            case .offline, .malformedAnswer: break
            default: throw error
            }
            if let held = state.withLock({ $0.offerings }), AppUserID.same(held.user, user) { return held.offerings }
            if let cached = disk.read(CachedAnswer.self, file), backend.acceptableCached(cached.verification),
                let offerings = try? await self.offerings(from: cached.body, verification: cached.verification)
            {
                SDKLog.log(.warn, "offerings answered from the disk cache: \(error)")
                state.withLock { $0.offerings = (offerings, user, cached.fetchedAt) }
                return offerings
            }
            throw error
        }
    }

    /// The offerings fetched last for the current user, if any (no request), as RevenueCat's
    /// `cachedOfferings`.
    public var cachedOfferings: Offerings? {
        state.withLock { state in state.offerings.flatMap { AppUserID.same($0.user, state.appUserID) ? $0.offerings : nil } }
    }

    /// An offerings answer with the store's products for its packages.
    private func offerings(from body: Data, verification: VerificationResult) async throws -> Offerings {
        guard let wire = try? JSONDecoder().decode(Offerings.Wire.self, from: body) else {
            throw PurchasesError.malformedAnswer(path: "/v1/subscribers/{id}/offerings")
        }
        let products = try await configuration.store.products(wire.productIdentifiers)
        let missing = Set(wire.productIdentifiers).subtracting(products.map(\.productIdentifier))
        if !missing.isEmpty {
            SDKLog.log(.warn, "the store does not know \(missing.sorted().joined(separator: ", ")); their packages are left out")
        }
        return try Offerings(
            answer: body, verification: verification,
            products: Dictionary(products.map { ($0.productIdentifier, $0) }, uniquingKeysWith: { first, _ in first }))
    }

    // MARK: Purchases

    /// What a purchase answers, in RevenueCat's shape. A cancel or a pending purchase throws
    /// (`ErrorCode.purchaseCancelledError`, `.paymentPendingError`), so `userCancelled` is false
    /// on every answer that returns; it is kept for code written against RevenueCat's tuple.
    public typealias PurchaseResult = PurchaseResultData

    /// Buys a product the store offered (see `PurchaseStore.products`), as RevenueCat's `purchase(product:)`.
    public func purchase(product: StoreProduct) async throws -> PurchaseResult {
        let (transaction, info) = try await purchase(productID: product.productIdentifier)
        return (transaction, info, false)
    }

    /// Buys a package's product, as RevenueCat's `purchase(package:)`.
    public func purchase(package: Offerings.Package) async throws -> PurchaseResult {
        let (transaction, info) = try await purchase(productID: package.productIdentifier)
        return (transaction, info, false)
    }

    /// Buys a product redeeming a promotional offer the server signed
    /// (``getPromotionalOffer(forProductDiscount:product:)``), as RevenueCat's
    /// `purchase(product:promotionalOffer:)`.
    public func purchase(product: StoreProduct, promotionalOffer: PromotionalOffer) async throws -> PurchaseResult {
        let (transaction, info) = try await purchase(productID: product.productIdentifier, promotionalOffer: promotionalOffer)
        return (transaction, info, false)
    }

    /// RevenueCat's `purchase(package:promotionalOffer:)`.
    public func purchase(package: Offerings.Package, promotionalOffer: PromotionalOffer) async throws -> PurchaseResult {
        let (transaction, info) = try await purchase(productID: package.productIdentifier, promotionalOffer: promotionalOffer)
        return (transaction, info, false)
    }

    /// RevenueCat's `purchase(_ params:)`: a product or package, with a promotional offer or not.
    public func purchase(_ params: PurchaseParams) async throws -> PurchaseResult {
        let (transaction, info) = try await purchase(productID: params.productIdentifier, promotionalOffer: params.promotionalOffer)
        return (transaction, info, false)
    }

    /// Buys a product through the store, records it on the server, and (with
    /// `purchasesAreCompletedBy == .countersign`) finishes the store transaction only once the
    /// server recorded it and its answer was not rejected.
    ///
    /// Once the store has charged, the purchase never fails for the server's sake: when the
    /// server cannot be reached or answers 5xx (after retries), the answer is the CustomerInfo
    /// computed on the device from the store's verified transactions (`verifiedOnDevice`), the
    /// transaction stays unfinished, and it is posted (then finished) when the server answers
    /// again, at the latest before the next CustomerInfo fetch. A second purchase of a product
    /// already being bought is refused (`operationAlreadyInProgressForProductError`).
    public func purchase(productID: String) async throws -> (transaction: StoreTransaction, customerInfo: CustomerInfo) {
        try await purchase(productID: productID, promotionalOffer: nil)
    }

    private func purchase(productID: String, promotionalOffer offer: PromotionalOffer?) async throws -> (
        transaction: StoreTransaction, customerInfo: CustomerInfo
    ) {
        guard state.withLock({ $0.purchasesInProgress.insert(productID).inserted }) else {
            throw PurchasesError.operationAlreadyInProgress(productId: productID)
        }
        defer { _ = state.withLock { $0.purchasesInProgress.remove(productID) } }
        let user = appUserID
        let token = AppAccountToken.forAppUserID(user)
        let transaction: StoreTransaction
        if let offer {
            // The offer's signature binds the token of the user it was signed for.
            guard offer.productIdentifier == productID, offer.appAccountToken == token else {
                throw PurchasesError.store(.invalidOfferIdentifier, detail: "the promotional offer was signed for another product or user")
            }
            transaction = try await configuration.store.purchase(productID, appUserID: user, appAccountToken: token, promotionalOffer: offer)
        } else {
            transaction = try await configuration.store.purchase(productID, appUserID: user, appAccountToken: token)
        }
        state.withLock { _ = $0.handledTransactions.insert(transaction.jws) }
        do {
            let info = try await post(transaction)
            deliver(info, force: true)
            return (transaction, info)
        } catch PurchasesError.offline(let detail) {
            _ = state.withLock { $0.handledTransactions.remove(transaction.jws) }
            SDKLog.log(.warn, "purchase of \(productID) charged; the server is unavailable (\(detail)): answered from the device, recorded later")
            guard let onDevice = try await offlineCustomerInfo(for: user) else { throw PurchasesError.offline(detail) }
            deliver(onDevice, force: true)
            return (transaction, onDevice)
        }
    }

    /// Posts every unfinished store transaction again (finishing those the server records) and
    /// every one that currently entitles the store account, then answers the current
    /// CustomerInfo.
    @discardableResult
    public func syncPurchases() async throws -> CustomerInfo {
        // The current entitlements too, not only unfinished transactions: a purchase finished on
        // this device but never recorded (another server, a restored backup) is synced as well.
        var transactions = try await configuration.store.unfinishedTransactions()
        let posted = Set(transactions.map(\.transactionId))
        transactions += try await configuration.store.currentEntitlements().filter { !posted.contains($0.transactionId) }
        return try await post(all: transactions)
    }

    /// Posts every transaction that currently entitles the user (a new device, a reinstall).
    @discardableResult
    public func restorePurchases() async throws -> CustomerInfo {
        try await post(all: try await configuration.store.currentEntitlements())
    }

    /// Posts each transaction, going on past one that fails (each failure is logged at `error`);
    /// throws the first failure only when not one transaction could be recorded.
    private func post(all transactions: [StoreTransaction]) async throws -> CustomerInfo {
        var latest: CustomerInfo?
        var firstFailure: (any Error)?
        for transaction in transactions {
            do {
                latest = try await post(transaction)
            } catch {
                SDKLog.log(.error, "could not record transaction \(transaction.transactionId) of \(transaction.productId): \(error)")
                firstFailure = firstFailure ?? error
            }
        }
        if latest == nil, let firstFailure { throw firstFailure }
        let info = if let latest { latest } else { try await customerInfo(fetchPolicy: .fetchCurrent) }
        deliver(info, force: true)
        return info
    }

    /// Records one transaction. Finishes it when the server recorded it with an answer that
    /// was not rejected, or refused it for good (another user's, another app's: posting again
    /// cannot change that) in an answer that verified. Network failures, 5xx, unverified
    /// refusals (anyone on the path can forge a 422) and enforced verification failures leave it
    /// unfinished, to be posted again by the next sync.
    func post(_ transaction: StoreTransaction) async throws -> CustomerInfo {
        let user = appUserID
        SDKLog.log(.info, "recording transaction \(transaction.transactionId) of \(transaction.productId)")
        let answer = try await backend.performAllowingRefusal(
            .post(
                "/v1/receipts", [("app_user_id", user), ("fetch_token", transaction.jws)],
                retryable: true))
        if let refusal = answer.refusal {
            if case .server(_, let code?, _) = refusal, APIErrorCode(rawValue: code)?.refusesPurchaseForGood == true,
                answer.verification == .verified || configuration.entitlementVerificationMode == .disabled
            {
                try await finish(transaction)
            }
            throw refusal
        }
        let info = try remember(answer, path: "/v1/receipts", user: user)
        // Only an answer that verified (or, with verification off, any answer) proves the server
        // recorded the purchase; an unverified one may be a forgery that dropped the request.
        if info.entitlements.verification != .failed {
            try await finish(transaction)
        }
        await refreshMappingIfNeeded()
        return info
    }

    private func finish(_ transaction: StoreTransaction) async throws {
        guard configuration.purchasesAreCompletedBy == .countersign else { return }
        try await configuration.store.finish(transaction)
    }

    /// Sends queued telemetry now (tests, and apps about to exit).
    public func flushDiagnostics() async {
        await reporter?.flush()
    }
}

/// A flag that is claimed once per process.
final class OnceFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var claimed = false
    /// True the first time only.
    func claim() -> Bool {
        lock.withLock {
            defer { claimed = true }; return !claimed
        }
    }
    var isClaimed: Bool { lock.withLock { claimed } }
}

extension CustomerInfo {
    /// Same entitlements, subscriptions and verification (the request date aside).
    func sameContent(as other: CustomerInfo) -> Bool {
        entitlements == other.entitlements && activeSubscriptions == other.activeSubscriptions
            && allPurchasedProductIdentifiers == other.allPurchasedProductIdentifiers && AppUserID.same(originalAppUserId, other.originalAppUserId)
    }

}

/// A delegate carried to the main actor. App delegates are not `Sendable` (RevenueCat's protocol
/// does not ask it); the SDK only ever calls them there.
private struct UncheckedDelegate: @unchecked Sendable {
    let delegate: any PurchasesDelegate
}
