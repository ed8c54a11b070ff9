import Foundation

extension Data {
    /// Decodes unpadded base64url (RFC 4648 section 5), rejecting padding, the `+` `/` alphabet
    /// and a last character with unused bits set (each byte string has one spelling).
    public init?(base64URL text: some StringProtocol) {
        self.init(base64URL: Array(text.utf8)[...])
    }

    public init?(base64URL encoded: ArraySlice<UInt8>) {
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
        guard accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
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
    public var base64URLEncodedString: String {
        base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
