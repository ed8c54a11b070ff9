import Foundation
import FuzzDriver

/// The one input handler of this process (libFuzzer takes a plain C function, so it cannot
/// carry a closure's context).
nonisolated(unsafe) private var handler: ((Data) -> CInt)?

/// Runs libFuzzer with `body` as the input handler; each target's `<Target>_main` (the entry
/// SwiftPM links every executable to) calls this.
public func runFuzzer(
    _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ body: @escaping (Data) -> CInt
) -> CInt {
    handler = body
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, count in
        handler!(data.map { Data(bytes: $0, count: count) } ?? Data())
    }
}
