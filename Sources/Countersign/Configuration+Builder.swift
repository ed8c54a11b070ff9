import CountersignCore
import Foundation

/// The StoreKit generation purchases go through, as RevenueCat names it. Countersign speaks
/// StoreKit 2 (signed transactions are what the server verifies); `storeKit1` is accepted so
/// RevenueCat code compiles, and runs on StoreKit 2 all the same (a warning says so).
public enum StoreKitVersion: Sendable, Hashable {
    case storeKit1
    case storeKit2

    public static let `default` = StoreKitVersion.storeKit2
}

extension Configuration {
    /// RevenueCat's way to configure, option by option:
    ///
    /// ```swift
    /// Purchases.configure(with: Configuration.Builder(withAPIKey: "cs_pub_...")
    ///     .with(serverURL: URL(string: "https://purchases.example.com")!)
    ///     .with(rootPublicKeys: ["<contents of keys/root.pub>"])
    ///     .with(entitlementVerificationMode: .informational)
    ///     .build())
    /// ```
    ///
    /// Every RevenueCat option that means something here takes effect; `serverURL` and
    /// `rootPublicKeys` are Countersign's own (a self-hosted server, its pinned root key) and
    /// must be given. Without `.with(store:)` the store is StoreKit 2 on Apple platforms and,
    /// elsewhere, the server's test store, signed in to a store account kept in the storage
    /// directory; without `.with(storageDirectory:)` caches live in Application Support.
    public final class Builder: @unchecked Sendable {
        private let apiKey: String
        private var appUserID: String?
        private var serverURL: URL?
        private var rootPublicKeys: [String] = []
        private var storageDirectory: URL?
        private var store: (any PurchaseStore)?
        private var mode: EntitlementVerificationMode = .informational
        private var completedBy: PurchasesAreCompletedBy = .countersign
        private var networkTimeout: TimeInterval = 30

        public init(withAPIKey apiKey: String) {
            self.apiKey = apiKey
        }

        /// The app user id; nil keeps the one on the device or makes an anonymous one.
        public func with(appUserID: String?) -> Builder { self.appUserID = appUserID; return self }
        /// The Countersign server.
        public func with(serverURL: URL) -> Builder { self.serverURL = serverURL; return self }
        /// The root public keys the app pins (base64, as `keys/root.pub` holds them).
        public func with(rootPublicKeys: [String]) -> Builder { self.rootPublicKeys = rootPublicKeys; return self }
        /// Where caches and the app user id live.
        public func with(storageDirectory: URL) -> Builder { self.storageDirectory = storageDirectory; return self }
        /// The store purchases go through (the test store, or a store of the app's own).
        public func with(store: any PurchaseStore) -> Builder { self.store = store; return self }
        public func with(entitlementVerificationMode mode: EntitlementVerificationMode) -> Builder { self.mode = mode; return self }
        /// Who finishes store transactions; `storeKitVersion` is StoreKit 2 whatever is asked.
        public func with(purchasesAreCompletedBy completedBy: PurchasesAreCompletedBy, storeKitVersion: StoreKitVersion) -> Builder {
            self.completedBy = completedBy
            warnIfStoreKit1(storeKitVersion)
            return self
        }
        public func with(storeKitVersion: StoreKitVersion) -> Builder { warnIfStoreKit1(storeKitVersion); return self }
        /// How long one request may take (default 30 seconds, as RevenueCat's).
        public func with(networkTimeout: TimeInterval) -> Builder { self.networkTimeout = networkTimeout; return self }

        private func warnIfStoreKit1(_ version: StoreKitVersion) {
            if version == .storeKit1 {
                SDKLog.log(.warn, "StoreKit 1 was asked for; Countersign uses StoreKit 2 (its signed transactions are what the server verifies)")
            }
        }

        /// The configuration. Stops with a message when the server URL or the root keys are
        /// missing (as a RevenueCat configuration without an API key stops): an app cannot
        /// verify anything without them.
        public func build() -> Configuration {
            guard let serverURL else { preconditionFailure("Configuration.Builder needs .with(serverURL:): the Countersign server's URL") }
            guard !rootPublicKeys.isEmpty else {
                preconditionFailure("Configuration.Builder needs .with(rootPublicKeys:): the server's root public key (keys/root.pub)")
            }
            let directory = storageDirectory ?? Configuration.defaultStorageDirectory(apiKey: apiKey)
            let resolvedStore: any PurchaseStore
            if let store {
                resolvedStore = store
            } else {
                do {
                    resolvedStore = try Configuration.defaultStore(
                        serverURL: serverURL, apiKey: apiKey, rootPublicKeys: rootPublicKeys, directory: directory)
                } catch {
                    preconditionFailure("Configuration.Builder cannot open the store in \(directory.path): \(error)")
                }
            }
            var configuration = Configuration(
                apiKey: apiKey, appUserID: appUserID, serverURL: serverURL, rootPublicKeys: rootPublicKeys,
                store: resolvedStore, storageDirectory: directory)
            configuration.entitlementVerificationMode = mode
            configuration.purchasesAreCompletedBy = completedBy
            configuration.networkTimeout = networkTimeout
            return configuration
        }
    }

    /// Application Support/Countersign/<a hash of the API key>: one directory per configured app.
    public static func defaultStorageDirectory(apiKey: String) -> URL {
        let base = FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first ?? FileManager.default.temporaryDirectory
        return base.appendingPathComponent("Countersign").appendingPathComponent(String(SHA256Hex.of(Data(apiKey.utf8)).prefix(16)))
    }

    /// StoreKit 2 on Apple platforms; elsewhere the server's test store, its account kept in `directory`.
    public static func defaultStore(serverURL: URL, apiKey: String, rootPublicKeys: [String], directory: URL) throws -> any PurchaseStore {
        #if canImport(StoreKit)
        if #available(iOS 17.0, macOS 14.0, tvOS 17.0, watchOS 10.0, *) {
            return StoreKitStore()
        } else {
            preconditionFailure("Countersign needs iOS 17, macOS 14, tvOS 17 or watchOS 10")
        }
        #else
        return try TestStore(serverURL: serverURL, apiKey: apiKey, rootPublicKeys: rootPublicKeys, directory: directory)
        #endif
    }
}
