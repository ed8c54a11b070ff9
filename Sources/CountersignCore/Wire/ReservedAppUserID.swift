/// App user ids the server keeps for itself.
///
/// The SDK names a user who has not logged in `$CSAnonymousID:` followed by a UUID. Every other
/// id starting with `$CS` or `$RC` (in any letter case) is reserved: the server refuses it
/// everywhere an app user id is accepted, so no client can ask for, log in as or post purchases
/// for an id that looks internal. RevenueCat's own anonymous ids (`$RCAnonymousID:`) are refused
/// too: they were made by another SDK and are migrated by logging the user in.
public enum ReservedAppUserID {
    public static let anonymousPrefix = "$CSAnonymousID:"

    /// Whether `appUserID` is an anonymous id in the SDK's format: the prefix and then 1 to 128
    /// ASCII letters, digits or `-` (the SDK writes a lowercase UUID).
    public static func isAnonymous(_ appUserID: String) -> Bool {
        guard appUserID.hasPrefix(anonymousPrefix) else { return false }
        let suffix = appUserID.utf8.dropFirst(anonymousPrefix.utf8.count)
        return (1...128).contains(suffix.count) && suffix.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == UInt8(ascii: "-")
        }
    }

    /// Whether `appUserID` is reserved: it starts with `$CS` or `$RC` (any case) and is not an
    /// anonymous id.
    public static func isReserved(_ appUserID: String) -> Bool {
        let head = Array(appUserID.utf8.prefix(3))
        guard head.count == 3, head[0] == UInt8(ascii: "$") else { return false }
        let letters = String(decoding: head[1...], as: UTF8.self).lowercased()
        guard letters == "cs" || letters == "rc" else { return false }
        return !isAnonymous(appUserID)
    }
}
