import CountersignCore
import Foundation

extension AppConfiguration {
    /// Entitlement tokens for the app's own backend (docs/entitlement-tokens.md).
    public struct EntitlementTokenSettings: Codable, Sendable, Hashable {
        /// The ids the app's backends check `aud` against; the SDK asks for one of them.
        public var audiences: [String]
        /// How long a token lives, in seconds (default 600; 30 to 86,400). A token never
        /// outlives the earliest expiry of the entitlements it vouches for.
        public var lifetimeSeconds: Int?

        public static let defaultLifetime = 600
        static let lifetimeRange = 30...86_400

        public init(audiences: [String], lifetimeSeconds: Int? = nil) {
            self.audiences = audiences
            self.lifetimeSeconds = lifetimeSeconds
        }

        public var lifetime: Int { lifetimeSeconds ?? Self.defaultLifetime }

        func validate(app: String) throws(ConfigurationError) {
            let name = "app '\(app)' entitlementTokens"
            guard !audiences.isEmpty else { throw ConfigurationError("\(name): list at least one audience") }
            for audience in audiences where !EntitlementToken.isUsableText(audience) {
                throw ConfigurationError("\(name): audience '\(audience.prefix(64))' must be 1 to 256 characters without control characters")
            }
            if let lifetimeSeconds, !Self.lifetimeRange.contains(lifetimeSeconds) {
                throw ConfigurationError("\(name): lifetimeSeconds must be from 30 to 86400")
            }
        }
    }

    /// The verification policy the server states in its signed answers (docs/sdk.md,
    /// "Verification policy").
    public struct VerificationPolicySettings: Codable, Sendable, Hashable {
        /// `informational` or `enforced`: what clients in the rollout apply (an app built with
        /// a higher mode keeps it).
        public var mode: VerificationPolicy.Mode
        /// The share of the app's users the mode applies to, 0 to 100 (to 0.01).
        public var rolloutPercent: Double
        /// The lowest SDK version it applies to (`1.2.3`); every version when unset.
        public var minimumSDKVersion: SDKVersion?
        /// How long a client keeps applying it without a verified answer restating it, in hours
        /// (default 24; 1 to 720). A client whose answers stop verifying falls back to the mode
        /// it was built with once this has passed.
        public var lifetimeHours: Double?
        /// Picks the users in the rollout (16 lowercase hex characters); derived from the app id
        /// when unset. Change it to draw another sample of users.
        public var seed: String?

        public static let defaultLifetimeHours = 24.0

        public init(
            mode: VerificationPolicy.Mode, rolloutPercent: Double, minimumSDKVersion: SDKVersion? = nil, lifetimeHours: Double? = nil,
            seed: String? = nil
        ) {
            self.mode = mode
            self.rolloutPercent = rolloutPercent
            self.minimumSDKVersion = minimumSDKVersion
            self.lifetimeHours = lifetimeHours
            self.seed = seed
        }

        /// The share in basis points (a share out of range counts as its nearest bound; a
        /// configuration file is refused at start for one).
        public var rolloutBasisPoints: Int {
            guard rolloutPercent.isFinite else { return 0 }
            return Int((min(max(rolloutPercent, 0), 100) * 100).rounded())
        }

        /// The policy as stated at `date` for `app`. Its expiry is kept within what a client reads
        /// (16 digits of milliseconds), whatever the clock or the lifetime.
        public func policy(app: String, at date: Date) -> VerificationPolicy {
            let hours = lifetimeHours.flatMap { $0.isFinite ? min(max($0, 1), 720) : nil } ?? Self.defaultLifetimeHours
            let milliseconds = (date.timeIntervalSince1970 + hours * 3_600) * 1000
            let expires = milliseconds.isFinite ? UInt64(min(max(milliseconds, 1), 9_999_999_999_999_999)) : 1
            return VerificationPolicy(
                mode: mode, rolloutBasisPoints: rolloutBasisPoints, minimumSDKVersion: minimumSDKVersion ?? SDKVersion(major: 0, minor: 0, patch: 0),
                seed: seed ?? VerificationPolicy.seed(forApp: app), expiresMilliseconds: expires)
        }

        func validate(app: String) throws(ConfigurationError) {
            let name = "app '\(app)' verificationPolicy"
            guard rolloutPercent.isFinite, (0...100).contains(rolloutPercent) else {
                throw ConfigurationError("\(name): rolloutPercent must be from 0 to 100")
            }
            if let lifetimeHours, !lifetimeHours.isFinite || !(1...720).contains(lifetimeHours) {
                throw ConfigurationError("\(name): lifetimeHours must be from 1 to 720")
            }
            if let seed, !WireHeader.isLowercaseHex16(seed) {
                throw ConfigurationError("\(name): seed must be 16 lowercase hexadecimal characters")
            }
        }
    }
}
