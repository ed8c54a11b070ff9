/// Why App Store signed data (a JWS with an `x5c` chain) was rejected.
///
/// The classes are those of Apple's App Store Server Library, so logs and dashboards read the
/// same; the reason says what exactly failed. Equality is on the class.
public struct SignedDataError: Error, Hashable, CustomStringConvertible, Sendable {
    public enum Class: String, Sendable, Hashable {
        /// Not a compact JWS, wrong `alg`, wrong `x5c` shape, undecodable header or payload.
        case invalidJWTFormat = "INVALID_JWT_FORMAT"
        /// A certificate in `x5c` cannot be parsed.
        case invalidCertificate = "INVALID_CERTIFICATE"
        /// The chain does not lead to a pinned root, a certificate lacks Apple's OID or is not
        /// valid at the signed date, the signed date is in the future, or the signature is wrong.
        case verificationFailure = "VERIFICATION_FAILURE"
        /// `bundleId` or `appAppleId` is not this app's.
        case invalidAppIdentifier = "INVALID_APP_IDENTIFIER"
        /// The environment is not one this app accepts, or not one the chain's root may sign.
        case invalidEnvironment = "INVALID_ENVIRONMENT"
    }

    public let errorClass: Class
    public let reason: String

    public init(_ errorClass: Class, _ reason: String) {
        self.errorClass = errorClass
        self.reason = reason
    }

    public var description: String { "\(errorClass.rawValue): \(reason)" }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.errorClass == rhs.errorClass }
    public func hash(into hasher: inout Hasher) { hasher.combine(errorClass) }
}
