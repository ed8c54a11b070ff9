import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignProxy
import CountersignServer
import CountersignServerCore
import CountersignTesting
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import Countersign
@testable import CountersignStorage

/// A live server (SQLite, port 0), the tampering proxy in front of it (port 0), and a way to
/// configure SDK instances that talk to the server through the proxy over real HTTP.
struct SDKHarness: Sendable {
    let server: CountersignServer
    let serverURL: URL
    let proxy: TamperingProxy
    let proxyURL: URL
    let directory: URL
    /// The devices' clock (SDK instances made by the harness read it).
    let clock: ManualClock
    /// The server's clock, apart from the devices' so a test can turn a device's clock without
    /// moving the server's.
    let serverClock: ManualClock

    var app: AppConfiguration { server.deployment.apps[0] }
    var apiKey: String { app.publicApiKeys[0] }
    var rootKey: String { server.keys.managedRootPublicKey!.rawRepresentation.base64EncodedString() }

    /// Runs `body` with a fresh server on `database` (SQLite by default); `configure` edits the
    /// demo configuration (given the server's data directory) before the server starts.
    static func run(
        database: TestDatabaseKind = .sqlite, configure: (@Sendable (inout DeploymentConfiguration, URL) throws -> Void)? = nil,
        _ body: @Sendable @escaping (SDKHarness) async throws -> Void
    ) async throws {
        try await FreshDatabase.with(database) { location, directory in
            if let configure {
                let serverDirectory = directory.appendingPathComponent("server")
                try FileManager.default.createDirectory(at: serverDirectory, withIntermediateDirectories: true)
                var deployment = DeploymentConfiguration(apps: [.makeDemo()])
                try configure(&deployment, serverDirectory)
                try deployment.save(toDataDirectory: serverDirectory)
            }
            try await run(location: location, directory: directory, body)
        }
    }

    private static func run(location: DatabaseLocation, directory: URL, _ body: @Sendable @escaping (SDKHarness) async throws -> Void) async throws {
        let serverClock = ManualClock(Date())
        var configuration = ServerConfiguration(dataDirectory: directory.appendingPathComponent("server"))
        configuration.database = location
        configuration.now = { serverClock.now }
        try await LiveServer.run(configuration) { server, serverClient in
            let serverURL = URL(string: "http://127.0.0.1:\(serverClient.port!)")!
            // An intermediate of the real root that expired two days ago, for expired-intermediate.
            let root = try KeyFile.loadRoot(from: DataDirectory(directory.appendingPathComponent("server")).rootKey)
            var proxyConfiguration = TamperingProxy.Configuration(upstream: serverURL, attack: .none)
            proxyConfiguration.expiredIntermediate = try root.issueIntermediate(expirationDays: UInt32(Date().timeIntervalSince1970 / 86_400) - 2)
            // The server's own signing key, as if stolen, for future-time.
            proxyConfiguration.stolenIntermediate = server.keys.currentSigner.key
            let proxy = try TamperingProxy(configuration: proxyConfiguration)
            try await proxy.makeApplication(host: "127.0.0.1", port: 0).test(.live) { proxyClient in
                let harness = SDKHarness(
                    server: server, serverURL: serverURL, proxy: proxy, proxyURL: URL(string: "http://127.0.0.1:\(proxyClient.port!)")!,
                    directory: directory, clock: ManualClock(Date()), serverClock: serverClock
                )
                try await body(harness)
            }
        }
    }

    /// An SDK configuration through the proxy; `storage` names its own storage directory (the
    /// same name: the same caches, as after an app restart).
    func configuration(mode: EntitlementVerificationMode, user: String?, storage: String) throws -> Configuration {
        let storageDirectory = directory.appendingPathComponent("sdk-\(storage)")
        let store = try TestStore(serverURL: serverURL, apiKey: apiKey, rootPublicKeys: [rootKey], directory: storageDirectory)
        var configuration = Configuration(
            apiKey: apiKey, appUserID: user, serverURL: proxyURL, rootPublicKeys: [rootKey], store: store, storageDirectory: storageDirectory
        )
        configuration.entitlementVerificationMode = mode
        // Quick retries; no launch requests or RevenueCat identity unless a test asks (the
        // suites count requests and switch attacks between them).
        configuration.retryBaseDelay = .milliseconds(10)
        configuration.launchRequests = false
        configuration.revenueCatDefaults = []
        let clock = clock
        configuration.now = { clock.now }
        return configuration
    }

    func purchases(mode: EntitlementVerificationMode, user: String?, storage: String, edit: (inout Configuration) -> Void = { _ in }) throws
        -> Purchases
    {
        var configuration = try configuration(mode: mode, user: user, storage: storage)
        edit(&configuration)
        return try Purchases(configuration: configuration)
    }

    /// Gives `user` an active `pro` directly on the server (not through the proxy).
    func givePro(to user: String) async throws {
        let (jws, payload) = try server.testStore!.mintTransaction(.init(productId: "lifetime", type: .nonConsumable, bundleId: app.bundleId))
        _ = try await server.store.record(try VerifiedTransaction(jws: jws, payload: payload, app: app), app: app, poster: user, now: Date())
    }
}

/// Collects what the SDK reports to its verification-failure handler.
typealias FailureLog = Collected<VerificationFailureEvent>
