import Foundation

/// Runs the built `countersign` executable as a user would.
public struct CLIRunner {
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
        public var lines: [String] { (stdout + stderr).split(separator: "\n").map(String.init) }
    }

    /// The executable next to the test bundle in the build products directory.
    public static let executable: URL = {
        var directory = Bundle.main.bundleURL
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("countersign")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory.deleteLastPathComponent()
        }
        fatalError("countersign executable not found near \(Bundle.main.bundleURL.path); run `swift build` first")
    }()

    /// Runs the command on a thread of its own, so a test whose server lives in the same
    /// process never blocks a thread of Swift's small cooperative pool while waiting for it.
    public static func runInBackground(_ arguments: [String]) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Swift.Result { try run(arguments) }) }.start()
        }
    }

    public static func run(_ arguments: [String]) throws -> Result {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(
            status: process.terminationStatus,
            stdout: String(decoding: stdout, as: UTF8.self),
            stderr: String(decoding: stderr, as: UTF8.self)
        )
    }

}

/// A long-running `countersign` process (serve, proxy), stopped with SIGTERM.
public final class BackgroundCommand: @unchecked Sendable {
    public let process = Process()
    private let output = Pipe()

    /// Starts `arguments` and waits (up to a minute) for a stdout line starting with `prefix`;
    /// returns that line.
    public init(_ arguments: [String], waitingFor prefix: String) throws {
        process.executableURL = CLIRunner.executable
        process.arguments = arguments
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        var buffer = Data()
        let handle = output.fileHandleForReading
        while !String(decoding: buffer, as: UTF8.self).split(separator: "\n").contains(where: { $0.hasPrefix(prefix) }) {
            let chunk = handle.availableData
            if chunk.isEmpty {
                throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "\(arguments[0]) exited before '\(prefix)'"])
            }
            buffer.append(chunk)
        }
        line = String(String(decoding: buffer, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix(prefix) }!)
    }

    public let line: String

    /// The port in a `... http://HOST:PORT ...` line.
    public var port: Int {
        let url = line.split(separator: " ").first { $0.hasPrefix("http://") }!
        return Int(url.split(separator: ":").last!)!
    }

    public func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}
