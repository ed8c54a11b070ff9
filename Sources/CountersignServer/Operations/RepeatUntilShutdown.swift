import CountersignCore
import CountersignServerCore
import Logging
import ServiceLifecycle

/// A periodic service's loop over the apps it serves: `pass` for each app, at once and then
/// every `interval` (``repeatUntilShutdown(every:_:logger:level:_:)``). With no app to serve it
/// waits for shutdown instead of returning, which would stop the server's service group.
func repeatForApps(
    _ apps: [AppConfiguration], every interval: Duration, _ name: String, logger: Logger, _ pass: (AppConfiguration) async throws -> Void
) async {
    guard !apps.isEmpty else {
        try? await gracefulShutdown()
        return
    }
    await repeatUntilShutdown(every: interval, name, logger: logger) {
        for app in apps { try await pass(app) }
    }
}

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
