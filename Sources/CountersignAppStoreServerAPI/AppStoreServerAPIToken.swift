import Foundation
import JWTKit

/// The claims of an App Store Server API bearer token (ES256, signed with an In-App Purchase Key).
public struct AppStoreServerAPIClaims: JWTPayload, Equatable {
    public static let audience = "appstoreconnect-v1"

    public var iss: IssuerClaim
    public var iat: IssuedAtClaim
    public var exp: ExpirationClaim
    public var aud: AudienceClaim
    public var bid: String

    public init(issuerId: String, bundleId: String, issuedAt: Date, expiresAt: Date) {
        iss = IssuerClaim(value: issuerId)
        iat = IssuedAtClaim(value: issuedAt)
        exp = ExpirationClaim(value: expiresAt)
        aud = AudienceClaim(value: Self.audience)
        bid = bundleId
    }

    public func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
        try aud.verifyIntendedAudience(includes: Self.audience)
    }
}

/// Makes and reuses bearer tokens: a new one only when the current one is within a minute of
/// expiring, since Apple allows a token to live up to an hour.
actor AppStoreServerAPITokenSource {
    private let keys: JWTKeyCollection
    private let keyId: String
    private let issuerId: String
    private let bundleId: String
    private let lifetime: TimeInterval
    private let now: @Sendable () -> Date
    private var current: (token: String, expiresAt: Date)?

    init(privateKeyPEM: String, keyId: String, issuerId: String, bundleId: String, lifetime: TimeInterval, now: @escaping @Sendable () -> Date)
        async throws
    {
        keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PrivateKey(pem: privateKeyPEM), kid: JWKIdentifier(string: keyId))
        self.keyId = keyId
        self.issuerId = issuerId
        self.bundleId = bundleId
        self.lifetime = lifetime
        self.now = now
    }

    func token() async throws -> String {
        let now = now()
        if let current, current.expiresAt.timeIntervalSince(now) > 60 { return current.token }
        let expiresAt = now.addingTimeInterval(lifetime)
        let claims = AppStoreServerAPIClaims(issuerId: issuerId, bundleId: bundleId, issuedAt: now, expiresAt: expiresAt)
        var header = JWTHeader()
        header.typ = "JWT"
        let token = try await keys.sign(claims, kid: JWKIdentifier(string: keyId), header: header)
        current = (token, expiresAt)
        return token
    }

    /// Forgets the current token, e.g. after Apple refused it.
    func invalidate() {
        current = nil
    }
}
