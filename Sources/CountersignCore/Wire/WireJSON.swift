import Foundation

/// JSON as the server writes it: sorted keys (equal content gives equal bytes and ETags), no
/// escaped slashes, a trailing newline.
public enum WireJSON {
    public static func encode(_ value: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var data = try encoder.encode(value)
        data.append(0x0A)
        return data
    }
}
