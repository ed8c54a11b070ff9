import Foundation
import NIOCore
import NIOPosix

/// Process-wide settings for a process whose job is to run the server (`countersign serve`).
public enum ServerProcess {
    /// Tunes the allocator (``AllocatorTuning``), gives NIO one event loop per CPU the process
    /// may run on (``eventLoopCount(environment:)``), and runs Swift Concurrency's tasks on NIO's
    /// event loop threads instead of a separate pool. `COUNTERSIGN_NIO_EXECUTOR=0` leaves NIO's
    /// and Swift's defaults alone (the loop count and the executor).
    ///
    /// With the default pool every `await` on I/O is two thread switches: NIO reads a database
    /// answer or a request on an event loop thread and the task resumes on a pool thread. A
    /// purchase on PostgreSQL awaits about ten round trips, and a profile put a sixth of the
    /// server's CPU in the kernel's context switches; on NIO's threads the task resumes where the
    /// answer arrived (BENCHMARKS.md, decision 12).
    ///
    /// Call from the main thread before any task has run; returns whether NIO took over.
    @discardableResult
    public static func prepare(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        AllocatorTuning.apply(environment: environment)
        guard environment["COUNTERSIGN_NIO_EXECUTOR"] != "0" else { return false }
        if let count = eventLoopCount(environment: environment) {
            NIOSingletons.groupLoopCountSuggestion = count
        }
        return NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }

    /// The event loops the server should run when that is fewer than NIO would start: the CPUs
    /// the process may run on (`sched_getaffinity`, as `taskset` or `numactl` set it). NIO counts
    /// the machine's CPUs and its cgroup's quota or cpuset, not the affinity mask, so a server
    /// pinned with `taskset` to one core of two ran two loops taking turns on it: each
    /// request's connection, its batch of reads and its task could sit on a loop the kernel had to
    /// switch to (BENCHMARKS.md, decision 12). Nil when NIO's own count is no larger, or when the operator set
    /// `NIO_SINGLETON_GROUP_LOOP_COUNT`.
    static func eventLoopCount(environment: [String: String]) -> Int? {
        guard environment["NIO_SINGLETON_GROUP_LOOP_COUNT"] == nil, let allowed = allowedCPUCount(), allowed < System.coreCount else { return nil }
        return allowed
    }

    /// The number of CPUs in this process's affinity mask, nil where it cannot be read.
    static func allowedCPUCount() -> Int? {
        guard let mask = CPUAffinity.current() else { return nil }
        let count = mask.reduce(0) { $0 + $1.nonzeroBitCount }
        return count > 0 ? count : nil
    }
}

/// The calling thread's CPU affinity mask (Linux's `sched_getaffinity`/`sched_setaffinity` with
/// pid 0), as the bytes of a `cpu_set_t`: CPU `n` is bit `n % 8` of byte `n / 8`. The Glibc module
/// leaves these GNU functions out, so they are looked up like ``AllocatorTuning``'s `mallopt`.
enum CPUAffinity {
    /// The size of glibc's `cpu_set_t` (1024 CPUs).
    static let byteCount = 128
    private typealias Call = @convention(c) (Int32, Int, UnsafeMutableRawPointer) -> Int32

    static func current() -> [UInt8]? {
        var mask = [UInt8](repeating: 0, count: byteCount)
        guard let call = function("sched_getaffinity"), mask.withUnsafeMutableBytes({ call(0, byteCount, $0.baseAddress!) }) == 0 else { return nil }
        return mask
    }

    /// Sets the calling thread's mask (CPUs past its bytes are left out); false when refused
    /// (or not on Linux).
    @discardableResult
    static func set(_ mask: [UInt8]) -> Bool {
        var mask = mask
        guard let call = function("sched_setaffinity"), !mask.isEmpty else { return false }
        return mask.withUnsafeMutableBytes { call(0, $0.count, $0.baseAddress!) } == 0
    }

    private static func function(_ name: String) -> Call? {
        #if os(Linux)
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
        return unsafeBitCast(symbol, to: Call.self)
        #else
        return nil
        #endif
    }
}
