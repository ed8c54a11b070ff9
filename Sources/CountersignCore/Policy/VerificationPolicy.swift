import Crypto
import Foundation

/// The verification policy a server states in every signed answer it is asked for one
/// (docs/wire-format.md, "Verification policy"): the mode an operator rolls out to a share of an
/// app's users, from an SDK version on, until a time.
///
/// It travels in the answer header `X-Verification-Policy`, whose value is part of the signed
/// message, in one of two spellings and no other:
///
///     none
///     mode=enforced;rollout=2500;sdk=0.2.0;seed=9f86d081884c7d65;expires=1798000000000
///
/// `rollout` is the share in basis points (0–10,000), `sdk` the lowest SDK version it applies to,
/// `seed` 16 lowercase hex characters that pick which users are in (``bucket(seed:appUserID:)``),
/// `expires` milliseconds since 1970 (1–16 digits, no leading zero) after which a client lets it
/// lapse. `none` says the app has no policy.
public struct VerificationPolicy: Sendable, Hashable, Codable {
    /// The mode a policy moves a client to (never below the one the app was built with).
    public enum Mode: String, Sendable, Hashable, Codable, CaseIterable {
        case informational
        case enforced
    }

    public var mode: Mode
    /// The share of users it applies to, in basis points (10,000 is everyone).
    public var rolloutBasisPoints: Int
    /// The lowest SDK version it applies to.
    public var minimumSDKVersion: SDKVersion
    /// Picks the users in the rollout, with their app user id.
    public var seed: String
    /// When a client stops applying it unless a later verified answer restates it.
    public var expiresMilliseconds: UInt64

    public static let fullRollout = 10_000

    public init(mode: Mode, rolloutBasisPoints: Int, minimumSDKVersion: SDKVersion, seed: String, expiresMilliseconds: UInt64) {
        self.mode = mode
        self.rolloutBasisPoints = min(max(rolloutBasisPoints, 0), Self.fullRollout)
        self.minimumSDKVersion = minimumSDKVersion
        self.seed = seed
        self.expiresMilliseconds = expiresMilliseconds
    }

    public var expirationDate: Date { Date(timeIntervalSince1970: TimeInterval(expiresMilliseconds) / 1000) }

    /// The header value.
    public var headerValue: String {
        "mode=\(mode.rawValue);rollout=\(rolloutBasisPoints);sdk=\(minimumSDKVersion);seed=\(seed);expires=\(expiresMilliseconds)"
    }

    /// Whether the policy applies to `appUserID` on an SDK of `sdkVersion` at `date`.
    public func applies(to appUserID: String, sdkVersion: SDKVersion, at date: Date) -> Bool {
        date < expirationDate && sdkVersion >= minimumSDKVersion && Self.bucket(seed: seed, appUserID: appUserID) < rolloutBasisPoints
    }

    /// A user's place in a rollout, 0..<10,000: the first 8 bytes of
    /// SHA-256(`seed` ‖ 0x00 ‖ app user id, UTF-8) as a big-endian integer, modulo 10,000. Stable,
    /// so raising the share only adds users; uniform, so a share of n basis points covers n in
    /// 10,000 users.
    public static func bucket(seed: String, appUserID: String) -> Int {
        var hash = SHA256()
        hash.update(data: Data(seed.utf8))
        hash.update(data: [0])
        hash.update(data: Data(appUserID.utf8))
        let value = hash.finalize().prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Int(value % UInt64(fullRollout))
    }

    /// The seed of an app that sets none: from its id, so two apps roll out to different users.
    public static func seed(forApp app: String) -> String {
        SHA256.hash(data: Data("countersign-rollout:\(app)".utf8)).prefix(8).hexString
    }

    /// What an `X-Verification-Policy` value states.
    public enum Statement: Sendable, Hashable {
        /// The app has no policy: clients apply the mode they were built with.
        case none
        case policy(VerificationPolicy)

        public var headerValue: String {
            switch self {
            case .none: "none"
            case .policy(let policy): policy.headerValue
            }
        }

        /// Reads a header value in its one spelling; nil for anything else. Compared byte by
        /// byte: the spelling is ASCII, and Swift's `String` comparison would take a canonically
        /// equivalent Unicode text as the same.
        public init?(header value: String) {
            guard value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
            if value == "none" {
                self = .none
                return
            }
            let fields = value.split(separator: ";", omittingEmptySubsequences: false)
            let names = ["mode", "rollout", "sdk", "seed", "expires"]
            guard fields.count == names.count else { return nil }
            var values: [Substring] = []
            for (field, name) in zip(fields, names) {
                guard field.hasPrefix(name + "=") else { return nil }
                values.append(field.dropFirst(name.count + 1))
            }
            guard let mode = Mode(rawValue: String(values[0])),
                let rollout = Self.decimal(values[1], maximumDigits: 5), rollout <= UInt64(VerificationPolicy.fullRollout),
                // Three numbers in the header (`1.2` elsewhere is 1.2.0): one spelling per policy.
                values[2].split(separator: ".", omittingEmptySubsequences: false).count == 3, let sdk = SDKVersion(values[2]),
                WireHeader.isLowercaseHex16(values[3]),
                let expires = Self.decimal(values[4], maximumDigits: 16), expires > 0
            else { return nil }
            self = .policy(
                VerificationPolicy(
                    mode: mode, rolloutBasisPoints: Int(rollout), minimumSDKVersion: sdk, seed: String(values[3]), expiresMilliseconds: expires))
        }

        /// 1 to `maximumDigits` ASCII digits, no leading zero but for `0` itself.
        static func decimal(_ text: Substring, maximumDigits: Int) -> UInt64? {
            let digits = Array(text.utf8)
            guard (1...maximumDigits).contains(digits.count), digits.allSatisfy({ (0x30...0x39).contains($0) }),
                digits.count == 1 || digits[0] != 0x30
            else { return nil }
            return digits.reduce(0) { $0 * 10 + UInt64($1 - 0x30) }
        }
    }
}

/// An SDK version, `major.minor.patch`, each 0–99,999, compared numerically.
public struct SDKVersion: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var major: Int
    public var minor: Int
    public var patch: Int

    public init(major: Int, minor: Int, patch: Int) {
        (self.major, self.minor, self.patch) = (major, minor, patch)
    }

    /// Parses `1.2.3` (also `1.2` and `1`, the rest zero); nil for anything else.
    public init?(_ text: some StringProtocol) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...3).contains(parts.count) else { return nil }
        var numbers: [Int] = []
        for part in parts {
            guard let number = VerificationPolicy.Statement.decimal(Substring(part), maximumDigits: 5) else { return nil }
            numbers.append(Int(number))
        }
        while numbers.count < 3 { numbers.append(0) }
        self.init(major: numbers[0], minor: numbers[1], patch: numbers[2])
    }

    public var description: String { "\(major).\(minor).\(patch)" }

    public static func < (lhs: SDKVersion, rhs: SDKVersion) -> Bool {
        (lhs.major, lhs.minor, lhs.patch) < (rhs.major, rhs.minor, rhs.patch)
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let version = SDKVersion(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "'\(text)' is not a version like 1.2.3"))
        }
        self = version
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
