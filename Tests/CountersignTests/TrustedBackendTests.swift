import CountersignCore
import CountersignProxy
import CountersignServerCore
import CountersignTesting
import Crypto
import Foundation
import Testing

@testable import Countersign

/// Entitlement tokens and the signed verification policy, over real HTTP: a live server, the
/// tampering proxy, the SDK (docs/entitlement-tokens.md, docs/sdk.md "Verification policy").
@Suite("Entitlement tokens and the verification policy, end to end")
struct TrustedBackendTests {
    static let audience = "api.example.com"

    static func withTokens(_ deployment: inout DeploymentConfiguration, _: URL) {
        deployment.issuer = "https://purchases.example.com"
        deployment.apps[0].entitlementTokens = .init(audiences: [audience, "worker.example.com"], lifetimeSeconds: 300)
    }

    static func verifier(_ harness: SDKHarness, audience: String = audience, at date: Date? = nil) throws -> EntitlementTokenVerifier {
        let root = try Curve25519.Signing.PublicKey(base64: harness.rootKey)
        return EntitlementTokenVerifier(
            rootKeys: [root], audience: audience, issuer: "https://purchases.example.com", now: { date ?? harness.serverClock.now })
    }

    @Test(
        "a token names the user, the audience and the active entitlements; it is reused until the customer changes",
        arguments: TestDatabaseKind.available)
    func token(_ database: TestDatabaseKind) async throws {
        try await SDKHarness.run(database: database, configure: Self.withTokens) { harness in
            let purchases = try harness.purchases(mode: .informational, user: "buyer", storage: "token-\(database)")
            let first = try await purchases.entitlementToken(audience: Self.audience)
            let claims = try Self.verifier(harness).verify(first)
            #expect(claims.subject == "buyer" && claims.audience == Self.audience && claims.app == "demo" && claims.entitlements.isEmpty)
            #expect(claims.expiresAt - claims.issuedAt == 300)
            #expect(
                try Self.verifier(harness, audience: "worker.example.com").verify(
                    try await purchases.entitlementToken(audience: "worker.example.com")
                ).subject == "buyer")
            // Fresh: handed out again without a request.
            let requests = harness.proxy.seenRequests.count
            #expect(try await purchases.entitlementToken(audience: Self.audience) == first)
            #expect(harness.proxy.seenRequests.count == requests)
            // A purchase changes the customer: the next token says so.
            _ = try await purchases.purchase(productID: "lifetime")
            let after = try Self.verifier(harness).verify(try await purchases.entitlementToken(audience: Self.audience))
            #expect(after.entitlements == [.init(identifier: "pro", productIdentifier: "lifetime", expiresMilliseconds: nil)])
            #expect(after.grants("pro", at: harness.serverClock.now))
            // An audience the app does not list is refused, signed, with its code.
            await #expect(throws: PurchasesError.self) { try await purchases.entitlementToken(audience: "evil.example.com") }
            do {
                _ = try await purchases.entitlementToken(audience: "evil.example.com")
            } catch PurchasesError.server(_, let code, _) {
                #expect(code == APIErrorCode.entitlementTokensUnavailable.rawValue)
            }
        }
    }

    @Test("a token signed before a key rotation verifies until it expires; the next is signed by the new key")
    func rotation() async throws {
        try await SDKHarness.run(configure: Self.withTokens) { harness in
            try await harness.givePro(to: "rotating")
            let purchases = try harness.purchases(mode: .enforced, user: "rotating", storage: "rotation")
            let before = try await purchases.entitlementToken(audience: Self.audience)
            let issued = harness.serverClock.now
            let oldKey = harness.server.keys.currentSigner.key.certificate
            // 25 days on, as the rotation service would: a new intermediate.
            harness.serverClock.now = issued.addingTimeInterval(25 * 86_400)
            harness.clock.now = harness.serverClock.now
            try harness.server.keys.rotateIfNeeded()
            #expect(harness.server.keys.currentSigner.key.certificate != oldKey)
            #expect(try Self.verifier(harness, at: issued.addingTimeInterval(290)).verify(before).subject == "rotating")
            let after = try await purchases.entitlementToken(audience: Self.audience)
            #expect(after != before)
            #expect(try Self.verifier(harness).verify(after).grants("pro", at: harness.serverClock.now))
            #expect(throws: EntitlementTokenFailure.expired) { try Self.verifier(harness).verify(before) }
        }
    }

    @Test(
        "no token is handed out from an answer that failed verification, in enforced or informational mode",
        arguments: [EntitlementVerificationMode.enforced, .informational])
    func noTokenFromFailedAnswer(_ mode: EntitlementVerificationMode) async throws {
        try await SDKHarness.run(configure: Self.withTokens) { harness in
            let purchases = try harness.purchases(mode: mode, user: "tampered", storage: "tampered-\(mode)")
            for attack in [TamperingProxy.Attack.stripSignature, .foreignRoot, .replay, .stripPolicy] {
                harness.proxy.attack = attack
                await #expect(throws: PurchasesError.self, "\(attack)") { try await purchases.entitlementToken(audience: Self.audience) }
            }
            harness.proxy.attack = .none
            #expect(try Self.verifier(harness).verify(try await purchases.entitlementToken(audience: Self.audience)).subject == "tampered")
        }
    }

    // MARK: Policy

    static func withPolicy(_ percent: Double, minimumSDKVersion: SDKVersion? = nil, lifetimeHours: Double? = nil)
        -> @Sendable (
            inout DeploymentConfiguration, URL
        ) -> Void
    {
        { deployment, _ in
            deployment.apps[0].verificationPolicy = .init(
                mode: .enforced, rolloutPercent: percent, minimumSDKVersion: minimumSDKVersion, lifetimeHours: lifetimeHours)
        }
    }

    @Test(
        "an app built informational moves to enforced for the rollout share of 10,000 users, after one verified answer",
        arguments: TestDatabaseKind.available)
    func rollout(_ database: TestDatabaseKind) async throws {
        try await SDKHarness.run(database: database, configure: Self.withPolicy(25)) { harness in
            let purchases = try harness.purchases(mode: .informational, user: "device-owner", storage: "rollout-\(database)")
            #expect(purchases.policy.current == nil)
            _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            let policy = try #require(purchases.policy.current)
            #expect(policy.rolloutBasisPoints == 2_500 && policy.seed == VerificationPolicy.seed(forApp: "demo"))
            let now = harness.clock.now
            let enforced = (0..<10_000).filter { purchases.policy.mode(for: "$CSAnonymousID:device-\($0)", at: now) == .enforced }.count
            #expect((2_400...2_600).contains(enforced), "\(enforced) of 10,000 users enforced under a 25 % rollout")
            // Two real users, one in and one out, each after its first verified answer.
            let inside = try #require((0..<1_000).map { "user-\($0)" }.first { VerificationPolicy.bucket(seed: policy.seed, appUserID: $0) < 2_500 })
            let outside = try #require(
                (0..<1_000).map { "user-\($0)" }.first { VerificationPolicy.bucket(seed: policy.seed, appUserID: $0) >= 2_500 })
            for (user, expected) in [(inside, EntitlementVerificationMode.enforced), (outside, .informational)] {
                let device = try harness.purchases(mode: .informational, user: user, storage: "rollout-\(database)-\(user)")
                #expect(device.verificationMode == .informational)
                _ = try await device.customerInfo(fetchPolicy: .fetchCurrent)
                #expect(device.verificationMode == expected, "\(user)")
                // In, a stripped answer is now an error; out, it is delivered marked failed.
                harness.proxy.attack = .stripSignature
                if expected == .enforced {
                    await #expect(throws: PurchasesError.self) { try await device.customerInfo(fetchPolicy: .fetchCurrent) }
                } else {
                    #expect(try await device.customerInfo(fetchPolicy: .fetchCurrent).entitlements.verification == .failed)
                }
                harness.proxy.attack = .none
            }
        }
    }

    @Test("the policy is kept across launches, lapses to the built mode when it expires unrefreshed, and a refresh renews it")
    func lapse() async throws {
        try await SDKHarness.run(configure: Self.withPolicy(100, lifetimeHours: 2)) { harness in
            // The policy's expiry is the server's clock plus two hours; the device's starts level
            // with it (the harness makes them apart, seconds apart on a loaded machine).
            harness.clock.now = harness.serverClock.now
            let purchases = try harness.purchases(mode: .informational, user: "lapsing", storage: "lapse")
            _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(purchases.verificationMode == .enforced)
            // The next launch knows it before any request.
            let relaunched = try harness.purchases(mode: .informational, user: "lapsing", storage: "lapse")
            #expect(relaunched.verificationMode == .enforced)
            // Every answer since fails (a proxy that breaks them): nothing refreshes the policy,
            // and two hours on the app is back to what it was built with.
            harness.proxy.attack = .stripSignature
            await #expect(throws: PurchasesError.self) { try await relaunched.customerInfo(fetchPolicy: .fetchCurrent) }
            harness.clock.now = harness.serverClock.now.addingTimeInterval(2 * 3_600 - 60)
            #expect(relaunched.verificationMode == .enforced)
            harness.clock.now = harness.serverClock.now.addingTimeInterval(2 * 3_600 + 60)
            #expect(relaunched.verificationMode == .informational)
            #expect(try await relaunched.customerInfo(fetchPolicy: .fetchCurrent).entitlements.verification == .failed)
            // One verified answer restates it.
            harness.proxy.attack = .none
            harness.serverClock.now = harness.clock.now
            _ = try await relaunched.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(relaunched.verificationMode == .enforced)
        }
    }

    @Test("a policy never lowers the built mode, skips SDKs below its floor, and `none` withdraws it")
    func bounds() async throws {
        try await SDKHarness.run(configure: Self.withPolicy(100, minimumSDKVersion: SDKVersion(major: 99, minor: 0, patch: 0))) { harness in
            let old = try harness.purchases(mode: .informational, user: "old-sdk", storage: "floor")
            _ = try await old.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(old.policy.current?.minimumSDKVersion == SDKVersion(major: 99, minor: 0, patch: 0))
            #expect(old.verificationMode == .informational)
            let disabled = try harness.purchases(mode: .disabled, user: "off", storage: "disabled")
            _ = try await disabled.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(disabled.verificationMode == .disabled && disabled.policy.current == nil)
        }
        try await SDKHarness.run(configure: { deployment, _ in
            deployment.apps[0].verificationPolicy = .init(mode: .informational, rolloutPercent: 100)
        }) { harness in
            let built = try harness.purchases(mode: .enforced, user: "strict", storage: "strict")
            _ = try await built.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(built.policy.current?.mode == .informational && built.verificationMode == .enforced)
        }
        try await SDKHarness.run { harness in
            // An app whose server states no policy: the verified `none` withdraws a remembered one.
            let device = try harness.purchases(mode: .informational, user: "withdrawn", storage: "withdrawn")
            device.policy.record(
                .policy(
                    VerificationPolicy(
                        mode: .enforced, rolloutBasisPoints: 10_000, minimumSDKVersion: SDKVersion(major: 0, minor: 0, patch: 0),
                        seed: "0000000000000000",
                        expiresMilliseconds: UInt64(harness.clock.now.addingTimeInterval(3_600).timeIntervalSince1970 * 1000))))
            #expect(device.verificationMode == .enforced)
            harness.proxy.attack = .forgePolicy  // "none" rewritten to a policy covering nobody: refused, nothing changes
            await #expect(throws: PurchasesError.self) { try await device.customerInfo(fetchPolicy: .fetchCurrent) }
            #expect(device.verificationMode == .enforced)
            harness.proxy.attack = .none
            _ = try await device.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(device.policy.current == nil && device.verificationMode == .informational)
        }
    }
}
