import CountersignCore
import CountersignServerCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// The per-request context of Countersign's routes.
public struct ServerRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// What middleware found out about the request, held by reference: Hummingbird hands the
    /// context from middleware to middleware by value, and an app's configuration and the
    /// signed parts are large (copied inline, each hand-over retained and released some twenty
    /// references; BENCHMARKS.md, decision 17).
    private var found = Found(signedExchange: nil, authentication: nil)
    /// The peer's address (the dashboard's sign-in limit counts attempts by it).
    public let remoteAddress: SocketAddress?

    private final class Found: Sendable {
        let signedExchange: SignedExchange?
        let authentication: Result<AppConfiguration, APIError>?

        init(signedExchange: SignedExchange?, authentication: Result<AppConfiguration, APIError>?) {
            self.signedExchange = signedExchange
            self.authentication = authentication
        }
    }

    /// Set by ``ResponseSigning`` on the signed routes: the checked request parts and the signer.
    public var signedExchange: SignedExchange? {
        get { found.signedExchange }
        set { found = Found(signedExchange: newValue, authentication: found.authentication) }
    }

    /// Set by ``AppAuthentication``: the app whose API key the request carries, or why not.
    public var authentication: Result<AppConfiguration, APIError>? {
        get { found.authentication }
        set { found = Found(signedExchange: found.signedExchange, authentication: newValue) }
    }

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// Request bodies are small JSON documents; anything larger is refused with 413.
    public var maxUploadSize: Int { Self.maximumBody }

    static let maximumBody = 64 * 1024
}

/// A context that carries what ``AppAuthentication`` found: the server's own and the signed
/// routes' child context.
protocol AuthenticatedContext {
    var authentication: Result<AppConfiguration, APIError>? { get }
}

extension ServerRequestContext: AuthenticatedContext {}

extension AuthenticatedContext {
    /// The authenticated app, or the refusal of the request's API key; only routes behind
    /// ``AppAuthentication`` ask.
    func authenticatedApp() throws(APIError) -> AppConfiguration {
        switch authentication {
        case .success(let app)?: return app
        case .failure(let refusal)?: throw refusal
        case nil: throw APIError(.internalError, "a route without authentication asked for the app")
        }
    }
}

extension Request {
    /// The whole request body, refused with 413 (code 4013) beyond the context's upload limit.
    mutating func collectBody(context: some RequestContext) async throws(APIError) -> Data {
        do {
            return Data(try await collectBody(upTo: context.maxUploadSize).readableBytesView)
        } catch {
            throw APIError(.bodyTooLarge, "request body is larger than \(context.maxUploadSize) bytes")
        }
    }
}
