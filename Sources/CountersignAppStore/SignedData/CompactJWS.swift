import Foundation

/// A compact JWS split into its parts, before any trust is placed in it.
struct CompactJWS: Sendable {
    struct Header: Decodable, Sendable {
        var alg: String
        var x5c: [String]
    }

    /// The exact `header.payload` ASCII bytes the signature covers.
    let signingInput: Substring
    /// The raw header segment: identical for every JWS signed by one leaf, so a cache key.
    let headerSegment: Substring
    let header: Header
    let payload: Data
    let signature: Data

    init(_ text: String) throws(SignedDataError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        let segments = trimmed.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, segments.allSatisfy({ !$0.isEmpty }) else {
            throw SignedDataError(.invalidJWTFormat, "expected 3 non-empty dot-separated segments, got \(segments.count)")
        }
        guard let headerBytes = Data(base64URL: segments[0]) else {
            throw SignedDataError(.invalidJWTFormat, "header is not base64url")
        }
        guard let payload = Data(base64URL: segments[1]) else {
            throw SignedDataError(.invalidJWTFormat, "payload is not base64url")
        }
        guard let signature = Data(base64URL: segments[2]) else {
            throw SignedDataError(.invalidJWTFormat, "signature is not base64url")
        }
        let header: Header
        do {
            header = try JSONDecoder().decode(Header.self, from: headerBytes)
        } catch {
            throw SignedDataError(.invalidJWTFormat, "header is not JSON with 'alg' and an 'x5c' array")
        }
        self.header = header
        self.payload = payload
        self.signature = signature
        headerSegment = segments[0]
        signingInput = trimmed[segments[0].startIndex..<segments[1].endIndex]
    }
}

extension Data {
    /// Decodes unpadded base64url (RFC 4648 section 5), rejecting any other character.
    init?(base64URL text: some StringProtocol) {
        var base64 = String(text).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard !base64.contains("=") else { return nil }
        switch base64.utf8.count % 4 {
        case 0: break
        case 2: base64 += "=="
        case 3: base64 += "="
        default: return nil
        }
        self.init(base64Encoded: base64)
    }

    /// Encodes as unpadded base64url.
    var base64URLEncodedString: String {
        base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
