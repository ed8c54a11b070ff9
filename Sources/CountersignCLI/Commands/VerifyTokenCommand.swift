import ArgumentParser
import CountersignCore
import Crypto
import Foundation

struct VerifyTokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-token",
        abstract: "Check an entitlement token offline with the root key alone.",
        discussion: """
            Checks the chain in the token's header against the pinned root, the intermediate's \
            signature, alg (EdDSA only), aud, iss (with --issuer), exp and iat (60 seconds of \
            leeway unless --leeway). Prints 'verified' and the claims as JSON and exits 0, or \
            'failed: <reason>' and exits 1. Unreadable input prints 'error: <problem>' and exits 2.
            """
    )

    @Option(name: .customLong("root-key"), help: "A pinned root public key (base64); repeat to pin several.")
    var rootKeys: [String]

    @Option(help: "The audience the token must be for (aud).")
    var audience: String

    @Option(help: "The issuer the token must name (iss); any when left out.")
    var issuer: String?

    @Option(help: "Seconds of clock difference allowed on exp, iat and the intermediate's expiry.")
    var leeway: Int = Int(EntitlementTokenVerifier.defaultLeeway)

    @Option(help: "Check with the clock set to this Unix time (seconds).")
    var at: Int?

    @Argument(help: "The token, or - to read it from standard input.")
    var token: String

    func run() throws {
        guard !rootKeys.isEmpty else { throw CLIError("give at least one --root-key") }
        guard (0...86_400).contains(leeway) else { throw CLIError("--leeway must be from 0 to 86400 seconds") }
        let roots = try rootKeys.map { key throws(CLIError) in
            try CLIError.wrapping("--root-key") { try Curve25519.Signing.PublicKey(base64: key, name: "root key") }
        }
        var text = token
        if token == "-" {
            text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        }
        text = text.trimmingCharacters(in: .whitespacesAndNewlines)
        let clock = at.map { Date(timeIntervalSince1970: TimeInterval($0)) }
        let verifier = EntitlementTokenVerifier(
            rootKeys: roots, audience: audience, issuer: issuer, leeway: TimeInterval(leeway), now: { clock ?? Date() })
        do {
            let claims = try verifier.verify(text)
            print("verified")
            print(Self.describe(claims))
        } catch {
            print("failed: \(error)")
            throw ExitCode(1)
        }
    }

    /// The claims as one JSON object with sorted keys (what a backend would read).
    static func describe(_ claims: EntitlementToken.Claims) -> String {
        let entitlements: [[String: Any]] = claims.entitlements.map { entitlement in
            ["id": entitlement.identifier, "product_id": entitlement.productIdentifier, "expires_ms": entitlement.expiresMilliseconds ?? NSNull()]
        }
        let object: [String: Any] = [
            "iss": claims.issuer, "sub": claims.subject, "aud": claims.audience, "app": claims.app, "entitlements": entitlements,
            "iat": claims.issuedAt, "exp": claims.expiresAt, "jti": claims.id,
        ]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}
