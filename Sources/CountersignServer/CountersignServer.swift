import CountersignCore
import Foundation
import Hummingbird
import Logging

/// Where and how a Countersign server runs.
public struct ServerConfiguration: Sendable {
    public var host = "127.0.0.1"
    /// 0 picks a free port (tests).
    public var port = 8080
    /// Holds `countersign.json`, the keys (managed mode) and the test store.
    public var dataDirectory: URL
    /// Offline key mode: read intermediates from here instead of managing a root.
    public var intermediatesDirectory: URL?

    public init(dataDirectory: URL) {
        self.dataDirectory = dataDirectory
    }
}

/// The Countersign server: the deployment's configuration, its signing keys and its routes.
public struct CountersignServer: Sendable {
    public let configuration: ServerConfiguration
    public let deployment: DeploymentConfiguration
    public let keys: SigningKeyRing
    public let logger: Logger

    /// Prepares a data directory: writes the default configuration on first start and loads or
    /// creates the signing keys.
    public init(configuration: ServerConfiguration, logger: Logger = Logger(label: "countersign")) throws {
        self.configuration = configuration
        self.logger = logger
        let directory = configuration.dataDirectory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        if let existing = try DeploymentConfiguration.load(fromDataDirectory: directory) {
            deployment = existing
        } else {
            deployment = DeploymentConfiguration(apps: [.makeDemo()])
            try deployment.save(toDataDirectory: directory)
            logger.info("wrote the default configuration", metadata: ["file": "\(directory.appendingPathComponent(DeploymentConfiguration.fileName).path)"])
        }
        let mode: SigningKeyRing.Mode = configuration.intermediatesDirectory.map { .offline(intermediatesDirectory: $0) }
            ?? .managed(dataDirectory: directory)
        keys = try SigningKeyRing(mode: mode, logger: logger)
        try keys.rotateIfNeeded()
    }

    public func makeRouter() -> Router<ServerRequestContext> {
        let router = Router(context: ServerRequestContext.self)
        router.addHealthRoutes(signing: ResponseSigning(keys: keys))
        return router
    }

    public func makeApplication(onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        Application(
            router: makeRouter(),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "Countersign"),
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? 0) },
            logger: logger
        )
    }
}
