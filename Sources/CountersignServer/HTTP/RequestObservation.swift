import CountersignCore
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Synchronization

/// Runs around every route: gives the request an id (the caller's `X-Request-Id` when it is a
/// sane token, else a fresh one), puts it in every log line of the request and in the answer,
/// turns the errors routes throw (``APIError``, Hummingbird's own) into the JSON error shape,
/// logs one line per request and counts it in the metrics.
struct RequestObservation: RouterMiddleware {
    typealias Context = ServerRequestContext
    static let requestIdHeader = SignatureHeader.requestId

    let metrics: ServerMetrics

    func handle(_ request: Request, context: ServerRequestContext, next: (Request, ServerRequestContext) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let id = request.headers[Self.requestIdHeader].flatMap(Self.acceptableId) ?? Self.newId()
        var context = context
        context.logger[metadataKey: "request_id"] = "\(id)"
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as HTTPError {
            response = ErrorAnswer.response(Self.apiError(for: error))
        } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        } catch {
            context.logger.error("request failed", metadata: ["error": "\(String(reflecting: error))"])
            response = ErrorAnswer.response(APIError(.internalError, "internal error; the server log has the details"))
        }
        response.headers[Self.requestIdHeader] = id
        let duration = ContinuousClock.now - start
        let route = context.endpointPath ?? "unmatched"
        metrics.recordRequest(route: route, method: request.method.rawValue, status: Int(response.status.code), duration: duration)
        context.logger.info("request", metadata: [
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

    /// 16 lowercase hex digits: a random 64-bit start drawn once per process, plus a counter
    /// scrambled by a bijection, so ids never repeat within a process (2^64 of them), differ
    /// between instances, and do not read as a sequence. A random draw per request was a
    /// `getrandom` system call (several, in fact) on every answer; `String(format:)`, before it,
    /// cost microseconds on Linux.
    static func newId() -> String {
        let counter = nextId.add(1, ordering: .relaxed).oldValue
        let hex = String(scramble(idStart &+ counter), radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    private static let idStart = UInt64.random(in: .min ... .max)
    private static let nextId = Atomic<UInt64>(0)

    /// A bijection of 64-bit integers (the SplitMix64 finalizer): distinct in, distinct out.
    static func scramble(_ value: UInt64) -> UInt64 {
        var z = value
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
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
