import CountersignCore
import Foundation

/// Input: the bytes of a `countersign.json`. Whatever is accepted must survive a save and a
/// second load unchanged (what the server writes back is what it read).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let input = Data(bytes: start, count: count)
    guard let configuration = try? DeploymentConfiguration.decode(input, source: "fuzz input") else { return 0 }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    let saved = try! encoder.encode(configuration)
    let again = try! DeploymentConfiguration.decode(saved, source: "saved configuration")
    precondition(again == configuration, "a saved configuration reads back differently")
    return 0
}
