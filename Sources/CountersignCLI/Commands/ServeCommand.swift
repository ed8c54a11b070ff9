import ArgumentParser
import CountersignCore
import CountersignServer
import CountersignStorage
import Foundation
import Hummingbird
import Logging

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the Countersign server.",
        discussion: """
            On a fresh data directory it writes countersign.json (the default demo app with generated \
            API keys) and, in managed key mode, keys/root.key and keys/root.pub. Stops gracefully on \
            SIGINT or SIGTERM. GET /metrics needs 'Authorization: Bearer <token>' when \
            COUNTERSIGN_METRICS_TOKEN is set; without it /metrics answers only this machine (loopback \
            peers), and a server listening beyond loopback says so at start.
            """
    )

    @Option(help: "The address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "The port to listen on (0: any free port).")
    var port = 8080

    @OptionGroup var storage: StorageOptions

    @Option(help: "Offline key mode: sign with the intermediates in this directory instead of a managed root.")
    var intermediates: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info (one line per request), notice, warning, error or critical.")
    var logLevel = "info"

    @Option(name: .customLong("dashboard-cache-seconds"), help: "How long the dashboard's overview reuses its counts (0: read them on every view).")
    var dashboardCacheSeconds: Double = DashboardSettings().overviewCacheSeconds

    @Option(name: .customLong("dashboard-session-seconds"), help: "How long a dashboard sign-in lasts (60 to 2592000; default 12 hours).")
    var dashboardSessionSeconds: Double = DashboardSettings().sessionLifetime

    @Option(
        name: .customLong("rate-limits"),
        help:
            "on: 429 with Retry-After past the per-address and per-app limits of the public routes, legacy receipt lookups and telemetry (docs/operations.md); off: no limits (benchmarks, a proxy that hides client addresses)."
    )
    var rateLimits = "on"

    @Option(
        name: .customLong("rate-limit-per-address"), help: "Public-route requests a second per client address (bursts of 10 times that; default 100)."
    )
    var ratePerAddress: Double = RateLimitSettings.standard.publicPerClient.perSecond

    @Option(name: .customLong("rate-limit-per-app"), help: "Public-route requests a second per app (bursts of 4 times that; default 5000).")
    var ratePerApp: Double = RateLimitSettings.standard.publicPerApp.perSecond

    @Option(name: .customLong("event-retention-days"), help: "How long delivered webhook deliveries and events are kept (1 to 3650).")
    var eventRetentionDays: Double = WebhookDeliveryService.Settings().retention / 86_400

    @Option(
        name: .customLong("customer-retention-days"),
        help:
            "How long a customer who never bought, logged in or got a grant or attribute is kept after last seen (0: forever; else 1 to 3650; default 90)."
    )
    var customerRetentionDays: Double = (WebhookDeliveryService.Settings().customerRetention ?? 0) / 86_400

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        guard (0...86_400).contains(dashboardCacheSeconds) else { throw ValidationError("--dashboard-cache-seconds must be 0 to 86400") }
        guard (60...2_592_000).contains(dashboardSessionSeconds) else { throw ValidationError("--dashboard-session-seconds must be 60 to 2592000") }
        guard ["on", "off"].contains(rateLimits) else { throw ValidationError("--rate-limits must be on or off") }
        guard (0.001...1_000_000).contains(ratePerAddress), (0.001...1_000_000).contains(ratePerApp) else {
            throw ValidationError("--rate-limit-per-address and --rate-limit-per-app must be 0.001 to 1000000 requests a second")
        }
        guard (1...3_650).contains(eventRetentionDays) else { throw ValidationError("--event-retention-days must be 1 to 3650") }
        guard customerRetentionDays == 0 || (1...3_650).contains(customerRetentionDays) else {
            throw ValidationError("--customer-retention-days must be 0 (forever) or 1 to 3650")
        }
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = LineLogHandler(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "countersign")
        var configuration = try storage.serverConfiguration()
        configuration.host = host
        configuration.port = port
        configuration.intermediatesDirectory = intermediates.map { URL(fileURLWithPath: $0) }
        configuration.dashboard.overviewCacheSeconds = dashboardCacheSeconds
        configuration.dashboard.sessionLifetime = dashboardSessionSeconds
        if rateLimits == "on" {
            var limits = RateLimitSettings.standard
            limits.publicPerClient = .init(perSecond: ratePerAddress, burst: ratePerAddress * 10)
            limits.publicPerApp = .init(perSecond: ratePerApp, burst: ratePerApp * 4)
            configuration.rateLimits = limits
        }
        configuration.webhooks.retention = eventRetentionDays * 86_400
        configuration.webhooks.customerRetention = customerRetentionDays == 0 ? nil : customerRetentionDays * 86_400
        configuration.metricsBearerToken = ProcessInfo.processInfo.environment["COUNTERSIGN_METRICS_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        let server: CountersignServer
        do {
            server = try await CountersignServer(configuration: configuration, logger: logger)
        } catch {
            throw CLIError("cannot start: \(error)")
        }
        if let root = server.keys.managedRootPublicKey {
            say("root public key (pin it in your app): \(root.rawRepresentation.base64EncodedString())")
            say("WARNING: managed key mode keeps the root key in \(storage.dataDir)/keys: for development only.")
        }
        if configuration.metricsBearerToken == nil, !["127.0.0.1", "::1", "localhost"].contains(host) {
            logger.warning("GET /metrics answers only this machine: set COUNTERSIGN_METRICS_TOKEN to read it from another host")
        }
        if configuration.rateLimits == nil {
            logger.warning("--rate-limits off: nothing limits how often clients call the public routes")
        }
        let application = server.makeApplication { port in
            say("listening on http://\(host):\(port)")
            say("dashboard: http://\(host):\(port)/dashboard (sign in with a secret key from countersign.json)")
        }
        // Key rotation and the database run inside the application, as services of its group:
        // on SIGTERM or SIGINT the server stops taking requests, finishes those in flight, and
        // then the database is closed.
        try await application.runService()
    }
}

/// Writes a line to standard output at once (unbuffered), so scripts reading a piped `serve`
/// see the root key and the address immediately.
private func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
