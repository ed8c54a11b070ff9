import CountersignCore
import CountersignServerCore
import Foundation
import Hummingbird

/// The context of the signed routes: Hummingbird's child context of ``ServerRequestContext``,
/// made when a request enters the signed group, after ``ResponseSigning`` has checked what the
/// request asks the server to vouch for. Its exchange is never absent, so a signed route answers
/// through it (``respond(to:with:)``) and reads the time the answer is signed at (``now``): one
/// reading of the clock a request.
struct SignedRequestContext: ChildRequestContext, AuthenticatedContext {
    var coreContext: CoreRequestContextStorage
    /// The checked request parts and the signer.
    let exchange: SignedExchange
    /// The app of the request's API key, or why not (nil on the unauthenticated `/v1/health`).
    let authentication: Result<AppConfiguration, APIError>?

    init(context: ServerRequestContext) throws {
        guard let exchange = context.signedExchange else {
            throw APIError(.internalError, "a signed route outside the signing middleware")
        }
        coreContext = context.coreContext
        self.exchange = exchange
        authentication = context.authentication
    }

    /// Request bodies are small JSON documents; anything larger is refused with 413.
    var maxUploadSize: Int { ServerRequestContext.maximumBody }

    /// The time the answer is signed at, which the route also answers for.
    var now: Date { exchange.date }

    /// The request's `X-Platform`, when it has one.
    var platform: String? { exchange.platform }

    /// The route's answer, signed over what the middleware checked.
    func respond(to request: Request, with answer: SignedAnswer) throws -> Response {
        try exchange.response(to: request, answer: answer)
    }
}
