import CountersignCore
import Foundation

/// The verification policy this device last had from a verified answer (docs/sdk.md,
/// "Verification policy"), kept on disk across launches, and the mode it makes: the mode the app
/// was built with, raised to the policy's while the policy applies to the current user and has
/// not expired. It never lowers the built mode, and a policy only ever comes from an answer that
/// verified, so a stripped or forged policy changes nothing; one left unrefreshed lapses.
final class VerificationPolicyState: @unchecked Sendable {
    let compiledMode: EntitlementVerificationMode
    private let store: CacheFiles
    private let lock = NSLock()
    private var policy: VerificationPolicy?
    static let fileName = "verification-policy.json"
    /// This SDK's version, as a policy's floor is compared with it.
    static let sdkVersion = SDKVersion(CountersignSDK.version)

    init(compiledMode: EntitlementVerificationMode, store: CacheFiles) {
        self.compiledMode = compiledMode
        self.store = store
        policy = store.read(VerificationPolicy.self, Self.fileName)
    }

    /// The policy last stated in a verified answer, if it has not been withdrawn.
    var current: VerificationPolicy? { lock.withLock { policy } }

    /// The mode for `appUserID` at `date` (the device clock: a policy lapses by it).
    func mode(for appUserID: String, at date: Date) -> EntitlementVerificationMode {
        guard compiledMode == .informational, let policy = current, policy.mode == .enforced,
            let version = Self.sdkVersion, policy.applies(to: appUserID, sdkVersion: version, at: date)
        else { return compiledMode }
        return .enforced
    }

    /// Takes the statement of an answer that verified: a new policy, or `none` (withdrawn).
    func record(_ statement: VerificationPolicy.Statement) {
        let next: VerificationPolicy?
        switch statement {
        case .none: next = nil
        case .policy(let policy): next = policy
        }
        let changed = lock.withLock { () -> Bool in
            guard policy != next else { return false }
            policy = next
            return true
        }
        guard changed else { return }
        if let next { store.write(next, Self.fileName) } else { store.remove(Self.fileName) }
    }
}
