import Foundation
import Logging
import ServiceLifecycle

/// Keeps the signing key fresh while the server runs: checks the intermediate at start and then
/// every `interval`, issuing (managed mode) or picking up (offline mode) a newer one before the
/// current one expires. A service of the server's `ServiceGroup`, so every embedding of
/// ``CountersignServer`` rotates, not only the CLI.
public struct KeyRotationService: Service {
    public let keys: SigningKeyRing
    public let interval: Duration
    public let logger: Logger

    public init(keys: SigningKeyRing, interval: Duration = .seconds(3_600), logger: Logger) {
        self.keys = keys
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        await repeatUntilShutdown(every: interval, "signing key rotation", logger: logger, level: .critical) { try keys.rotateIfNeeded() }
    }
}
