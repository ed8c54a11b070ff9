import Foundation

/// App user ids the server keeps for itself.
///
/// The SDK names a user who has not logged in `$CSAnonymousID:` followed by a UUID; RevenueCat's
/// SDK named such a user `$RCAnonymousID:` followed by 32 lowercase letters and digits (a UUID's
/// hex without dashes), and those ids, carried over from RevenueCat (on the device, in an
/// export, in an app's backend), are anonymous ids here too: the same user, the same rules (an
/// anonymous id pins no purchase and merges into the user it logs in as). Every other id
/// starting with `$CS` or `$RC` (in any letter case) is reserved: the server refuses it
/// everywhere an app user id is accepted, so no client can ask for, log in as or post purchases
/// for an id that looks internal.
public enum ReservedAppUserID {
    public static let anonymousPrefix = "$CSAnonymousID:"
    /// RevenueCat's prefix for the anonymous ids its SDK made.
    public static let revenueCatAnonymousPrefix = "$RCAnonymousID:"

    /// Whether `appUserID` is an anonymous id: this SDK's (the prefix and then 1 to 128 ASCII
    /// letters, digits or `-`; the SDK writes a lowercase UUID) or RevenueCat's (its prefix and
    /// exactly 32 lowercase ASCII letters or digits, as RevenueCat's SDK checks them).
    public static func isAnonymous(_ appUserID: String) -> Bool {
        let bytes = appUserID.utf8
        if bytes.starts(with: anonymousPrefix.utf8) {
            let suffix = bytes.dropFirst(anonymousPrefix.utf8.count)
            return (1...128).contains(suffix.count)
                && suffix.allSatisfy { byte in
                    (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == UInt8(ascii: "-")
                }
        }
        if bytes.starts(with: revenueCatAnonymousPrefix.utf8) {
            let suffix = bytes.dropFirst(revenueCatAnonymousPrefix.utf8.count)
            return suffix.count == 32 && suffix.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x7A).contains($0) }
        }
        return false
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

/// App user ids compared as everything that stores or derives from them compares them.
///
/// SQLite and PostgreSQL (with a deterministic collation) hold two ids equal only when their
/// bytes are; the app account token is made from the id's UTF-8 bytes, and RevenueCat keeps ids
/// as given. Swift's `==` on `String` is Unicode canonical equivalence instead: "é" written as one
/// code point equals "e" followed by U+0301, and the Kelvin sign U+212A equals "K". Two customers
/// the database keeps apart would be one customer to a rule written with `==` (a purchase posted
/// by one of them read as "already recorded" where it moves to them, a token bound to the other
/// read as the poster's own), so every decision about whose an id is compares with ``same(_:_:)``.
public enum AppUserID {
    /// Whether `a` and `b` are one app user id: the same UTF-8 bytes.
    public static func same(_ a: String, _ b: String) -> Bool {
        a.utf8.elementsEqual(b.utf8)
    }
}

/// The rules every app user id from outside passes (a path, a body, an import file): the API
/// and the imports apply the same ones, so an id one accepts the other never refuses.
public enum AppUserIDRules {
    /// App user ids: 1 to 256 characters (Unicode scalars, as JSON Schema's `maxLength` and the
    /// OpenAPI document count them) without control characters, and not reserved (see
    /// ``ReservedAppUserID``).
    public static func validated(_ raw: String, percentEncoded: Bool) throws(APIError) -> String {
        // Foundation's decoding only where there is something to decode (it returns the text as
        // it is otherwise), and the control-character check without a Unicode property lookup
        // for ASCII (whose controls are U+0000–U+001F and U+007F): both ran on every request.
        guard let decoded = percentEncoded && raw.utf8.contains(UInt8(ascii: "%")) ? raw.removingPercentEncoding : raw else {
            throw APIError(.invalidAppUserId, "app user id is not valid percent-encoded UTF-8")
        }
        let isControl = { (scalar: Unicode.Scalar) in
            scalar.isASCII ? scalar.value < 0x20 || scalar.value == 0x7F : scalar.properties.generalCategory == .control
        }
        guard (1...256).contains(decoded.unicodeScalars.count), !decoded.unicodeScalars.contains(where: isControl) else {
            throw APIError(.invalidAppUserId, "app user id must be 1 to 256 characters without control characters")
        }
        guard !ReservedAppUserID.isReserved(decoded) else {
            throw APIError(
                .reservedAppUserId, "app user ids starting with '$CS' or '$RC' are reserved (only the SDK's '$CSAnonymousID:' ids are accepted)")
        }
        return decoded
    }
}
