import ArgumentParser
import Countersign
import CountersignCore
import CountersignProxy
import CountersignServer
import CountersignServerCore
import Foundation
import Hummingbird
import Logging

/// `countersign demo`: the whole story in one run, on a temporary data directory.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Start a server, buy pro honestly, then watch a tampering proxy get caught in informational and enforced modes."
    )

    @Flag(help: "Keep the temporary data directory.")
    var keep = false

    func run() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("countersign-demo-\(UUID().uuidString.prefix(8))")
        defer { if !keep { try? FileManager.default.removeItem(at: directory) } }
        var logger = Logger(label: "countersign.demo")
        // Quiet: the demo's own output tells the story (and stopping the servers at the end is not an error).
        logger.logLevel = .critical
        var serverConfiguration = ServerConfiguration(dataDirectory: directory.appendingPathComponent("server"))
        serverConfiguration.port = 0
        let server = try await CountersignServer(configuration: serverConfiguration, logger: logger)
        let app = server.deployment.apps[0]
        let rootKey = server.keys.managedRootPublicKey!.rawRepresentation.base64EncodedString()
        let success: Bool
        do {
            success = try await withThrowingTaskGroup(of: Void.self) { group in
                let serverPort = try await Self.start(server.makeApplication(onServerRunning:), in: &group)
                let serverURL = URL(string: "http://127.0.0.1:\(serverPort)")!
                let proxy = try TamperingProxy(configuration: .init(upstream: serverURL, attack: .grantEntitlement))
                let proxyPort = try await Self.start({ proxy.makeApplication(host: "127.0.0.1", port: 0, logger: logger, onRunning: $0) }, in: &group)
                let proxyURL = URL(string: "http://127.0.0.1:\(proxyPort)")!
                defer { group.cancelAll() }
                return try await Self.story(app: app, rootKey: rootKey, serverURL: serverURL, proxyURL: proxyURL, directory: directory)
            }
        } catch {
            try? await server.shutdown()
            throw error
        }
        try await server.shutdown()
        guard success else { throw ExitCode(1) }
    }

    /// Runs an application in `group`; returns its port once it listens.
    static func start<A: ApplicationProtocol>(
        _ make: (@escaping @Sendable (Int) async -> Void) -> A, in group: inout ThrowingTaskGroup<Void, any Error>
    ) async throws -> Int {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = make { port in continuation.yield(port) }
        group.addTask { try await application.runService(gracefulShutdownSignals: []) }
        for await port in ports { return port }
        throw CLIError("a demo server did not start")
    }

    static func story(app: AppConfiguration, rootKey: String, serverURL: URL, proxyURL: URL, directory: URL) async throws -> Bool {
        func purchases(_ user: String, mode: EntitlementVerificationMode, through url: URL) throws -> Purchases {
            let storage = directory.appendingPathComponent("sdk-\(user)-\(mode)")
            let store = try TestStore(serverURL: serverURL, apiKey: app.publicApiKeys[0], rootPublicKeys: [rootKey], directory: storage)
            var configuration = Configuration(
                apiKey: app.publicApiKeys[0], appUserID: user, serverURL: url, rootPublicKeys: [rootKey], store: store, storageDirectory: storage
            )
            configuration.entitlementVerificationMode = mode
            // A tool asks for what it shows: no launch requests, no identity carried over from RevenueCat.
            configuration.launchRequests = false
            configuration.revenueCatDefaults = []
            return try Purchases(configuration: configuration)
        }
        func indented(_ text: String) -> String { text.split(separator: "\n").map { "     " + $0 }.joined(separator: "\n") }
        var ok = true

        print("Countersign demo (data in \(directory.path))")
        print("1. Server on \(serverURL.absoluteString), app '\(app.id)', root public key \(rootKey)")
        print("")
        print("2. 'demo-buyer' buys pro_monthly through the test store (informational mode, direct to the server):")
        let buyer = try purchases("demo-buyer", mode: .informational, through: serverURL)
        let bought = try await buyer.purchase(productID: "pro_monthly").customerInfo
        print(indented(ClientReport.text(bought)))
        let honest = bought.entitlements.verification == .verified && bought.entitlements["pro"]?.isActive == true
        print(honest ? "   ✓ the honest purchase is verified" : "   ✗ expected a verified, active pro")
        ok = ok && honest
        print("")

        print("3. An attacker's proxy on \(proxyURL.absoluteString) rewrites answers to grant 'pro' (attack grant-entitlement).")
        print("   'demo-freeloader' has not paid.")
        print("")
        print("   informational mode:")
        let informational = try purchases("demo-freeloader", mode: .informational, through: proxyURL)
        let tampered = try await informational.customerInfo(fetchPolicy: .fetchCurrent)
        print(indented(ClientReport.text(tampered)))
        let caughtInformational = tampered.entitlements.verification == .failed
        print(
            caughtInformational
                ? "   ✓ caught: the tampered data is delivered but marked failed (\(tampered.verificationFailure?.rawValue ?? "?")); gate on isVerified to deny it"
                : "   ✗ expected verification failed")
        ok = ok && caughtInformational
        print("")
        print("   enforced mode:")
        let enforced = try purchases("demo-freeloader", mode: .enforced, through: proxyURL)
        do {
            let info = try await enforced.customerInfo(fetchPolicy: .fetchCurrent)
            print(indented(ClientReport.text(info)))
            print("   ✗ expected an error, got data")
            ok = false
        } catch let error as PurchasesError where error.verificationFailure != nil {
            print("     error: \(error)")
            print("   ✓ caught: nothing granted")
        }
        print("")
        print(ok ? "Result: the honest purchase verified; the tampering was caught in both modes." : "Result: something did not behave as expected.")
        return ok
    }
}
