import CountersignCore
import CountersignServerCore
import Foundation
import FuzzSupport

/// The program's entry point: libFuzzer runs `fuzzOne` on each input.
@_cdecl("FuzzCapturedHTTP_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

/// Input: a captured request and its response as raw HTTP, split at the first NUL byte (the
/// layout `countersign verify` reads from two files). Whatever the parser accepts without chunked
/// framing must keep the body exactly as sent after the head, and a second parse of the same
/// bytes must agree.
private func fuzzOne(_ input: Data) -> CInt {
    let parts = input.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
    let requestData = Data(parts[0])
    let responseData = parts.count > 1 ? Data(parts[1]) : Data()
    if let message = try? HTTPMessage(parsing: responseData), message[header: "Transfer-Encoding"] == nil {
        precondition(responseData.count >= message.body.count, "a body longer than the message")
        precondition(responseData.suffix(message.body.count) == message.body, "the body is not the bytes after the head")
    }
    let first = try? CapturedExchange(request: requestData, response: responseData)
    let second = try? CapturedExchange(request: requestData, response: responseData)
    precondition(first == second, "two parses of the same capture disagree")
    return 0
}
