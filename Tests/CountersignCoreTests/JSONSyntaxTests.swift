import CountersignTesting
import Foundation
import Testing

@testable import CountersignCore

@Suite("JSON syntax check")
struct JSONSyntaxTests {
    @Test(
        "valid JSON documents are accepted",
        arguments: [
            "{}", " {} \n", #"{"a":[1,-2.5e+3,0,0.1,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9"]}"#,
            #"{"nested":{"deep":[[[{}]]]}}"#, #"{"é":"漢🙂"}"#,
        ])
    func valid(_ text: String) {
        #expect(JSONSyntax.isValid(Data(text.utf8), topLevel: .object))
        #expect(JSONSyntax.isValid(Data(text.utf8), topLevel: .anyValue))
    }

    @Test(
        "invalid JSON is rejected",
        arguments: [
            "", "{", "}", "{\"a\"}", "{\"a\":}", "{a:1}", "{\"a\":1,}", "[1,]", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}",
            "{\"a\":-}", "{\"a\":1e}", "{\"a\":tru}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12g4\"}", "{\"a\":\"\u{01}\"}",
            "{\"a\":\"unterminated}", "{} {}", "{}x", "\u{FEFF}{}", "{\"a\":NaN}",
        ])
    func invalid(_ text: String) {
        #expect(!JSONSyntax.isValid(Data(text.utf8), topLevel: .anyValue))
    }

    @Test("top-level kinds: scalars are JSON but not objects")
    func topLevel() {
        for text in ["\"\"", "12", "null", "[]"] {
            #expect(JSONSyntax.isValid(Data(text.utf8), topLevel: .anyValue))
            #expect(!JSONSyntax.isValid(Data(text.utf8), topLevel: .object))
        }
    }

    @Test("trailing commas, which Foundation's parser tolerates, are rejected")
    func trailingCommas() {
        #expect(!JSONSyntax.isValid(Data(#"{"a":{"b":1},}"#.utf8), topLevel: .object))
        #expect(!JSONSyntax.isValid(Data(#"{"a":[1,null,]}"#.utf8), topLevel: .object))
    }

    @Test("deep nesting is refused without exhausting the stack")
    func deepNesting() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(!JSONSyntax.isValid(Data(deep.utf8), topLevel: .anyValue))
        let fine = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(JSONSyntax.isValid(Data(fine.utf8), topLevel: .anyValue))
    }

    @Test("on random JSON-ish bytes the scanner agrees with Foundation's parser (apart from repeated keys)")
    func randomBytes() {
        var generator = SeededGenerator(seed: 20_261_123)
        let alphabet = Array("{}[]\":,.-+eE0123456789 tfnrul\\\n".utf8)
        var accepted = 0
        for _ in 0..<5_000 {
            let data = Data((0..<Int.random(in: 0...64, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! })
            let problem = JSONSyntax.check(data, topLevel: .anyValue)
            let foundation = (try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])) != nil
            if case .duplicateKey = problem { continue }
            #expect((problem == nil) == foundation, "\(String(decoding: data, as: UTF8.self))")
            if problem == nil { accepted += 1 }
        }
        #expect(accepted > 0, "the generator made no valid JSON at all; the comparison proved nothing")
    }
}
