import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import Logging
import ServiceLifecycle

/// Keeps subscriptions true when Apple's notifications are late or lost: every `interval`, the
/// subscriptions of each app with an In-App Purchase key whose state is in doubt (see
/// ``CustomerDatabase/chainsInDoubt(app:now:recheckAfter:limit:)``) are asked of the App Store
/// Server API and brought up to date, with the same events a notification would have made. A
/// chain is asked at most every 12 hours; an API failure is logged and tried next time.
public struct ReconciliationService: Service {
    let store: CustomerDatabase
    let storeAPI: StoreServerAPI
    let deployment: DeploymentConfiguration
    let interval: Duration
    let now: @Sendable () -> Date
    let logger: Logger

    static let recheckAfter: TimeInterval = 12 * 3_600
    static let batch = 200

    public func run() async throws {
        await repeatForApps(deployment.apps.filter(storeAPI.isConfigured(for:)), every: interval, "reconciliation", logger: logger) { app in
            await reconcile(app)
        }
    }

    /// One pass over an app's subscriptions in doubt; returns how many were applied.
    @discardableResult
    func reconcile(_ app: AppConfiguration) async -> Int {
        do {
            let chains = try await store.chainsInDoubt(app: app.id, now: now(), recheckAfter: Self.recheckAfter, limit: Self.batch)
            guard !chains.isEmpty else { return 0 }
            let applied = try await storeAPI.refresh(app: app, chains: chains)
            logger.info("subscriptions reconciled", metadata: ["app": "\(app.id)", "asked": "\(chains.count)", "applied": "\(applied)"])
            return applied
        } catch {
            logger.error("reconciliation failed", metadata: ["app": "\(app.id)", "error": "\(error)"])
            return 0
        }
    }
}
