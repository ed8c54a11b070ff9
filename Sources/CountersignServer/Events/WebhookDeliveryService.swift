import AsyncHTTPClient
import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import ServiceLifecycle

/// Sends stored events to the apps' webhook endpoints, and reports subscriptions that expired
/// without a word from the store. A service of the server's `ServiceGroup`.
///
/// At least once, in order per customer: a delivery is sent only when no earlier event of the
/// same customer is still pending for that endpoint, and is marked delivered only after a 2xx
/// answer; a server that dies mid-delivery leaves its lease to run out, and the delivery is sent
/// again with the same event id. Failed attempts wait out the endpoint's retry schedule; after
/// the last one the delivery is `failed` until redelivered through the admin API. The API never
/// waits for any of this: requests only write rows.
///
/// Every delivery is signed like an answer: `X-Signature` (the same 180-byte blob and keys)
/// over salt ‖ the URL's path ‖ the hash of the app id and the endpoint (host, port, path) ‖
/// `X-Request-Time` ‖ body (``WebhookSignature``), so a receiver pinning the root key knows the
/// event came from this server, unchanged, when, and for it: a delivery replayed to another
/// endpoint, or to another app's receiver, fails.
public struct WebhookDeliveryService: Service {
    public struct Settings: Sendable {
        /// How often the queue is looked at.
        public var pollInterval: Duration = .seconds(1)
        /// How long a server holds a delivery it is sending before another may take it (well
        /// over an attempt's timeout, so a live sender never loses its lease mid-attempt).
        public var lease: TimeInterval = 90
        /// How long one attempt may take (connect, send, answer): 60 seconds, RevenueCat's wait.
        public var attemptTimeout: TimeInterval = 60
        /// Deliveries sent at once.
        public var batchSize = 32
        /// How long delivered deliveries, and events with nothing left to deliver, are kept
        /// (seconds; the admin API, the dashboard's charts and `countersign` read them until then).
        public var retention: TimeInterval = 90 * 86_400
        /// How long a customer who never bought, never logged in and has no grant or attribute is
        /// kept after they were last seen (seconds; nil: forever). A read of an id never seen
        /// records a customer (RevenueCat's first sight); this bounds what made-up ids leave.
        public var customerRetention: TimeInterval? = 90 * 86_400
        /// How often what is past the retention is deleted.
        public var pruneInterval: Duration = .seconds(3_600)

        public init() {}
    }

    let store: CustomerDatabase
    let deployment: DeploymentConfiguration
    let keys: SigningKeyRing
    let settings: Settings
    let now: @Sendable () -> Date
    let metrics: ServerMetrics
    let logger: Logger
    /// Without a valid signing key every pass fails every delivery: said once a minute, not
    /// once a delivery a pass.
    let unsignedNotice = NIOLockedValueBox<ContinuousClock.Instant?>(nil)

    public func run() async throws {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow)
        let timeout = TimeAmount.milliseconds(Int64(settings.attemptTimeout * 1000))
        configuration.timeout = .init(connect: timeout, read: timeout)
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            try await store.failUnconfiguredDeliveries(apps: deployment.apps, now: now())
        } catch {
            logger.error("could not close the deliveries of removed webhooks", metadata: ["error": "\(error)"])
        }
        // One loop per endpoint, so a slow or dead endpoint holds up only its own deliveries,
        // and one for the expiry check. Shutdown cancels attempts under way: they are given back
        // uncounted (or, if even that fails, their leases run out) and sent again.
        try? await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    await repeatUntilShutdown(every: settings.pollInterval, "expiry check", logger: logger) { try await checkExpirations() }
                }
                group.addTask {
                    await repeatUntilShutdown(every: settings.pruneInterval, "event retention", logger: logger) { try await prune() }
                }
                for app in deployment.apps {
                    for webhook in app.webhooks ?? [] {
                        group.addTask {
                            await repeatUntilShutdown(every: settings.pollInterval, "webhook delivery", logger: logger) {
                                try await deliverDue(to: webhook, app: app.id, with: client)
                            }
                        }
                    }
                }
            }
        }
        try? await client.shutdown()
    }

    /// Reports subscriptions whose period ended since the last check (see
    /// ``CustomerDatabase/recordExpirations(apps:now:limit:)``).
    func checkExpirations() async throws {
        let reported = try await store.recordExpirations(apps: deployment.apps, now: now())
        if reported > 0 { logger.info("subscriptions expired", metadata: ["events": "\(reported)"]) }
    }

    /// Deletes delivered deliveries and undeliverable-or-delivered events older than the
    /// retention, and customers who left nothing to keep, unseen for the customer retention
    /// (``CustomerDatabase/pruneCustomers(app:lastSeenBefore:limit:)``, a thousand at a time).
    func prune() async throws {
        let time = now()
        let removed = try await store.pruneEvents(before: time.addingTimeInterval(-settings.retention))
        if removed.events + removed.deliveries > 0 {
            logger.info("pruned past the retention", metadata: ["events": "\(removed.events)", "deliveries": "\(removed.deliveries)"])
        }
        guard let customerRetention = settings.customerRetention else { return }
        for app in deployment.apps {
            var customers = 0
            while true {
                let batch = try await store.pruneCustomers(app: app.id, lastSeenBefore: time.addingTimeInterval(-customerRetention))
                customers += batch
                if batch < 1000 || Task.isCancelled { break }
            }
            if customers > 0 { logger.info("pruned customers past the retention", metadata: ["app": "\(app.id)", "customers": "\(customers)"]) }
        }
    }

    /// Sends every delivery to one endpoint whose turn has come, a batch at a time; returns how
    /// many were sent.
    @discardableResult
    func deliverDue(to webhook: AppConfiguration.Webhook, app: String, with client: HTTPClient) async throws -> Int {
        var sent = 0
        while !Task.isCancelled {
            let time = now()
            let due = try await store.takeDueDeliveries(
                app: app, endpoint: webhook.url, now: time, leaseUntil: time.addingTimeInterval(settings.lease),
                limit: settings.batchSize)
            guard !due.isEmpty else { break }
            await withTaskGroup(of: Void.self) { group in
                for delivery in due {
                    group.addTask { await attempt(delivery, to: webhook, app: app, with: client) }
                }
            }
            sent += due.count
        }
        return sent
    }

    /// One attempt of one delivery to its (configured) endpoint, its outcome recorded.
    func attempt(_ delivery: CustomerDatabase.DueDelivery, to webhook: AppConfiguration.Webhook, app: String, with client: HTTPClient) async {
        let request: HTTPClientRequest
        do {
            request = try signedRequest(delivery, to: webhook, app: app)
        } catch {
            // The server's own fault (no valid signing key): no attempt is counted, and the
            // delivery is tried again on a later pass, once rotation has brought a key.
            let due = unsignedNotice.withLockedValue { last in
                guard last.map({ ContinuousClock.now - $0 >= .seconds(60) }) ?? true else { return false }
                last = ContinuousClock.now
                return true
            }
            if due {
                logger.critical(
                    "cannot sign webhook deliveries; they wait, no attempt counted (said once a minute)",
                    metadata: ["event": "\(delivery.eventId)", "error": "\(error)"])
            }
            do {
                try await store.releaseLease(delivery)
            } catch {
                logger.error("could not release a webhook delivery", metadata: ["event": "\(delivery.eventId)", "error": "\(error)"])
            }
            return
        }
        var status: Int?
        var problem: String?
        do {
            let response = try await client.execute(request, timeout: .milliseconds(Int64(settings.attemptTimeout * 1000)))
            status = Int(response.status.code)
            // Read (a bounded part of) the answer so the connection can be reused.
            _ = try? await response.body.collect(upTo: 64 * 1024)
            if !(200..<300).contains(Int(response.status.code)) { problem = "the endpoint answered \(response.status.code)" }
        } catch {
            problem = "\(error)"
        }
        if Task.isCancelled, problem != nil {
            // Stopped by shutdown, not refused by the endpoint: no attempt is counted.
            try? await store.releaseLease(delivery)
            return
        }
        let delivered = problem == nil
        let schedule = webhook.retrySchedule
        let retryAt = delivered || delivery.attempts >= schedule.count ? nil : now().addingTimeInterval(schedule[delivery.attempts])
        metrics.recordWebhookAttempt(outcome: delivered ? "delivered" : retryAt == nil ? "failed" : "retry")
        if delivered {
            logger.info("webhook delivered", metadata: ["event": "\(delivery.eventId)", "endpoint": "\(delivery.endpoint)"])
        } else {
            logger.warning(
                "webhook attempt failed",
                metadata: [
                    "event": "\(delivery.eventId)", "endpoint": "\(delivery.endpoint)", "attempt": "\(delivery.attempts + 1)",
                    "error": "\(problem ?? "")", "retry": "\(retryAt.map { "\($0.epochMilliseconds)" } ?? "none")",
                ])
        }
        await finish(delivery, delivered: delivered, status: status, error: problem, retryAt: retryAt)
    }

    private func finish(_ delivery: CustomerDatabase.DueDelivery, delivered: Bool, status: Int?, error: String?, retryAt: Date?) async {
        do {
            try await store.finishAttempt(delivery, delivered: delivered, status: status, error: error, retryAt: retryAt, now: now())
        } catch {
            // The lease runs out and the delivery is attempted again: at least once holds.
            logger.error("could not record a webhook attempt", metadata: ["event": "\(delivery.eventId)", "error": "\(error)"])
        }
    }

    /// The POST of one delivery: the event's stored bytes, signed now.
    func signedRequest(_ delivery: CustomerDatabase.DueDelivery, to webhook: AppConfiguration.Webhook, app: String) throws -> HTTPClientRequest {
        let date = now()
        let body = Data(delivery.body.utf8)
        let requestTime = String(date.epochMilliseconds)
        // The configuration checked every URL has a host.
        guard let parts = WebhookSignature.requestParts(appId: app, url: webhook.url) else {
            throw ConfigurationError("webhook '\(webhook.url)' has no host")
        }
        let signature = try keys.signer(at: date).signature(request: parts, response: SignedResponseParts(requestTime: requestTime, body: body))
        var request = HTTPClientRequest(url: webhook.url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "Countersign-Webhooks/1")
        if let authorization = webhook.authorization { request.headers.add(name: "Authorization", value: authorization) }
        request.headers.add(name: WireHeader.signature, value: signature)
        request.headers.add(name: WireHeader.requestTime, value: requestTime)
        request.body = .bytes(ByteBuffer(bytes: body))
        return request
    }
}
