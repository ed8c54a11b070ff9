import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Keeps glibc's allocator from handing memory back to the kernel after every request.
///
/// By default glibc trims a thread's heap as soon as 128 KiB at its top are free, with
/// `madvise(MADV_DONTNEED)`; the next request touches those pages again and takes a page fault
/// for each. NIO's threads and Swift's cooperative pool allocate and free about that much per
/// request, so with glibc's defaults the server pays a trim and a burst of page faults on nearly
/// every answer (BENCHMARKS.md, decision 13).
///
/// Freed memory up to 32 MiB per heap is kept for reuse, and blocks under 4 MiB come from the
/// heap rather than their own `mmap`. An operator who tunes malloc (`GLIBC_TUNABLES` naming
/// `glibc.malloc`, or a `MALLOC_…` variable) keeps their settings.
public enum AllocatorTuning {
    public static let trimThreshold: Int32 = 32 << 20
    public static let mmapThreshold: Int32 = 4 << 20

    /// Applies the thresholds; true when they were applied (glibc, and no operator settings).
    @discardableResult
    public static func apply(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        #if canImport(Glibc)
        let operatorTuned =
            environment["GLIBC_TUNABLES"]?.contains("glibc.malloc") == true
            || environment.keys.contains { $0.hasPrefix("MALLOC_") }
        // mallopt is declared in <malloc.h>, which the Glibc module does not bring in: look it up.
        // Its option numbers are glibc's ABI: M_TRIM_THRESHOLD -1, M_MMAP_THRESHOLD -3.
        guard !operatorTuned, let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return false }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        return mallopt(-3, mmapThreshold) == 1 && mallopt(-1, trimThreshold) == 1
        #else
        return false
        #endif
    }
}
