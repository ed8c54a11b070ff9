import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird

/// `/v1/admin/...`: for the app's own backend, with a secret API key. Answers are not signed
/// (they never reach a device) and never create customers as a side effect of reading.
///
/// - `GET /v1/admin/customers/{id}`: the customer, their entitlements, transactions and grants.
/// - `GET /v1/admin/customers/{id}/customer_info`: the CustomerInfo the app would see, unsigned.
/// - `POST /v1/admin/customers/{id}/entitlements/{entitlement}/promotional`: grant, body
///   `{"duration": "weekly"}` (or another ``PromotionalDuration``) or `{"end_time_ms": N}`.
/// - `POST /v1/admin/customers/{id}/entitlements/{entitlement}/revoke_promotionals`.
/// - `POST /v1/admin/customers/{id}/refresh`: the customer's subscriptions asked of the App
///   Store Server API and brought up to date (apps with an In-App Purchase key).
/// - `DELETE /v1/admin/customers/{id}`.
/// - `POST /v1/admin/dashboard/sessions/end`: every dashboard session of the app ends (after a
///   leaked secret key was rotated, or whenever).
/// - `GET /v1/admin/keys`: the signing key's status.
/// - `GET /v1/admin/diagnostics/verification_failures?days=N`: SDK-reported failure counts.
/// - `POST /v1/admin/test_store/{renew,refund,approve,share,purchase}`: play the App Store's part
///   for test-store purchases (see AdminRoutes+TestStore.swift).
/// - `/v1/admin/webhooks/...`: webhook deliveries (see AdminRoutes+Webhooks.swift).
/// - `POST /v1/admin/stripe/redemption_links`: a web purchase's redemption link (AdminRoutes+Stripe.swift).
///
/// RevenueCat's REST API v1, as backends call it with the secret key, at RevenueCat's paths and
/// with RevenueCat's answers: `POST /v1/subscribers/{id}/entitlements/{entitlement}/promotional`
/// (201, the customer's CustomerInfo), `POST /v1/subscribers/{id}/entitlements/{entitlement}/
/// revoke_promotionals` (200, CustomerInfo) and `DELETE /v1/subscribers/{id}`
/// (`{"app_user_id", "deleted": true}`). (`GET /v1/subscribers/{id}` with the secret key is the
/// signed public route.)
struct AdminRoutes: Sendable {
    let authentication: APIKeyAuthentication
    let store: CustomerDatabase
    let keys: SigningKeyRing
    let verifiers: [String: SignedDataVerifier]
    let testStore: TestStoreCA?
    let storeAPI: StoreServerAPI
    /// Web purchases (redemption links).
    let stripe: StripeWeb
    let now: @Sendable () -> Date

    struct GrantRequest: Decodable {
        var duration: String?
        var endTimeMs: Int64?

        enum CodingKeys: String, CodingKey {
            case duration, endTimeMs = "end_time_ms"
        }
    }

    struct KeyStatus: Encodable {
        var mode: String
        var rootPublicKey: String?
        var intermediatePublicKey: String
        var intermediateExpires: String
        var intermediateDaysLeft: Double
        var renewalWindowDays: Int

        enum CodingKeys: String, CodingKey {
            case mode, rootPublicKey = "root_public_key", intermediatePublicKey = "intermediate_public_key"
            case intermediateExpires = "intermediate_expires", intermediateDaysLeft = "intermediate_days_left"
            case renewalWindowDays = "renewal_window_days"
        }
    }

    struct Deleted: Encodable {
        var appUserId: String
        var deleted: Bool

        enum CodingKeys: String, CodingKey {
            case appUserId = "app_user_id", deleted
        }
    }

    func add(to router: ServerRouter) {
        let router = router.group().add(middleware: AppAuthentication(authentication: authentication, kind: .secretKey))
        let customer = "/v1/admin/customers/:app_user_id"
        func path(_ suffix: String = "") -> RouterPath { RouterPath(customer + suffix) }
        route(router, .get, path(), customerRecord)
        route(router, .get, path("/customer_info"), customerInfo)
        route(router, .post, path("/entitlements/:entitlement/promotional"), grantPromotional)
        route(router, .post, path("/entitlements/:entitlement/revoke_promotionals"), revokePromotionals)
        route(router, .post, path("/refresh"), refresh)
        route(router, .delete, path(), deleteCustomer)
        let subscriber = "/v1/subscribers/:app_user_id"
        route(router, .post, RouterPath(subscriber + "/entitlements/:entitlement/promotional")) { app, request, context in
            try await grant(app, request, context)
            return try await Self.json(try await existingInfo(app, context), status: .created)
        }
        route(router, .post, RouterPath(subscriber + "/entitlements/:entitlement/revoke_promotionals")) { app, request, context in
            try await revoke(app, context)
            return try await Self.json(try await existingInfo(app, context))
        }
        route(router, .delete, RouterPath(subscriber), deleteCustomer)
        route(router, .post, "/v1/admin/dashboard/sessions/end", endDashboardSessions)
        route(router, .get, "/v1/admin/keys", keyStatus)
        route(router, .get, "/v1/admin/diagnostics/verification_failures", verificationFailures)
        addTestStoreRoutes(to: router)
        addWebhookRoutes(to: router)
        addChartRoutes(to: router)
        addStripeRoutes(to: router)
    }

    private func customerRecord(_ app: AppConfiguration, _: Request, _ context: ServerRequestContext) async throws -> Response {
        try await Self.json(try await existing(app: app, context: context))
    }

    private func customerInfo(_ app: AppConfiguration, _: Request, _ context: ServerRequestContext) async throws -> Response {
        try await Self.json(try await existingInfo(app, context))
    }

    private func grantPromotional(_ app: AppConfiguration, _ request: Request, _ context: ServerRequestContext) async throws -> Response {
        try await grant(app, request, context)
        return try await Self.json(try await existing(app: app, context: context), status: .created)
    }

    /// The customer's CustomerInfo (404 for a customer the server does not know): the admin
    /// route's answer, and RevenueCat's REST API's answer to a change.
    private func existingInfo(_ app: AppConfiguration, _ context: ServerRequestContext) async throws -> SubscriberResponse {
        guard let info = try await store.existingCustomerInfo(app: app, user: try Self.user(context), now: now()) else {
            throw Self.unknownCustomer
        }
        return info
    }

    /// Grants the promotional entitlement the request names.
    private func grant(_ app: AppConfiguration, _ request: Request, _ context: ServerRequestContext) async throws {
        var request = request
        let user = try Self.user(context)
        let entitlement = try Self.entitlement(context, app: app)
        let grant = try await JSONBody.body(GrantRequest.self, of: &request, context: context)
        let start = now()
        let expires: Date?
        switch (grant.duration, grant.endTimeMs) {
        case (let name?, nil):
            expires = try PromotionalDuration.named(name).end(from: start)
        case (nil, let end?):
            guard end > start.epochMilliseconds else { throw APIError(.invalidField, "end_time_ms must be in the future") }
            guard end <= Date.latestRequestMilliseconds else {
                throw APIError(.invalidField, "end_time_ms must be a time before the year 10000 (at most \(Date.latestRequestMilliseconds))")
            }
            expires = Date(epochMilliseconds: end)
        default:
            throw APIError(.invalidField, "give exactly one of duration and end_time_ms")
        }
        try await store.grantPromotional(app: app, user: user, entitlement: entitlement, expires: expires, now: start)
    }

    private func revokePromotionals(_ app: AppConfiguration, _: Request, _ context: ServerRequestContext) async throws -> Response {
        try await revoke(app, context)
        return try await Self.json(try await existing(app: app, context: context))
    }

    /// Revokes the customer's promotional grants of the entitlement the request names.
    private func revoke(_ app: AppConfiguration, _ context: ServerRequestContext) async throws {
        let user = try Self.user(context)
        let entitlement = try Self.entitlement(context, app: app)
        _ = try await existing(app: app, context: context)
        _ = try await store.revokePromotionals(app: app, user: user, entitlement: entitlement, now: now())
    }

    private func refresh(_ app: AppConfiguration, _: Request, _ context: ServerRequestContext) async throws -> Response {
        let user = try Self.user(context)
        _ = try await existing(app: app, context: context)
        try await storeAPI.refresh(app: app, chains: try await store.subscriptionChains(app: app.id, user: user))
        return try await Self.json(try await existing(app: app, context: context))
    }

    private func deleteCustomer(_ app: AppConfiguration, _: Request, _ context: ServerRequestContext) async throws -> Response {
        let user = try Self.user(context)
        guard try await store.deleteCustomer(app: app, user: user, now: now()) else { throw Self.unknownCustomer }
        context.logger.notice("customer deleted", metadata: ["app": "\(app.id)"])
        return try await Self.json(Deleted(appUserId: user, deleted: true))
    }

    private func endDashboardSessions(_ app: AppConfiguration, _: Request, _ context: ServerRequestContext) async throws -> Response {
        let ended = try await store.endDashboardSessions(app: app.id)
        context.logger.notice("dashboard sessions ended", metadata: ["app": "\(app.id)", "sessions": "\(ended)"])
        return try await Self.json(["ended_sessions": ended])
    }

    private func keyStatus(_: AppConfiguration, _: Request, _: ServerRequestContext) async throws -> Response {
        let certificate = keys.currentSigner.key.certificate
        let mode =
            switch keys.mode {
            case .managed: "managed"
            case .offline: "offline"
            }
        return try await Self.json(
            KeyStatus(
                mode: mode,
                rootPublicKey: keys.managedRootPublicKey?.rawRepresentation.base64EncodedString(),
                intermediatePublicKey: certificate.publicKey.base64EncodedString(),
                intermediateExpires: WireDate.format(certificate.expirationDate),
                intermediateDaysLeft: (keys.daysUntilExpiry * 100).rounded(.down) / 100,
                renewalWindowDays: Int(SigningKeyRing.renewalWindow / 86_400)
            ))
    }

    private func verificationFailures(_ app: AppConfiguration, _ request: Request, _: ServerRequestContext) async throws -> Response {
        let days: Int
        if let text = request.uri.queryParameters.get("days") {
            guard let value = Int(text), (1...366).contains(value) else { throw APIError(.invalidField, "days must be 1 to 366") }
            days = value
        } else {
            days = 30
        }
        return try await Self.json(try await VerificationReport.make(app: app, store: store, days: days, now: now()))
    }

    static let unknownCustomer = APIError(.notFound, "no customer with that app user id")

    private func existing(app: AppConfiguration, context: ServerRequestContext) async throws -> CustomerDatabase.CustomerRecord {
        guard let record = try await store.lookup(app: app, user: try Self.user(context), now: now()) else { throw Self.unknownCustomer }
        return record
    }

    private static func user(_ context: ServerRequestContext) throws(APIError) -> String {
        try AppUserIDRules.validated(context.parameters.get("app_user_id") ?? "", percentEncoded: true)
    }

    /// The entitlement in the path, which some product of the app must unlock.
    private static func entitlement(_ context: ServerRequestContext, app: AppConfiguration) throws(APIError) -> String {
        try entitlement(named: context.parameters.get("entitlement")?.removingPercentEncoding ?? "", app: app)
    }

    /// `raw`, when some product of the app unlocks it (admin API and dashboard alike).
    static func entitlement(named raw: String, app: AppConfiguration) throws(APIError) -> String {
        guard app.products.contains(where: { $0.entitlements.contains(raw) }) else {
            throw APIError(.unknownEntitlement, "no product of app '\(app.id)' unlocks entitlement '\(raw.prefix(100))'")
        }
        return raw
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) async throws -> Response {
        json(bytes: try WireJSON.encode(value), status: status)
    }

    /// A CustomerInfo through the lean writer, the same bytes as `WireJSON.encode(info)`
    /// (`LeanJSONTests.leanEqualsCodable` holds the two equal) without the encoder's reflection.
    static func json(_ info: SubscriberResponse, status: HTTPResponse.Status = .ok) async throws -> Response {
        json(bytes: info.leanJSON(), status: status)
    }

    private static func json(bytes: some Sequence<UInt8>, status: HTTPResponse.Status) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// An admin route, given the app the group's middleware found for the secret key.
    func route(
        _ group: RouterGroup<ServerRequestContext>, _ method: HTTPRequest.Method, _ path: RouterPath,
        _ handler: @escaping @Sendable (AppConfiguration, Request, ServerRequestContext) async throws -> Response
    ) {
        group.on(path, method: method) { request, context in
            try await handler(try context.authenticatedApp(), request, context)
        }
    }
}

/// `POST /v1/diagnostics/verification_failures`: SDKs report the signature verification
/// failures they saw, in batches. Counted by app, UTC day, reason and mode; nothing personal is
/// stored (not even the app user id the report may carry).
///
/// The counts are client-reported: the route takes the app's public API key, which every copy
/// of the app holds, so a report says what a client claims, not what the server saw. They are
/// kept in their own table and shown as such (the dashboard says so), apart from anything the
/// server measures itself. Only the failure reasons and modes the SDK knows are taken (anything
/// else is a 400), so stored rows and metric label values stay a small fixed set; reports are
/// rate limited per client address and per app (429 with `Retry-After`), so one noisy or hostile
/// client can neither flood the table nor use up the app's budget for everyone else.
struct DiagnosticsRoutes: Sendable {
    let authentication: APIKeyAuthentication
    let store: CustomerDatabase
    let metrics: ServerMetrics
    let limiter: RateLimiter
    /// Per client address (nil: no limit).
    let perClient: RateLimiter?
    let now: @Sendable () -> Date

    static let maximumBatch = 100
    static let modes: Set<String> = ["informational", "enforced"]
    static let reasons = Set(VerificationFailure.allCases.map(\.rawValue))

    typealias Report = VerificationFailureReport

    func add(to router: ServerRouter) {
        let group = router.group().add(middleware: AppAuthentication(authentication: authentication, kind: .publicKey))
        group.post("/v1/diagnostics/verification_failures") { request, context in
            var request = request
            let app = try context.authenticatedApp()
            if let wait = perClient?.admit(context.clientAddress) {
                metrics.recordTelemetryRateLimited(app: app.id)
                throw APIError(.rateLimited, "too many verification failure reports from this address; try again in \(wait) s", retryAfter: wait)
            }
            if let wait = limiter.admit(app.id) {
                metrics.recordTelemetryRateLimited(app: app.id)
                throw APIError(.rateLimited, "too many verification failure reports from this app; try again in \(wait) s", retryAfter: wait)
            }
            let counts = try Self.validated(try await JSONBody.body(Report.self, of: &request, context: context))
            try await store.addVerificationFailures(app: app.id, counts: counts, at: now())
            for entry in counts {
                metrics.recordReportedFailures(app: app.id, reason: entry.reason, mode: entry.mode, count: entry.count)
            }
            return Response(
                status: .accepted, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(bytes: try WireJSON.encode(["accepted": counts.count]))))
        }
    }

    /// Checks every entry before anything is stored: a bad entry refuses the whole batch.
    static func validated(_ report: Report) throws(APIError) -> [CustomerDatabase.ReportedFailure] {
        guard (1...maximumBatch).contains(report.failures.count) else {
            throw APIError(.invalidField, "failures must hold 1 to \(maximumBatch) entries")
        }
        return try report.failures.map { failure throws(APIError) in
            guard reasons.contains(failure.reason) else {
                throw APIError(.invalidField, "reason must be one of \(reasons.sorted().joined(separator: ", "))")
            }
            guard modes.contains(failure.mode) else {
                throw APIError(.invalidField, "mode must be informational or enforced (disabled mode verifies nothing)")
            }
            guard failure.path.utf8.count <= 1024, (failure.appUserId?.unicodeScalars.count ?? 0) <= 256 else {
                throw APIError(.invalidField, "path or app_user_id is too long")
            }
            // Versions become table rows and dashboard columns: short, printable, or refused.
            for (name, value) in [("sdk_version", failure.sdkVersion), ("app_version", failure.appVersion)] {
                if let value, !Report.isVersionText(value) {
                    throw APIError(.invalidField, "\(name) must be 1 to 32 letters, digits and . - + _ characters")
                }
            }
            let count = failure.count ?? 1
            guard (1...10_000).contains(count) else { throw APIError(.invalidField, "count must be 1 to 10000") }
            return CustomerDatabase.ReportedFailure(
                reason: failure.reason, mode: failure.mode, sdkVersion: failure.sdkVersion ?? "", appVersion: failure.appVersion ?? "", count: count)
        }
    }
}

extension PromotionalDuration {
    /// The duration a request names, or the refusal that lists the known ones.
    static func named(_ name: String) throws(APIError) -> PromotionalDuration {
        guard let duration = PromotionalDuration(rawValue: name) else {
            throw APIError(.invalidField, "duration must be one of \(allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return duration
    }
}
