import CountersignTesting
import Foundation
import Testing

@testable import CountersignAppStore

@Suite("base64url")
struct Base64URLTests {
    @Test("decoding inverts encoding for every length up to 200")
    func roundTrip() {
        var generator = SeededGenerator(seed: 4648)
        for length in 0...200 {
            let bytes = Data((0..<length).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
            #expect(Data(base64URL: bytes.base64URLEncodedString) == bytes, "length \(length)")
        }
    }

    @Test("padding, the standard alphabet, whitespace and impossible lengths are refused", arguments: ["AA==", "A+B/", "AB C", "A", "ABCDE", "AB\n"])
    func refused(_ text: String) {
        #expect(Data(base64URL: text) == nil)
    }
}
