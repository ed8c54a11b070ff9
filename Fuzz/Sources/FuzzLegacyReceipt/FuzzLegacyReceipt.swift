import CountersignAppStore
import Foundation

/// Input: the bytes of a legacy app receipt (PKCS#7 BER) or the base64 text of one. The reader
/// must answer a transaction id, nil or a format error, never crash or hang.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let input = Data(bytes: start, count: count)
    if let id = try? LegacyReceipt.transactionId(fromBase64: input.base64EncodedString()) {
        precondition(!id.isEmpty, "an empty transaction id")
    }
    _ = try? LegacyReceipt.transactionId(fromBase64: String(decoding: input, as: UTF8.self))
    return 0
}
