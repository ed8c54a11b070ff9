import CountersignCore
import CountersignServerCore
import Crypto
import Foundation

/// Fixed keys for reproducible tests. Never use these outside tests: their seeds are public.
public enum TestKeys {
    /// RevenueCat's published Android test root seed (base64 without padding in their tests).
    public static let revenueCatRootSeed = unpaddedBase64("YMHMQMpepBKamtSzO8KCN2M8Z3AUW5R1JXIFtxUWFUI")
    /// RevenueCat's published Android test intermediate seed.
    public static let revenueCatIntermediateSeed = unpaddedBase64("fPBoIjQ7DecE89ATW6PZsqLVQNyEs5fiX3sUyS3U4YI")

    /// Our own fixed root: seed bytes 1...32.
    public static let root = try! RootSigningKey(seed: Data(1...32))
    /// A second root that apps do not pin: what an attacker would sign with.
    public static let foreignRoot = try! RootSigningKey(seed: Data(101...132))

    /// The day 2026-01-01 (UTC) and a moment inside it, for fixed-clock tests.
    public static let referenceDay: UInt32 = 20_454
    public static let referenceDate = Date(timeIntervalSince1970: TimeInterval(referenceDay) * 86_400 + 3_600)

    /// An intermediate of ``root`` expiring 30 days after ``referenceDay``.
    public static let intermediate = makeIntermediate(root: root, seed: Data(33...64), expirationDays: referenceDay + 30)

    public static func makeIntermediate(root: RootSigningKey, seed: Data, expirationDays: UInt32) -> IntermediateSigningKey {
        try! root.issueIntermediate(Curve25519.Signing.PrivateKey(rawRepresentation: seed), expirationDays: expirationDays)
    }

    /// Decodes base64 that may lack its `=` padding.
    public static func unpaddedBase64(_ text: String) -> Data {
        let padded = text + String(repeating: "=", count: (4 - text.count % 4) % 4)
        guard let data = Data(base64Encoded: padded) else { preconditionFailure("bad base64 in test data: \(text)") }
        return data
    }
}
