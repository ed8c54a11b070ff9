import CountersignAppStore
import CountersignCore
import Foundation

/// Input: a compact JWS (or any text). The splitter must accept only three base64url segments,
/// and on the input and every decoded header and payload the two JSON readers (Core's syntax
/// check and the App Store reader) must agree on what is valid.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let input = Data(bytes: start, count: count)
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
