import Foundation

/// A new, empty directory under the system's temporary directory; the caller removes it.
public func makeTemporaryDirectory(_ prefix: String = "countersign") throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}
