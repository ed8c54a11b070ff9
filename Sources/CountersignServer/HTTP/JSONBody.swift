import CountersignAppStore
import CountersignCore
import CountersignStorage
import Foundation
import HTTPTypes
import Hummingbird

/// A JSON request body with the fields its `X-Post-Params-Hash` covers, taken from the decoded
/// body itself, so the hash and the handler can never read two different values.
protocol PostBody: Decodable, Sendable {
    var postParams: [(String, String?)] { get }
}

/// Attributes are not covered by `X-Post-Params-Hash` (they are not flat string fields); the
/// answer says how many were stored and grants nothing.
extension SubscriberAttributesBody: PostBody {
    var postParams: [(String, String?)] { [] }
}

/// The answer lists every product asked for, so the SDK can tell an answer to its own question.
extension IntroEligibilityRequest: PostBody {
    var postParams: [(String, String?)] { [] }
}

extension PromotionalOfferRequest: PostBody {
    var postParams: [(String, String?)] { [("product_identifier", productIdentifier), ("offer_identifier", offerIdentifier)] }
}

/// Decoding of JSON request bodies with errors that tell bad JSON from a bad field.
/// Every body is checked by ``JSONSyntax`` first: a repeated key (after unescaping), invalid
/// UTF-8 or a lone surrogate escape is refused, so no two readers of a body can disagree.
enum JSONBody {
    /// The request's body, collected (413 beyond the limit) and decoded.
    static func body<T: Decodable>(_ type: T.Type, of request: inout Request, context: some RequestContext) async throws(APIError) -> T {
        try decode(T.self, from: try await request.collectBody(context: context))
    }

    /// The body of a signed route, with its `X-Post-Params-Hash` checked against the decoded
    /// fields. Every refusal here is unsigned: the server cannot vouch for a request it could
    /// not read or whose claims do not match it.
    static func signedBody<T: PostBody>(_ type: T.Type, of request: inout Request, context: SignedRequestContext) async throws(UnsignedRefusal) -> T {
        let decoded: T
        do throws(APIError) {
            decoded = try await body(T.self, of: &request, context: context)
        } catch {
            throw UnsignedRefusal(error)
        }
        try context.exchange.checkPostParams(decoded.postParams)
        return decoded
    }

    static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws(APIError) -> T {
        switch JSONSyntax.check(data, topLevel: .object) {
        case nil: break
        case .duplicateKey(let key)?:
            throw APIError(.duplicateJSONKey, "the body repeats the key \"\(key.prefix(64))\" in one object")
        case .malformed?:
            throw APIError(.malformedJSON, "the body must be one JSON object")
        }
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch let error as DecodingError {
            // Foundation answers a number it cannot store in the field's type (1.5 or 1e400 for an
            // integer) with "The given data was not valid JSON." and no path: name the number.
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty, let number = unreadableNumber(in: data) {
                throw APIError(.invalidField, "invalid body: '\(number.path)' must be an integer of at most 64 bits, not \(number.text.prefix(40))")
            }
            throw APIError(.invalidField, "invalid body: \(error.shortDescription)")
        } catch {
            throw APIError(.malformedJSON, "the body is not valid JSON")
        }
    }

    /// The first number of a (syntactically valid) body that is no 64-bit integer, with its path:
    /// no field of a request body takes a fraction.
    static func unreadableNumber(in data: Data) -> (path: String, text: Substring)? {
        func find(_ value: JSONValue, _ path: [String]) -> (path: String, text: Substring)? {
            switch value {
            case .number(let text):
                if Int64(text) != nil { return nil }
                if let double = Double(text), double.rounded() == double, abs(double) < 0x1p63 { return nil }
                return (path.joined(separator: "."), text)
            case .array(let elements):
                return elements.indices.lazy.compactMap { find(elements[$0], path + ["\($0)"]) }.first
            case .object(let members):
                return members.keys.sorted().lazy.compactMap { find(members[$0]!, path + [$0]) }.first
            case .null, .bool, .string:
                return nil
            }
        }
        return (try? JSONValue.parse(data)).flatMap { find($0, []) }
    }
}
