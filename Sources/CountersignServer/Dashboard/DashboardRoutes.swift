import CountersignCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird

/// `/dashboard`: server-rendered pages for app teams, signed in with an app's secret API key.
///
/// - `GET /dashboard/login`, `POST /dashboard/login` (field `secret_key`), `POST /dashboard/logout`
/// - `GET /dashboard`: overview; `POST /dashboard/switch`: show another signed-in app
/// - `GET /dashboard/customers?q=`, `GET /dashboard/customers/{id}`, with
///   `POST …/{id}/grant`, `POST …/{id}/revoke`, `GET` and `POST …/{id}/delete`
/// - `GET /dashboard/failures`, `GET /dashboard/keys`, `GET /dashboard/style.css`
///
/// A session is a random token in an HttpOnly, SameSite=Strict cookie; the database keeps its
/// SHA-256, the apps it was given keys for and the CSRF token every form carries (a POST without
/// it is a 403 that changes nothing). The sign-in form has its own CSRF token, in a cookie of
/// its own, and failed sign-ins are limited per client address. Nothing secret is ever in a URL.
struct DashboardRoutes: Sendable {
    let deployment: DeploymentConfiguration
    let store: CustomerDatabase
    let keys: SigningKeyRing
    let templates: DashboardTemplates?
    let settings: DashboardSettings
    let limiter: RateLimiter
    let overview = OverviewCache()
    let now: @Sendable () -> Date

    init(
        deployment: DeploymentConfiguration, store: CustomerDatabase, keys: SigningKeyRing, templates: DashboardTemplates?,
        settings: DashboardSettings, now: @escaping @Sendable () -> Date
    ) {
        self.deployment = deployment
        self.store = store
        self.keys = keys
        self.templates = templates
        self.settings = settings
        limiter = RateLimiter(perSecond: settings.signInRefillPerSecond, burst: settings.signInBurst, now: now)
        self.now = now
    }

    /// The signed-in session a page is shown for.
    struct SignedIn: Sendable {
        let tokenHash: String
        let session: CustomerDatabase.DashboardSession
        let app: AppConfiguration
        let apps: [AppConfiguration]
        let secure: Bool
    }

    func add(to router: ServerRouter) {
        router.get("/dashboard/style.css") { _, _ in
            guard let templates else { throw APIError(.dashboardUnavailable, "the dashboard's resources are not installed") }
            var headers: HTTPFields = [.contentType: "text/css; charset=utf-8"]
            DashboardHeaders.apply(to: &headers)
            headers[.cacheControl] = "max-age=3600"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: templates.stylesheet))
        }
        router.get("/dashboard/login") { request, _ in
            try await signInPage(request, error: nil, status: .ok)
        }
        router.post("/dashboard/login") { request, context in
            do {
                return try await signIn(request, context: context)
            } catch let error as APIError {
                return try render("error", nil, title: "Sign-in refused", section: "", status: error.status, ["message": error.message])
            }
        }
        page(router, .post, "/dashboard/logout", signOut)
        page(router, .post, "/dashboard/sessions/end", endSessions)
        page(router, .post, "/dashboard/switch", switchApp)
        page(router, .get, "/dashboard") { signedIn, _, _ in
            try await overviewPage(signedIn)
        }
        page(router, .get, "/dashboard/customers") { signedIn, _, request in
            try await customersPage(
                signedIn, query: request.uri.queryParameters.get("q") ?? "",
                deleted: request.uri.queryParameters.get("deleted") == "1")
        }
        let customer = "/dashboard/customers/:app_user_id"
        page(router, .get, RouterPath(customer)) { signedIn, _, request in
            try await customerPage(signedIn, user: try Self.user(request), done: request.uri.queryParameters.get("done"))
        }
        page(router, .post, RouterPath(customer + "/grant"), grant)
        page(router, .post, RouterPath(customer + "/revoke"), revoke)
        page(router, .get, RouterPath(customer + "/delete"), deletePage)
        page(router, .post, RouterPath(customer + "/delete"), delete)
        page(router, .get, "/dashboard/failures") { signedIn, _, _ in
            try await failuresPage(signedIn)
        }
        page(router, .get, "/dashboard/keys") { signedIn, _, _ in
            try keysPage(signedIn)
        }
    }

    private func signOut(_ signedIn: SignedIn, _: FormBody?, _: Request) async throws -> Response {
        try await store.deleteDashboardSession(tokenHash: signedIn.tokenHash)
        var response = Self.redirect("/dashboard/login")
        response.headers[.setCookie] = DashboardCookie.set(DashboardCookie.session, "", maxAge: 0, secure: signedIn.secure)
        return response
    }

    private func endSessions(_ signedIn: SignedIn, _: FormBody?, _: Request) async throws -> Response {
        // Every session of the shown app ends, this one's hold on it included.
        try await store.endDashboardSessions(app: signedIn.app.id)
        var response = Self.redirect(signedIn.apps.count > 1 ? "/dashboard" : "/dashboard/login")
        if signedIn.apps.count == 1 {
            response.headers[.setCookie] = DashboardCookie.set(DashboardCookie.session, "", maxAge: 0, secure: signedIn.secure)
        }
        return response
    }

    private func switchApp(_ signedIn: SignedIn, _ form: FormBody?, _: Request) async throws -> Response {
        guard let app = form?["app_id"], signedIn.apps.contains(where: { $0.id == app }) else {
            throw APIError(.appNotInSession, "this session has not signed in to that app")
        }
        try await store.switchDashboardApp(tokenHash: signedIn.tokenHash, to: app)
        return Self.redirect("/dashboard")
    }

    private func grant(_ signedIn: SignedIn, _ form: FormBody?, _ request: Request) async throws -> Response {
        let user = try Self.user(request)
        let entitlement = try AdminRoutes.entitlement(named: form?["entitlement"] ?? "", app: signedIn.app)
        let duration = try PromotionalDuration.named(form?["duration"] ?? "")
        try await requireCustomer(user, of: signedIn)
        let start = now()
        try await store.grantPromotional(app: signedIn.app, user: user, entitlement: entitlement, expires: duration.end(from: start), now: start)
        overview.markStale(app: signedIn.app.id)
        return Self.redirect(Self.customerPath(user) + "?done=granted")
    }

    private func revoke(_ signedIn: SignedIn, _ form: FormBody?, _ request: Request) async throws -> Response {
        let user = try Self.user(request)
        let entitlement = try AdminRoutes.entitlement(named: form?["entitlement"] ?? "", app: signedIn.app)
        try await requireCustomer(user, of: signedIn)
        _ = try await store.revokePromotionals(app: signedIn.app, user: user, entitlement: entitlement, now: now())
        overview.markStale(app: signedIn.app.id)
        return Self.redirect(Self.customerPath(user) + "?done=revoked")
    }

    private func deletePage(_ signedIn: SignedIn, _: FormBody?, _ request: Request) async throws -> Response {
        let user = try Self.user(request)
        try await requireCustomer(user, of: signedIn)
        return try render(
            "delete", signedIn, title: "Delete \(user)", section: "customers",
            [
                "user": user, "userPath": Self.customerPath(user),
            ])
    }

    private func delete(_ signedIn: SignedIn, _ form: FormBody?, _ request: Request) async throws -> Response {
        let user = try Self.user(request)
        // The confirmation step: the app user id typed again.
        guard form?["confirm"] == user else {
            return try render(
                "delete", signedIn, title: "Delete \(user)", section: "customers", status: .unprocessableContent,
                [
                    "user": user, "userPath": Self.customerPath(user), "error": "Type the app user id exactly to delete this customer.",
                ])
        }
        guard try await store.deleteCustomer(app: signedIn.app, user: user, now: now()) else { throw AdminRoutes.unknownCustomer }
        overview.markStale(app: signedIn.app.id)
        return Self.redirect("/dashboard/customers?deleted=1")
    }

    private func requireCustomer(_ user: String, of signedIn: SignedIn) async throws {
        guard try await store.customerExists(app: signedIn.app.id, user: user) else { throw AdminRoutes.unknownCustomer }
    }

    // MARK: Sign-in

    private func signInPage(_ request: Request, error: String?, status: HTTPResponse.Status) async throws -> Response {
        let token = DashboardToken.make()
        var values: [String: Any] = ["csrf": token]
        if let error { values["error"] = error }
        // Already signed in: the apps the new sign-in may keep, if asked (never by default).
        if let current = try await signedIn(request) {
            values["heldApps"] = current.apps.map(\.id).joined(separator: ", ")
        }
        var response = try render("login", nil, title: "Sign in", section: "", status: status, values)
        response.headers[.setCookie] = DashboardCookie.set(DashboardCookie.signIn, token, maxAge: 3_600, secure: DashboardCookie.isSecure(request))
        return response
    }

    private func signIn(_ request: Request, context: ServerRequestContext) async throws -> Response {
        var request = request
        let form = try FormBody(try await request.collectBody(context: context))
        guard let expected = DashboardCookie.value(DashboardCookie.signIn, in: request), let sent = form["csrf_token"],
            APIKeyAuthentication.constantTimeEqual(expected, sent)
        else {
            throw APIError(.csrfRejected, "the sign-in form was stale or not from this dashboard; load it again")
        }
        let client = context.clientAddress
        guard limiter.hasToken(client) else {
            context.logger.warning("dashboard sign-in refused: too many wrong keys", metadata: ["client": "\(client)"])
            return try await signInPage(
                request, error: "Too many wrong keys from this address. Wait a few minutes and try again.", status: .tooManyRequests)
        }
        let key = (form["secret_key"] ?? "").trimmingCharacters(in: .whitespaces)
        guard let app = deployment.apps.first(where: { APIKeyAuthentication.holds($0.secretApiKeys, key) }) else {
            _ = limiter.allow(client)
            context.logger.notice("dashboard sign-in with a wrong key", metadata: ["client": "\(client)"])
            let publicKey = deployment.apps.contains { APIKeyAuthentication.holds($0.publicApiKeys, key) }
            return try await signInPage(
                request,
                error: publicKey
                    ? "That is a public API key (the one apps ship). Sign in with the app's secret key."
                    : "No app here has that secret key.", status: .unauthorized)
        }
        // A sign-in replaces the session it came from, under a new token. The apps that session
        // held (with their keys still configured) stay only when the form asks for it
        // (`keep_apps`, a checkbox naming them): another key never carries them over silently.
        var grants = [CustomerDatabase.DashboardSession.Grant(app: app.id, key: DashboardToken.fingerprint(ofKey: key))]
        if let token = DashboardCookie.value(DashboardCookie.session, in: request) {
            let old = DashboardToken.hash(token)
            if let session = try await store.dashboardSession(tokenHash: old, now: now()) {
                if form["keep_apps"] == "1" {
                    grants = validGrants(session).filter { $0.app != app.id } + grants
                }
                try await store.deleteDashboardSession(tokenHash: old)
            }
        }
        let token = DashboardToken.make()
        let session = CustomerDatabase.DashboardSession(
            grants: grants, currentApp: app.id, csrfToken: DashboardToken.make(),
            expires: now().addingTimeInterval(settings.sessionLifetime))
        try await store.createDashboardSession(tokenHash: DashboardToken.hash(token), session, now: now())
        context.logger.notice("dashboard sign-in", metadata: ["app": "\(app.id)"])
        var response = Self.redirect("/dashboard")
        let secure = DashboardCookie.isSecure(request)
        response.headers[values: .setCookie] = [
            DashboardCookie.set(DashboardCookie.session, token, maxAge: Int(settings.sessionLifetime), secure: secure),
            DashboardCookie.set(DashboardCookie.signIn, "", maxAge: 0, secure: secure),
        ]
        return response
    }

    /// The session of the request's cookie, with the apps it may see; nil: not signed in.
    private func signedIn(_ request: Request) async throws -> SignedIn? {
        guard let token = DashboardCookie.value(DashboardCookie.session, in: request) else { return nil }
        let hash = DashboardToken.hash(token)
        guard let session = try await store.dashboardSession(tokenHash: hash, now: now()) else { return nil }
        let apps = validGrants(session).compactMap { grant in deployment.apps.first { $0.id == grant.app } }
        guard let app = apps.first(where: { $0.id == session.currentApp }) ?? apps.first else { return nil }
        return SignedIn(tokenHash: hash, session: session, app: app, apps: apps, secure: DashboardCookie.isSecure(request))
    }

    /// The session's apps whose key is still configured: an app removed from the configuration,
    /// or whose secret key was rotated away since the sign-in (a leaked key replaced), is gone
    /// from every session at once.
    private func validGrants(_ session: CustomerDatabase.DashboardSession) -> [CustomerDatabase.DashboardSession.Grant] {
        session.grants.filter { grant in
            deployment.apps.first { $0.id == grant.app }?.secretApiKeys.contains { DashboardToken.fingerprint(ofKey: $0) == grant.key } == true
        }
    }

    /// A page behind the sign-in: no session → to the sign-in form (303); a POST must carry the
    /// session's CSRF token (403 otherwise, before anything is read or changed). Errors are
    /// pages too, with their status.
    private func page(
        _ router: ServerRouter, _ method: HTTPRequest.Method, _ path: RouterPath,
        _ handler: @escaping @Sendable (SignedIn, FormBody?, Request) async throws -> Response
    ) {
        router.on(path, method: method) { request, context in
            guard let signedIn = try await signedIn(request) else { return Self.redirect("/dashboard/login") }
            do {
                var form: FormBody?
                if method == .post {
                    var request = request
                    let body = try FormBody(try await request.collectBody(context: context))
                    guard let sent = body["csrf_token"], APIKeyAuthentication.constantTimeEqual(sent, signedIn.session.csrfToken) else {
                        throw APIError(
                            .csrfRejected, "the form was stale or not from this dashboard (its CSRF token did not match); nothing was changed")
                    }
                    form = body
                }
                return try await handler(signedIn, form, request)
            } catch let error as APIError {
                return try render("error", signedIn, title: "Error", section: "", status: error.status, ["message": error.message])
            }
        }
    }

    // MARK: Pages

    private func overviewPage(_ signedIn: SignedIn) async throws -> Response {
        let date = now()
        let app = signedIn.app
        let figures = try await overview.figures(app: app.id, now: date, maximumAge: settings.overviewCacheSeconds, wait: settings.overviewFirstWait)
        {
            OverviewCache.Figures(
                active: try await store.activeCustomers(app: app, now: date),
                activity: try await store.dailyActivity(app: app.id, days: 30, now: date), computed: date)
        }
        let today = date.epochMilliseconds / 86_400_000
        let days = (0..<30).map { today - 29 + Int64($0) }
        func label(_ day: Int64) -> String { CustomerDatabase.day(Date(timeIntervalSince1970: TimeInterval(day) * 86_400)) }
        func chart(_ figures: OverviewCache.Figures, _ title: String, _ style: String, _ value: (CustomerDatabase.DailyActivity) -> Int) -> [String:
            Any]
        {
            let values = days.map { (label($0), value(figures.activity[$0] ?? .init())) }
            return [
                "title": title, "total": values.reduce(0) { $0 + $1.1 },
                "svg": SVGChart.bars(values, title: "\(title) per day, last 30 days", style: style),
            ]
        }
        let failures = try await store.verificationFailures(app: app.id, days: 30, now: date)
        // Per reason, the counts of each day (both modes together).
        var byReason: [String: [String: Int]] = [:]
        for entry in failures { byReason[entry.reason, default: [:]][entry.day, default: 0] += Int(entry.count) }
        let reasonCharts: [[String: Any]] = byReason.keys.sorted().map { reason in
            let perDay = byReason[reason] ?? [:]
            let values = days.map { day in (label(day), perDay[label(day)] ?? 0) }
            return [
                "reason": reason, "total": perDay.values.reduce(0, +),
                "svg": SVGChart.bars(values, title: "\(reason) per day, last 30 days", style: "failure"),
            ]
        }
        var values: [String: Any] = [
            "failureTotal": failures.reduce(0) { $0 + Int($1.count) }, "reasonCharts": reasonCharts, "key": keySummary(),
        ]
        if let figures {
            values["counted"] =
                [
                    "active": figures.active.map { ["entitlement": $0.entitlement, "customers": $0.customers] },
                    "hasActive": !figures.active.isEmpty,
                    "charts": [
                        chart(figures, "Purchases", "purchases", \.purchases), chart(figures, "Renewals", "renewals", \.renewals),
                        chart(figures, "Refunds", "refunds", \.refunds), chart(figures, "Expirations", "expirations", \.expirations),
                    ],
                    "time": Self.time(figures.computed),
                ] as [String: Any]
        }
        return try render("overview", signedIn, title: "Overview", section: "overview", values)
    }

    private func keySummary() -> [String: Any] {
        let days = keys.daysUntilExpiry
        return [
            "daysLeft": String(format: "%.1f", days), "expires": Self.time(keys.currentSigner.key.certificate.expirationDate),
            "warning": days < 7,
        ]
    }

    private func customersPage(_ signedIn: SignedIn, query: String, deleted: Bool) async throws -> Response {
        let trimmed = query.trimmingCharacters(in: .whitespaces)
        var values: [String: Any] = ["query": trimmed, "searched": !trimmed.isEmpty, "deleted": deleted]
        if !trimmed.isEmpty {
            guard trimmed.unicodeScalars.count <= 256 else { throw APIError(.invalidField, "search for at most 256 characters") }
            let found = try await store.searchCustomers(app: signedIn.app.id, query: trimmed)
            values["results"] = found.map { ["user": $0.appUserId, "path": Self.customerPath($0.appUserId), "matched": $0.matched] }
            values["none"] = found.isEmpty
            values["hasResults"] = !found.isEmpty
        }
        return try render("customers", signedIn, title: "Customers", section: "customers", values)
    }

    /// The customer page's last 50 events and webhook deliveries, as the template lists them.
    private func eventRows(app: String, user: String) async throws -> (events: [[String: Any]], deliveries: [[String: Any]]) {
        let events: [[String: Any]] = try await store.events(app: app, user: user, limit: 50).map { event in
            let body = (try? JSONSerialization.jsonObject(with: Data(event.body.utf8)) as? [String: Any])?["event"] as? [String: Any] ?? [:]
            return [
                "type": event.type, "product": body["product_id"] as? String ?? "",
                "time": Self.time((body["event_timestamp_ms"] as? NSNumber)?.int64Value), "id": body["id"] as? String ?? "",
            ]
        }
        let deliveries: [[String: Any]] = try await store.deliveries(app: app, status: nil, user: user, limit: 50).map { delivery in
            [
                "type": delivery.eventType, "endpoint": delivery.endpoint, "status": delivery.status.rawValue, "attempts": delivery.attempts,
                "lastError": delivery.lastError ?? "", "created": Self.time(delivery.createdAtMs),
            ]
        }
        return (events, deliveries)
    }

    private func customerPage(_ signedIn: SignedIn, user: String, done: String?) async throws -> Response {
        let date = now()
        let app = signedIn.app
        guard let (record, detail) = try await store.lookupWithEntitlements(app: app, user: user, now: date) else {
            throw AdminRoutes.unknownCustomer
        }
        let nowMs = date.epochMilliseconds
        let entitlements: [[String: Any]] = detail.entitlements.keys.sorted().map { id in
            let grant = detail.entitlements[id]!
            return [
                "id": id, "active": grant.isActive, "product": grant.productId, "why": Self.why(grant, detail: detail, now: date),
                "expires": grant.expiresDate.map { Self.time($0) } ?? "never",
            ]
        }
        let transactions: [[String: Any]] = record.transactions.reversed().map { transaction in
            [
                "id": transaction.transactionId, "original": transaction.originalTransactionId, "product": transaction.productId,
                "environment": transaction.environment, "purchased": Self.time(transaction.purchaseDateMs),
                "expires": Self.time(transaction.expiresDateMs),
                "status":
                    (transaction.revocationDateMs != nil
                    ? "refunded \(Self.time(transaction.revocationDateMs))"
                    : transaction.expiresDateMs.map { $0 <= nowMs ? "expired" : "current period" } ?? "bought")
                    + Self.importNote(transaction.importStatus),
            ]
        }
        func isOpen(_ grant: CustomerDatabase.GrantRecord) -> Bool { grant.revokedMs == nil && (grant.expiresMs.map { $0 > nowMs } ?? true) }
        let grants: [[String: Any]] = record.promotionalGrants.reversed().map { grant in
            [
                "entitlement": grant.entitlement, "starts": Self.time(grant.startsMs), "expires": grant.expiresMs.map { Self.time($0) } ?? "never",
                "state": grant.revokedMs != nil ? "revoked \(Self.time(grant.revokedMs))" : (isOpen(grant) ? "open" : "ended"),
            ]
        }
        let openGrants = Set(record.promotionalGrants.filter(isOpen).map(\.entitlement)).sorted()
        // Opened through an alias, the page is the customer's.
        let user = record.appUserId
        let (events, deliveries) = try await eventRows(app: app.id, user: user)
        let notices = ["granted": "Promotional entitlement granted.", "revoked": "Promotional entitlements revoked."]
        var values: [String: Any] = [
            "user": user, "userPath": Self.customerPath(user),
            "aliases": record.aliases.joined(separator: ", "), "hasAliases": !record.aliases.isEmpty,
            "firstSeen": record.customerInfo.subscriber.firstSeen, "lastSeen": record.customerInfo.subscriber.lastSeen,
            "entitlements": entitlements, "hasEntitlements": !entitlements.isEmpty,
            "transactions": transactions, "hasTransactions": !transactions.isEmpty,
            "grants": grants, "hasGrants": !grants.isEmpty,
            "allEntitlements": Set(app.products.flatMap(\.entitlements)).sorted().map { ["id": $0] },
            "durations": PromotionalDuration.allCases.map { ["id": $0.rawValue, "selected": $0 == .monthly] },
            "openGrants": openGrants.map { ["id": $0] }, "hasOpenGrants": !openGrants.isEmpty,
            "events": events, "hasEvents": !events.isEmpty, "deliveries": deliveries, "hasDeliveries": !deliveries.isEmpty,
        ]
        if let notice = done.flatMap({ notices[$0] }) { values["notice"] = notice }
        return try render("customer", signedIn, title: user, section: "customers", values)
    }

    /// Why the customer has (or had) an entitlement, in words.
    static func why(_ grant: EntitlementGrant, detail: CustomerEntitlements, now: Date) -> String {
        switch grant.source {
        case .promotional:
            let end = grant.expiresDate.map { grant.isActive ? "until \(Self.time($0))" : "ended \(Self.time($0))" } ?? "for life"
            return "promotional grant, \(end)"
        case .store(let environment):
            guard let expires = grant.expiresDate else { return "\(grant.productId) bought for life (\(environment))" }
            if let subscription = detail.subscriptions[grant.productId] {
                if subscription.revocationDate != nil { return "\(grant.productId) refunded (\(environment))" }
                if let grace = grant.gracePeriodExpiresDate, grace > now, expires <= now {
                    return "\(grant.productId) in a billing grace period until \(Self.time(grace)) (\(environment))"
                }
                if subscription.isInBillingRetry && !grant.isActive { return "\(grant.productId) expired in billing retry (\(environment))" }
            }
            if !grant.isActive { return "\(grant.productId) expired \(Self.time(expires)) (\(environment))" }
            return "\(grant.productId) subscription, \(grant.willRenew ? "renews" : "ends") \(Self.time(expires)) (\(environment))"
        }
    }

    private func failuresPage(_ signedIn: SignedIn) async throws -> Response {
        let report = try await VerificationReport.make(app: signedIn.app, store: store, days: 30, now: now())
        let failures = report.counts
        var totals: [String: [String: Int]] = [:]
        for entry in failures { totals[entry.reason, default: [:]][entry.mode, default: 0] += Int(entry.count) }
        let reasons: [[String: Any]] = VerificationFailure.allCases.map { reason in
            [
                "reason": reason.rawValue, "meaning": reason.explanation, "category": reason.category == .tampering ? "tampering" : "cannot verify",
                "informational": totals[reason.rawValue]?["informational"] ?? 0, "enforced": totals[reason.rawValue]?["enforced"] ?? 0,
                "seen": totals[reason.rawValue] != nil,
            ]
        }
        return try render(
            "failures", signedIn, title: "Verification failures", section: "failures",
            [
                "reasons": reasons,
                "days": failures.map { entry -> [String: Any] in
                    [
                        "day": entry.day, "reason": entry.reason, "mode": entry.mode, "count": entry.count,
                        "sdkVersion": entry.sdkVersion.isEmpty ? "unknown" : entry.sdkVersion,
                        "appVersion": entry.appVersion.isEmpty ? "unknown" : entry.appVersion,
                    ]
                },
                "hasDays": !failures.isEmpty,
                "versions": report.byVersion.map { total -> [String: Any] in
                    [
                        "sdkVersion": total.sdkVersion.isEmpty ? "unknown" : total.sdkVersion,
                        "appVersion": total.appVersion.isEmpty ? "unknown" : total.appVersion, "tampering": total.tampering,
                        "cannotVerify": total.cannotVerify,
                    ]
                },
                "policy": report.policy.map { policy -> [String: Any] in
                    [
                        "mode": policy.mode, "rolloutPercent": Self.percent(policy.rolloutPercent), "minimumSDKVersion": policy.minimumSDKVersion,
                        "lifetimeHours": Self.percent(policy.lifetimeHours), "counted": policy.customersCounted, "covered": policy.customersCovered,
                        "coveredPercent": Self.percent(policy.coveredPercent),
                    ]
                } ?? [:],
                "hasPolicy": report.policy != nil,
            ])
    }

    /// `25`, `12.5`, `0.01`: a number without trailing zeros.
    static func percent(_ value: Double) -> String {
        guard value.isFinite, value.magnitude < 1e15 else { return "–" }
        return value == value.rounded()
            ? String(Int(value)) : String(format: "%.2f", value).replacingOccurrences(of: #"0+$"#, with: "", options: .regularExpression)
    }

    private func keysPage(_ signedIn: SignedIn) throws -> Response {
        let date = now()
        let current = keys.currentSigner.key.certificate
        let intermediates: [[String: Any]] = keys.intermediates().map { certificate in
            [
                "publicKey": certificate.publicKey.base64EncodedString(), "expires": Self.time(certificate.expirationDate),
                "daysLeft": String(format: "%.1f", certificate.expirationDate.timeIntervalSince(date) / 86_400),
                "state": certificate == current ? "signing now" : (certificate.isValid(at: date) ? "valid, not in use" : "expired"),
                "current": certificate == current,
            ]
        }
        let mode =
            switch keys.mode {
            case .managed: "managed (the root key is in the data directory: development only)"
            case .offline: "offline (the root key is kept off this server)"
            }
        var values: [String: Any] = ["mode": mode, "intermediates": intermediates, "key": keySummary()]
        if let root = keys.managedRootPublicKey { values["root"] = root.rawRepresentation.base64EncodedString() }
        return try render("keys", signedIn, title: "Signing keys", section: "keys", values)
    }

    // MARK: Rendering

    private func render(
        _ template: String, _ signedIn: SignedIn?, title: String, section: String,
        status: HTTPResponse.Status = .ok, _ values: [String: Any]
    ) throws -> Response {
        guard let templates else { throw APIError(.dashboardUnavailable, "the dashboard's resources are not installed") }
        var context = values
        context["title"] = title
        if let signedIn {
            context["signedIn"] = true
            context["csrf"] = signedIn.session.csrfToken
            context["appId"] = signedIn.app.id
            context["apps"] = signedIn.apps.map { ["id": $0.id, "selected": $0.id == signedIn.app.id] }
            context["manyApps"] = signedIn.apps.count > 1
            context["section_" + section] = true
        }
        guard let html = templates.library.render(context, withTemplate: template) else {
            throw APIError(.internalError, "no dashboard template '\(template)'")
        }
        var headers: HTTPFields = [.contentType: "text/html; charset=utf-8"]
        DashboardHeaders.apply(to: &headers)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    static func redirect(_ location: String) -> Response {
        var headers: HTTPFields = [.location: location]
        DashboardHeaders.apply(to: &headers)
        return Response(status: .seeOther, headers: headers)
    }

    static func customerPath(_ user: String) -> String {
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)..<Unicode.Scalar(128)))
        allowed.insert(charactersIn: "-._~")
        return "/dashboard/customers/" + (user.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")
    }

    private static func user(_ request: Request) throws(APIError) -> String {
        // The id is the path's fourth segment, still percent-encoded (it may hold a '/').
        let segments = request.uri.path.split(separator: "/", omittingEmptySubsequences: false)
        guard segments.count >= 4 else { throw APIError(.invalidAppUserId, "no app user id in the path") }
        return try AppUserIDRules.validated(String(segments[3]), percentEncoded: true)
    }

    /// How a transaction's import status reads after its state (nothing for a signed copy).
    static func importNote(_ status: String?) -> String {
        switch status {
        case nil: ""
        case "awaiting_store": " · imported, awaiting the App Store"
        default: " · imported, not in the App Store's history"
        }
    }

    static func time(_ milliseconds: Int64?) -> String {
        guard let milliseconds else { return "" }
        return time(Date(epochMilliseconds: milliseconds))
    }

    /// `2026-11-25 14:03 UTC`: what a person reads (the wire's ISO 8601, minute precision).
    static func time(_ date: Date) -> String {
        let wire = WireDate.format(date)
        return String(wire.prefix(10)) + " " + String(wire.dropFirst(11).prefix(5)) + " UTC"
    }
}
