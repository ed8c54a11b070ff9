import CountersignAppStoreServerAPI
import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import Logging
import ServiceLifecycle

/// Answers Apple's `CONSUMPTION_REQUEST`s (a customer asked Apple for a refund) for the apps
/// that set `refundRequests`: every `interval`, each stored request not yet answered is sent
/// through Send Consumption Information with what the server knows (docs/webhooks.md, "Refund
/// requests"). A failure is tried again later, doubling the wait from a minute up to an hour,
/// until Apple's 12 hours to answer have passed; Apple's refusal (a 4xx other than 401 and
/// 429) ends it.
public struct ConsumptionAnswerService: Service {
    let store: CustomerDatabase
    let storeAPI: StoreServerAPI
    let deployment: DeploymentConfiguration
    let interval: Duration
    let now: @Sendable () -> Date
    let logger: Logger

    /// Apple's time to answer a consumption request.
    static let window: TimeInterval = 12 * 3_600
    /// How long a server holds a request it is sending.
    static let lease: TimeInterval = 120
    static let batch = 50

    public func run() async throws {
        let apps = deployment.apps.filter { $0.refundRequests != nil && storeAPI.isConfigured(for: $0) }
        await repeatForApps(apps, every: interval, "consumption answers", logger: logger) { app in try await answer(app) }
    }

    /// One pass over an app's due requests; returns how many were sent.
    @discardableResult
    func answer(_ app: AppConfiguration) async throws -> Int {
        guard let settings = app.refundRequests else { return 0 }
        let time = now()
        var sent = 0
        for due in try await store.takeDueConsumptionRequests(
            app: app.id, now: time, leaseUntil: time.addingTimeInterval(Self.lease), limit: Self.batch)
        {
            let request = Self.request(for: due, settings: settings, now: time)
            do {
                try await storeAPI.client(for: app, environment: due.environment).sendConsumptionInformation(
                    transactionId: due.transactionId, request)
                try await store.finishConsumptionRequest(due, status: .sent, httpStatus: 202, error: nil, retryAt: nil, now: now())
                logger.info("consumption request answered", metadata: ["app": "\(app.id)", "transaction": "\(due.transactionId)"])
                sent += 1
            } catch {
                try await failed(due, error, app: app)
            }
        }
        return sent
    }

    /// Records a failed attempt: tried again later unless Apple refused the answer or its
    /// window has passed.
    private func failed(_ due: CustomerDatabase.ConsumptionRequestDue, _ error: any Error, app: AppConfiguration) async throws {
        let time = now()
        var status: Int?
        var final = false
        var wait = min(3_600, 60 * pow(2, Double(min(due.attempts, 10))))
        if let apiError = error as? AppStoreServerAPIError {
            switch apiError.kind {
            case .badRequest: (status, final) = (400, true)
            case .notFound: (status, final) = (404, true)
            case .unauthorized: status = 401
            case .rateLimited(let retryAfter):
                status = 429
                wait = max(wait, retryAfter ?? 0)
            case .server(let code): status = code
            case .transport, .invalidResponse: break
            }
        }
        let retryAt = time.addingTimeInterval(wait)
        let expired = retryAt.timeIntervalSince(due.receivedAt) > Self.window
        let givesUp = final || expired
        let message = expired && !final ? "Apple's 12 hours to answer passed; last error: \(error)" : "\(error)"
        try await store.finishConsumptionRequest(
            due, status: givesUp ? .failed : .pending, httpStatus: status, error: message, retryAt: givesUp ? nil : retryAt, now: time)
        logger.warning(
            "consumption request not answered",
            metadata: ["app": "\(app.id)", "transaction": "\(due.transactionId)", "error": "\(error)", "final": "\(givesUp)"])
    }

    /// What the server tells Apple of a purchase whose refund was asked for:
    /// - `customerConsented`: true (setting `refundRequests` states the app's terms obtain it);
    /// - `deliveryStatus`: `DELIVERED` when a customer's device posted the purchase, otherwise
    ///   `UNDELIVERED_OTHER` (the server never granted it);
    /// - `consumptionPercentage`: for a non-renewing subscription, the share of its period gone
    ///   by; none otherwise (Apple works it out for auto-renewable ones; the server does not
    ///   know how much of a one-time purchase was used);
    /// - `refundPreference`: the customer's `$appleRefundHandlingPreference` when it names one,
    ///   else the app's.
    static func request(
        for due: CustomerDatabase.ConsumptionRequestDue, settings: AppConfiguration.RefundRequests, now: Date
    ) -> ConsumptionRequest {
        var percentage: Int?
        if due.productKind == AppConfiguration.ProductKind.nonRenewing.rawValue, let start = due.purchaseDate, let end = due.expiresDate, end > start
        {
            let share = now.timeIntervalSince(start) / end.timeIntervalSince(start)
            percentage = Int((min(1, max(0, share)) * 100_000).rounded())
        }
        let preference: String? =
            switch settings.preference {
            case .grant: "GRANT_FULL"
            case .decline: "DECLINE"
            case .noPreference: nil
            }
        return ConsumptionRequest(
            customerConsented: true, deliveryStatus: due.delivered ? "DELIVERED" : "UNDELIVERED_OTHER",
            sampleContentProvided: settings.sampleContentProvided ?? false, consumptionPercentage: percentage,
            refundPreference: customerPreference(due.customerPreference) ?? preference)
    }

    /// A customer's `$appleRefundHandlingPreference`: Apple's values (`GRANT_FULL`,
    /// `GRANT_PRORATED`, `DECLINE`) or the earlier API's (`PREFER_GRANT`, `PREFER_DECLINE`),
    /// any case; `NO_PREFERENCE` sends none. Nil (the app's preference applies) for anything else.
    static func customerPreference(_ value: String?) -> String?? {
        switch value?.uppercased() {
        case "GRANT_FULL", "PREFER_GRANT": "GRANT_FULL"
        case "GRANT_PRORATED": "GRANT_PRORATED"
        case "DECLINE", "PREFER_DECLINE": "DECLINE"
        case "NO_PREFERENCE": .some(nil)
        default: nil
        }
    }
}
