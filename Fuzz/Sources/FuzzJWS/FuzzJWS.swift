import CountersignAppStore
import CountersignCore
import Foundation
import FuzzSupport

/// The program's entry point: libFuzzer runs `fuzzOne` on each input.
@_cdecl("FuzzJWS_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

/// Input: a compact JWS (or any text). The splitter must accept only three base64url segments,
/// and the JSON reader, on the input and on every decoded header and payload, must accept only
/// what Foundation's parser accepts too.
private func fuzzOne(_ input: Data) -> CInt {
    agree(on: input)
    let text = String(decoding: input, as: UTF8.self)
    guard let jws = try? UnverifiedJWS(text) else { return 0 }
    precondition(text.utf8.filter { $0 == UInt8(ascii: ".") }.count == 2, "a JWS without exactly three segments was split")
    precondition(JSONSyntax.check(jws.header, topLevel: .object) == nil, "a header that is not one JSON object was accepted")
    agree(on: jws.payload)
    return 0
}

/// The JSON reader on any bytes: whatever it accepts, Foundation's parser must accept too (ours
/// only refuses more: repeated keys, lone surrogates, deep nesting), and `JSONSyntax.check` must
/// give the same verdict as a parse.
private func agree(on data: Data) {
    let parsed = try? JSONValue.parse(data)
    precondition((parsed == nil) == (JSONSyntax.check(data, topLevel: .anyValue) != nil), "check and parse disagree")
    if parsed != nil, data.count < 4096, !data.contains(where: { $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") }), longestDigitRun(data) <= 300 {
        // (Exponents and numbers of more than 300 digits are left out: Foundation refuses
        // numbers beyond Double's range, which a reader that keeps the number's text accepts;
        // the App Store decoders refuse them where they are read as numbers.)
        precondition((try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])) != nil,
                     "the reader accepts what Foundation refuses")
    }
}

/// The most ASCII digits in a row in `data`.
private func longestDigitRun(_ data: Data) -> Int {
    var longest = 0, run = 0
    for byte in data {
        run = (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) ? run + 1 : 0
        longest = max(longest, run)
    }
    return longest
}
