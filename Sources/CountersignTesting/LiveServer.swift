import CountersignServer
import Foundation
import HummingbirdTesting
import Logging

/// The one way every suite runs a live server over real HTTP: start it on a free port, hand the
/// body a client, and shut it down (database closed) whether the body returns or throws.
public enum LiveServer {
    public static func run<Value: Sendable>(
        _ configuration: ServerConfiguration, logLevel: Logger.Level = .error,
        _ body: @Sendable @escaping (CountersignServer, any TestClientProtocol) async throws -> Value
    ) async throws -> Value {
        var configuration = configuration
        configuration.port = 0
        var logger = Logger(label: "test")
        logger.logLevel = logLevel
        let server = try await CountersignServer(configuration: configuration, logger: logger)
        let value: Value
        do {
            value = try await server.makeApplication().test(.live) { client in try await body(server, client) }
        } catch {
            try? await server.shutdown()
            throw error
        }
        try await server.shutdown()
        return value
    }
}
