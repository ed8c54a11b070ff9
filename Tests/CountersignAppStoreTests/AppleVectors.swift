import CountersignAppStore
import CountersignTesting
import Foundation
import X509

/// `Tests/Fixtures/apple/`: Apple's public signed-data vectors, their manifest and files.
enum AppleVectors {
    static let directory = Fixtures.url("apple")

    nonisolated(unsafe) static let manifest: [String: Any] = {
        try! JSONSerialization.jsonObject(with: Fixtures.data("apple/manifest.json")) as! [String: Any]
    }()

    static func entries(_ section: String) -> [[String: Any]] {
        manifest[section] as? [[String: Any]] ?? []
    }

    static func text(_ path: String) -> String {
        String(decoding: Fixtures.data("apple/\(path)"), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func certificate(_ path: String) -> Certificate {
        try! TrustAnchor.loadCertificate(from: directory.appendingPathComponent(path))
    }

    static var appleRoot: Certificate { certificate("roots/AppleRootCA-G3.cer") }
    static var appleLibraryTestRoot: Certificate { certificate("roots/apple-lib-testCA.der") }

    /// A verifier for one app, trusting `root` for Production and Sandbox (as Apple's root is).
    /// It accepts Sandbox, and Production too when given the app's Apple ID (required for it).
    static func verifier(
        root: Certificate, bundleId: String?, appAppleId: Int64? = nil,
        environments: Set<AppStoreEnvironment>? = nil, now: Date = Date()
    ) -> SignedDataVerifier {
        var configuration = SignedDataVerifier.Configuration(
            anchors: [TrustAnchor(certificate: root, environments: [.production, .sandbox])],
            bundleId: bundleId, appAppleId: appAppleId, environments: environments ?? (appAppleId == nil ? [.sandbox] : [.sandbox, .production])
        )
        configuration.now = { now }
        // Apple's test certificates carry no key identifiers; Apple's own tests turn strict mode
        // off for them, and so do these (Apple's real chains are checked strictly).
        configuration.requiresKeyIdentifiers = root != appleLibraryTestRoot
        return try! SignedDataVerifier(configuration: configuration)
    }

    /// Looks up a dotted path (`data.bundleId`) in a JSON object.
    static func value(_ object: Any?, at path: String) -> Any? {
        path.split(separator: ".").reduce(object) { current, key in (current as? [String: Any])?[String(key)] }
    }

    /// Compares a vector's expected field to what our typed model decoded (re-encoded as JSON).
    /// Numbers may differ by under 1 ms: our encoder writes whole milliseconds.
    static func matches(_ actual: Any?, _ expected: Any) -> Bool {
        switch (actual, expected) {
        case (nil, is NSNull): return true
        case (let a as NSNumber, let e as NSNumber): return abs(a.doubleValue - e.doubleValue) < 1
        case (let a as String, let e as String): return a == e
        default: return false
        }
    }

    static func encodedFields(_ payload: some Encodable) -> Any {
        try! JSONSerialization.jsonObject(with: AppStoreJSON.makeEncoder().encode(payload))
    }
}
