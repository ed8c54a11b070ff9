import Foundation

/// The test vectors kept in this repository under `Tests/Fixtures/` (their origins and licences
/// are in `Tests/Fixtures/README.md`). Found from this file's own path, so they are there on every
/// clone; a missing file is a broken checkout and stops the test run rather than skipping it.
public enum Fixtures {
    /// `Tests/Fixtures/` of the package this file was compiled from.
    public static let directory: URL = {
        var url = URL(fileURLWithPath: #filePath)
        while url.pathComponents.count > 1 {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) {
                return url.appendingPathComponent("Tests/Fixtures")
            }
        }
        fatalError("no Package.swift above \(#filePath)")
    }()

    /// A file under `Tests/Fixtures/`, by its relative path.
    public static func url(_ relativePath: String) -> URL {
        directory.appendingPathComponent(relativePath)
    }

    /// The bytes of a fixture; a missing one stops the run with its path.
    public static func data(_ relativePath: String) -> Data {
        let url = url(relativePath)
        guard let data = try? Data(contentsOf: url) else {
            fatalError("missing fixture \(url.path): the checkout is incomplete")
        }
        return data
    }
}
