import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import Logging
import ServiceLifecycle

/// Keeps subscriptions true when the store's notifications are late or lost: every `interval`,
/// the subscriptions whose state is in doubt (see
/// ``CustomerDatabase/chainsInDoubt(app:now:recheckAfter:limit:)``) are asked again of their
/// store, the App Store Server API (apps with an In-App Purchase key) or Stripe's API (apps that
/// sell through Stripe), and brought up to date, with the same events a notification would have
/// made. A chain is asked at most every 12 hours; an API failure is logged and tried next time.
public struct ReconciliationService: Service {
    let store: CustomerDatabase
    let storeAPI: StoreServerAPI
    let stripe: StripeWeb
    let deployment: DeploymentConfiguration
    let interval: Duration
    let now: @Sendable () -> Date
    let logger: Logger

    static let recheckAfter: TimeInterval = 12 * 3_600
    static let batch = 200

    public func run() async throws {
        let apps = deployment.apps.filter { storeAPI.isConfigured(for: $0) || $0.stripe != nil }
        await repeatForApps(apps, every: interval, "reconciliation", logger: logger) { app in
            await reconcile(app)
        }
    }

    /// One pass over an app's subscriptions in doubt; returns how many were applied.
    @discardableResult
    func reconcile(_ app: AppConfiguration) async -> Int {
        do {
            let chains = try await store.chainsInDoubt(app: app.id, now: now(), recheckAfter: Self.recheckAfter, limit: Self.batch)
            guard !chains.isEmpty else { return 0 }
            let web = chains.filter { $0.environment == "Stripe" || $0.environment == "StripeTest" }
            var applied = 0
            for (chain, _) in web where app.stripe != nil {
                try await stripe.refresh(subscription: chain, app: app, now: now())
                applied += 1
            }
            let apple = chains.filter { $0.environment != "Stripe" && $0.environment != "StripeTest" }
            if !apple.isEmpty && storeAPI.isConfigured(for: app) { applied += try await storeAPI.refresh(app: app, chains: apple) }
            logger.info("subscriptions reconciled", metadata: ["app": "\(app.id)", "asked": "\(chains.count)", "applied": "\(applied)"])
            return applied
        } catch {
            logger.error("reconciliation failed", metadata: ["app": "\(app.id)", "error": "\(error)"])
            return 0
        }
    }
}
