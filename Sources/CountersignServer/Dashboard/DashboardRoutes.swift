import CountersignCore
import CountersignServerCore
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
        addChartPages(to: router)
    }

    func signOut(_ signedIn: SignedIn, _: FormBody?, _: Request) async throws -> Response {
        try await store.deleteDashboardSession(tokenHash: signedIn.tokenHash)
        var response = Self.redirect("/dashboard/login")
        response.headers[.setCookie] = DashboardCookie.set(DashboardCookie.session, "", maxAge: 0, secure: signedIn.secure)
        return response
    }

    func endSessions(_ signedIn: SignedIn, _: FormBody?, _: Request) async throws -> Response {
        // Every session of the shown app ends, this one's hold on it included.
        try await store.endDashboardSessions(app: signedIn.app.id)
        var response = Self.redirect(signedIn.apps.count > 1 ? "/dashboard" : "/dashboard/login")
        if signedIn.apps.count == 1 {
            response.headers[.setCookie] = DashboardCookie.set(DashboardCookie.session, "", maxAge: 0, secure: signedIn.secure)
        }
        return response
    }

    func switchApp(_ signedIn: SignedIn, _ form: FormBody?, _: Request) async throws -> Response {
        guard let app = form?["app_id"], signedIn.apps.contains(where: { $0.id == app }) else {
            throw APIError(.appNotInSession, "this session has not signed in to that app")
        }
        try await store.switchDashboardApp(tokenHash: signedIn.tokenHash, to: app)
        return Self.redirect("/dashboard")
    }

    func grant(_ signedIn: SignedIn, _ form: FormBody?, _ request: Request) async throws -> Response {
        let user = try Self.user(request)
        let entitlement = try AdminRoutes.entitlement(named: form?["entitlement"] ?? "", app: signedIn.app)
        let duration = try PromotionalDuration.named(form?["duration"] ?? "")
        try await requireCustomer(user, of: signedIn)
        let start = now()
        try await store.grantPromotional(app: signedIn.app, user: user, entitlement: entitlement, expires: duration.end(from: start), now: start)
        overview.markStale(app: signedIn.app.id)
        return Self.redirect(Self.customerPath(user) + "?done=granted")
    }

    func revoke(_ signedIn: SignedIn, _ form: FormBody?, _ request: Request) async throws -> Response {
        let user = try Self.user(request)
        let entitlement = try AdminRoutes.entitlement(named: form?["entitlement"] ?? "", app: signedIn.app)
        try await requireCustomer(user, of: signedIn)
        _ = try await store.revokePromotionals(app: signedIn.app, user: user, entitlement: entitlement, now: now())
        overview.markStale(app: signedIn.app.id)
        return Self.redirect(Self.customerPath(user) + "?done=revoked")
    }

    func deletePage(_ signedIn: SignedIn, _: FormBody?, _ request: Request) async throws -> Response {
        let user = try Self.user(request)
        try await requireCustomer(user, of: signedIn)
        return try render(
            "delete", signedIn, title: "Delete \(user)", section: "customers",
            [
                "user": user, "userPath": Self.customerPath(user),
            ])
    }

    func delete(_ signedIn: SignedIn, _ form: FormBody?, _ request: Request) async throws -> Response {
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

    func requireCustomer(_ user: String, of signedIn: SignedIn) async throws {
        guard try await store.customerExists(app: signedIn.app.id, user: user) else { throw AdminRoutes.unknownCustomer }
    }

    // MARK: Sign-in

    func signInPage(_ request: Request, error: String?, status: HTTPResponse.Status) async throws -> Response {
        let token = SecretToken.make()
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

    func signIn(_ request: Request, context: ServerRequestContext) async throws -> Response {
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
        var grants = [CustomerDatabase.DashboardSession.Grant(app: app.id, key: SecretToken.fingerprint(ofKey: key))]
        if let token = DashboardCookie.value(DashboardCookie.session, in: request) {
            let old = SecretToken.hash(token)
            if let session = try await store.dashboardSession(tokenHash: old, now: now()) {
                if form["keep_apps"] == "1" {
                    grants = validGrants(session).filter { $0.app != app.id } + grants
                }
                try await store.deleteDashboardSession(tokenHash: old)
            }
        }
        let token = SecretToken.make()
        let session = CustomerDatabase.DashboardSession(
            grants: grants, currentApp: app.id, csrfToken: SecretToken.make(),
            expires: now().addingTimeInterval(settings.sessionLifetime))
        try await store.createDashboardSession(tokenHash: SecretToken.hash(token), session, now: now())
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
    func signedIn(_ request: Request) async throws -> SignedIn? {
        guard let token = DashboardCookie.value(DashboardCookie.session, in: request) else { return nil }
        let hash = SecretToken.hash(token)
        guard let session = try await store.dashboardSession(tokenHash: hash, now: now()) else { return nil }
        let apps = validGrants(session).compactMap { grant in deployment.apps.first { $0.id == grant.app } }
        guard let app = apps.first(where: { $0.id == session.currentApp }) ?? apps.first else { return nil }
        return SignedIn(tokenHash: hash, session: session, app: app, apps: apps, secure: DashboardCookie.isSecure(request))
    }

    /// The session's apps whose key is still configured: an app removed from the configuration,
    /// or whose secret key was rotated away since the sign-in (a leaked key replaced), is gone
    /// from every session at once.
    func validGrants(_ session: CustomerDatabase.DashboardSession) -> [CustomerDatabase.DashboardSession.Grant] {
        session.grants.filter { grant in
            deployment.apps.first { $0.id == grant.app }?.secretApiKeys.contains { SecretToken.fingerprint(ofKey: $0) == grant.key } == true
        }
    }

    /// A page behind the sign-in: no session → to the sign-in form (303); a POST must carry the
    /// session's CSRF token (403 otherwise, before anything is read or changed). Errors are
    /// pages too, with their status.
    func page(
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

    // MARK: Rendering

    func render(
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

    static func user(_ request: Request) throws(APIError) -> String {
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
