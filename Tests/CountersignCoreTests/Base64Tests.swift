import CountersignTesting
import Foundation
import Testing

@testable import CountersignCore

@Suite("Base64 encoder")
struct Base64Tests {
    @Test("agrees with Foundation for every length up to 300 and random contents")
    func agreesWithFoundation() {
        var generator = SeededGenerator(seed: 64)
        for length in 0...300 {
            let bytes = (0..<length).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
            #expect(Base64.encode(bytes) == Data(bytes).base64EncodedString(), "length \(length)")
        }
    }

    @Test("RFC 4648 test vectors")
    func rfcVectors() {
        let vectors = ["": "", "f": "Zg==", "fo": "Zm8=", "foo": "Zm9v", "foob": "Zm9vYg==", "fooba": "Zm9vYmE=", "foobar": "Zm9vYmFy"]
        for (input, output) in vectors {
            #expect(Base64.encode(Array(input.utf8)) == output)
        }
    }
}
