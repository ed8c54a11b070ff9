import CountersignCore
import HTTPTypes
import Hummingbird

/// The server's routes are registered through this, so it knows which methods each path takes:
/// any other method on a known path is answered 405 with an `Allow` header (Hummingbird's router
/// alone answers 404, as if the path did not exist).
final class ServerRouter: RouterMethods {
    typealias Context = ServerRequestContext

    private let router = Router(context: ServerRequestContext.self)
    private var methodsByPath: [(path: RouterPath, methods: [HTTPRequest.Method])] = []

    /// Methods a request may name that are answered 405 on a path that does not take them.
    private static let refusable: [HTTPRequest.Method] = [.get, .head, .post, .put, .delete, .patch, .options, .trace, HTTPRequest.Method("QUERY")!]

    @discardableResult
    func on<Responder: HTTPResponder>(_ path: RouterPath, method: HTTPRequest.Method, responder: Responder) -> Self
    where Responder.Context == Context {
        router.on(path, method: method, responder: responder)
        if let index = methodsByPath.firstIndex(where: { $0.path.description == path.description }) {
            methodsByPath[index].methods.append(method)
        } else {
            methodsByPath.append((path, [method]))
        }
        return self
    }

    @discardableResult
    func add(middleware: any MiddlewareProtocol<Request, Response, Context>) -> Self {
        router.add(middleware: middleware)
        return self
    }

    /// The router with a 405 answer for every other method of every registered path.
    func finish() -> Router<Context> {
        for (path, methods) in methodsByPath {
            let allow = methods.map(\.rawValue).joined(separator: ", ")
            for method in Self.refusable where !methods.contains(method) {
                router.on(path, method: method) { _, _ in
                    var response = ErrorAnswer.response(APIError(.methodNotAllowed, "this endpoint accepts \(allow)"))
                    response.headers[.allow] = allow
                    return response
                }
            }
        }
        return router
    }
}
