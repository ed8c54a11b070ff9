import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Testing

/// `countersign verify-token`: exit 0 and the claims for a good token, 1 and the reason for a
/// refused one, 2 for input that cannot be used (as `countersign verify`).
@Suite("countersign verify-token")
struct VerifyTokenCommandTests {
    static let rootKey = TestKeys.root.publicKey.rawRepresentation.base64EncodedString()
    static let issuedAt = Int64(TestKeys.referenceDate.timeIntervalSince1970)
    static let at = String(issuedAt + 30)

    static func token(audience: String = "api.example.com", key: IntermediateSigningKey = TestKeys.intermediate) throws -> String {
        let claims = EntitlementToken.Claims(
            issuer: "https://purchases.example.com", subject: "user-1", audience: audience, app: "demo",
            entitlements: [.init(identifier: "pro", productIdentifier: "lifetime", expiresMilliseconds: nil)], issuedAt: issuedAt,
            expiresAt: issuedAt + 600, id: "0f3c9e52-6f0e-4c59-9b0b-8f2f45a4f001")
        return try EntitlementToken.sign(claims, with: key)
    }

    static func verify(_ token: String, _ extra: [String] = []) throws -> CLIRunner.Result {
        try CLIRunner.run(["verify-token", "--root-key", rootKey, "--audience", "api.example.com", "--at", at] + extra + [token])
    }

    @Test("a good token: verified, then the claims as JSON, exit 0")
    func good() throws {
        let result = try Self.verify(try Self.token(), ["--issuer", "https://purchases.example.com"])
        #expect(result.status == 0)
        #expect(result.lines.first == "verified")
        let claims = try JSONSerialization.jsonObject(with: Data(result.lines[1].utf8)) as? [String: Any]
        #expect(claims?["sub"] as? String == "user-1" && claims?["aud"] as? String == "api.example.com")
        #expect((claims?["entitlements"] as? [[String: Any]])?.first?["id"] as? String == "pro")
    }

    @Test("refusals print failed: <reason> and exit 1")
    func refused() throws {
        let foreign = TestKeys.makeIntermediate(root: TestKeys.foreignRoot, seed: Data(33...64), expirationDays: TestKeys.referenceDay + 30)
        let cases: [(String, [String], String)] = [
            (try Self.token(audience: "other.example.com"), [], "failed: wrongAudience"),
            (try Self.token(key: foreign), [], "failed: untrustedIntermediate"),
            (try Self.token(), ["--issuer", "https://elsewhere.example.com"], "failed: wrongIssuer"),
            (String(try Self.token().dropLast(3)) + "AAA", [], "failed: badSignature"),
            ("not.a.token", [], "failed: malformed"),
        ]
        for (token, extra, expected) in cases {
            let result = try Self.verify(token, extra)
            #expect(result.status == 1 && result.lines == [expected], "\(expected): \(result.lines)")
        }
        let late = try CLIRunner.run([
            "verify-token", "--root-key", Self.rootKey, "--audience", "api.example.com", "--at", String(Self.issuedAt + 700), try Self.token(),
        ])
        #expect(late.status == 1 && late.lines == ["failed: expired"])
    }

    @Test("unusable input exits 2: no root key, a root key that is no key, a leeway out of range")
    func unusable() throws {
        let token = try Self.token()
        #expect(try CLIRunner.run(["verify-token", "--root-key", "AAAA", "--audience", "a", token]).status == 2)
        #expect(try Self.verify(token, ["--leeway=-1"]).status == 2)
        #expect(try Self.verify(token, ["--leeway", "99999999"]).status == 2)
    }
}
