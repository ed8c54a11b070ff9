import Foundation

/// A compact JWS split into its parts, before any trust is placed in it.
///
/// Parts are decoded on demand: a verifier that has already validated a header (it is the same
/// for every JWS one leaf signs) skips decoding its ~2 KB certificate chain. The text is handled
/// as bytes: a JWS is ASCII, and String-level work on 3 KB costs more than the signature check.
struct CompactJWS: Sendable {
    struct Header: Decodable, Sendable {
        var alg: String
        var x5c: [String]
    }

    /// The trimmed JWS bytes.
    private let bytes: [UInt8]
    private let firstDot: Int
    private let secondDot: Int

    init(_ text: String) throws(SignedDataError) {
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }
        var bytes = Array(text.utf8)
        while let last = bytes.last, isSpace(last) { bytes.removeLast() }
        if let start = bytes.firstIndex(where: { !isSpace($0) }), start > 0 { bytes.removeFirst(start) }
        // memchr: the scan runs over ~3 KB on every verification.
        let dots: [Int] = bytes.withUnsafeBufferPointer { buffer in
            var found: [Int] = []
            var offset = 0
            while offset < buffer.count, found.count < 3,
                  let hit = memchr(buffer.baseAddress! + offset, Int32(UInt8(ascii: ".")), buffer.count - offset) {
                let index = buffer.baseAddress!.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                found.append(index)
                offset = index + 1
            }
            return found
        }
        guard dots.count == 2 else {
            throw SignedDataError(.invalidJWTFormat, "expected 3 dot-separated segments, got \(dots.count + 1)")
        }
        firstDot = dots[0]
        secondDot = dots[1]
        guard firstDot > 0, secondDot > firstDot + 1, secondDot < bytes.count - 1 else {
            throw SignedDataError(.invalidJWTFormat, "a JWS segment is empty")
        }
        self.bytes = bytes
    }

    /// The header segment as sent: a cache key for the chain it carries.
    var headerSegment: ArraySlice<UInt8> { bytes[..<firstDot] }

    /// The exact `header.payload` ASCII bytes the signature covers.
    var signingInput: ArraySlice<UInt8> { bytes[..<secondDot] }

    /// Decodes the header: `alg` and the `x5c` certificate chain.
    func header() throws(SignedDataError) -> Header {
        guard let decoded = Data(base64URL: headerSegment) else {
            throw SignedDataError(.invalidJWTFormat, "header is not base64url")
        }
        do {
            return try JSONDecoder().decode(Header.self, from: decoded)
        } catch {
            throw SignedDataError(.invalidJWTFormat, "header is not JSON with 'alg' and an 'x5c' array")
        }
    }

    func payload() throws(SignedDataError) -> Data {
        guard let payload = Data(base64URL: bytes[(firstDot + 1)..<secondDot]) else {
            throw SignedDataError(.invalidJWTFormat, "payload is not base64url")
        }
        return payload
    }

    func signature() throws(SignedDataError) -> Data {
        guard let signature = Data(base64URL: bytes[(secondDot + 1)...]) else {
            throw SignedDataError(.invalidJWTFormat, "signature is not base64url")
        }
        return signature
    }
}

extension Data {
    /// Decodes unpadded base64url (RFC 4648 section 5), rejecting padding and the `+` `/` alphabet.
    init?(base64URL text: some StringProtocol) {
        self.init(base64URL: Array(text.utf8)[...])
    }

    init?(base64URL encoded: ArraySlice<UInt8>) {
        guard encoded.count % 4 != 1 else { return nil }
        var output = [UInt8]()
        output.reserveCapacity(encoded.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in encoded {
            let value = Self.base64URLValues[Int(byte)]
            guard value != 0xFF else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        self.init(output)
    }

    /// The 6-bit value of each base64url character; 0xFF for every other byte.
    private static let base64URLValues: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (value, character) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8.enumerated() {
            table[Int(character)] = UInt8(value)
        }
        return table
    }()

    /// Encodes as unpadded base64url.
    var base64URLEncodedString: String {
        base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
