@testable import Countersign
import CountersignCore
import CountersignProxy
import Foundation
import Testing

/// Acceptance 1 of the SDK: every mode × {honest answer, body changed, signature stripped,
/// signature from another root, answer replayed from an earlier request, another user's answer,
/// 304 with a forged ETag}, over real HTTP through the tampering proxy. The README's table is
/// this one.
@Suite("SDK verification matrix")
struct VerificationMatrixTests {
    enum Tampering: String, CaseIterable, Sendable {
        case honest, bodyChanged, signatureStripped, anotherRoot, replayed, anotherUsersAnswer, forged304

        var attack: TamperingProxy.Attack {
            switch self {
            case .honest: .none
            case .bodyChanged: .grantEntitlement
            case .signatureStripped: .stripSignature
            case .anotherRoot: .foreignRoot
            case .replayed: .replay
            case .anotherUsersAnswer: .crossUser
            case .forged304: .forge304
            }
        }

        /// What the verifier reports for it (the honest answer verifies).
        var reason: VerificationFailure? {
            switch self {
            case .honest: nil
            case .bodyChanged, .replayed, .anotherUsersAnswer, .forged304: .payloadMismatch
            case .signatureStripped: .missingSignature
            case .anotherRoot: .untrustedRoot
            }
        }
    }

    enum Expected: Hashable, CustomStringConvertible {
        /// Delivered with this verification result.
        case delivered(VerificationResult)
        /// `signatureVerificationFailed` with the reason; nothing delivered.
        case error(VerificationFailure)

        var description: String {
            switch self {
            case .delivered(let result): "delivered, \(result.rawValue)"
            case .error(let reason): "error signatureVerificationFailed(\(reason.rawValue))"
            }
        }
    }

    /// The table of expectations.
    static func expected(_ tampering: Tampering, _ mode: EntitlementVerificationMode) -> Expected {
        switch (mode, tampering.reason) {
        case (.disabled, _): .delivered(.notRequested)
        case (_, nil): .delivered(.verified)
        case (.informational, .some): .delivered(.failed)
        case (.enforced, let reason?): .error(reason)
        }
    }

    static let cases = EntitlementVerificationMode.allCases.flatMap { mode in Tampering.allCases.map { (mode, $0) } }

    @Test("mode × tampering gives the expected verification or error; enforced never hands back failed data")
    func matrix() async throws {
        try await SDKHarness.run { harness in
            try await harness.givePro(to: "paying-user")
            for (mode, tampering) in Self.cases {
                let failures = FailureLog()
                let storage = "\(mode)-\(tampering)"
                let purchases = try harness.purchases(mode: mode, user: "free-user", storage: storage) { configuration in
                    configuration.verificationFailureHandler = { failures.add($0) }
                    configuration.reportsVerificationFailures = false
                }
                harness.proxy.attack = .none
                if tampering == .forged304 {
                    // A cached answer for the forged 304 to point at.
                    _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                }
                harness.proxy.attack = tampering.attack
                let expected = Self.expected(tampering, mode)
                let label = "\(mode) × \(tampering): expected \(expected)"
                do {
                    let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                    #expect(expected == .delivered(info.entitlements.verification), "\(label)")
                    #expect(info.entitlements.all.values.allSatisfy { $0.verification == info.entitlements.verification }, "\(label)")
                    if info.entitlements.verification == .failed {
                        #expect(info.verificationFailure == tampering.reason, "\(label)")
                    }
                    if info.entitlements.verification.isVerified {
                        // Verified data is the free user's own, honest data.
                        #expect(info.entitlements["pro"]?.isActive != true, "\(label)")
                        #expect(info.originalAppUserId == "free-user", "\(label)")
                    }
                } catch let error as PurchasesError {
                    #expect(expected == error.verificationFailure.map(Expected.error), "\(label): threw \(error)")
                    if case .signatureVerificationFailed(let path, let status, _) = error {
                        #expect(path == "/v1/subscribers/free-user" && (status == 200 || status == 304), "\(label)")
                    }
                    // Nothing from the failed answer reached the cache.
                    let cached = try? await purchases.customerInfo(fetchPolicy: .fromCacheOnly)
                    #expect(cached?.entitlements["pro"]?.isActive != true, "\(label)")
                }
                // (The SDK's follow-up fetch of the product mapping goes through the proxy too.)
                let seen = failures.all.filter { $0.path == "/v1/subscribers/free-user" }
                if mode != .disabled, let reason = tampering.reason {
                    #expect(seen.map(\.reason) == [reason], "\(label): the error handler saw \(seen)")
                    #expect(seen.allSatisfy { $0.mode == mode && $0.appUserID == "free-user" }, "\(label)")
                } else {
                    #expect(failures.all.isEmpty, "\(label)")
                }
            }
        }
    }
}
