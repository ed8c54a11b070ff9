import Crypto
import Foundation

/// The `appAccountToken` of an app user: a name-based UUID (RFC 9562 version 5) of the app
/// user id, so the SDK, the CLI and the server derive the same token without storing it.
public enum AppAccountToken {
    /// The namespace of Countersign app account tokens.
    static let namespace: [UInt8] = [0x6F, 0x1B, 0x6A, 0x52, 0x3C, 0x0E, 0x4A, 0x8D, 0x9E, 0x21, 0x57, 0xC4, 0x0B, 0x3D, 0x88, 0x12]

    public static func forAppUserID(_ appUserID: String) -> UUID {
        var hasher = Insecure.SHA1()
        hasher.update(data: namespace)
        hasher.update(data: Data(appUserID.utf8))
        var bytes = Array(hasher.finalize().prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50  // version 5
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC variant
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }
}
