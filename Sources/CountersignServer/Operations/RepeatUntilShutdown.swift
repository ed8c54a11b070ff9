import Logging
import ServiceLifecycle

/// The loop of the server's periodic services: runs `pass` at once and then every `interval`
/// until the task is cancelled or the service group shuts down gracefully (a sleep ends at
/// once then). A pass that throws is logged as "`name` failed" at `level`; the next one runs.
func repeatUntilShutdown(
    every interval: Duration, _ name: String, logger: Logger, level: Logger.Level = .error,
    _ pass: () async throws -> Void
) async {
    while !Task.isCancelled {
        do {
            try await pass()
        } catch  where !Task.isCancelled {
            logger.log(level: level, "\(name) failed", metadata: ["error": "\(error)"])
        } catch {
            return
        }
        do {
            try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        } catch {
            return
        }
    }
}
