import CountersignCore
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How the SDK treats signed answers (docs/sdk.md, "Verification").
public enum EntitlementVerificationMode: String, Sendable, Codable, CaseIterable {
    /// No verification: every result is `notRequested`.
    case disabled
    /// Verify; a failed answer is still delivered, marked `failed`, and reported.
    case informational
    /// Verify; a failed answer is an error (`signatureVerificationFailed`) and nothing is granted.
    case enforced
}

/// Who finishes store transactions.
public enum PurchasesAreCompletedBy: String, Sendable, Codable {
    /// The SDK finishes a transaction once the server recorded it and the answer was not rejected.
    case countersign
    /// The app finishes transactions itself; the SDK records them and never finishes.
    case myApp

    /// RevenueCat's name for ``countersign``, so `.with(purchasesAreCompletedBy: .revenueCat, …)` compiles.
    public static let revenueCat = PurchasesAreCompletedBy.countersign
}

/// Everything `Purchases.configure(with:)` needs.
public struct Configuration: Sendable {
    /// The app's public API key (`cs_pub_...`).
    public var apiKey: String
    /// Nil: the id kept on disk, else the one RevenueCat's SDK kept on the device (see
    /// ``revenueCatDefaults``), else a new anonymous `$CSAnonymousID:<uuid>`, kept until `logIn`.
    public var appUserID: String?
    /// The Countersign server, e.g. `https://purchases.example.com`.
    public var serverURL: URL
    /// The pinned root public keys (base64 of 32 raw Ed25519 bytes); several allow rotation.
    public var rootPublicKeys: [String]
    public var entitlementVerificationMode: EntitlementVerificationMode = .informational
    /// How far the device clock may be past an intermediate key's expiry.
    public var clockSkewTolerance: TimeInterval = 0
    public var purchasesAreCompletedBy: PurchasesAreCompletedBy = .countersign
    /// The store purchases go through.
    public var store: any PurchaseStore
    /// Where caches and the anonymous id live (one directory per configured app).
    public var storageDirectory: URL
    /// Report verification failures to the server in the background (reason, path, mode, SDK
    /// version; no personal data beyond the app user id).
    public var reportsVerificationFailures = true
    /// How long failures are collected before one report is sent.
    public var diagnosticsBatchDelay: Duration = .seconds(2)
    /// Where reports go (default: the server URL).
    public var diagnosticsURL: URL?
    /// The app's version, sent with failure reports so the dashboard can tell app releases
    /// apart: the main bundle's `CFBundleShortVersionString` unless set (1 to 32 letters, digits
    /// and `.-+_`; anything else is not sent).
    public var appVersion: String? = Bundle.main.infoDictionary?["CFBundleShortVersionString"] as? String
    /// Receives every verification failure, in every verifying mode.
    public var verificationFailureHandler: (@Sendable (VerificationFailureEvent) -> Void)?
    /// The clock; tests inject one to check the cache's 5-minute rule without sleeping.
    public var now: @Sendable () -> Date = { Date() }
    /// The transport; tests may inject one.
    public var session: URLSession = .shared
    /// How long one request may take, in seconds (RevenueCat's default, 30).
    public var networkTimeout: TimeInterval = 30
    /// Requests that are safe to repeat (reads, and posts of a store transaction, which the
    /// server records once) are tried again this many times after a 429, a 5xx or a transport
    /// failure, waiting `retryBaseDelay` × 2ⁿ with jitter, or the answer's `Retry-After` (up to
    /// 60 seconds).
    public var networkRetries = 2
    public var retryBaseDelay: Duration = .milliseconds(500)
    /// At configure: fetch the CustomerInfo (the delegate and the stream get it), and on the
    /// first launch with this SDK post the store's current entitlements once, so a subscriber
    /// who bought before the move is entitled without Restore. False: only when asked (tests
    /// that count requests).
    public var launchRequests = true
    /// Where an app that used RevenueCat's SDK kept its app user id (read once, on the first
    /// launch with this SDK, when no id is configured), as `UserDefaults` suite names, nil for
    /// `UserDefaults.standard`: the standard defaults, then RevenueCat's suite
    /// `com.revenuecat.user_defaults`; key `com.revenuecat.userdefaults.appUserID.new`.
    public var revenueCatDefaults: [String?] = RevenueCatIdentity.defaultSuites

    public init(apiKey: String, appUserID: String? = nil, serverURL: URL, rootPublicKeys: [String], store: any PurchaseStore, storageDirectory: URL) {
        self.apiKey = apiKey
        self.appUserID = appUserID
        self.serverURL = serverURL
        self.rootPublicKeys = rootPublicKeys
        self.store = store
        self.storageDirectory = storageDirectory
    }
}

/// One verification failure, as the error handler and telemetry see it.
public struct VerificationFailureEvent: Sendable, Hashable {
    public var path: String
    public var statusCode: Int
    public var reason: VerificationFailure
    public var mode: EntitlementVerificationMode
    public var appUserID: String
}

/// The app user id RevenueCat's SDK left on the device, so a moved app keeps its users.
public enum RevenueCatIdentity {
    /// RevenueCat's key for the current app user id.
    public static let key = "com.revenuecat.userdefaults.appUserID.new"
    /// RevenueCat's own suite, where installs that did not use `UserDefaults.standard` keep it.
    public static let suiteName = "com.revenuecat.user_defaults"

    /// The standard defaults, then RevenueCat's suite, in the order RevenueCat reads them.
    public static let defaultSuites: [String?] = [nil, suiteName]

    /// The first usable id in the suites (nil: `UserDefaults.standard`): a RevenueCat anonymous
    /// id or any id that is not reserved, of at most 256 characters without control characters.
    public static func storedAppUserID(in suites: [String?]) -> String? {
        for suite in suites {
            guard let store = suite.map({ UserDefaults(suiteName: $0) }) ?? UserDefaults.standard,
                let id = store.string(forKey: key), !id.isEmpty, id.unicodeScalars.count <= 256,
                !id.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }),
                ReservedAppUserID.isAnonymous(id) || !ReservedAppUserID.isReserved(id)
            else { continue }
            return id
        }
        return nil
    }
}

/// The SDK's version, sent with telemetry.
public enum CountersignSDK {
    public static let version = "0.1.0"
}

extension Purchases {
    /// The one configure line that differs from RevenueCat's `configure(withAPIKey:appUserID:)`:
    /// a self-hosted server has its own URL and its own root keys to pin. The store is StoreKit 2
    /// on Apple platforms and the server's test store elsewhere; caches live in the user's
    /// Application Support directory. Verification is `enforced` (RevenueCat's default is
    /// `disabled`; a self-hosted server signs every answer, so there is no reason not to).
    ///
    /// An unusable configuration (root keys that are not Ed25519 public keys, storage that
    /// cannot be written) stops with a message saying what is wrong, as a misconfigured
    /// RevenueCat does; use ``configure(validating:)`` to handle it as an error instead.
    @discardableResult
    public static func configure(withAPIKey apiKey: String, serverURL: URL, rootPublicKeys: [String], appUserID: String? = nil) -> Purchases {
        configure(
            with: Configuration.Builder(withAPIKey: apiKey).with(serverURL: serverURL).with(rootPublicKeys: rootPublicKeys)
                .with(appUserID: appUserID).with(entitlementVerificationMode: .enforced).build())
    }
}
