import CountersignAppStore
import Foundation
import FuzzSupport

/// The program's entry point: libFuzzer runs `fuzzOne` on each input.
@_cdecl("FuzzLegacyReceipt_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

/// Input: the bytes of a legacy app receipt (PKCS#7 BER) or the base64 text of one. The reader
/// must answer a transaction id, nil or a format error, never crash or hang.
private func fuzzOne(_ input: Data) -> CInt {
    if let id = try? LegacyReceipt.transactionId(fromBase64: input.base64EncodedString()) {
        precondition(!id.isEmpty, "an empty transaction id")
    }
    _ = try? LegacyReceipt.transactionId(fromBase64: String(decoding: input, as: UTF8.self))
    return 0
}
