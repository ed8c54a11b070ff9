import Foundation
import NIOConcurrencyHelpers
import Prometheus

/// The server's metrics, in its own Prometheus registry (one per server, so several servers in
/// one process, as in tests, never mix their counts). `GET /metrics` emits them as text.
public final class ServerMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()
    private let signingTime: DurationHistogram
    private let keyExpiry: Gauge

    private static let latencyBuckets: [Duration] = [
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2.5),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5),
    ]

    public init() {
        signingTime = registry.makeDurationHistogram(
            descriptor: Self.name(
                "response_signing", unit: "seconds",
                help: "Time to sign one answer (message assembly, Ed25519, blob and base64), on the monotonic clock."),
            buckets: [
                .microseconds(10), .microseconds(25), .microseconds(50), .microseconds(100), .microseconds(250),
                .microseconds(500), .milliseconds(1), .milliseconds(5),
            ]
        )
        keyExpiry = registry.makeGauge(
            descriptor: Self.name("intermediate_key_expiry", unit: "seconds", help: "Seconds until the signing intermediate key expires.")
        )
    }

    static func name(_ metric: String, unit: String, help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "countersign", metricName: metric, unitName: unit, helpText: help)
    }

    /// One answered request: `route` is the matched route pattern (never the raw path, so user
    /// ids do not become label values).
    ///
    /// The registry validates names, labels and help text on every `make…` call; the counter and
    /// histogram of each (route, method, status) are kept here after the first request, so an
    /// answer costs one locked dictionary lookup.
    func recordRequest(route: String, method: String, status: Int, duration: Duration) {
        let method = Self.countedMethods.contains(method) ? method : "other"
        let key = RequestSeries(route: route, method: method, status: status)
        let series = requestSeries.withLockedValue { cache in
            if let known = cache[key] { return known }
            let made = (
                registry.makeCounter(
                    descriptor: Self.name("http_requests", unit: "total", help: "Answered requests by route, method and status."),
                    labels: [("route", route), ("method", method), ("status", String(status))]
                ),
                registry.makeDurationHistogram(
                    descriptor: Self.name("http_request_duration", unit: "seconds", help: "Request latency by route."),
                    labels: [("route", route)], buckets: Self.latencyBuckets
                )
            )
            cache[key] = made
            return made
        }
        series.0.increment()
        series.1.record(duration)
    }

    private struct RequestSeries: Hashable {
        var route: String
        var method: String
        var status: Int
    }

    private let requestSeries = NIOLockedValueBox<[RequestSeries: (Counter, DurationHistogram)]>([:])

    func recordSigning(_ duration: Duration) {
        signingTime.record(duration)
    }

    /// An entitlement token issued.
    func recordEntitlementToken() {
        registry.makeCounter(
            descriptor: Self.name(
                "entitlement_tokens_issued", unit: "total", help: "Entitlement tokens issued (POST /v1/subscribers/{id}/entitlement_token).")
        ).increment()
    }

    /// An answer refused with 503 because no unexpired intermediate key was left to sign it.
    func recordSigningRefused() {
        registry.makeCounter(
            descriptor: Self.name("signing_refused", unit: "total", help: "Answers refused (503) because the intermediate key had expired.")
        ).increment()
    }

    /// Telemetry reports refused because an app sent more than its share.
    func recordTelemetryRateLimited(app: String) {
        registry.makeCounter(
            descriptor: Self.name("verification_failure_reports_rate_limited", unit: "total", help: "Telemetry reports refused with 429, by app."),
            labels: [("app", app)]
        ).increment()
    }

    /// The HTTP methods counted by name; anything else is `other`, so a client cannot mint label values.
    static let countedMethods: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    /// Verification failures that SDKs reported, by app and reason.
    func recordReportedFailures(app: String, reason: String, mode: String, count: Int) {
        registry.makeCounter(
            descriptor: Self.name(
                "verification_failures_reported", unit: "total",
                help: "Signature verification failures reported by SDKs, by app, reason and mode."),
            labels: [("app", app), ("reason", reason), ("mode", mode)]
        ).increment(by: Int64(count))
    }

    /// Purchases posted, by outcome (`new`, `already_recorded`, `transferred`, `bound_to_another_user`,
    /// or the error code of a refusal).
    func recordPurchase(app: String, outcome: String) {
        registry.makeCounter(
            descriptor: Self.name("purchases", unit: "total", help: "Posted purchases by app and outcome."),
            labels: [("app", app), ("outcome", outcome)]
        ).increment()
    }

    /// Webhook delivery attempts, by outcome (`delivered`, `retry`, `failed`).
    func recordWebhookAttempt(outcome: String) {
        registry.makeCounter(
            descriptor: Self.name("webhook_attempts", unit: "total", help: "Webhook delivery attempts by outcome."),
            labels: [("outcome", outcome)]
        ).increment()
    }

    /// The metrics as Prometheus text, with the key expiry gauge brought up to date.
    func exposition(keyExpiresIn seconds: Double) -> [UInt8] {
        keyExpiry.set(seconds)
        return registry.emitToBuffer()
    }
}
