import CountersignAppStore
import Foundation
import FuzzSupport

/// The program's entry point: libFuzzer runs `fuzzOne` on each input.
@_cdecl("FuzzLegacyReceipt_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

/// Input: the bytes of a legacy app receipt (PKCS#7 BER) or the base64 text of one. The reader
/// (everything the verifier does before the signature) must answer contents or a format error,
/// never crash or hang.
private func fuzzOne(_ input: Data) -> CInt {
    if let receipt = try? AppReceiptVerifier.unverifiedContents(base64: input.base64EncodedString()) {
        precondition(!receipt.transactionIds.contains(""), "an empty transaction id")
    }
    _ = try? AppReceiptVerifier.unverifiedContents(base64: String(decoding: input, as: UTF8.self))
    return 0
}
