import CountersignCore
import Crypto
import Foundation
import FuzzSupport

private let verifier = EntitlementTokenVerifier(
    rootKeys: [
        // RevenueCat's production root (public vectors): real, and its private key is not ours.
        try! Curve25519.Signing.PublicKey(base64: "UC1upXWg5QVmyOSwozp755xLqquBKjjU+di6U8QhMlM=")
    ], audience: "api.example.com", now: { Date(timeIntervalSince1970: 1_796_000_000) })

/// The program's entry point: libFuzzer runs `fuzzOne` on each input.
@_cdecl("FuzzEntitlementToken_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

/// Input: an entitlement token, or an `X-Verification-Policy` value. No token verifies under a
/// root whose private key nobody has here, nothing stops the process, and a policy value that
/// parses is written back as the very same text (it has one spelling).
private func fuzzOne(_ input: Data) -> CInt {
    let text = String(decoding: input, as: UTF8.self)
    if case .some = try? verifier.verify(text) {
        preconditionFailure("a forged token verified")
    }
    if let statement = VerificationPolicy.Statement(header: text) {
        precondition(statement.headerValue == text, "a policy value is read as another")
    }
    return 0
}
