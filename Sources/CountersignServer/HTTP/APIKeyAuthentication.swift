import CountersignCore
import CountersignServerCore
import HTTPTypes
import Hummingbird

/// Finds the app an API key belongs to. Public keys (shipped in apps) open public endpoints
/// only; secret keys open the admin API only.
public struct APIKeyAuthentication: Sendable {
    public let deployment: DeploymentConfiguration

    public init(deployment: DeploymentConfiguration) {
        self.deployment = deployment
    }

    /// The bearer value of `Authorization`, if the header is well formed.
    static func bearer(_ request: Request) throws(APIError) -> String {
        guard let header = request.headers[.authorization] else {
            throw APIError(.missingAPIKey, "send the API key as 'Authorization: Bearer <key>'")
        }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].isEmpty else {
            throw APIError(.missingAPIKey, "Authorization must be 'Bearer <key>'")
        }
        return String(parts[1])
    }

    /// Compares two keys in time that depends on their lengths only, never on where they first
    /// differ, so response timing cannot be used to guess a key byte by byte.
    static func constantTimeEqual(_ lhs: String, _ rhs: String) -> Bool {
        let left = Array(lhs.utf8)
        let right = Array(rhs.utf8)
        guard left.count == right.count else { return false }
        var difference: UInt8 = 0
        for index in left.indices { difference |= left[index] ^ right[index] }
        return difference == 0
    }

    /// Whether `keys` holds `key`; every key is compared in full.
    static func holds(_ keys: [String], _ key: String) -> Bool {
        keys.reduce(false) { found, candidate in constantTimeEqual(candidate, key) || found }
    }

    /// The app whose public key `key` is.
    public func publicApp(key: String) throws(APIError) -> AppConfiguration {
        if let app = deployment.apps.first(where: { Self.holds($0.publicApiKeys, key) }) { return app }
        if deployment.apps.contains(where: { Self.holds($0.secretApiKeys, key) }) {
            throw APIError(.wrongKeyKind, "a secret key cannot be used on a public endpoint; apps ship their public key")
        }
        throw APIError(.invalidAPIKey, "unknown API key")
    }

    /// The app whose secret key the request carries.
    public func secretApp(_ request: Request) throws(APIError) -> AppConfiguration {
        let key = try Self.bearer(request)
        if let app = deployment.apps.first(where: { Self.holds($0.secretApiKeys, key) }) { return app }
        if deployment.apps.contains(where: { Self.holds($0.publicApiKeys, key) }) {
            throw APIError(.wrongKeyKind, "a public key cannot be used on the admin API; use a secret key")
        }
        throw APIError(.invalidAPIKey, "unknown API key")
    }
}

/// The middleware of the routes an API key opens: finds the app the key belongs to and puts it,
/// or the refusal of a missing, unknown or wrong-kind key, in the context. The refusal is raised
/// when the route asks for the app (``ServerRequestContext/authenticatedApp()``), first thing on
/// most routes, and on a signed POST once the body and its `X-Post-Params-Hash` are checked: a
/// signed refusal never covers a claim the server did not check. Behind ``ResponseSigning`` the
/// refusal is signed; elsewhere it is a plain error answer.
struct AppAuthentication: RouterMiddleware {
    typealias Context = ServerRequestContext

    enum Kind {
        /// Public keys, shipped in apps: the public endpoints.
        case publicKey
        /// Secret keys, kept on the app's backend: the admin API.
        case secretKey
    }

    let authentication: APIKeyAuthentication
    let kind: Kind

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        // On a signed route the signing middleware already read the key it binds into the signature.
        let presented = context.signedExchange?.apiKey
        context.authentication = Result { () throws(APIError) in
            switch kind {
            case .publicKey:
                let key = if let presented { presented } else { try APIKeyAuthentication.bearer(request) }
                return try authentication.publicApp(key: key)
            case .secretKey:
                return try authentication.secretApp(request)
            }
        }
        return try await next(request, context)
    }
}
