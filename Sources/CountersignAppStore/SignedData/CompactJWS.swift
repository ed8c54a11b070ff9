import CountersignCore
import Foundation

/// A compact JWS split into its parts, before any trust is placed in it.
///
/// Parts are decoded on demand: a verifier that has already validated a header (it is the same
/// for every JWS one leaf signs) skips decoding its ~2 KB certificate chain. The text is handled
/// as bytes: a JWS is ASCII, and String-level work on 3 KB costs more than the signature check.
struct CompactJWS: Sendable {
    /// The JOSE header, read as Apple's library (PyJWT) reads it: `crit` may only name `b64`,
    /// which must then be present and true (no detached payloads); `kid`, when present, is a
    /// string. `alg` and `x5c` are kept as sent and judged by the verifier, in Apple's order.
    struct Header: Sendable {
        enum Chain: Sendable {
            case missing
            case certificates([JSONValue])
            /// Not an array: only its length is judged, as a length (a string's characters).
            case other(count: Int?)
        }

        var alg: String?
        var x5c: Chain

        init(json: Data) throws(SignedDataError) {
            let fields: [String: JSONValue]
            do {
                fields = try JSONValue.parseObject(json)
            } catch {
                throw .malformedJSON(json, error, part: "header")
            }
            if let kid = fields["kid"], case .string = kid {
            } else if fields["kid"] != nil {
                throw .failure(.unsupportedHeader, "kid must be a string")
            }
            if let crit = fields["crit"] {
                guard case .array(let names) = crit, !names.isEmpty else {
                    throw .failure(.unsupportedHeader, "crit must be a non-empty list")
                }
                for name in names {
                    guard case .string(let name) = name, name == "b64", fields[name] != nil else {
                        throw .failure(.unsupportedHeader, "crit names an extension this verifier does not understand or the header lacks")
                    }
                }
            }
            if case .bool(false)? = fields["b64"] {
                throw .failure(.unsupportedHeader, "b64 false (a detached, unencoded payload) is not App Store signed data")
            }
            if case .string(let alg)? = fields["alg"] { self.alg = alg }
            switch fields["x5c"] {
            case nil, .null?: x5c = .missing
            case .array(let entries)?: x5c = entries.isEmpty ? .missing : .certificates(entries)
            case .string(let text)?: x5c = text.isEmpty ? .missing : .other(count: text.count)
            case .object(let members)?: x5c = members.isEmpty ? .missing : .other(count: members.count)
            default: x5c = .other(count: nil)
            }
        }
    }

    /// The JWS bytes.
    private let bytes: [UInt8]
    private let firstDot: Int
    private let secondDot: Int

    init(_ text: String) throws(SignedDataError) {
        let bytes = Array(text.utf8)
        // memchr: the scan runs over ~3 KB on every verification.
        let dots: [Int] = bytes.withUnsafeBufferPointer { buffer in
            var found: [Int] = []
            var offset = 0
            while offset < buffer.count, found.count < 3,
                let hit = memchr(buffer.baseAddress! + offset, Int32(UInt8(ascii: ".")), buffer.count - offset)
            {
                let index = buffer.baseAddress!.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                found.append(index)
                offset = index + 1
            }
            return found
        }
        guard dots.count == 2 else {
            throw .failure(.malformedJWS, "expected 3 dot-separated segments, got \(dots.count + 1)")
        }
        firstDot = dots[0]
        secondDot = dots[1]
        guard firstDot > 0, secondDot > firstDot + 1, secondDot < bytes.count - 1 else {
            throw .failure(.malformedJWS, "a JWS segment is empty")
        }
        self.bytes = bytes
    }

    /// The header segment as sent: a cache key for the chain it carries.
    var headerSegment: ArraySlice<UInt8> { bytes[..<firstDot] }

    /// The exact `header.payload` ASCII bytes the signature covers.
    var signingInput: ArraySlice<UInt8> { bytes[..<secondDot] }

    func header() throws(SignedDataError) -> Header {
        guard let decoded = Data(base64URL: headerSegment) else { throw Self.undecodable(headerSegment, "header") }
        return try Header(json: decoded)
    }

    func payload() throws(SignedDataError) -> Data {
        let segment = bytes[(firstDot + 1)..<secondDot]
        guard let payload = Data(base64URL: segment) else { throw Self.undecodable(segment, "payload") }
        return payload
    }

    func signature() throws(SignedDataError) -> Data {
        let segment = bytes[(secondDot + 1)...]
        guard let signature = Data(base64URL: segment) else { throw Self.undecodable(segment, "signature") }
        return signature
    }

    private static func undecodable(_ segment: ArraySlice<UInt8>, _ part: String) -> SignedDataError {
        segment.last == UInt8(ascii: "=")
            ? .failure(.paddedBase64URL, "the \(part) segment is padded; JWS segments are unpadded base64url")
            : .failure(.malformedJWS, "the \(part) segment is not base64url")
    }
}

/// A compact JWS split and decoded exactly as ``SignedDataVerifier`` does it, its header held to
/// the same rules, before any trust is placed in it: for tools that show signed data and for
/// the fuzz targets, which hold the splitter to its contract through this.
public struct UnverifiedJWS: Sendable {
    /// The JOSE header's JSON bytes.
    public let header: Data
    public let payload: Data
    public let signature: Data

    public init(_ text: String) throws(SignedDataError) {
        let jws = try CompactJWS(text)
        _ = try jws.header()
        header = Data(base64URL: jws.headerSegment)!
        payload = try jws.payload()
        signature = try jws.signature()
    }
}
