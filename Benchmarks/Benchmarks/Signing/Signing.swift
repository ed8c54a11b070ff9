import Benchmark
import CountersignCore
import CountersignServerCore
import Crypto
import Foundation

// Signing and verifying a 1 KiB answer, next to a bare Ed25519 sign and verify of the same
// 1 KiB in the same run, so the overhead of the wire format reads as a ratio.

let root = try! RootSigningKey(seed: Data(1...32))
let intermediate = try! root.issueIntermediate(
    Curve25519.Signing.PrivateKey(rawRepresentation: Data(33...64)),
    expirationDays: UInt32(Date().timeIntervalSince1970 / 86_400) + 30
)

/// A 1 KiB JSON object body, as the subscriber endpoint answers.
let body: Data = {
    let prefix = #"{"request_date":"2026-01-01T00:00:00Z","request_date_ms":1767225600000,"subscriber":{"note":""#
    let suffix = "\"}}\n"
    return Data((prefix + String(repeating: "x", count: 1024 - prefix.utf8.count - suffix.utf8.count) + suffix).utf8)
}()

let request = SignedRequestParts(
    authValue: "cs_pub_demo_0123456789",
    nonce: Data("0123456789ab".utf8),
    path: "/v1/subscribers/u1",
    headersHash: FieldsHash.headerValue([("X-Is-Sandbox", "true")])
)
let responseParts = SignedResponseParts(requestTime: "1767225600000", etag: "0123456789abcdef", body: body)
let signer = ResponseSigner(key: intermediate)
let signature = try! signer.signature(request: request, response: responseParts)
let received = ReceivedResponse(statusCode: 200, signature: signature, requestTime: "1767225600000", etag: "0123456789abcdef", body: body)
let verifier = SignatureVerifier(rootKeys: [root.publicKey])
let bareSignature = try! intermediate.privateKey.signature(for: body)
let intermediatePublicKey = intermediate.privateKey.publicKey

let benchmarks: @Sendable () -> Void = {
    precondition(body.count == 1024)
    precondition(verifier.verify(request: request, response: received) == .verified)

    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .cpuTotal, .mallocCountTotal, .throughput],
        timeUnits: .nanoseconds,
        warmupIterations: 100,
        maxDuration: .seconds(3),
        maxIterations: 20_000
    )

    Benchmark("Ed25519 sign 1 KiB (bare)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try! intermediate.privateKey.signature(for: body))
        }
    }

    Benchmark("Countersign sign 1 KiB answer") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try! signer.signature(request: request, response: responseParts))
        }
    }

    Benchmark("Ed25519 verify 1 KiB (bare)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(intermediatePublicKey.isValidSignature(bareSignature, for: body))
        }
    }

    Benchmark("Countersign verify 1 KiB answer (intermediate cached)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(verifier.verify(request: request, response: received))
        }
    }
}
