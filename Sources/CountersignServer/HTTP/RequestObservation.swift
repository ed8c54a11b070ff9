import CountersignCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Runs around every route: the request's one id is Hummingbird's (`context.id`, in every log
/// line of the request as `hb.request.id`), or the caller's `X-Request-Id` in its place when it
/// is a sane token; it goes back in the answer. The middleware
/// turns the errors routes throw (``APIError``, Hummingbird's own) into the JSON error shape,
/// logs one line per request and counts it in the metrics.
struct RequestObservation: RouterMiddleware {
    typealias Context = ServerRequestContext
    static let requestIdHeader = SignatureHeader.requestId

    let metrics: ServerMetrics

    func handle(_ request: Request, context: ServerRequestContext, next: (Request, ServerRequestContext) async throws -> Response) async throws
        -> Response
    {
        let start = ContinuousClock.now
        var context = context
        let id: String
        if let given = request.headers[Self.requestIdHeader].flatMap(Self.acceptableId) {
            id = given
            context.logger[metadataKey: "hb.request.id"] = "\(given)"
        } else {
            id = context.id
        }
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as HTTPError {
            response = ErrorAnswer.response(Self.apiError(for: error))
        } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        } catch {
            response = ErrorAnswer.response(ErrorAnswer.apiError(for: error, logger: context.logger))
        }
        response.headers[Self.requestIdHeader] = id
        let duration = ContinuousClock.now - start
        let route = context.endpointPath ?? "unmatched"
        metrics.recordRequest(route: route, method: request.method.rawValue, status: Int(response.status.code), duration: duration)
        context.logger.info(
            "request",
            metadata: [
                "method": "\(request.method.rawValue)",
                "route": "\(route)",
                "status": "\(response.status.code)",
                "duration_ms": "\(Self.milliseconds(duration))",
            ])
        return response
    }

    /// Hummingbird's own errors (no route, wrong method, unreadable request) in our error shape.
    static func apiError(for error: HTTPError) -> APIError {
        switch error.status {
        case .notFound: APIError(.notFound, "no such endpoint")
        case .methodNotAllowed: APIError(.methodNotAllowed, "this endpoint does not accept that method")
        case .contentTooLarge: APIError(.bodyTooLarge, "request body is too large")
        case .internalServerError: APIError(.internalError, "internal error; the server log has the details")
        default: APIError(.malformedRequest, "the request could not be read (\(error.status.code))")
        }
    }

    /// 1 to 64 characters of letters, digits, `-`, `_`, `.`: nothing that could forge a log line.
    static func acceptableId(_ value: String) -> String? {
        guard (1...64).contains(value.utf8.count),
            value.utf8.allSatisfy({ $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") })
        else { return nil }
        return value
    }

    /// A duration in milliseconds with two decimals (`12.34`), rounded to the nearest 10 µs.
    static func milliseconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let hundredths = (seconds * 1_000_000 + attoseconds / 1_000_000_000_000 + 5) / 10
        let fraction = hundredths % 100
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
    }
}

extension UInt8 {
    var isASCIIAlphanumeric: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self)
            || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
    }
}
