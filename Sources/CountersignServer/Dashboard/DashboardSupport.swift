import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignStorage
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Mustache
import NIOConcurrencyHelpers

/// How the dashboard keeps sessions and figures.
public struct DashboardSettings: Sendable {
    /// How long a sign-in lasts.
    public var sessionLifetime: TimeInterval = 12 * 3_600
    /// How old the overview's counts (active customers, events per day) may be before a view
    /// refreshes them in the background: they read an index range that grows with the app's
    /// active subscriptions. 0: every view counts while it waits.
    public var overviewCacheSeconds: TimeInterval = 60
    /// How long the first view after a start waits for the counts before it shows that they are
    /// being counted.
    public var overviewFirstWait: Duration = .milliseconds(250)
    /// Failed sign-ins allowed at once from one address, and how fast the allowance refills.
    public var signInBurst: Double = 10
    public var signInRefillPerSecond: Double = 1.0 / 30

    public init() {}
}

/// The dashboard's templates and stylesheet, shipped as the server module's resources
/// (`Countersign_CountersignServer.resources` beside the executable, as SwiftPM builds it).
struct DashboardTemplates: Sendable {
    let library: MustacheLibrary
    let stylesheet: ByteBuffer

    static let bundleName = "Countersign_CountersignServer.resources"

    /// Looks in `COUNTERSIGN_DASHBOARD_RESOURCES` when set, then beside the executable (a build,
    /// an install that copied the folder along), then in the source tree this was built from.
    static func load() async throws -> DashboardTemplates {
        var candidates: [URL] = []
        if let variable = ProcessInfo.processInfo.environment["COUNTERSIGN_DASHBOARD_RESOURCES"] {
            candidates.append(URL(fileURLWithPath: variable))
        }
        let executable = URL(fileURLWithPath: CommandLine.arguments.first ?? "").resolvingSymlinksInPath()
        for directory in [Bundle.main.bundleURL, executable.deletingLastPathComponent()] {
            candidates.append(directory.appendingPathComponent(bundleName).appendingPathComponent("Resources"))
        }
        candidates.append(URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Resources"))
        guard let directory = candidates.first(where: { FileManager.default.fileExists(atPath: $0.appendingPathComponent("style.css").path) }) else {
            throw ConfigurationError("the dashboard's templates were not found (looked in \(candidates.map(\.path).joined(separator: ", ")))")
        }
        // Every template starts with `{{% CONTENT_TYPE: SCALARHTML }}`: the library's own HTML
        // escaping goes by Character, and `"` followed by a combining mark is one Character
        // that is not `"`, so it passed unescaped.
        MustacheContentTypes.register(ScalarHTMLEscaping(), named: "SCALARHTML")
        let library = try await MustacheLibrary(directory: directory.path)
        let css = try Data(contentsOf: directory.appendingPathComponent("style.css"))
        return DashboardTemplates(library: library, stylesheet: ByteBuffer(bytes: css))
    }
}

/// Security headers of every dashboard answer: no script at all, styles from the dashboard's
/// own stylesheet only, forms posting only back to it, never framed, never cached.
enum DashboardHeaders {
    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    static func apply(to headers: inout HTTPFields) {
        headers[.contentSecurityPolicy] = contentSecurityPolicy
        headers[.xContentTypeOptions] = "nosniff"
        headers[.init("Referrer-Policy")!] = "no-referrer"
        headers[.init("X-Frame-Options")!] = "DENY"
        headers[.cacheControl] = "no-store"
    }
}

/// `application/x-www-form-urlencoded` bodies, read strictly: a field named twice is refused
/// (two readers could take different copies), as is anything that is not UTF-8.
struct FormBody {
    let fields: [String: String]

    init(_ data: Data) throws(APIError) {
        var fields: [String: String] = [:]
        for pair in data.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.decode(parts[0]), let value = Self.decode(parts.count > 1 ? parts[1] : Data()) else {
                throw APIError(.malformedRequest, "the form is not valid percent-encoded UTF-8")
            }
            guard fields.updateValue(value, forKey: name) == nil else {
                throw APIError(.malformedRequest, "the form names '\(name.prefix(40))' twice")
            }
        }
        self.fields = fields
    }

    subscript(_ name: String) -> String? { fields[name] }

    private static func decode(_ bytes: some Collection<UInt8>) -> String? {
        let plus = bytes.map { $0 == UInt8(ascii: "+") ? UInt8(ascii: " ") : $0 }
        guard let text = String(validating: plus, as: UTF8.self) else { return nil }
        return text.removingPercentEncoding
    }
}

/// Secret tokens (dashboard sign-in, web purchase redemption): 32 random bytes, base64url; the
/// database keeps their SHA-256 only.
enum SecretToken {
    static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }).base64URLEncodedString
    }

    static func hash(_ token: String) -> String {
        SHA256.hash(data: Data(token.utf8)).hexString
    }

    /// What a session keeps of the secret key an app was opened with: enough to tell whether
    /// that key is still configured, nothing that signs in (a domain-separated SHA-256, 16 bytes).
    static func fingerprint(ofKey key: String) -> String {
        SHA256.hash(data: Data(("countersign dashboard key\u{0}" + key).utf8)).prefix(16).hexString
    }
}

/// Cookies of the dashboard: HttpOnly, SameSite=Strict, scoped to `/dashboard`, and Secure when
/// the request came over TLS as a proxy in front says (`X-Forwarded-Proto: https`).
enum DashboardCookie {
    static let session = "countersign_session"
    static let signIn = "countersign_signin"

    static func value(_ name: String, in request: Request) -> String? {
        guard let header = request.headers[.cookie] else { return nil }
        var found: String?
        for part in header.split(separator: ";") {
            let pair = part.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces) == name else { continue }
            // The same cookie twice (a path-scoped one beside ours): refuse to pick one.
            guard found == nil else { return nil }
            found = pair[1].trimmingCharacters(in: .whitespaces)
        }
        return found
    }

    static func isSecure(_ request: Request) -> Bool {
        request.headers[.init("X-Forwarded-Proto")!]?.lowercased() == "https"
    }

    static func set(_ name: String, _ value: String, maxAge: Int, secure: Bool) -> String {
        "\(name)=\(value); Path=/dashboard; Max-Age=\(maxAge); HttpOnly; SameSite=Strict" + (secure ? "; Secure" : "")
    }
}

/// The overview's counts per app, never recounted while a page waits once they exist: a view
/// that finds them older than the maximum age is answered with the figures there are while one
/// refresh per app runs in the background. Without any figures yet (the first view after a
/// start) a view waits for the count at most `wait`, then shows that counting is under way. With
/// a maximum age of 0 every view counts while it waits.
final class OverviewCache: Sendable {
    struct Figures: Sendable {
        var active: [(entitlement: String, customers: Int)]
        var activity: [Int64: CustomerDatabase.DailyActivity]
        var computed: Date
    }

    private struct State {
        var figures: Figures?
        var refreshing = false
    }

    private let states = NIOLockedValueBox<[String: State]>([:])

    func figures(
        app: String, now: Date, maximumAge: TimeInterval, wait: Duration,
        compute: @escaping @Sendable () async throws -> Figures
    ) async throws -> Figures? {
        guard maximumAge > 0 else { return try await compute() }
        let (cached, start) = states.withLockedValue { states -> (Figures?, Bool) in
            var state = states[app] ?? State()
            let stale = state.figures.map { now.timeIntervalSince($0.computed) >= maximumAge || $0.computed > now } ?? true
            let start = stale && !state.refreshing
            if start { state.refreshing = true }
            states[app] = state
            return (state.figures, start)
        }
        if start {
            Task {
                let fresh = try? await compute()
                states.withLockedValue { states in
                    states[app]?.refreshing = false
                    if let fresh { states[app]?.figures = fresh }
                }
            }
        }
        if let cached { return cached }
        let deadline = ContinuousClock.now + wait
        while ContinuousClock.now < deadline {
            if let counted = states.withLockedValue({ $0[app]?.figures }) { return counted }
            try await Task.sleep(for: .milliseconds(5))
        }
        return states.withLockedValue { $0[app]?.figures }
    }

    /// After a change made from the dashboard: the next view refreshes the figures.
    func markStale(app: String) {
        states.withLockedValue { $0[app]?.figures?.computed = .distantPast }
    }
}

/// Bar charts as SVG, drawn on the server (no script, nothing loaded).
enum SVGChart {
    /// One bar per day, oldest first; each bar's title tells its day and value.
    static func bars(_ values: [(label: String, value: Int)], title: String, style: String) -> String {
        bars(values.map { ($0.label, Double($0.value)) }, title: title, style: style) { String(Int($0)) }
    }

    /// One bar per period, oldest first (none where a value is missing); each bar's title tells
    /// its period and value written by `text`, and the tallest is marked on the axis.
    static func bars(_ values: [(label: String, value: Double?)], title: String, style: String, text: (Double) -> String) -> String {
        let width = 300.0
        let height = 100.0
        let top = 14.0
        let legend = 12.0
        let largest = values.compactMap(\.value).filter(\.isFinite).max() ?? 0
        let scale = largest > 0 ? largest : 1
        let slot = width / Double(max(values.count, 1))
        var svg = "<svg class=\"chart\" viewBox=\"0 0 \(Int(width)) \(Int(height + legend))\" role=\"img\" aria-label=\"\(escape(title))\">"
        svg += "<title>\(escape(title))</title>"
        svg += "<line class=\"axis\" x1=\"0\" y1=\"\(height - 0.5)\" x2=\"\(width)\" y2=\"\(height - 0.5)\"/>"
        for (index, entry) in values.enumerated() {
            guard let value = entry.value, value.isFinite else { continue }
            let barHeight = (height - top) * max(value, 0) / scale
            let x = Double(index) * slot + slot * 0.15
            svg +=
                "<rect class=\"bar \(style)\" x=\"\(format(x))\" y=\"\(format(height - barHeight))\" width=\"\(format(slot * 0.7))\" height=\"\(format(barHeight))\">"
            svg += "<title>\(escape(entry.label)): \(escape(text(value)))</title></rect>"
        }
        svg += "<text class=\"peak\" x=\"2\" y=\"10\">\(escape(text(max(largest, 0))))</text>"
        if let first = values.first, let last = values.last {
            svg += "<text class=\"peak\" x=\"0\" y=\"\(Int(height + legend - 1))\">\(escape(String(first.label.suffix(5))))</text>"
            svg +=
                "<text class=\"peak\" x=\"\(Int(width))\" y=\"\(Int(height + legend - 1))\" text-anchor=\"end\">\(escape(String(last.label.suffix(5))))</text>"
        }
        return svg + "</svg>"
    }

    static func format(_ value: Double) -> String {
        String((value * 10).rounded() / 10)
    }

    static func escape(_ text: String) -> String {
        ScalarHTMLEscaping.escape(text)
    }
}

/// HTML escaping by Unicode scalar, for the dashboard's templates and its SVG charts: `<`, `>`,
/// `&`, `"` and `'` are replaced wherever they occur, also when a combining mark follows them
/// (Swift's `Character` iteration sees `"` + U+0301 as one character that is not `"`, and a
/// browser's tokenizer sees a quote).
struct ScalarHTMLEscaping: MustacheContentType {
    func escapeText(_ text: String) -> String {
        Self.escape(text)
    }

    static func escape(_ text: String) -> String {
        var escaped = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "<": escaped.append(contentsOf: "&lt;".unicodeScalars)
            case ">": escaped.append(contentsOf: "&gt;".unicodeScalars)
            case "&": escaped.append(contentsOf: "&amp;".unicodeScalars)
            case "\"": escaped.append(contentsOf: "&quot;".unicodeScalars)
            case "'": escaped.append(contentsOf: "&#39;".unicodeScalars)
            default: escaped.append(scalar)
            }
        }
        return String(escaped)
    }
}

extension VerificationFailure {
    /// What a failure reason means for an app team, on the dashboard.
    var explanation: String {
        switch self {
        case .missingSignature: "An answer that must be signed came without a signature: stripped by a proxy, or a server that does not sign."
        case .malformedSignature:
            "The signature header was not a Countersign signature (wrong length or encoding): rewritten or truncated on the way."
        case .untrustedRoot: "The signing key was not vouched for by a root the app pins: a forged key, or an app pinning another server's root."
        case .intermediateExpired: "Signed with a key that had expired before the answer's own time: a replayed or forged answer."
        case .deviceClockOutsideValidity:
            "The device's clock is outside the key's validity while the answer's time is inside: most likely a wrong clock, not an attack."
        case .payloadMismatch: "The signature does not cover what arrived: the body, path, nonce, API key, time or ETag was changed."
        case .missingRequestTime: "The answer's signed request time was removed."
        case .malformedRequestTime: "The answer's request time was not a plain number of milliseconds."
        case .malformedETag: "The ETag header did not have the server's shape."
        case .missingETag: "A 304 came without the ETag that vouches for the cached body: a forged 'not modified'."
        case .malformedBody: "The body was not the JSON the endpoint sends (or a 304 carried a body)."
        case .malformedNonce: "The app sent a nonce of the wrong size: a client bug."
        case .appUserMismatch: "A correctly signed answer for another user than the one asked for: an answer moved between requests."
        case .missingPolicy: "The verification policy the app asked for was stripped from the answer."
        case .malformedPolicy: "The verification policy header was rewritten into something the server never sends."
        }
    }
}
