import CountersignTesting
import Foundation
import Testing

/// One entry of `Tests/Fixtures/revenuecat/rc_vectors.json`.
struct RevenueCatVector: Decodable, CustomTestStringConvertible {
    struct Decoded: Decodable {
        var salt_hex: String?
        var intermediate_key_expiration_days_le: UInt32?
    }

    struct Keys: Decodable {
        var root_private_seed_b64: String
        var intermediate_private_seed_b64: String
    }

    var id: String
    var kind: String?
    var format: String?
    var root_public_key_b64: String?
    var public_key_b64: String?
    var verification_time_unix: Int?
    var path: String?
    var auth_value: String?
    var nonce_b64: String?
    var post_params_hash_header: String?
    var headers_hash_header: String?
    var request_date: String?
    var etag: String?
    var status_code: Int?
    var body: String?
    var signature_b64: String?
    var signature_hex: String?
    var message_utf8: String?
    var expected: String
    var computed_result: String?
    var decoded: Decoded?
    var signed_message_hex: String?
    var test_keys: Keys?
    var reproducible_with_test_private_keys: Bool?

    var testDescription: String { id }

    /// Full-message vectors of the current format (not the legacy layouts).
    var isCurrentFullMessage: Bool {
        (format ?? "").hasPrefix("current") && kind == nil
    }

    var isAndroid: Bool { id.hasPrefix("android_") }

    /// Every vector in the file.
    static let loaded: [RevenueCatVector] = {
        try! JSONDecoder().decode([RevenueCatVector].self, from: Fixtures.data("revenuecat/rc_vectors.json"))
    }()

    static func all(where predicate: (RevenueCatVector) -> Bool) -> [RevenueCatVector] {
        loaded.filter(predicate)
    }
}

extension Data {
    init(hex: String) {
        var bytes = [UInt8]()
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        self.init(bytes)
    }
}
