import CountersignStorage
import Foundation
import Logging
import ServiceLifecycle

/// Keeps the revenue charts' sums up to date between requests: every `interval` it takes the
/// marks writes have left since (a few hundred at a time, so intake never waits long for the
/// writer) until none remain. A chart request finishes whatever is left before it reads, so
/// this only keeps that short; after a large import or the migration that marks every record,
/// it is this service that catches up.
public struct ChartTotalsService: Service {
    let store: CustomerDatabase
    let interval: Duration
    let now: @Sendable () -> Date
    let logger: Logger

    public func run() async throws {
        // Not at once: the first pass waits an interval, as every later one does.
        guard (try? await cancelWhenGracefulShutdown({ try await Task.sleep(for: interval) })) != nil else { return }
        await repeatUntilShutdown(every: interval, "chart sums", logger: logger) {
            while try await store.refreshChartTotals(now: now()) > 0 { try Task.checkCancellation() }
        }
    }
}
