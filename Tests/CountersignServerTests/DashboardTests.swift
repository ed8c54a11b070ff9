import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// The dashboard over real HTTP, as a browser drives it: cookies, forms and redirects, on both
/// databases. Every refused request is checked to have changed nothing.
@Suite("Dashboard", .serialized)
struct DashboardTests {
    /// A browser of one: its cookies, and the pages it is shown.
    final class Browser: @unchecked Sendable {
        let client: any TestClientProtocol
        var cookies: [String: String] = [:]
        var forwardedProto: String?

        init(client: any TestClientProtocol) {
            self.client = client
        }

        @discardableResult
        func request(_ method: HTTPRequest.Method, _ path: String, form: [(String, String)]? = nil) async throws -> Reply {
            var headers: HTTPFields = [:]
            if !cookies.isEmpty { headers[.cookie] = cookies.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: "; ") }
            if let forwardedProto { headers[.init("X-Forwarded-Proto")!] = forwardedProto }
            var body: ByteBuffer?
            if let form {
                headers[.contentType] = "application/x-www-form-urlencoded"
                body = ByteBuffer(string: DashboardTests.encode(form))
            }
            let reply = try await client.execute(uri: path, method: method, headers: headers, body: body) { response in
                Reply(status: Int(response.status.code), headers: response.headers, body: Data(response.body.readableBytesView))
            }
            for line in reply.headers[values: .setCookie] {
                let pair = line.split(separator: ";")[0].split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let name = String(pair[0])
                let value = pair.count > 1 ? String(pair[1]) : ""
                if line.contains("Max-Age=0") { cookies[name] = nil } else { cookies[name] = value }
            }
            return reply
        }

        func get(_ path: String) async throws -> Reply { try await request(.get, path) }

        /// The page's CSRF token (every form of a page carries the same one).
        func csrf(of page: Reply) throws -> String {
            let html = String(decoding: page.body, as: UTF8.self)
            guard let range = html.range(of: "name=\"csrf_token\" value=\"") else { throw DashboardError("no form on the page") }
            return String(html[range.upperBound...].prefix { $0 != "\"" })
        }

        /// Signs in with `key`; `keep` ticks the box that keeps the session's other apps.
        func signIn(_ key: String, keep: Bool = false) async throws -> Reply {
            let page = try await get("/dashboard/login")
            return try await request(
                .post, "/dashboard/login",
                form: [("csrf_token", try csrf(of: page)), ("secret_key", key)]
                    + (keep ? [("keep_apps", "1")] : []))
        }
    }

    struct DashboardError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static func encode(_ form: [(String, String)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return form.map {
            "\($0.0.addingPercentEncoding(withAllowedCharacters: allowed)!)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed)!)"
        }
        .joined(separator: "&")
    }

    struct Setup: Sendable {
        let harness: ReceiptTests.Harness
        let other: AppConfiguration
        let clock: ManualClock
        let browser: Browser
    }

    /// A server with the demo app and a second app, a clock the test moves, and a browser.
    static func withSetup(
        _ kind: TestDatabaseKind, burst: Double = 10, configure: @Sendable (inout AppConfiguration) -> Void = { _ in },
        _ body: @Sendable @escaping (Setup) async throws -> Void
    ) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            var app = AppConfiguration.makeDemo()
            configure(&app)
            var other = AppConfiguration.makeDemo()
            other.id = "other"
            other.bundleId = "com.example.other"
            other.publicApiKeys = [APIKey.make(.public)]
            other.secretApiKeys = [APIKey.make(.secret)]
            try DeploymentConfiguration(apps: [app, other]).save(toDataDirectory: directory)
            let clock = ManualClock(Date())
            var configuration = ServerConfiguration(dataDirectory: directory)
            configuration.database = location
            configuration.now = { clock.now }
            configuration.dashboard.overviewCacheSeconds = 0
            configuration.dashboard.signInBurst = burst
            let configured = (app, other)
            try await LiveServer.run(configuration) { server, client in
                let ca = try TestStoreCA.loadOrCreate(for: DataDirectory(directory))
                let harness = ReceiptTests.Harness(server: server, client: client, app: configured.0, ca: ca)
                try await body(Setup(harness: harness, other: configured.1, clock: clock, browser: Browser(client: client)))
            }
        }
    }

    static func text(_ reply: Reply) -> String { String(decoding: reply.body, as: UTF8.self) }

    @Test("without a session every page sends the browser to the sign-in form", arguments: TestDatabaseKind.available)
    func noSession(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            for path in [
                "/dashboard", "/dashboard/customers?q=x", "/dashboard/customers/anyone", "/dashboard/failures", "/dashboard/keys",
                "/dashboard/customers/anyone/delete",
            ] {
                let reply = try await setup.browser.get(path)
                #expect(reply.status == 303, "\(path)")
                #expect(reply.headers[.location] == "/dashboard/login", "\(path)")
            }
            let post = try await setup.browser.request(
                .post, "/dashboard/customers/anyone/grant", form: [("entitlement", "pro"), ("duration", "weekly")])
            #expect(post.status == 303)
            // A made-up session token is no session either.
            setup.browser.cookies[DashboardCookie.session] = SecretToken.make()
            #expect(try await setup.browser.get("/dashboard").status == 303)
        }
    }

    @Test(
        "sign-in: cookie flags, security headers, wrong and public keys, a form without its CSRF token, the limit on wrong keys",
        arguments: TestDatabaseKind.available)
    func signIn(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind, burst: 3) { setup in
            let browser = setup.browser
            let form = try await browser.get("/dashboard/login")
            #expect(form.status == 200)
            #expect(form.headers[.contentSecurityPolicy]?.contains("default-src 'none'") == true)
            #expect(form.headers[.init("X-Frame-Options")!] == "DENY")
            #expect(form.headers[.cacheControl] == "no-store")
            // No CSRF token, or another one: 403, and no session.
            let noToken = try await browser.request(.post, "/dashboard/login", form: [("secret_key", setup.harness.secretKey)])
            #expect(noToken.status == 403)
            let wrongToken = try await browser.request(
                .post, "/dashboard/login", form: [("csrf_token", "forged"), ("secret_key", setup.harness.secretKey)])
            #expect(wrongToken.status == 403)
            #expect(browser.cookies[DashboardCookie.session] == nil)
            // A field named twice is refused, not guessed at.
            let twice = try await browser.request(
                .post, "/dashboard/login",
                form: [
                    ("csrf_token", try browser.csrf(of: try await browser.get("/dashboard/login"))), ("secret_key", "a"),
                    ("secret_key", setup.harness.secretKey),
                ])
            #expect(twice.status == 400)
            #expect(browser.cookies[DashboardCookie.session] == nil)
            // A public key is named as such; an unknown key is refused.
            let publicKey = try await browser.signIn(setup.harness.key)
            #expect(publicKey.status == 401)
            #expect(Self.text(publicKey).contains("public API key"))
            #expect(try await browser.signIn("cs_sk_wrong").status == 401)
            // The third wrong key uses up the allowance: even the right key waits now.
            #expect(try await browser.signIn("cs_sk_wrong").status == 401)
            let limited = try await browser.signIn(setup.harness.secretKey)
            #expect(limited.status == 429)
            #expect(browser.cookies[DashboardCookie.session] == nil)
            setup.clock.now = setup.clock.now.addingTimeInterval(60)  // two wrong keys' worth refilled
            // Behind a TLS proxy the session cookie is Secure.
            browser.forwardedProto = "https"
            let signedIn = try await browser.signIn(setup.harness.secretKey)
            #expect(signedIn.status == 303)
            #expect(signedIn.headers[.location] == "/dashboard")
            let cookie = try #require(signedIn.headers[values: .setCookie].first { $0.hasPrefix(DashboardCookie.session + "=") })
            for flag in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/dashboard"] { #expect(cookie.contains(flag), "\(flag)") }
            // The token is not in the database, only its hash.
            let token = try #require(browser.cookies[DashboardCookie.session])
            #expect(try await setup.harness.server.store.dashboardSession(tokenHash: token, now: setup.clock.now) == nil)
            #expect(try await setup.harness.server.store.dashboardSession(tokenHash: SecretToken.hash(token), now: setup.clock.now) != nil)
            let overview = try await browser.get("/dashboard")
            #expect(overview.status == 200)
            #expect(overview.headers[.contentSecurityPolicy] != nil)
            #expect(!Self.text(overview).contains(setup.harness.secretKey))
        }
    }

    @Test(
        "grant and revoke from the customer page change the signed CustomerInfo; forms without or with a wrong CSRF token change nothing",
        arguments: TestDatabaseKind.available)
    func grantAndRevoke(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let browser = setup.browser
            #expect(try await setup.harness.post(user: "dora", jws: try setup.harness.mint("coins_100", type: .consumable).jws).status == 200)
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)
            let search = try await browser.get("/dashboard/customers?q=dora")
            #expect(Self.text(search).contains("href=\"/dashboard/customers/dora\""))
            let page = try await browser.get("/dashboard/customers/dora")
            #expect(page.status == 200)
            let csrf = try browser.csrf(of: page)
            for form in [
                [("entitlement", "pro"), ("duration", "weekly")], [("csrf_token", "forged"), ("entitlement", "pro"), ("duration", "weekly")],
            ] {
                let refused = try await browser.request(.post, "/dashboard/customers/dora/grant", form: form)
                #expect(refused.status == 403)
                #expect(Self.text(refused).contains("CSRF"))
            }
            let info = try await setup.harness.customerInfo("dora")
            #expect(((info["subscriber"] as? [String: Any])?["entitlements"] as? [String: Any])?["pro"] == nil)
            // An entitlement no product unlocks, a duration nobody knows: refused.
            #expect(
                try await browser.request(
                    .post, "/dashboard/customers/dora/grant", form: [("csrf_token", csrf), ("entitlement", "gold"), ("duration", "weekly")]
                ).status == 422)
            #expect(
                try await browser.request(
                    .post, "/dashboard/customers/dora/grant", form: [("csrf_token", csrf), ("entitlement", "pro"), ("duration", "fortnight")]
                ).status == 400)
            let granted = try await browser.request(
                .post, "/dashboard/customers/dora/grant", form: [("csrf_token", csrf), ("entitlement", "pro"), ("duration", "weekly")])
            #expect(granted.status == 303)
            #expect(granted.headers[.location] == "/dashboard/customers/dora?done=granted")
            let after = Self.text(try await browser.get("/dashboard/customers/dora?done=granted"))
            #expect(after.contains("Promotional entitlement granted."))
            #expect(after.contains("promotional grant, until"))
            let pro =
                ((try await setup.harness.customerInfo("dora")["subscriber"] as? [String: Any])?["entitlements"] as? [String: Any])?["pro"]
                as? [String: Any]
            #expect((pro?["product_identifier"] as? String)?.hasPrefix("rc_promo_pro_") == true)
            // Revoke: a wrong token changes nothing, the right one ends the grant.
            #expect(
                try await browser.request(.post, "/dashboard/customers/dora/revoke", form: [("csrf_token", "forged"), ("entitlement", "pro")]).status
                    == 403)
            #expect(
                ((try await setup.harness.customerInfo("dora")["subscriber"] as? [String: Any])?["entitlements"] as? [String: Any])?["pro"] != nil)
            #expect(
                try await browser.request(.post, "/dashboard/customers/dora/revoke", form: [("csrf_token", csrf), ("entitlement", "pro")]).status
                    == 303)
            let revoked =
                ((try await setup.harness.customerInfo("dora")["subscriber"] as? [String: Any])?["entitlements"] as? [String: Any])?["pro"]
                as? [String: Any]
            let expires = try #require(revoked?["expires_date"] as? String)
            #expect(try #require(WireDate.parse(expires)) <= setup.clock.now)
            #expect(Self.text(try await browser.get("/dashboard/customers/dora")).contains("revoked"))
        }
    }

    @Test("a session of one app never shows another app's customers, and cannot switch to it", arguments: TestDatabaseKind.available)
    func appsApart(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let otherHarness = ReceiptTests.Harness(
                server: setup.harness.server, client: setup.harness.client, app: setup.other, ca: setup.harness.ca)
            let minted = try otherHarness.mint("pro_monthly")
            #expect(try await otherHarness.post(user: "olga", jws: minted.jws).status == 200)
            let browser = setup.browser
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)
            for query in ["olga", "ol", try #require(minted.payload.transactionId), try #require(minted.payload.originalTransactionId)] {
                let search = Self.text(try await browser.get("/dashboard/customers?q=\(query)"))
                #expect(search.contains("Nobody matches"), "\(query)")
                #expect(!search.contains("href=\"/dashboard/customers/olga\""))
            }
            #expect(try await browser.get("/dashboard/customers/olga").status == 404)
            let page = try await browser.get("/dashboard")
            let switched = try await browser.request(
                .post, "/dashboard/switch", form: [("csrf_token", try browser.csrf(of: page)), ("app_id", "other")])
            #expect(switched.status == 403)
            #expect(try await browser.get("/dashboard/customers/olga").status == 404)
            // Signing in with the other app's key, keeping the first, adds it: the switcher shows both.
            #expect(Self.text(try await browser.get("/dashboard/login")).contains("Keep demo signed in"))
            #expect(try await browser.signIn(setup.other.secretApiKeys[0], keep: true).status == 303)
            let both = try await browser.get("/dashboard")
            #expect(Self.text(both).contains("<option value=\"demo\">demo</option>"))
            #expect(try await browser.get("/dashboard/customers/olga").status == 200)
            #expect(
                try await browser.request(.post, "/dashboard/switch", form: [("csrf_token", try browser.csrf(of: both)), ("app_id", "demo")]).status
                    == 303)
            #expect(try await browser.get("/dashboard/customers/olga").status == 404)
        }
    }

    @Test("sessions end at their expiry and at sign-out", arguments: TestDatabaseKind.available)
    func expiryAndSignOut(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let browser = setup.browser
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)
            #expect(try await browser.get("/dashboard").status == 200)
            setup.clock.now = setup.clock.now.addingTimeInterval(DashboardSettings().sessionLifetime + 1)
            #expect(try await browser.get("/dashboard").status == 303)
            setup.clock.now = setup.clock.now.addingTimeInterval(-DashboardSettings().sessionLifetime)
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)
            let page = try await browser.get("/dashboard/keys")
            #expect(page.status == 200)
            let token = try #require(browser.cookies[DashboardCookie.session])
            // Sign-out needs the form's token too.
            #expect(try await browser.request(.post, "/dashboard/logout", form: [("csrf_token", "forged")]).status == 403)
            #expect(try await browser.get("/dashboard").status == 200)
            let out = try await browser.request(.post, "/dashboard/logout", form: [("csrf_token", try browser.csrf(of: page))])
            #expect(out.status == 303)
            #expect(out.headers[.location] == "/dashboard/login")
            #expect(browser.cookies[DashboardCookie.session] == nil)
            // The old cookie, kept by someone, opens nothing.
            browser.cookies[DashboardCookie.session] = token
            #expect(try await browser.get("/dashboard").status == 303)
        }
    }

    @Test("deleting asks for the app user id again; pages escape what customers chose", arguments: TestDatabaseKind.available)
    func deleteAndEscaping(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let user = "<b>eve</b>\"&'"
            #expect(try await setup.harness.post(user: user, jws: try setup.harness.mint("pro_monthly").jws).status == 200)
            let browser = setup.browser
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)
            let path = DashboardRoutes.customerPath(user)
            let page = try await browser.get(path)
            #expect(page.status == 200)
            #expect(!Self.text(page).contains("<b>eve"))
            #expect(Self.text(page).contains("&lt;b&gt;eve&lt;/b&gt;&quot;&amp;&#39;"))
            let confirm = try await browser.get(path + "/delete")
            let csrf = try browser.csrf(of: confirm)
            #expect(try await browser.request(.post, path + "/delete", form: [("csrf_token", csrf), ("confirm", "eve")]).status == 422)
            #expect(try await browser.request(.post, path + "/delete", form: [("confirm", user)]).status == 403)
            #expect(try await browser.get(path).status == 200)
            let deleted = try await browser.request(.post, path + "/delete", form: [("csrf_token", csrf), ("confirm", user)])
            #expect(deleted.status == 303)
            #expect(try await browser.get(path).status == 404)
        }
    }

    @Test(
        "the overview counts purchases, renewals, refunds and active customers; failures and keys pages show their tables",
        arguments: TestDatabaseKind.available)
    func overviewFigures(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            for user in ["p1", "p2", "p3"] {
                #expect(try await setup.harness.post(user: user, jws: try setup.harness.mint("pro_monthly").jws).status == 200)
            }
            #expect(try await setup.harness.post(user: "p4", jws: try setup.harness.mint("lifetime", type: .nonConsumable).jws).status == 200)
            let report = try JSONSerialization.data(withJSONObject: [
                "failures": [["reason": "payloadMismatch", "mode": "enforced", "path": "/v1/subscribers/x", "count": 3]]
            ])
            #expect(
                try await setup.harness.send(
                    .post, "/v1/diagnostics/verification_failures", key: setup.harness.key, body: report,
                    headers: [.contentType: "application/json"]
                ).status == 202)
            let browser = setup.browser
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)
            let overview = Self.text(try await browser.get("/dashboard"))
            #expect(overview.contains("<td>pro</td><td class=\"number\">4</td>"))
            #expect(overview.contains("Purchases <span class=\"muted\">4 in 30 days</span>"))
            #expect(overview.contains("payloadMismatch <span class=\"muted\">3</span>"))
            #expect(overview.components(separatedBy: "<svg").count - 1 == 5)
            let failures = Self.text(try await browser.get("/dashboard/failures"))
            #expect(
                failures.contains(
                    "<tr class=\"seen\"><td><code>payloadMismatch</code></td><td>tampering</td><td class=\"number\">0</td><td class=\"number\">3</td>"
                ))
            let keys = Self.text(try await browser.get("/dashboard/keys"))
            #expect(keys.contains(setup.harness.server.keys.managedRootPublicKey!.rawRepresentation.base64EncodedString()))
            #expect(keys.contains("signing now"))
            // Thirty-one days on, the intermediate has expired: the overview warns.
            setup.clock.now = setup.clock.now.addingTimeInterval(25 * 86_400)
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)
            #expect(Self.text(try await browser.get("/dashboard")).contains("Under 7 days"))
        }
    }

    @Test("the overview's counts: counted while the first view waits, then served as they are while one refresh runs")
    func overviewCache() async throws {
        let cache = OverviewCache()
        let counted = ManualClock(Date(timeIntervalSince1970: 1_000))
        let calls = Collected<Int>()
        @Sendable func compute() async throws -> OverviewCache.Figures {
            calls.add(1)
            try await Task.sleep(for: .milliseconds(50))
            return OverviewCache.Figures(active: [("pro", calls.all.count)], activity: [:], computed: counted.now)
        }
        let start = counted.now
        #expect(try await cache.figures(app: "a", now: start, maximumAge: 60, wait: .seconds(5), compute: compute)?.active.first?.customers == 1)
        #expect(
            try await cache.figures(app: "a", now: start.addingTimeInterval(30), maximumAge: 60, wait: .seconds(5), compute: compute)?.active.first?
                .customers == 1)
        #expect(calls.all.count == 1)
        // Stale: the old figures at once, and one refresh however many views come meanwhile.
        counted.now = start.addingTimeInterval(61)
        for _ in 0..<5 {
            #expect(
                try await cache.figures(app: "a", now: counted.now, maximumAge: 60, wait: .seconds(5), compute: compute)?.active.first?.customers == 1
            )
        }
        _ = try await waitUntil { calls.all.count >= 2 }
        try await Task.sleep(for: .milliseconds(100))
        #expect(calls.all.count == 2)
        #expect(
            try await cache.figures(app: "a", now: counted.now, maximumAge: 60, wait: .seconds(5), compute: compute)?.active.first?.customers == 2)
        // With nothing counted yet and a short wait, the view goes on without figures; the count
        // it started shows next time.
        #expect(try await cache.figures(app: "c", now: counted.now, maximumAge: 60, wait: .milliseconds(1), compute: compute) == nil)
        #expect(try await cache.figures(app: "c", now: counted.now, maximumAge: 60, wait: .seconds(5), compute: compute) != nil)
        #expect(calls.all.count == 3)
        // A change marks them stale; a maximum age of 0 counts on every view.
        cache.markStale(app: "a")
        _ = try await cache.figures(app: "a", now: counted.now, maximumAge: 60, wait: .seconds(5), compute: compute)
        _ = try await waitUntil { calls.all.count >= 4 }
        #expect(try await cache.figures(app: "b", now: counted.now, maximumAge: 0, wait: .seconds(5), compute: compute)?.active.first?.customers == 5)
    }

    @Test("a form body is read strictly")
    func formBody() throws {
        #expect(try FormBody(Data("a=1&b=x+y%21&c=".utf8)).fields == ["a": "1", "b": "x y!", "c": ""])
        #expect(throws: APIError.self) { try FormBody(Data("a=1&a=2".utf8)) }
        #expect(throws: APIError.self) { try FormBody(Data("a=%ZZ".utf8)) }
        #expect(throws: APIError.self) { try FormBody(Data([0x61, 0x3D, 0xFF])) }
    }

    // MARK: Security review, findings 3 and 10

    @Test(
        "finding 3: a session ends for an app whose secret key was rotated away, at the next request after the restart",
        arguments: TestDatabaseKind.available)
    func rotatedKeyEndsSessions(_ kind: TestDatabaseKind) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            var app = AppConfiguration.makeDemo()
            let leaked = app.secretApiKeys[0]
            var configuration = ServerConfiguration(dataDirectory: directory)
            configuration.database = location
            try DeploymentConfiguration(apps: [app]).save(toDataDirectory: directory)
            let cookies = try await LiveServer.run(configuration) { _, client async throws -> [String: String] in
                let browser = Browser(client: client)
                #expect(try await browser.signIn(leaked).status == 303)
                #expect(try await browser.get("/dashboard/customers?q=x").status == 200)
                return browser.cookies
            }
            // The documented rotation: a new key in secretApiKeys, the leaked one removed, restart.
            app.secretApiKeys = [APIKey.make(.secret)]
            try DeploymentConfiguration(apps: [app]).save(toDataDirectory: directory)
            let replacement = app.secretApiKeys[0]
            try await LiveServer.run(configuration) { _, client in
                let browser = Browser(client: client)
                browser.cookies = cookies
                let page = try await browser.get("/dashboard/customers?q=x")
                #expect(page.status == 303 && page.headers[.location] == "/dashboard/login")
                // The new key signs in.
                #expect(try await browser.signIn(replacement).status == 303)
                #expect(try await browser.get("/dashboard").status == 200)
            }
        }
    }

    @Test("finding 3: signing in with another app's key does not carry the first app over unless asked", arguments: TestDatabaseKind.available)
    func noSilentCarryOver(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let browser = setup.browser
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)
            #expect(try await browser.signIn(setup.other.secretApiKeys[0]).status == 303)
            let page = Self.text(try await browser.get("/dashboard"))
            #expect(!page.contains("<option value=\"demo\">"))
            let switched = try await browser.request(
                .post, "/dashboard/switch", form: [("csrf_token", try browser.csrf(of: try await browser.get("/dashboard"))), ("app_id", "demo")])
            #expect(switched.status == 403)
        }
    }

    @Test("finding 3: the admin call and the dashboard button end every session of an app", arguments: TestDatabaseKind.available)
    func endEverySession(_ kind: TestDatabaseKind) async throws {
        try await Self.withSetup(kind) { setup in
            let first = setup.browser
            let second = Browser(client: setup.harness.client)
            let both = Browser(client: setup.harness.client)
            #expect(try await first.signIn(setup.harness.secretKey).status == 303)
            #expect(try await second.signIn(setup.harness.secretKey).status == 303)
            #expect(try await both.signIn(setup.other.secretApiKeys[0]).status == 303)
            #expect(try await both.signIn(setup.harness.secretKey, keep: true).status == 303)
            let ended = try await setup.harness.send(.post, "/v1/admin/dashboard/sessions/end", key: setup.harness.secretKey)
            #expect(ended.status == 200 && ended.json["ended_sessions"] as? Int == 3)
            for browser in [first, second] { #expect(try await browser.get("/dashboard").status == 303) }
            // The session that also held the other app keeps that one only.
            let left = Self.text(try await both.get("/dashboard"))
            #expect(left.contains("other") && !left.contains("<option value=\"demo\">"))

            // The button: signed in again, the keys page ends every session of the app shown.
            #expect(try await first.signIn(setup.harness.secretKey).status == 303)
            #expect(try await second.signIn(setup.harness.secretKey).status == 303)
            let keys = try await first.get("/dashboard/keys")
            #expect(Self.text(keys).contains("id=\"end-sessions\""))
            let pressed = try await first.request(.post, "/dashboard/sessions/end", form: [("csrf_token", try first.csrf(of: keys))])
            #expect(pressed.status == 303 && pressed.headers[.location] == "/dashboard/login")
            for browser in [first, second] { #expect(try await browser.get("/dashboard").status == 303) }
            // Without the CSRF token the button changes nothing.
            #expect(try await second.signIn(setup.harness.secretKey).status == 303)
            #expect(try await second.request(.post, "/dashboard/sessions/end", form: []).status == 403)
            #expect(try await second.get("/dashboard").status == 200)
        }
    }

    @Test("finding 10: a quote followed by a combining mark is escaped in every page and chart", arguments: TestDatabaseKind.available)
    func escapingByScalar(_ kind: TestDatabaseKind) async throws {
        let hostile = "q\"\u{301} autofocus onfocus=alert(1) x=\"\u{301}<\u{301}b>'\u{301}&\u{301}"
        #expect(
            ScalarHTMLEscaping.escape(hostile) == "q&quot;\u{301} autofocus onfocus=alert(1) x=&quot;\u{301}&lt;\u{301}b&gt;&#39;\u{301}&amp;\u{301}")
        #expect(SVGChart.escape("\"\u{301}") == "&quot;\u{301}")
        try await Self.withSetup(kind) { setup in
            #expect(try await setup.harness.post(user: hostile, jws: try setup.harness.mint("pro_monthly").jws).status == 200)
            let browser = setup.browser
            #expect(try await browser.signIn(setup.harness.secretKey).status == 303)
            let pages = [
                try await browser.get("/dashboard/customers?q=\(DashboardTests.encode([("", hostile)]).dropFirst())"),
                try await browser.get("/dashboard/customers/\(hostile.pathSegment)"),
                try await browser.get("/dashboard/customers/\(hostile.pathSegment)/delete"),
            ]
            for page in pages {
                #expect(page.status == 200)
                let html = Self.text(page)
                #expect(html.contains("&quot;\u{301}"))
                // Byte for byte: no quote, bracket or apostrophe of the id reaches the page unescaped.
                for raw in ["\"\u{301}", "<\u{301}", "'\u{301}"] {
                    #expect(Data(html.utf8).range(of: Data(raw.utf8)) == nil, "\(raw.unicodeScalars.map(\.value))")
                }
            }
        }
    }
}
