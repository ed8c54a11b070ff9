import CountersignAppStore
import CountersignCore
import Foundation
import FuzzDriver

/// The program's entry point (see FuzzDriver.h): libFuzzer runs `fuzzOne` on each input.
@_cdecl("FuzzJWS_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, count in fuzzOne(data.map { Data(bytes: $0, count: count) } ?? Data()) }
}

/// Input: a compact JWS (or any text). The splitter must accept only three base64url segments,
/// and on the input and every decoded header and payload the two JSON readers (Core's syntax
/// check and the App Store reader) must agree on what is valid.
private func fuzzOne(_ input: Data) -> CInt {
    agree(on: input)
    let text = String(decoding: input, as: UTF8.self)
    guard let jws = try? UnverifiedJWS(text) else { return 0 }
    precondition(text.utf8.filter { $0 == UInt8(ascii: ".") }.count == 2, "a JWS without exactly three segments was split")
    precondition(JSONSyntax.check(jws.header, topLevel: .object) == nil, "a header that is not one JSON object was accepted")
    agree(on: jws.payload)
    return 0
}

/// JSONSyntax and the App Store reader read the same bytes the same way: both accept or both
/// refuse (JSONSyntax alone refuses duplicate keys, so those are set apart).
private func agree(on data: Data) {
    let syntax = JSONSyntax.check(data, topLevel: .anyValue)
    let parsed = AppStoreJSON.isWellFormed(data)
    switch (syntax, parsed) {
    case (nil, false): preconditionFailure("JSONSyntax accepts what the App Store reader refuses")
    case (.some(let problem), true):
        if case .duplicateKey = problem { return }
        preconditionFailure("the App Store reader accepts what JSONSyntax refuses: \(problem)")
    default: return
    }
}
