import Foundation
import NIOCore
import NIOPosix

/// Process-wide settings for a process whose job is to run the server (`countersign serve`).
public enum ServerProcess {
    /// Tunes the allocator (``AllocatorTuning``) and runs Swift Concurrency's tasks on NIO's
    /// event loop threads instead of a separate pool, unless `COUNTERSIGN_NIO_EXECUTOR=0`.
    ///
    /// With the default pool every `await` on I/O is two thread switches: NIO reads a database
    /// answer or a request on an event loop thread and the task resumes on a pool thread. A
    /// purchase on PostgreSQL awaits about ten round trips, and a profile put a sixth of the
    /// server's CPU in the kernel's context switches; on NIO's threads the task resumes where the
    /// answer arrived (BENCHMARKS.md has the measurements).
    ///
    /// Call from the main thread before any task has run; returns whether NIO took over.
    @discardableResult
    public static func prepare(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        AllocatorTuning.apply(environment: environment)
        guard environment["COUNTERSIGN_NIO_EXECUTOR"] != "0" else { return false }
        return NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}
