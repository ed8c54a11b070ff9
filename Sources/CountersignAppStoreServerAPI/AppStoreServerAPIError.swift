import Foundation

/// A failed App Store Server API call, mapped from its HTTP status and Apple's error body.
public struct AppStoreServerAPIError: Error, Hashable, CustomStringConvertible, Sendable {
    public enum Kind: Hashable, Sendable {
        /// 401: the bearer token was refused (wrong key, wrong issuer, expired).
        case unauthorized
        /// 404: no such transaction (or wrong environment).
        case notFound
        /// 429: slow down; retry after the given seconds when Apple says.
        case rateLimited(retryAfter: TimeInterval?)
        /// 400: the request was malformed (an invalid transaction id, say).
        case badRequest
        /// 5xx or another status.
        case server(status: Int)
        /// The answer was not the JSON this endpoint promises.
        case invalidResponse
        /// The request never got an answer.
        case transport
    }

    public let kind: Kind
    /// Apple's numeric `errorCode`, when the body had one (e.g. 4040010 transaction id not found).
    public let apiErrorCode: Int?
    public let message: String

    public init(_ kind: Kind, apiErrorCode: Int? = nil, message: String) {
        self.kind = kind
        self.apiErrorCode = apiErrorCode
        self.message = message
    }

    public var description: String {
        "App Store Server API \(kind)\(apiErrorCode.map { " (\($0))" } ?? ""): \(message)"
    }
}
