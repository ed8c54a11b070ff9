import CountersignCore
import Foundation

/// A payload that arrives as App Store signed data, with what the verifier checks in it.
public protocol AppStoreSignedPayload: Codable, Sendable {
    /// The environment it claims.
    var claimedEnvironment: AppStoreEnvironment? { get }
    /// The bundle id it claims.
    var claimedBundleId: String? { get }
    /// The App Store app id it claims (checked for Production only).
    var claimedAppAppleId: Int64? { get }
    /// Whether the payload kind always names its bundle (renewal infos do not).
    static var carriesBundleId: Bool { get }
    /// Whether the payload kind names the app's App Store id. Only notifications and app
    /// transactions do, and only those are checked against `appAppleId` (as Apple's own
    /// library does): Production transactions and renewal infos carry none.
    static var carriesAppAppleId: Bool { get }
}

extension AppStoreSignedPayload {
    public static var carriesBundleId: Bool { true }
    public static var carriesAppAppleId: Bool { false }

    /// Decodes a verified payload (dates in milliseconds); transactions take the fast path.
    static func decodeVerified(from fields: [String: JSONValue]) throws -> Self {
        if Self.self == TransactionPayload.self {
            return try TransactionPayload.decodeFast(fields: fields) as! Self
        }
        return try JSONValueDecoder(value: .object(fields), codingPath: []).decodeValue(Self.self)
    }
}
