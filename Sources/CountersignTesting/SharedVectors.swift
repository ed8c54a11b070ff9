import Foundation

/// Finds `../shared/vectors` beside the project root, where every developer machine and CI keep
/// the RevenueCat and Apple test vectors. A user's own clone may not have it; tests then skip.
public enum SharedVectors {
    /// The vectors directory, or nil (with the reason) when it is absent.
    public static func directory(file: StaticString = #filePath) -> Result<URL, MissingVectors> {
        if let override = ProcessInfo.processInfo.environment["COUNTERSIGN_VECTORS"] {
            return .success(URL(fileURLWithPath: override))
        }
        var url = URL(fileURLWithPath: "\(file)")
        while url.pathComponents.count > 1 {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) {
                let vectors = url.deletingLastPathComponent().appendingPathComponent("shared/vectors")
                if FileManager.default.fileExists(atPath: vectors.path) { return .success(vectors) }
                return .failure(MissingVectors(reason: "no vectors at \(vectors.path) (set COUNTERSIGN_VECTORS to point elsewhere)"))
            }
        }
        return .failure(MissingVectors(reason: "could not find the package root above \(file)"))
    }

    public struct MissingVectors: Error, CustomStringConvertible {
        public let reason: String
        public var description: String { reason }
    }
}
