import Crypto
import Foundation

/// Entitlement tokens: what a customer is entitled to, signed by the server's current
/// intermediate for the app's own backend, which checks it offline with the pinned root key
/// alone (docs/entitlement-tokens.md).
///
/// A compact JWS (RFC 7515), `alg` `EdDSA` (RFC 8037, Ed25519). The header carries the chain
/// the answers' `X-Signature` carries: the intermediate's public key, its expiry (days since
/// 1970, UTC) and the root's signature over `expiry (UInt32, little-endian) ‖ key`:
///
///     {"alg":"EdDSA","typ":"JWT","intermediate":"<base64url, 32 bytes>","intermediate_expires":20790,
///      "root_signature":"<base64url, 64 bytes>"}
///
/// The claims:
///
///     {"iss":"https://purchases.example.com","sub":"user-1","aud":"api.example.com","app":"demo",
///      "entitlements":[{"id":"pro","product_id":"pro_monthly","expires_ms":1798000000000}],
///      "iat":1796000000,"exp":1796000600,"jti":"4f1c…"}
///
/// Both are written without spaces, members in the order shown, strings escaped as
/// `JSON.stringify` escapes them, so each is exactly its canonical serialization: a verifier may
/// refuse any other spelling (the Node.js recipe does), which refuses a duplicated key, since a
/// parse keeps only one of them.
public enum EntitlementToken {
    public struct Claims: Sendable, Hashable {
        /// `iss`: the deployment.
        public var issuer: String
        /// `sub`: the app user id the token was issued to.
        public var subject: String
        /// `aud`: the backend it is for.
        public var audience: String
        /// `app`: the app id.
        public var app: String
        /// The entitlements active when it was issued.
        public var entitlements: [Entitlement]
        /// `iat`, `exp`: seconds since 1970.
        public var issuedAt: Int64
        public var expiresAt: Int64
        /// `jti`: unique per token.
        public var id: String

        public struct Entitlement: Sendable, Hashable {
            public var identifier: String
            /// The product that grants it (a promotional grant names RevenueCat's `rc_promo_…` id).
            public var productIdentifier: String
            /// Milliseconds since 1970 when it ends (grace included); nil for life.
            public var expiresMilliseconds: Int64?

            public init(identifier: String, productIdentifier: String, expiresMilliseconds: Int64?) {
                self.identifier = identifier
                self.productIdentifier = productIdentifier
                self.expiresMilliseconds = expiresMilliseconds
            }
        }

        public init(
            issuer: String, subject: String, audience: String, app: String, entitlements: [Entitlement], issuedAt: Int64, expiresAt: Int64,
            id: String
        ) {
            self.issuer = issuer
            self.subject = subject
            self.audience = audience
            self.app = app
            self.entitlements = entitlements
            self.issuedAt = issuedAt
            self.expiresAt = expiresAt
            self.id = id
        }

        /// Whether `entitlement` is in the token and active at `date`.
        public func grants(_ entitlement: String, at date: Date) -> Bool {
            entitlements.contains { item in
                item.identifier == entitlement && item.expiresMilliseconds.map { Double($0) > date.timeIntervalSince1970 * 1000 } ?? true
            }
        }
    }

    /// An audience or issuer: 1 to 256 characters, none a control character.
    public static func isUsableText(_ text: String) -> Bool {
        (1...256).contains(text.unicodeScalars.count) && !text.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }
}

/// Why a token was refused. Raw values are stable: `countersign verify-token` prints them.
public enum EntitlementTokenFailure: String, Error, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Not three unpadded base64url segments, or a header or claims that are not the JSON
    /// objects of the format (a member missing or of the wrong type).
    case malformed
    /// A key appears twice in one JSON object of the header or the claims.
    case duplicateKey
    /// `alg` is not `EdDSA` (`none`, `HS256`, `ES256`… are refused before any key is used), or
    /// the header names a critical extension.
    case unsupportedAlgorithm
    /// The intermediate in the header is not signed by a pinned root.
    case untrustedIntermediate
    /// The intermediate in the header has expired (or the token was issued after it expired).
    case intermediateExpired
    /// The intermediate's signature does not cover the header and claims.
    case badSignature
    /// `aud` is not the audience the verifier is for.
    case wrongAudience
    /// `iss` is not the deployment the verifier expects.
    case wrongIssuer
    /// `exp` has passed (beyond the leeway).
    case expired
    /// `iat` lies ahead of the verifier's clock (beyond the leeway).
    case issuedInFuture

    public var description: String { rawValue }
}

/// Checks entitlement tokens with the pinned root keys alone: for the app's backend (server-side
/// Swift, `countersign verify-token`) and for the SDK, which checks what it hands out.
public struct EntitlementTokenVerifier: Sendable {
    public var rootKeys: [Curve25519.Signing.PublicKey]
    public var audience: String
    /// The `iss` to insist on; any when nil.
    public var issuer: String?
    /// Seconds of clock difference allowed on `exp`, `iat` and the intermediate's expiry (60 by
    /// default, the same as the Python and Node.js recipes).
    public var leeway: TimeInterval
    public var now: @Sendable () -> Date

    public static let defaultLeeway: TimeInterval = 60
    /// Tokens are short; anything longer is refused before it is decoded.
    public static let maximumLength = 16_384

    public init(
        rootKeys: [Curve25519.Signing.PublicKey], audience: String, issuer: String? = nil, leeway: TimeInterval = defaultLeeway,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.rootKeys = rootKeys
        self.audience = audience
        self.issuer = issuer
        self.leeway = leeway
        self.now = now
    }

    /// The token's claims, once the chain, the signature, `aud`, `iss`, `exp` and `iat` check out.
    public func verify(_ token: String) throws(EntitlementTokenFailure) -> EntitlementToken.Claims {
        guard token.utf8.count <= Self.maximumLength else { throw .malformed }
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, let headerBytes = Data(base64URL: segments[0]), let payloadBytes = Data(base64URL: segments[1]),
            let signature = Data(base64URL: segments[2])
        else { throw .malformed }
        let header = try Self.object(headerBytes)
        // The algorithm first, before any key is looked at: nothing but EdDSA is ever tried.
        guard case .string("EdDSA")? = header["alg"] else { throw .unsupportedAlgorithm }
        guard header["crit"] == nil else { throw .unsupportedAlgorithm }
        if let type = header["typ"] {
            guard case .string("JWT") = type else { throw .malformed }
        }
        guard case .string(let keyText)? = header["intermediate"], let key = Data(base64URL: keyText),
            case .string(let rootSignatureText)? = header["root_signature"], let rootSignature = Data(base64URL: rootSignatureText),
            let days = header["intermediate_expires"]?.integer, let expirationDays = UInt32(exactly: days),
            let certificate = try? IntermediateCertificate(publicKey: key, expirationDays: expirationDays, rootSignature: rootSignature)
        else { throw .malformed }
        guard rootKeys.contains(where: certificate.isIssued(by:)),
            let intermediate = try? Curve25519.Signing.PublicKey(rawRepresentation: certificate.publicKey)
        else { throw .untrustedIntermediate }
        let date = now()
        guard certificate.isValid(at: date, tolerance: leeway) else { throw .intermediateExpired }
        let input = Data(segments[0].utf8) + Data(".".utf8) + Data(segments[1].utf8)
        guard signature.count == 64, intermediate.isValidSignature(signature, for: input) else { throw .badSignature }

        let claims = try Self.claims(try Self.object(payloadBytes))
        guard certificate.isValid(at: Date(timeIntervalSince1970: TimeInterval(claims.issuedAt))) else { throw .intermediateExpired }
        guard claims.audience == audience else { throw .wrongAudience }
        if let issuer, claims.issuer != issuer { throw .wrongIssuer }
        let seconds = date.timeIntervalSince1970
        guard Double(claims.expiresAt) + leeway > seconds else { throw .expired }
        guard Double(claims.issuedAt) - leeway <= seconds else { throw .issuedInFuture }
        return claims
    }

    private static func object(_ bytes: Data) throws(EntitlementTokenFailure) -> [String: JSONValue] {
        do {
            return try JSONValue.parseObject(bytes)
        } catch .duplicateKey {
            throw .duplicateKey
        } catch {
            throw .malformed
        }
    }

    private static func claims(_ members: [String: JSONValue]) throws(EntitlementTokenFailure) -> EntitlementToken.Claims {
        guard case .string(let issuer)? = members["iss"], case .string(let subject)? = members["sub"],
            case .string(let audience)? = members["aud"], case .string(let app)? = members["app"], case .string(let id)? = members["jti"],
            let issuedAt = members["iat"]?.integer, let expiresAt = members["exp"]?.integer, expiresAt > issuedAt,
            case .array(let list)? = members["entitlements"]
        else { throw .malformed }
        var entitlements: [EntitlementToken.Claims.Entitlement] = []
        for item in list {
            guard case .object(let entitlement) = item, case .string(let identifier)? = entitlement["id"],
                case .string(let product)? = entitlement["product_id"], let expires = entitlement["expires_ms"]
            else { throw .malformed }
            var expiresMilliseconds: Int64?
            if case .null = expires {
                expiresMilliseconds = nil
            } else {
                guard let value = expires.integer else { throw .malformed }
                expiresMilliseconds = value
            }
            entitlements.append(.init(identifier: identifier, productIdentifier: product, expiresMilliseconds: expiresMilliseconds))
        }
        return EntitlementToken.Claims(
            issuer: issuer, subject: subject, audience: audience, app: app, entitlements: entitlements, issuedAt: issuedAt,
            expiresAt: expiresAt, id: id)
    }
}

extension JSONValue {
    /// A JSON number written as a plain integer within ±2⁵³ (the range every JSON reader holds
    /// exactly); nil for anything else.
    var integer: Int64? {
        guard case .number(let text) = self, let value = Int64(text), value.magnitude <= 1 << 53 else { return nil }
        return value
    }
}
