import CountersignCore
import CountersignServerCore
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// What a signature-required route answers, before it is signed.
public struct SignedAnswer: Sendable {
    public var status: HTTPResponse.Status
    /// The exact body bytes the signature covers.
    public var body: Data
    /// Whether the answer gets an `X-ETag` (and so can be answered 304 later).
    public var cacheable: Bool
    /// What the ETag is computed from, when not the whole body.
    public var etagSource: Data?
    /// Sent as `Retry-After` (a refusal for asking too often).
    public var retryAfter: Int?

    public init(status: HTTPResponse.Status = .ok, body: Data, cacheable: Bool, etagSource: Data? = nil) {
        self.status = status
        self.body = body
        self.cacheable = cacheable
        self.etagSource = etagSource
    }

    /// A CustomerInfo answer whose ETag covers the subscriber only, not the request date, so a
    /// client whose cached customer is unchanged gets a signed 304 (the 304's own signed request
    /// time tells when the server vouched for it). The body is byte for byte
    /// `WireJSON.encode(info)` (tests hold the lean writer to it); the subscriber is written once.
    ///
    /// `requestedAs` is the id the request named: when it is an alias of the customer (not its
    /// `original_app_user_id`), the body also says `"app_user_id": requestedAs`, within the
    /// signature, so that a client holding the alias can tell an answer for itself from one moved
    /// from another user's request. The ETag is the customer's, whichever id asked.
    public static func customerInfo(_ info: SubscriberResponse, requestedAs: String? = nil) -> SignedAnswer {
        let subscriber = info.subscriber.leanJSON()
        let body = LeanJSONWriter.subscriberResponse(
            requestDate: info.requestDate, requestDateMs: info.requestDateMs, subscriber: subscriber,
            leading: aliasMember(info, requestedAs: requestedAs))
        return SignedAnswer(body: Data(body), cacheable: true, etagSource: Data(subscriber))
    }

    /// A CustomerInfo answer with one more top-level member that sorts before `request_date`
    /// (`purchase_status` of a receipt, `created` of a logIn), answered to a POST: no ETag.
    /// `LeanAnswerTests` holds it to golden files.
    static func customerInfo(
        _ info: SubscriberResponse, requestedAs: String? = nil, status: HTTPResponse.Status = .ok, member key: String,
        string value: String? = nil, bool flag: Bool? = nil
    ) -> SignedAnswer {
        var member = LeanJSONWriter(capacity: 40)
        let alias = aliasMember(info, requestedAs: requestedAs)
        if !alias.isEmpty {
            member.append(contentsOf: alias)
            member.raw(",")
        }
        member.string(key)
        member.raw(":")
        if let value { member.string(value) } else { member.bool(flag ?? false) }
        let body = LeanJSONWriter.subscriberResponse(
            requestDate: info.requestDate, requestDateMs: info.requestDateMs, subscriber: info.subscriber.leanJSON(), leading: member.bytes
        )
        return SignedAnswer(status: status, body: Data(body), cacheable: false)
    }

    /// `"app_user_id":"<alias>"` when `requestedAs` is not the customer's own id; nothing otherwise.
    /// (`app_user_id` sorts before every other top-level key.)
    private static func aliasMember(_ info: SubscriberResponse, requestedAs: String?) -> [UInt8] {
        guard let requestedAs, !AppUserID.same(requestedAs, info.subscriber.originalAppUserId) else { return [] }
        var member = LeanJSONWriter(capacity: requestedAs.utf8.count + 16)
        member.raw(#""app_user_id":"#)
        member.string(requestedAs)
        return member.bytes
    }

    /// Encodes a JSON answer with sorted keys, so equal content gives equal bytes and ETags.
    public static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok, cacheable: Bool) throws -> SignedAnswer {
        SignedAnswer(status: status, body: try WireJSON.encode(value), cacheable: cacheable)
    }

    /// An error answer (`{"code", "message"}` with the code's HTTP status), signed like any other.
    public static func error(_ error: APIError) -> SignedAnswer {
        var answer = SignedAnswer(status: error.status, body: (try? WireJSON.encode(error)) ?? Data(), cacheable: false)
        answer.retryAfter = error.retryAfter
        return answer
    }

    /// The ETag of a body: 16 lowercase hex characters (the first 8 bytes of its SHA-256), the
    /// one shape the client's verifier accepts.
    public static func etag(of body: Data) -> String {
        SHA256.hash(data: body).prefix(8).hexString
    }
}

/// How a signature-required endpoint binds the request into its signature.
public struct SignedEndpoint: Sendable {
    /// Whether the bearer API key is part of the signed message (false only for `/v1/health`).
    public var authenticated: Bool

    public init(authenticated: Bool) {
        self.authenticated = authenticated
    }
}

/// Header names of the signed exchange.
public enum SignatureHeader {
    public static let signature = HTTPField.Name(WireHeader.signature)!
    public static let requestTime = HTTPField.Name(WireHeader.requestTime)!
    public static let etag = HTTPField.Name(WireHeader.etag)!
    public static let nonce = HTTPField.Name(WireHeader.nonce)!
    public static let postParamsHash = HTTPField.Name(WireHeader.postParamsHash)!
    public static let headersHash = HTTPField.Name(WireHeader.headersHash)!
    public static let isSandbox = HTTPField.Name(WireHeader.isSandbox)!
    public static let requestId = HTTPField.Name(WireHeader.requestId)!
    public static let acceptPolicy = HTTPField.Name(WireHeader.acceptPolicy)!
    public static let policy = HTTPField.Name(WireHeader.policy)!
}
