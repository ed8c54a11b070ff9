import Foundation

/// A payload that arrives as App Store signed data, with what the verifier checks in it.
public protocol AppStoreSignedPayload: Codable, Sendable {
    /// The time its certificate chain is validated at (`signedDate`, or `receiptCreationDate`
    /// for an app transaction). Nil: the current time.
    var validationDate: Date? { get }
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
    /// Decodes the payload JSON (dates in milliseconds).
    static func decodePayload(from data: Data) throws -> Self
}

extension AppStoreSignedPayload {
    public static var carriesBundleId: Bool { true }
    public static var carriesAppAppleId: Bool { false }

    public static func decodePayload(from data: Data) throws -> Self {
        try AppStoreJSON.decode(Self.self, from: data)
    }
}

extension TransactionPayload {
    public static func decodePayload(from data: Data) throws -> TransactionPayload {
        try decodeFast(from: data)
    }
}
