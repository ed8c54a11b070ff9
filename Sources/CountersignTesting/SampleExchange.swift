import CountersignCore
import Foundation

/// An honest, signed exchange built from fixed keys, for tests to tamper with.
public struct SampleExchange: Sendable {
    public var request: SignedRequestParts
    public var response: ReceivedResponse

    public static let body = Data(
        #"{"request_date":"2026-01-01T01:00:00Z","request_date_ms":1767229200000,"subscriber":{"entitlements":{"pro":{"expires_date":null,"product_identifier":"lifetime"}},"original_app_user_id":"u1"}}"#
            .utf8 + [0x0A])

    /// Signs a GET of a subscriber with every optional part present.
    public static func make(
        key: IntermediateSigningKey = TestKeys.intermediate,
        salt: Data = Data(repeating: 7, count: 16),
        request: SignedRequestParts = SignedRequestParts(
            authValue: "cs_pub_demo_0123456789",
            nonce: Data("0123456789ab".utf8),
            path: "/v1/subscribers/u1",
            postParamsHash: FieldsHash.headerValue([("app_user_id", "u1"), ("fetch_token", "jws")]),
            headersHash: FieldsHash.headerValue([(WireHeader.isSandbox, "true")])
        ),
        statusCode: Int = 200,
        requestTime: String = "1767229200000",
        etag: String? = "0123456789abcdef",
        policy: String? = nil,
        body: Data = SampleExchange.body
    ) -> SampleExchange {
        let parts = SignedResponseParts(requestTime: requestTime, etag: etag, policy: policy, body: body)
        let signature = try! ResponseSigner(key: key, saltSource: .fixed(salt)).signature(request: request, response: parts)
        return SampleExchange(
            request: request,
            response: ReceivedResponse(
                statusCode: statusCode, signature: signature, requestTime: requestTime, etag: etag, policy: policy, body: body)
        )
    }
}
