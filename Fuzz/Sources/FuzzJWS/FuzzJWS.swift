import CountersignCore
@testable import CountersignAppStore
import Foundation

/// Input: a compact JWS (or any text). The splitter must accept only three base64url segments,
/// and on every decoded header and payload the two JSON readers (Core's syntax check and the App
/// Store reader) must agree on what is valid.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let input = Data(bytes: start, count: count)
    agree(on: input)
    let text = String(decoding: input, as: UTF8.self)
    guard let jws = try? CompactJWS(text) else { return 0 }
    precondition(text.utf8.filter { $0 == UInt8(ascii: ".") }.count == 2, "a JWS without exactly three segments was split")
    if let header = try? jws.header() { _ = header.chain }
    if let payload = try? jws.payload() {
        agree(on: payload)
        _ = try? SignedDataVerifier.payloadFields(payload)
    }
    _ = try? jws.signature()
    return 0
}

/// JSONSyntax and JSONParser read the same bytes the same way: both accept or both refuse
/// (JSONSyntax refuses duplicate keys, which JSONParser leaves to it, so those are set apart).
private func agree(on data: Data) {
    let syntax = JSONSyntax.check(data, topLevel: .anyValue)
    let parsed = try? JSONParser.parse(data)
    switch (syntax, parsed) {
    case (nil, nil): preconditionFailure("JSONSyntax accepts what JSONParser refuses")
    case (.some(let problem), .some):
        if case .duplicateKey = problem { return }
        preconditionFailure("JSONParser accepts what JSONSyntax refuses: \(problem)")
    default: return
    }
}
