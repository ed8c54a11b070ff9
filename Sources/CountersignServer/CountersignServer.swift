import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import Hummingbird
import Logging
import X509

/// Where and how a Countersign server runs.
public struct ServerConfiguration: Sendable {
    public var host = "127.0.0.1"
    /// 0 picks a free port (tests).
    public var port = 8080
    /// Holds `countersign.json`, the keys (managed mode) and the test store.
    public var dataDirectory: URL
    /// Offline key mode: read intermediates from here instead of managing a root.
    public var intermediatesDirectory: URL?
    /// Nil: SQLite in the data directory.
    public var database: DatabaseLocation?
    /// PostgreSQL connections this instance keeps, split between its event loops (at least two
    /// each). 16 measured best on two cores: 8 left concurrent requests queueing for a
    /// connection, 32 had PostgreSQL's backends crowd the machine (BENCHMARKS.md, decision 10).
    public var databaseConnections = Database.defaultPostgresConnections
    /// The apps' configuration; nil: `countersign.json` in the data directory (written with the
    /// demo app on first start). A given file must exist.
    public var configurationFile: URL?
    /// When set, `GET /metrics` needs `Authorization: Bearer <token>` (401 otherwise).
    public var metricsBearerToken: String?
    /// Telemetry reports (`POST /v1/diagnostics/verification_failures`) each app may send: a
    /// sustained rate and a burst; beyond them the server answers 429.
    public var telemetryReportsPerSecond: Double = 20
    public var telemetryReportBurst: Double = 200
    /// Per-client and per-app limits on the public routes, legacy receipt lookups and telemetry;
    /// nil: none (`countersign serve` sets ``RateLimitSettings/standard`` unless told otherwise).
    public var rateLimits: RateLimitSettings?
    /// How often the key rotation service checks the intermediate key.
    public var keyCheckInterval: Duration = .seconds(3_600)
    /// How often subscriptions in doubt are checked with the App Store Server API (apps with an
    /// In-App Purchase key only).
    public var reconciliationInterval: Duration = .seconds(3_600)
    /// How often Apple's consumption requests waiting for an answer are sent (apps with
    /// `refundRequests` only).
    public var consumptionAnswerInterval: Duration = .seconds(30)
    /// How often the revenue charts' sums catch up with what was written.
    public var chartRefreshInterval: Duration = .seconds(1)
    /// Dashboard sessions and figures.
    public var dashboard = DashboardSettings()
    /// How webhook deliveries are sent (tests poll often and hold leases briefly).
    public var webhooks = WebhookDeliveryService.Settings()
    /// The one clock of routes, signing, key rotation and storage (tests move it).
    public var now: @Sendable () -> Date = { Date() }

    public init(dataDirectory: URL) {
        self.dataDirectory = dataDirectory
    }
}

/// The Countersign server: the deployment's configuration, its signing keys, its database and
/// its routes.
public struct CountersignServer: Sendable {
    public let configuration: ServerConfiguration
    public let deployment: DeploymentConfiguration
    public let keys: SigningKeyRing
    public let database: Database
    public let store: CustomerDatabase
    /// Each app's signed-data verifier: Apple's root for Production and Sandbox, the deployment's
    /// test store root for TestStore, as far as the app lists those environments.
    public let verifiers: [String: SignedDataVerifier]
    /// The deployment's test store, when an app lists TestStore.
    public let testStore: TestStoreCA?
    /// Promotional offer signers of the apps with an In-App Purchase key.
    let offerSigners: [String: PromotionalOfferSigner]
    /// The App Store Server API of the apps with an In-App Purchase key.
    public let storeAPI: StoreServerAPI
    /// Web purchases of the apps that sell through Stripe.
    let stripe: StripeWeb
    public let metrics = ServerMetrics()
    public let logger: Logger
    /// The dashboard's templates; nil when they are not installed (its pages then answer 503).
    let dashboardTemplates: DashboardTemplates?

    /// Prepares a data directory (the default configuration on first start, the signing keys,
    /// the test store CA when an app uses it) and opens and migrates the database.
    public init(configuration: ServerConfiguration, logger: Logger = Logger(label: "countersign")) async throws {
        self.configuration = configuration
        self.logger = logger
        let directory = configuration.dataDirectory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        if let file = configuration.configurationFile {
            deployment = try DeploymentConfiguration.load(from: file)
        } else if let existing = try DeploymentConfiguration.load(fromDataDirectory: directory) {
            deployment = existing
        } else {
            deployment = DeploymentConfiguration(apps: [.makeDemo()])
            try deployment.save(toDataDirectory: directory)
            logger.info("wrote the default configuration", metadata: ["file": "\(DataDirectory(directory).configurationFile.path)"])
        }
        for warning in Self.configurationWarnings(deployment) { logger.warning("\(warning)") }
        (verifiers, testStore) = try Self.makeVerifiers(for: deployment, dataDirectory: directory, now: configuration.now)
        var signers: [String: PromotionalOfferSigner] = [:]
        for app in deployment.apps {
            signers[app.id] = try PromotionalOfferSigner.load(for: app, dataDirectory: directory)
        }
        offerSigners = signers
        let mode: SigningKeyRing.Mode =
            configuration.intermediatesDirectory.map { .offline(intermediatesDirectory: $0) }
            ?? .managed(dataDirectory: directory)
        keys = try SigningKeyRing(mode: mode, now: configuration.now, logger: logger)
        try keys.rotateIfNeeded()
        database = try await Database.open(
            configuration.database ?? .embedded(in: directory), logger: logger,
            postgresConnections: configuration.databaseConnections, now: configuration.now())
        store = CustomerDatabase(database: database)
        storeAPI = try StoreServerAPI(
            deployment: deployment, dataDirectory: directory, verifiers: verifiers, store: store,
            lookupRate: configuration.rateLimits?.storeLookupsPerApp, now: configuration.now, logger: logger)
        stripe = StripeWeb(deployment: deployment, store: store)
        do {
            dashboardTemplates = try await DashboardTemplates.load()
        } catch {
            logger.warning("the dashboard is unavailable", metadata: ["error": "\(error)"])
            dashboardTemplates = nil
        }
    }

    /// What a configuration allows that an operator rarely means, logged at start.
    static func configurationWarnings(_ deployment: DeploymentConfiguration) -> [String] {
        var warnings: [String] = []
        if deployment.appleRootCertificates != nil {
            warnings.append("appleRootCertificates replaces Apple's root: data signed under it counts as App Store data (testing only)")
        }
        for app in deployment.apps where app.legacyReceipts == true && app.inAppPurchaseKey == nil {
            warnings.append("app '\(app.id)' sets legacyReceipts but has no inAppPurchaseKey: every legacy receipt will be refused (422, code 4211)")
        }
        for app in deployment.apps where app.environments.contains("Production") && !app.environments.contains("Sandbox") {
            // App Review buys with the release build in Apple's sandbox, as TestFlight testers do.
            warnings.append(
                "app '\(app.id)' accepts Production but not Sandbox: purchases made in App Review and TestFlight "
                    + "(Sandbox) will be refused; list Sandbox too (answers mark them is_sandbox)")
        }
        return warnings
    }

    /// Each app's verifier, judging signed dates by the server's one clock (`now`).
    static func makeVerifiers(
        for deployment: DeploymentConfiguration, dataDirectory: URL,
        now: @escaping @Sendable () -> Date
    ) throws -> ([String: SignedDataVerifier], TestStoreCA?) {
        var testStore: TestStoreCA?
        var verifiers: [String: SignedDataVerifier] = [:]
        let appleAnchors =
            try deployment.appleRootCertificates.map { roots in
                try roots.map { encoded in
                    guard let der = Data(base64Encoded: encoded), let certificate = try? Certificate(derEncoded: [UInt8](der)) else {
                        throw ConfigurationError("appleRootCertificates must be base64 DER certificates")
                    }
                    return TrustAnchor(certificate: certificate, environments: [.production, .sandbox])
                }
            } ?? [AppleRootCertificates.anchor]
        for app in deployment.apps {
            let environments = Set(app.environments.map(AppStoreEnvironment.init(rawValue:)))
            var anchors: [TrustAnchor] = []
            if !environments.isDisjoint(with: [.production, .sandbox]) { anchors.append(contentsOf: appleAnchors) }
            if environments.contains(.testStore) {
                if environments.contains(.production) {
                    throw ConfigurationError(
                        "app '\(app.id)' lists both Production and TestStore: test-store purchases would unlock a production app")
                }
                let ca = try testStore ?? TestStoreCA.loadOrCreate(for: DataDirectory(dataDirectory))
                testStore = ca
                anchors.append(ca.anchor)
            }
            var configuration = SignedDataVerifier.Configuration(
                anchors: anchors, bundleId: app.bundleId, appAppleId: app.appAppleId, environments: environments
            )
            configuration.allowsXcode = environments.contains(.xcode)
            configuration.now = now
            configuration.xcodeCertificates = try (app.storeKitTestingCertificates ?? []).map { encoded in
                guard let der = Data(base64Encoded: encoded), let certificate = try? Certificate(derEncoded: [UInt8](der)) else {
                    throw ConfigurationError("app '\(app.id)': storeKitTestingCertificates must be base64 DER certificates")
                }
                return certificate
            }
            do {
                verifiers[app.id] = try SignedDataVerifier(configuration: configuration)
            } catch {
                throw ConfigurationError("app '\(app.id)': \(error)")
            }
        }
        return (verifiers, testStore)
    }

    public func makeRouter() -> Router<ServerRequestContext> {
        let router = ServerRouter()
        router.add(middleware: RequestObservation(metrics: metrics))
        let now = configuration.now
        let authentication = APIKeyAuthentication(deployment: deployment)
        router.addHealthRoutes(signing: ResponseSigning(keys: keys, endpoint: SignedEndpoint(authenticated: false), metrics: metrics, now: now))
        PublicRoutes(
            signing: ResponseSigning(
                keys: keys, endpoint: SignedEndpoint(authenticated: true), metrics: metrics, policies: PolicyDirectory(apps: deployment.apps),
                now: now),
            authentication: authentication, store: store, verifiers: verifiers, testStore: testStore,
            offerSigners: offerSigners, storeAPI: storeAPI, metrics: metrics, issuer: deployment.tokenIssuer, rateLimits: configuration.rateLimits,
            stripe: stripe, now: now
        ).add(to: router)
        NotificationRoutes(deployment: deployment, store: store, verifiers: verifiers, stripe: stripe, now: now).add(to: router)
        AdminRoutes(
            authentication: authentication, store: store, keys: keys, verifiers: verifiers, testStore: testStore, storeAPI: storeAPI,
            stripe: stripe, now: now
        ).add(to: router)
        let limiter = RateLimiter(perSecond: configuration.telemetryReportsPerSecond, burst: configuration.telemetryReportBurst, now: now)
        DiagnosticsRoutes(
            authentication: authentication, store: store, metrics: metrics, limiter: limiter,
            perClient: configuration.rateLimits.map { RateLimiter($0.telemetryPerClient, now: now) }, now: now
        ).add(to: router)
        DashboardRoutes(
            deployment: deployment, store: store, keys: keys, templates: dashboardTemplates, settings: configuration.dashboard,
            now: now
        ).add(to: router)
        let metricsToken = configuration.metricsBearerToken
        router.get("/metrics") { request, context in
            if let metricsToken {
                guard let presented = try? APIKeyAuthentication.bearer(request), APIKeyAuthentication.constantTimeEqual(presented, metricsToken)
                else {
                    throw APIError(.invalidAPIKey, "GET /metrics needs 'Authorization: Bearer <metrics token>'")
                }
            } else if !context.isLoopbackPeer {
                // Without a token the figures (apps, routes, purchase outcomes) are for this machine only.
                throw APIError(.missingAPIKey, "GET /metrics from another host needs a metrics token (COUNTERSIGN_METRICS_TOKEN) on the server")
            }
            let text = metrics.exposition(keyExpiresIn: keys.daysUntilExpiry * 86_400)
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(bytes: text)))
        }
        return router.finish()
    }

    /// Closes the database. The application of ``makeApplication(onServerRunning:)`` does so
    /// itself when it stops; call this when the server's application never ran, or to be sure
    /// (closing twice is harmless).
    public func shutdown() async throws {
        try await database.close()
    }

    /// The service that sends webhook deliveries and reports expiries.
    public var webhookService: WebhookDeliveryService {
        WebhookDeliveryService(
            store: store, deployment: deployment, keys: keys, settings: configuration.webhooks, now: configuration.now,
            metrics: metrics, logger: logger)
    }

    public func makeApplication(onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        Application(
            router: makeRouter(),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "Countersign"),
            // Stopped in reverse order after the HTTP server: webhook delivery first, key rotation
            // outlives the database.
            services: [
                KeyRotationService(keys: keys, interval: configuration.keyCheckInterval, logger: logger),
                DatabaseService(database: database),
                webhookService,
                ReconciliationService(
                    store: store, storeAPI: storeAPI, stripe: stripe, deployment: deployment, interval: configuration.reconciliationInterval,
                    now: configuration.now, logger: logger),
                ConsumptionAnswerService(
                    store: store, storeAPI: storeAPI, deployment: deployment, interval: configuration.consumptionAnswerInterval,
                    now: configuration.now, logger: logger),
                ChartTotalsService(store: store, interval: configuration.chartRefreshInterval, now: configuration.now, logger: logger),
            ],
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? 0) },
            logger: logger
        )
    }
}
