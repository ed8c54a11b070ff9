import CountersignCore
import Crypto
import Foundation
import FuzzSupport

private let verifier = SignatureVerifier(configuration: .init(rootKeys: [
    // RevenueCat's production root (public vectors): real, and its private key is not ours.
    try! Curve25519.Signing.PublicKey(base64: "UC1upXWg5QVmyOSwozp755xLqquBKjjU+di6U8QhMlM="),
]))
private let request = SignedRequestParts(
    authValue: "appl_fuzz", nonce: Data(repeating: 7, count: 12), path: "/v1/subscribers/fuzz"
)

/// The program's entry point: libFuzzer runs `fuzzOne` on each input.
@_cdecl("FuzzSignatureHeader_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

/// Input: `X-Signature` value, `X-Request-Time` value, `X-ETag` value, then the body, split at
/// the first three newlines. The blob parser must round-trip whatever it accepts, and the full
/// verifier must never call an answer verified under a root whose private key nobody has here.
private func fuzzOne(_ input: Data) -> CInt {
    if let blob = try? SignatureBlob(rawRepresentation: input) {
        precondition(blob.rawRepresentation == input, "a parsed blob re-encodes to other bytes")
    }
    let fields = input.split(separator: UInt8(ascii: "\n"), maxSplits: 3, omittingEmptySubsequences: false)
    let text = { (index: Int) -> String? in
        index < fields.count ? String(decoding: fields[index], as: UTF8.self) : nil
    }
    if let header = text(0), let blob = try? SignatureBlob(base64: header) {
        precondition(blob.rawRepresentation.count == SignatureBlob.byteCount, "a parsed blob has the wrong size")
    }
    if let time = text(1), let milliseconds = SignatureVerifier.parseRequestTime(time) {
        precondition(String(milliseconds) == time, "a request time is read as another number")
    }
    for status in [200, 304] {
        let response = ReceivedResponse(
            statusCode: status, signature: text(0), requestTime: text(1), etag: text(2),
            body: fields.count > 3 ? Data(fields[3]) : Data()
        )
        precondition(verifier.verify(request: request, response: response) != .verified, "a forged answer verified")
    }
    return 0
}
