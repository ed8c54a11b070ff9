import Foundation

/// How much the SDK logs, as RevenueCat's `LogLevel` names it.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    case verbose, debug, info, warn, error

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .verbose: "VERBOSE"
        case .debug: "DEBUG"
        case .info: "INFO"
        case .warn: "WARN"
        case .error: "ERROR"
        }
    }
}

extension Purchases {
    /// Messages at this level and above reach ``logHandler`` (default `.info`).
    public static var logLevel: LogLevel {
        get { SDKLog.state.withLock { $0.level } }
        set { SDKLog.state.withLock { $0.level = newValue } }
    }

    /// Receives each message at or above ``logLevel``; by default it writes
    /// `[Countersign] LEVEL: message` to standard error. Messages never hold API keys or whole
    /// signed transactions.
    public static var logHandler: @Sendable (LogLevel, String) -> Void {
        get { SDKLog.state.withLock { $0.handler } }
        set { SDKLog.state.withLock { $0.handler = newValue } }
    }
}

/// The SDK's log, one process-wide level and handler as in RevenueCat.
enum SDKLog {
    struct State {
        var level = LogLevel.info
        var handler: @Sendable (LogLevel, String) -> Void = { level, message in
            FileHandle.standardError.write(Data("[Countersign] \(level): \(message)\n".utf8))
        }
    }

    static let state = LockedState(State())

    static func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        let (threshold, handler) = state.withLock { ($0.level, $0.handler) }
        guard level >= threshold else { return }
        handler(level, message())
    }
}

/// A value behind a lock.
final class LockedState<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
