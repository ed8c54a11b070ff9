import CountersignCore
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CountersignServer
@testable import CountersignStorage

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One answer, as a test reads it.
struct Reply: Sendable {
    var status: Int
    var headers: HTTPFields
    var body: Data

    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body) as? [String: Any]) ?? [:] }
    var code: Int? { json["code"] as? Int }
}

extension String {
    /// The id as one path segment, escaped as the SDK escapes it (`pathSegmentEncoded`): every
    /// byte but RFC 3986's unreserved ASCII characters, so no raw UTF-8 goes into a request line.
    var pathSegment: String {
        addingPercentEncoding(
            withAllowedCharacters: CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"))!
    }
}

extension ReceiptTests.Harness {
    var secretKey: String { app.secretApiKeys[0] }

    /// Any request; `key` goes in `Authorization: Bearer`.
    func send(
        _ method: HTTPRequest.Method, _ path: String, key: String?, body: Data? = nil, headers extra: HTTPFields = [:]
    ) async throws -> Reply {
        var headers = extra
        if let key { headers[.authorization] = "Bearer \(key)" }
        return try await client.execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(data: $0) }) { response in
            Reply(status: Int(response.status.code), headers: response.headers, body: Data(response.body.readableBytesView))
        }
    }

    /// Makes `user` a customer the server knows, as an app's logIn does (from a fresh anonymous
    /// id): a read alone writes no customer.
    func logIn(_ user: String) async throws {
        let anonymous = "$CSAnonymousID:" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let reply = try await signed(
            .post, "/v1/subscribers/identify", json: ["app_user_id": anonymous, "new_app_user_id": user],
            paramKeys: ParamKeys.identify
        ).reply
        precondition(reply.status == 200 || reply.status == 201, "logIn of \(user) answered \(reply.status)")
    }

    /// A request to a signed endpoint with a fresh nonce; returns the answer and what the
    /// verifier makes of it.
    func signed(
        _ method: HTTPRequest.Method, _ path: String, json: [String: String]? = nil, paramKeys: [String] = [], etag: String? = nil
    ) async throws -> (reply: Reply, outcome: VerificationOutcome) {
        let nonce = SignedRequestParts.makeNonce()
        var headers: HTTPFields = [:]
        headers[SignatureHeader.nonce] = nonce.base64EncodedString()
        if let etag { headers[SignatureHeader.etag] = etag }
        var hash: String?
        var body: Data?
        if let json {
            body = try JSONSerialization.data(withJSONObject: json)
            hash = FieldsHash.headerValue(paramKeys.map { ($0, json[$0]) })
            headers[SignatureHeader.postParamsHash] = hash
        }
        let reply = try await send(method, path, key: key, body: body, headers: headers)
        let outcome = SignatureVerifier(rootKeys: [server.keys.managedRootPublicKey!]).verify(
            request: SignedRequestParts(authValue: key, nonce: nonce, path: path, postParamsHash: hash),
            response: ReceivedResponse(
                statusCode: reply.status, signature: reply.headers[SignatureHeader.signature],
                requestTime: reply.headers[SignatureHeader.requestTime], etag: reply.headers[SignatureHeader.etag], body: reply.body
            )
        )
        return (reply, outcome)
    }

    /// Every row of every table, as text: two equal snapshots mean the request changed nothing.
    func snapshot() async throws -> [String] {
        let tables = [
            "customers", "purchases", "purchase_owners", "subscription_states", "notifications",
            "promotional_grants", "verification_failures", "subscriber_attributes", "customer_aliases", "consumption_requests",
        ]
        return try await server.database.withConnection { sql in
            var lines: [String] = []
            for table in tables {
                let columns: [String] = try await sql.all(
                    sql.dialect == .sqlite
                        ? "SELECT name FROM pragma_table_info(\(bind: table)) ORDER BY name"
                        : "SELECT column_name AS name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = \(bind: table) ORDER BY column_name"
                ) { try $0.string("name") }
                try await sql.query("SELECT \(raw: columns.joined(separator: ", ")) FROM \(raw: table)") { row in
                    let cells = columns.enumerated().map { position, column -> String in
                        if case .success(let text) = Result(catching: { try row.text(Int32(position), column) }) {
                            return "\(column)=\(text ?? "null")"
                        }
                        if case .success(let number) = Result(catching: { try row.integer(Int32(position), column) }) {
                            return "\(column)=\(number.map(String.init) ?? "null")"
                        }
                        return "\(column)=?"
                    }
                    lines.append("\(table): \(cells.joined(separator: ", "))")
                }
            }
            return lines.sorted()
        }
    }
}

/// Plain HTTP over URLSession, for many requests at once against a live server.
enum LiveHTTP {
    static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = 16
        configuration.timeoutIntervalForRequest = 60
        return URLSession(configuration: configuration)
    }()

    static func send(port: Int, method: String, path: String, headers: [String: String], body: Data?) async throws -> (status: Int, body: Data) {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.httpBody = body
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await session.data(for: request)
        return ((response as! HTTPURLResponse).statusCode, data)
    }
}

/// The body fields each endpoint's `X-Post-Params-Hash` covers, in order (as the SDK sends them).
enum ParamKeys {
    static let receipt = ["app_user_id", "fetch_token"]
    static let identify = ["app_user_id", "new_app_user_id"]
    static let testPurchase = ["app_user_id", "product_id", "app_account_token"]
}
