import CountersignCore
import Foundation
import Hummingbird

/// Limits the public routes per client address and per app (``RateLimitSettings``): beyond
/// either, a 429 (`rate_limited`) with `Retry-After`, signed like any answer of the group. A
/// request whose key names no app counts against its address only.
struct PublicRateLimit: RouterMiddleware {
    typealias Context = ServerRequestContext

    let perClient: RateLimiter
    let perApp: RateLimiter

    init(_ settings: RateLimitSettings, now: @escaping @Sendable () -> Date) {
        perClient = RateLimiter(settings.publicPerClient, now: now)
        perApp = RateLimiter(settings.publicPerApp, now: now)
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let wait = perClient.admit(context.clientAddress) {
            throw APIError(.rateLimited, "too many requests from this address; try again in \(wait) s", retryAfter: wait)
        }
        if case .success(let app)? = context.authentication, let wait = perApp.admit(app.id) {
            throw APIError(.rateLimited, "too many requests for app '\(app.id)'; try again in \(wait) s", retryAfter: wait)
        }
        return try await next(request, context)
    }
}

extension ServerRequestContext {
    /// The peer's IP address (behind a proxy, the proxy's), the key of per-address limits.
    var clientAddress: String { remoteAddress?.ipAddress ?? "unknown" }

    /// Whether the peer is this machine (127.0.0.0/8, ::1, or IPv4 loopback mapped into IPv6).
    var isLoopbackPeer: Bool {
        guard let address = remoteAddress?.ipAddress else { return false }
        return address.hasPrefix("127.") || address == "::1" || address.hasPrefix("::ffff:127.")
    }
}
