import Benchmark
import CountersignAppStore
import Crypto
import Foundation

// Verifying a StoreKit 2 transaction whose certificate chain the verifier has already seen,
// next to a bare P-256 ECDSA verification of the same signing input in the same run.

let ca = try! TestStoreCA.create(name: "benchmark")
let (jws, _) = try! ca.mintTransaction(.init(productId: "pro_monthly", type: .autoRenewable, bundleId: "com.example.demo"))
let verifier = try! SignedDataVerifier(configuration: .init(anchors: [ca.anchor], bundleId: "com.example.demo", environments: [.testStore]))

// The same bytes a bare verification checks: `header.payload` and the raw R‖S signature.
let parts = jws.split(separator: ".")
let signingInput = Data((parts[0] + "." + parts[1]).utf8)
let signature: P256.Signing.ECDSASignature = {
    var text = String(parts[2]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while text.count % 4 != 0 { text += "=" }
    return try! P256.Signing.ECDSASignature(rawRepresentation: Data(base64Encoded: text)!)
}()
let leafKey = P256.Signing.PublicKey(ca.leaf.publicKey)!

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .mallocCountTotal, .throughput],
        timeUnits: .nanoseconds,
        warmupIterations: 2,
        // 1,000 verifications per sample: package-benchmark hands every sample of an async
        // benchmark to a task and waits for it, which costs a thread switch; batching makes
        // that cost vanish from both sides of the comparison.
        scalingFactor: .kilo,
        maxDuration: .seconds(8),
        maxIterations: 100
    )

    Benchmark("P-256 verify (bare)") { benchmark in
        precondition(leafKey.isValidSignature(signature, for: signingInput))
        for _ in benchmark.scaledIterations {
            blackHole(leafKey.isValidSignature(signature, for: signingInput))
        }
    }

    Benchmark("Transaction verify, chain already seen") { benchmark in
        _ = try await verifier.verify(jws, as: TransactionPayload.self)
        for _ in benchmark.scaledIterations {
            blackHole(try await verifier.verify(jws, as: TransactionPayload.self))
        }
    }
}
