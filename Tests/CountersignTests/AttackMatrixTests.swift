import CountersignCore
import CountersignProxy
import CountersignTesting
import Foundation
import Testing

@testable import Countersign

/// Every attack of the tampering proxy × every verification mode, over real HTTP: the SDK asks
/// for the CustomerInfo of a user who has not paid, through the proxy. ATTACKS.md (and the table
/// in docs/sdk.md) are rendered from ``expected(_:_:)``, the same table the test checks.
@Suite("Attack matrix")
struct AttackMatrixTests {
    typealias Attack = TamperingProxy.Attack

    enum Expected: Hashable, CustomStringConvertible {
        /// Delivered with this verification result (and, for `failed`, this reason).
        case delivered(VerificationResult, VerificationFailure?)
        /// `signatureVerificationFailed` with the reason; nothing delivered.
        case rejected(VerificationFailure)
        /// The server is unreachable and nothing cached or on the device stands in.
        case offline
        /// A `server` error with this code: a refusal, nothing delivered.
        case refused(Int)

        var description: String {
            switch self {
            case .delivered(let result, let reason?): "delivered, `\(result.rawValue)` (\(reason.rawValue))"
            case .delivered(let result, nil): "delivered, `\(result.rawValue)`"
            case .rejected(let reason): "error `signatureVerificationFailed` (\(reason.rawValue))"
            case .offline: "error `offline`"
            case .refused(let code): "error `server` (\(code)), nothing granted"
            }
        }
    }

    /// What the verifier reports for each attack on a CustomerInfo answer; nil: nothing to catch.
    static func reason(_ attack: Attack) -> VerificationFailure? {
        switch attack {
        case .none, .serverDown, .unavailable: nil
        case .grantEntitlement, .replay, .crossUser, .swapPath, .forge304, .forgePolicy: .payloadMismatch
        case .stripPolicy: .missingPolicy
        case .stripSignature: .missingSignature
        case .truncateSignature: .malformedSignature
        case .digitShift: .malformedETag
        case .foreignRoot: .untrustedRoot
        case .expiredIntermediate, .futureTime: .intermediateExpired
        case .dropRequestTime: .missingRequestTime
        case .forgeRefusal: .missingSignature
        }
    }

    /// The table.
    static func expected(_ attack: Attack, _ mode: EntitlementVerificationMode) -> Expected {
        if attack == .serverDown { return .offline }
        if attack == .forgeRefusal { return mode == .enforced ? .rejected(.missingSignature) : .refused(4201) }
        switch (mode, reason(attack)) {
        case (.disabled, _): return .delivered(.notRequested, nil)
        case (_, nil): return .delivered(.verified, nil)
        case (.informational, let reason?): return .delivered(.failed, reason)
        case (.enforced, let reason?): return .rejected(reason)
        }
    }

    /// What each attack does, for the document.
    static func explanation(_ attack: Attack) -> String {
        switch attack {
        case .none: "forwards untouched"
        case .grantEntitlement: "rewrites the body to add an active `pro` (signature untouched)"
        case .stripSignature: "removes `X-Signature`"
        case .truncateSignature: "cuts `X-Signature` in half"
        case .replay: "answers with a signed answer recorded for another request (another nonce)"
        case .crossUser: "answers with a paying user's signed answer for the same nonce"
        case .swapPath: "asks the server for the same user under another spelling of the path"
        case .digitShift: "moves a digit from `X-Request-Time` into `X-ETag`: the signed bytes stay the same"
        case .foreignRoot: "grants `pro` and re-signs with the attacker's own root and intermediate"
        case .expiredIntermediate: "grants `pro` and signs with an expired intermediate of the real root"
        case .forge304: "turns the server's 200 into a 304 with a made-up ETag, to keep the client on its cached answer"
        case .serverDown: "answers 503 (no cache, no store purchase: nothing to fall back on)"
        case .dropRequestTime: "removes `X-Request-Time`"
        case .forgeRefusal: "answers an unsigned `422 {\"code\":4201}` (a forged refusal; a purchase refused this way is never finished)"
        case .unavailable: "answers 503 to the next 2 requests, then forwards (the SDK tries again and gets the signed answer)"
        case .stripPolicy: "takes `X-Accept-Verification-Policy` off the request, so the genuine answer is signed without the policy"
        case .forgePolicy: "rewrites `X-Verification-Policy` to `none` (withdraws the policy)"
        case .futureTime:
            "re-signs the untouched answer with a stolen, still valid intermediate of the real root and a request time in 2286 (the device's verified-time floor stays where it was)"
        }
    }

    /// The table itself (also in docs/sdk.md, between the attack-matrix markers).
    static func table() -> String {
        let modes = EntitlementVerificationMode.allCases
        var lines = [
            "| attack | what it does | " + modes.map(\.rawValue).joined(separator: " | ") + " |",
            "|---|---|" + modes.map { _ in "---|" }.joined(),
        ]
        for attack in Attack.allCases {
            lines.append(
                "| `\(attack.rawValue)` | \(explanation(attack)) | " + modes.map { expected(attack, $0).description }.joined(separator: " | ") + " |")
        }
        return lines.joined(separator: "\n")
    }

    static func markdown() -> String {
        var lines = [
            "# Attack matrix",
            "",
            "Generated from `Tests/CountersignTests/AttackMatrixTests.swift`, whose test checks every cell over real HTTP:",
            "a live server, `countersign proxy`'s tampering proxy in front of it, and the SDK asking for the CustomerInfo",
            "of a user who has not paid. Regenerate with `COUNTERSIGN_WRITE_DOCS=1 swift test --filter AttackMatrix`.",
            "",
            "No attack is ever reported `verified`. In `informational` mode tampered data is delivered marked `failed`",
            "(and reported to the error handler and telemetry); in `enforced` mode it is an error and nothing is granted.",
            "`disabled` shows why verification matters: everything is delivered as `notRequested`.",
            "",
            table(),
        ]
        lines.append("")
        lines.append("With a store purchase on the device and the signed product mapping cached, `server-down` gives")
        lines.append("`verifiedOnDevice` entitlements instead (see `SDKBehaviourTests`); with a cached verified CustomerInfo, the cache.")
        return lines.joined(separator: "\n") + "\n"
    }

    static let projectRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    @Test("ATTACKS.md and docs/sdk.md's table are the table this test checks")
    func document() throws {
        let attacks = Self.projectRoot.appendingPathComponent("ATTACKS.md")
        if GeneratedDocSection.writing { try Data(Self.markdown().utf8).write(to: attacks) }
        let section = GeneratedDocSection(name: "attack-matrix", generatedBy: "AttackMatrixTests", expected: Self.table())
        let current = try #require(
            try section.current(in: Self.projectRoot.appendingPathComponent("docs/sdk.md")), "docs/sdk.md lacks the attack-matrix markers")
        #expect(
            try String(contentsOf: attacks, encoding: .utf8) == Self.markdown(), "ATTACKS.md is out of date; regenerate with COUNTERSIGN_WRITE_DOCS=1"
        )
        #expect(current == Self.table(), "docs/sdk.md's table is out of date; regenerate with COUNTERSIGN_WRITE_DOCS=1")
    }

    @Test("every attack × mode gives the expected result; no attack is ever verified; enforced never hands back failed data")
    func matrix() async throws {
        try await SDKHarness.run { harness in
            try await harness.givePro(to: "paying-user")
            var checked = 0
            for mode in EntitlementVerificationMode.allCases {
                for attack in Attack.allCases {
                    try await Self.check(attack, mode, harness)
                    checked += 1
                }
            }
            print("attack matrix: \(checked) cells checked")
        }
    }

    @Test("finding 5: an answer a stolen intermediate signed for 2286 is refused and leaves the device's verified time; genuine answers still verify")
    func futureSignedTime() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .informational, user: "free-user", storage: "future")
            #expect(try await purchases.customerInfo(fetchPolicy: .fetchCurrent).entitlements.verification == .verified)
            let floor = try #require(purchases.timeFloor.value)
            harness.proxy.attack = .futureTime
            let forged = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(forged.entitlements.verification == .failed && forged.verificationFailure == .intermediateExpired)
            #expect(try #require(purchases.timeFloor.value) < floor.addingTimeInterval(3_600))
            harness.proxy.attack = .none
            #expect(try await purchases.customerInfo(fetchPolicy: .fetchCurrent).entitlements.verification == .verified)
            // And on a fresh device (storage wiped or not) as well: the floor never passed the key's expiry.
            let expiry = harness.server.keys.currentSigner.key.certificate.expirationDate
            #expect(try #require(purchases.timeFloor.value) <= expiry)
        }
    }

    @Test(
        "an app built informational, raised to enforced by the server's signed policy, catches every attack exactly as one built enforced"
    )
    func matrixUnderPolicy() async throws {
        try await SDKHarness.run(configure: { deployment, _ in
            deployment.apps[0].verificationPolicy = .init(mode: .enforced, rolloutPercent: 100)
        }) { harness in
            try await harness.givePro(to: "paying-user")
            for attack in Attack.allCases {
                try await Self.check(attack, .informational, harness, raisedByPolicy: true)
            }
        }
    }

    /// One cell. `raisedByPolicy`: the app is built with `mode`, learns the server's enforced
    /// policy from one verified answer first, and must then behave as an app built `enforced`.
    static func check(_ attack: Attack, _ mode: EntitlementVerificationMode, _ harness: SDKHarness, raisedByPolicy: Bool = false) async throws {
        let failures = FailureLog()
        let storage = "\(mode)-\(attack.rawValue)" + (raisedByPolicy ? "-policy" : "")
        let purchases = try harness.purchases(mode: mode, user: "free-user", storage: storage) { configuration in
            configuration.verificationFailureHandler = { failures.add($0) }
            configuration.reportsVerificationFailures = false
        }
        harness.proxy.attack = .none
        if attack == .forge304 || raisedByPolicy {
            // A cached answer for the forged 304 to point at; the policy, from a verified answer.
            _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            if attack != .forge304 {
                // Only the policy stays: the cell starts as the built-enforced one does, from nothing cached.
                purchases.invalidateCustomerInfoCache()
                purchases.etags.clear()
                purchases.disk.remove("mapping.json")
            }
        }
        let mode = raisedByPolicy ? EntitlementVerificationMode.enforced : mode
        #expect(purchases.verificationMode == mode, "\(attack.rawValue): the policy did not raise the mode")
        harness.proxy.attack = attack
        let expected = Self.expected(attack, mode)
        let label = "\(mode)\(raisedByPolicy ? " (by policy)" : "") × \(attack.rawValue): expected \(expected)"
        do {
            let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(expected == .delivered(info.entitlements.verification, info.verificationFailure), "\(label)")
            #expect(info.entitlements.all.values.allSatisfy { $0.verification == info.entitlements.verification }, "\(label)")
            if Self.reason(attack) != nil {
                #expect(info.entitlements.verification != .verified, "\(label): an attack reported verified")
            }
            if info.entitlements.verification.isVerified {
                #expect(info.entitlements["pro"]?.isActive != true, "\(label): verified data must be the free user's own")
                #expect(info.originalAppUserId == "free-user", "\(label)")
            }
        } catch let error as PurchasesError {
            switch error {
            case .signatureVerificationFailed(let path, let status, let reason):
                #expect(expected == .rejected(reason), "\(label): threw \(error)")
                #expect(path == "/v1/subscribers/free-user" && (status == 200 || status == 304 || status == 422), "\(label)")
            case .offline:
                #expect(expected == .offline, "\(label): threw \(error)")
            case .server(_, let code?, _):
                #expect(expected == .refused(code), "\(label): threw \(error)")
            default:
                Issue.record("\(label): threw \(error)")
            }
            // Nothing from a refused answer reached the cache.
            let cached = try? await purchases.customerInfo(fetchPolicy: .fromCacheOnly)
            #expect(cached?.entitlements["pro"]?.isActive != true, "\(label)")
        }
        // The error handler saw the CustomerInfo failure (the follow-up mapping fetch goes through the proxy too).
        let seen = failures.all.filter { $0.path == "/v1/subscribers/free-user" }
        if mode != .disabled, let reason = Self.reason(attack) {
            #expect(seen.map(\.reason) == [reason], "\(label): the error handler saw \(seen)")
            #expect(seen.allSatisfy { $0.mode == mode && $0.appUserID == "free-user" }, "\(label)")
        } else {
            #expect(failures.all.isEmpty, "\(label)")
        }
        // No attack, a stripped or forged policy included, took the raised mode away.
        #expect(purchases.verificationMode == mode, "\(label): the mode is now \(purchases.verificationMode)")
    }
}
