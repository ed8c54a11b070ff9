import CountersignTesting
import Foundation
import Testing

@testable import CountersignAppStore

/// Thousands of random mutations of one valid JWS: every one is rejected with an error, or
/// accepted only when the signed bytes (header and payload segments) and the decoded
/// signature are exactly the original ones. Nothing crashes.
@Suite("Signed data fuzzing")
struct SignedDataFuzzTests {
    static let iterations = 6_000

    enum Mutation: CaseIterable {
        case flipBit, deleteRange, insertCharacter, duplicateRange, cutSegments, brokenJSONPayload, swapSegments, replaceCharacter
    }

    static func mutate(_ jws: String, _ mutation: Mutation, _ generator: inout SeededGenerator) -> String {
        var bytes = Array(jws.utf8)
        let index = Int.random(in: 0..<bytes.count, using: &generator)
        switch mutation {
        case .flipBit:
            bytes[index] ^= 1 << UInt8.random(in: 0..<8, using: &generator)
        case .deleteRange:
            bytes.removeSubrange(index..<min(bytes.count, index + Int.random(in: 1...40, using: &generator)))
        case .insertCharacter:
            bytes.insert(Array("A-_=.+/{}\" \n".utf8).randomElement(using: &generator)!, at: index)
        case .duplicateRange:
            let end = min(bytes.count, index + Int.random(in: 1...20, using: &generator))
            bytes.insert(contentsOf: bytes[index..<end], at: end)
        case .replaceCharacter:
            bytes[index] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8).randomElement(using: &generator)!
        case .cutSegments:
            let segments = jws.split(separator: ".", omittingEmptySubsequences: false)
            let kept = segments.enumerated().filter { _ in Bool.random(using: &generator) }.map(\.element)
            return kept.joined(separator: ".")
        case .swapSegments:
            var segments = jws.split(separator: ".", omittingEmptySubsequences: false)
            segments.swapAt(Int.random(in: 0..<3, using: &generator), Int.random(in: 0..<3, using: &generator))
            return segments.joined(separator: ".")
        case .brokenJSONPayload:
            var segments = jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            var payload = [UInt8](Data(base64URL: segments[1])!)
            let position = Int.random(in: 0..<payload.count, using: &generator)
            payload[position] = Array("{}[]\",:0a ".utf8).randomElement(using: &generator)!
            segments[1] = Data(payload).base64URLEncodedString
            return segments.joined(separator: ".")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test("random mutations are rejected unless the signed bytes are unchanged")
    func mutations() async throws {
        let ca = try TestStoreCA.create(name: "fuzz")
        let (jws, _) = try ca.mintTransaction(.init(productId: "pro_monthly", type: .autoRenewable, bundleId: "com.example.demo"))
        let verifier = try SignedDataVerifier(configuration: .init(anchors: [ca.anchor], bundleId: "com.example.demo", environments: [.testStore]))
        let original = jws.split(separator: ".")
        let originalSignature = Data(base64URL: original[2])!
        var generator = SeededGenerator(seed: 2026)
        var rejected = 0
        var acceptedUnchanged = 0
        for _ in 0..<Self.iterations {
            let mutation = Mutation.allCases.randomElement(using: &generator)!
            let mutated = Self.mutate(jws, mutation, &generator)
            do {
                _ = try await verifier.verify(mutated, as: TransactionPayload.self)
                let parts = mutated.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ".", omittingEmptySubsequences: false)
                let unchanged =
                    parts.count == 3 && parts[0] == original[0] && parts[1] == original[1]
                    && Data(base64URL: parts[2]) == originalSignature
                #expect(unchanged, "accepted a changed JWS (\(mutation)): \(mutated)")
                acceptedUnchanged += 1
            } catch {
                rejected += 1
            }
        }
        print("signed-data fuzzing: \(Self.iterations) mutations, \(rejected) rejected, \(acceptedUnchanged) accepted with unchanged signed bytes")
        #expect(rejected > Self.iterations * 9 / 10)
    }
}
