/// Standard base64 encoding (RFC 4648 section 4, with padding) without Foundation.
///
/// The signer encodes one 180-byte blob per answer; this is several times faster than
/// `Data.base64EncodedString()` on Linux and matters on the server's hot path.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        let outputCount = (bytes.count + 2) / 3 * 4
        return String(unsafeUninitializedCapacity: outputCount) { output in
            var out = 0
            var index = 0
            while index + 3 <= bytes.count {
                let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
                output[out] = alphabet[Int(value >> 18 & 0x3F)]
                output[out + 1] = alphabet[Int(value >> 12 & 0x3F)]
                output[out + 2] = alphabet[Int(value >> 6 & 0x3F)]
                output[out + 3] = alphabet[Int(value & 0x3F)]
                out += 4
                index += 3
            }
            let remaining = bytes.count - index
            if remaining > 0 {
                let value = UInt32(bytes[index]) << 16 | (remaining == 2 ? UInt32(bytes[index + 1]) << 8 : 0)
                output[out] = alphabet[Int(value >> 18 & 0x3F)]
                output[out + 1] = alphabet[Int(value >> 12 & 0x3F)]
                output[out + 2] = remaining == 2 ? alphabet[Int(value >> 6 & 0x3F)] : UInt8(ascii: "=")
                output[out + 3] = UInt8(ascii: "=")
                out += 4
            }
            return out
        }
    }
}
