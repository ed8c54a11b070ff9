import CountersignCore
import CountersignServerCore
import Foundation
import FuzzSupport

/// The program's entry point: libFuzzer runs `fuzzOne` on each input.
@_cdecl("FuzzConfiguration_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

/// Input: the bytes of a `countersign.json`. Whatever is accepted must survive a save and a
/// second load unchanged (what the server writes back is what it read).
private func fuzzOne(_ input: Data) -> CInt {
    guard let configuration = try? DeploymentConfiguration.decode(input, source: "fuzz input") else { return 0 }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    let saved = try! encoder.encode(configuration)
    let again = try! DeploymentConfiguration.decode(saved, source: "saved configuration")
    precondition(again == configuration, "a saved configuration reads back differently")
    return 0
}
