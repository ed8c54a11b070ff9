import CountersignCore
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import Testing

/// Entitlement tokens from the attacker's side: every forgery a backend might be handed is
/// refused by the Swift verifier with its reason (the Python and Node.js recipes are held to the
/// same cases by scripts/token-recipes.py in CI).
@Suite("Entitlement tokens")
struct EntitlementTokenTests {
    static let issuedAt: Int64 = Int64(TestKeys.referenceDate.timeIntervalSince1970)

    static func claims(subject: String = "user-1", audience: String = "api.example.com", issuedAt: Int64 = issuedAt) -> EntitlementToken.Claims {
        let entitlements = [
            EntitlementToken.Claims.Entitlement(identifier: "pro", productIdentifier: "pro_monthly", expiresMilliseconds: (issuedAt + 86_400) * 1000),
            EntitlementToken.Claims.Entitlement(identifier: "lifetime", productIdentifier: "lifetime", expiresMilliseconds: nil),
        ]
        return EntitlementToken.Claims(
            issuer: "https://purchases.example.com", subject: subject, audience: audience, app: "demo", entitlements: entitlements,
            issuedAt: issuedAt, expiresAt: issuedAt + 600, id: "2b1f0c1e-7d4a-4a53-9f57-3f1a2c9d8e10")
    }

    static func verifier(audience: String = "api.example.com", at date: Date = TestKeys.referenceDate.addingTimeInterval(10))
        -> EntitlementTokenVerifier
    {
        EntitlementTokenVerifier(rootKeys: [TestKeys.root.publicKey], audience: audience, issuer: "https://purchases.example.com", now: { date })
    }

    static func token(_ claims: EntitlementToken.Claims = claims(), key: IntermediateSigningKey = TestKeys.intermediate) throws -> String {
        try EntitlementToken.sign(claims, with: key)
    }

    /// A token with these exact header and claims texts, signed by `key` (an attacker holding
    /// the real intermediate, for the cases that must fail on something other than the signature).
    static func forged(header: String, payload: String, key: Curve25519.Signing.PrivateKey = TestKeys.intermediate.privateKey) throws -> String {
        let input = Data(header.utf8).base64URLEncodedString + "." + Data(payload.utf8).base64URLEncodedString
        return input + "." + (try key.signature(for: Data(input.utf8))).base64URLEncodedString
    }

    static func segments(_ token: String) -> (header: String, payload: String) {
        let parts = token.split(separator: ".")
        return (
            String(decoding: Data(base64URL: parts[0])!, as: UTF8.self), String(decoding: Data(base64URL: parts[1])!, as: UTF8.self)
        )
    }

    static func refusal(_ token: String, _ verifier: EntitlementTokenVerifier = verifier()) -> EntitlementTokenFailure? {
        do {
            _ = try verifier.verify(token)
            return nil
        } catch {
            return error
        }
    }

    @Test("a token verifies with the root key alone and gives back its claims; header and claims are their canonical JSON")
    func honest() throws {
        let token = try Self.token()
        #expect(try Self.verifier().verify(token) == Self.claims())
        let (header, payload) = Self.segments(token)
        let certificate = TestKeys.intermediate.certificate
        #expect(
            header
                == #"{"alg":"EdDSA","typ":"JWT","intermediate":"\#(certificate.publicKey.base64URLEncodedString)","intermediate_expires":\#(certificate.expirationDays),"root_signature":"\#(certificate.rootSignature.base64URLEncodedString)"}"#
        )
        #expect(
            payload
                == #"{"iss":"https://purchases.example.com","sub":"user-1","aud":"api.example.com","app":"demo","entitlements":[{"id":"pro","product_id":"pro_monthly","expires_ms":\#((Self.issuedAt + 86_400) * 1000)},{"id":"lifetime","product_id":"lifetime","expires_ms":null}],"iat":\#(Self.issuedAt),"exp":\#(Self.issuedAt + 600),"jti":"2b1f0c1e-7d4a-4a53-9f57-3f1a2c9d8e10"}"#
        )
        #expect(Self.claims().grants("pro", at: TestKeys.referenceDate) && !Self.claims().grants("gold", at: TestKeys.referenceDate))
    }

    @Test("a token for another audience is wrongAudience; another issuer is wrongIssuer")
    func audience() throws {
        #expect(Self.refusal(try Self.token(Self.claims(audience: "other.example.com"))) == .wrongAudience)
        #expect(Self.refusal(try Self.token(), Self.verifier(audience: "other.example.com")) == .wrongAudience)
        var claims = Self.claims()
        claims.issuer = "https://elsewhere.example.com"
        #expect(Self.refusal(try Self.token(claims)) == .wrongIssuer)
    }

    @Test("expired past the 60 seconds of leeway is expired; within it verifies; issued ahead of the clock is issuedInFuture")
    func times() throws {
        let token = try Self.token()
        let expiry = TestKeys.referenceDate.addingTimeInterval(600)
        #expect(Self.refusal(token, Self.verifier(at: expiry.addingTimeInterval(59))) == nil)
        #expect(Self.refusal(token, Self.verifier(at: expiry.addingTimeInterval(60))) == .expired)
        #expect(Self.refusal(token, Self.verifier(at: TestKeys.referenceDate.addingTimeInterval(-61))) == .issuedInFuture)
    }

    @Test("signed by an expired intermediate of the real root, or issued after its expiry: intermediateExpired")
    func expiredIntermediate() throws {
        let expired = TestKeys.makeIntermediate(root: TestKeys.root, seed: Data(65...96), expirationDays: TestKeys.referenceDay)
        #expect(Self.refusal(try Self.token(key: expired)) == .intermediateExpired)
        // A stolen intermediate used after it expired, the clock of the backend set back to match.
        let late = Self.issuedAt + 40 * 86_400
        let lateVerifier = Self.verifier(at: TestKeys.intermediate.certificate.expirationDate.addingTimeInterval(-30))
        #expect(Self.refusal(try Self.token(Self.claims(issuedAt: late)), lateVerifier) == .intermediateExpired)
    }

    @Test("signed by an intermediate of a foreign root: untrustedIntermediate")
    func foreign() throws {
        let foreign = TestKeys.makeIntermediate(root: TestKeys.foreignRoot, seed: Data(33...64), expirationDays: TestKeys.referenceDay + 30)
        #expect(Self.refusal(try Self.token(key: foreign)) == .untrustedIntermediate)
    }

    @Test("alg none, HS256 keyed with the public key, and ES256 are refused before any key is used")
    func algorithms() throws {
        let (header, payload) = Self.segments(try Self.token())
        let input = { (alg: String) -> String in
            Data(header.replacingOccurrences(of: #""alg":"EdDSA""#, with: #""alg":"\#(alg)""#).utf8).base64URLEncodedString + "."
                + Data(payload.utf8).base64URLEncodedString
        }
        #expect(Self.refusal(input("none") + ".") == .unsupportedAlgorithm)
        let hmacKey = SymmetricKey(data: TestKeys.intermediate.certificate.publicKey)
        let hs256 = input("HS256")
        #expect(
            Self.refusal(hs256 + "." + Data(HMAC<SHA256>.authenticationCode(for: Data(hs256.utf8), using: hmacKey)).base64URLEncodedString)
                == .unsupportedAlgorithm)
        let es256 = input("ES256")
        let p256 = P256.Signing.PrivateKey()
        #expect(
            Self.refusal(es256 + "." + (try p256.signature(for: Data(es256.utf8))).rawRepresentation.base64URLEncodedString) == .unsupportedAlgorithm)
        #expect(
            Self.refusal(try Self.forged(header: header.replacingOccurrences(of: #""alg":"EdDSA""#, with: #""alg":"eddsa""#), payload: payload))
                == .unsupportedAlgorithm)
        #expect(Self.refusal(try Self.forged(header: String(header.dropLast()) + #","crit":["exp"]}"#, payload: payload)) == .unsupportedAlgorithm)
    }

    @Test("a changed claim breaks the signature: badSignature")
    func changedClaim() throws {
        let token = try Self.token()
        let parts = token.split(separator: ".").map(String.init)
        for (from, to) in [("user-1", "user-2"), (#""id":"pro""#, #""id":"gold""#), ("\(Self.issuedAt + 600)", "\(Self.issuedAt + 999_999)")] {
            let payload = Self.segments(token).payload.replacingOccurrences(of: from, with: to)
            #expect(Self.refusal(parts[0] + "." + Data(payload.utf8).base64URLEncodedString + "." + parts[2]) == .badSignature)
        }
    }

    @Test("a duplicated key in the header or the claims is refused even under a genuine signature")
    func duplicateKeys() throws {
        let (header, payload) = Self.segments(try Self.token())
        #expect(Self.refusal(try Self.forged(header: String(header.dropLast()) + #","alg":"none"}"#, payload: payload)) == .duplicateKey)
        #expect(Self.refusal(try Self.forged(header: header, payload: String(payload.dropLast()) + #","sub":"user-2"}"#)) == .duplicateKey)
        #expect(Self.refusal(try Self.forged(header: header, payload: String(payload.dropLast()) + #","aud":"api.example.com"}"#)) == .duplicateKey)
    }

    @Test("what is not a token is malformed: padding, a wrong member type, a fourth segment, 16 KiB and more")
    func malformed() throws {
        let token = try Self.token()
        let (header, payload) = Self.segments(token)
        for bad in [
            token + "=", token + ".x", "", "..", String(repeating: "a", count: 16_385),
            try Self.forged(
                header: header, payload: payload.replacingOccurrences(of: #""iat":\#(Self.issuedAt)"#, with: #""iat":"\#(Self.issuedAt)""#)),
            try Self.forged(header: header, payload: payload.replacingOccurrences(of: #""iat":\#(Self.issuedAt)"#, with: #""iat":1e9"#)),
            try Self.forged(header: header, payload: "[]"),
            try Self.forged(header: header.replacingOccurrences(of: #""typ":"JWT""#, with: #""typ":"JOSE""#), payload: payload),
        ] {
            #expect(Self.refusal(bad) == .malformed, "\(bad.prefix(60))")
        }
    }

    @Test("a token never outlives the entitlement it vouches for first, nor its intermediate")
    func expiry() {
        let entitlements = Self.claims().entitlements
        let certificate = TestKeys.intermediate.certificate
        #expect(
            EntitlementToken.expiry(issuedAt: Self.issuedAt, lifetime: 600, entitlements: entitlements, intermediate: certificate) == Self.issuedAt
                + 600)
        let soon = [
            EntitlementToken.Claims.Entitlement(identifier: "pro", productIdentifier: "p", expiresMilliseconds: (Self.issuedAt + 90) * 1000 + 999)
        ]
        #expect(EntitlementToken.expiry(issuedAt: Self.issuedAt, lifetime: 600, entitlements: soon, intermediate: certificate) == Self.issuedAt + 90)
        let lateIssue = Int64(certificate.expirationDays) * 86_400 - 100
        #expect(EntitlementToken.expiry(issuedAt: lateIssue, lifetime: 600, entitlements: [], intermediate: certificate) == lateIssue + 100)
    }
}
