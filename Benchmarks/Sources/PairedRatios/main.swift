import Countersign
import CountersignAppStore
import CountersignCore
import CountersignServerCore
import Crypto
import Foundation

// Paired throughput ratios: each round times a batch of the bare operation and a batch of ours
// back to back (alternating which goes first), and the median of the per-round ratios is
// reported. On a shared VM whose speed drifts between phases, pairing cancels the drift that
// makes ratios of separately measured benchmarks unreliable. See BENCHMARKS.md.
//
//   swift run -c release PairedRatios [ROUNDS] [SERVER_BODY_BYTES]
//
// SERVER_BODY_BYTES (default 575, the CustomerInfo body of scripts/bench-server.py) sizes the
// body of the absolute "bare Ed25519 sign" figure that the server benchmark compares against.

let rounds = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 200 : 200
let serverBodyBytes = CommandLine.arguments.count > 2 ? Int(CommandLine.arguments[2]) ?? 575 : 575
let batch = 100

// App Store: a test-store transaction, its chain already cached.
let ca = try TestStoreCA.create(name: "count", now: Date(timeIntervalSince1970: 1_767_225_600))
let (jws, _) = try ca.mintTransaction(
    .init(productId: "pro_monthly", type: .autoRenewable, bundleId: "com.example.demo", purchaseDate: Date(timeIntervalSince1970: 1_767_225_600))
)
var storeConfiguration = SignedDataVerifier.Configuration(anchors: [ca.anchor], bundleId: "com.example.demo", environments: [.testStore])
storeConfiguration.now = { Date(timeIntervalSince1970: 1_767_225_600) }
let storeVerifier = try SignedDataVerifier(configuration: storeConfiguration)
let parts = jws.split(separator: ".")
let signingInput = Data((parts[0] + "." + parts[1]).utf8)
let ecdsa: P256.Signing.ECDSASignature = {
    var text = String(parts[2]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while text.count % 4 != 0 { text += "=" }
    return try! P256.Signing.ECDSASignature(rawRepresentation: Data(base64Encoded: text)!)
}()
let leafKey = P256.Signing.PublicKey(ca.leaf.publicKey)!

// Wire format: a 1 KiB answer.
let root = try RootSigningKey(seed: Data(1...32))
let intermediate = try root.issueIntermediate(Curve25519.Signing.PrivateKey(rawRepresentation: Data(33...64)), expirationDays: 30_000)
let body = Data((#"{"subscriber":{"note":""# + String(repeating: "x", count: 1024 - 27) + "\"}}\n").utf8)
let request = SignedRequestParts(authValue: "cs_pub_demo_0123456789", nonce: Data("0123456789ab".utf8), path: "/v1/subscribers/u1")
let responseParts = SignedResponseParts(requestTime: "1767225600000", etag: "0123456789abcdef", body: body)
let signer = ResponseSigner(key: intermediate)
let signature = try signer.signature(request: request, response: responseParts)
let received = ReceivedResponse(statusCode: 200, signature: signature, requestTime: "1767225600000", etag: "0123456789abcdef", body: body)
let verifier = SignatureVerifier(rootKeys: [root.publicKey])
let bareSignature = try intermediate.privateKey.signature(for: body)
let intermediatePublicKey = intermediate.privateKey.publicKey
precondition(verifier.verify(request: request, response: received) == .verified)
_ = try await storeVerifier.verify(jws, as: TransactionPayload.self)

func seconds(_ work: () async throws -> Void) async rethrows -> Double {
    let start = ContinuousClock.now
    try await work()
    let elapsed = ContinuousClock.now - start
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

/// The median over rounds of (time of `bare` / time of `ours`): ours' throughput relative to bare.
func pairedRatio(_ bare: () async throws -> Void, _ ours: () async throws -> Void) async rethrows -> (median: Double, low: Double, high: Double) {
    var ratios: [Double] = []
    for round in 0..<rounds {
        var bareTime = 0.0
        var ourTime = 0.0
        if round.isMultiple(of: 2) {
            bareTime = try await seconds { for _ in 0..<batch { try await bare() } }
            ourTime = try await seconds { for _ in 0..<batch { try await ours() } }
        } else {
            ourTime = try await seconds { for _ in 0..<batch { try await ours() } }
            bareTime = try await seconds { for _ in 0..<batch { try await bare() } }
        }
        ratios.append(bareTime / ourTime)
    }
    ratios.sort()
    return (ratios[ratios.count / 2], ratios[ratios.count / 10], ratios[ratios.count * 9 / 10])
}

nonisolated(unsafe) var sink = 0
func report(_ name: String, _ result: (median: Double, low: Double, high: Double)) {
    print(String(format: "%-44@ throughput %.2fx bare (p10 %.2f, p90 %.2f), %d rounds of %d", name as NSString, result.median, result.low, result.high, rounds, batch))
}

report("sign 1 KiB answer vs Ed25519 sign", try await pairedRatio(
    { sink &+= try intermediate.privateKey.signature(for: body).count },
    { sink &+= try signer.signature(request: request, response: responseParts).utf8.count }
))
report("verify 1 KiB answer vs Ed25519 verify", await pairedRatio(
    { sink &+= intermediatePublicKey.isValidSignature(bareSignature, for: body) ? 1 : 0 },
    { sink &+= verifier.verify(request: request, response: received).isVerified ? 1 : 0 }
))
report("verify transaction (chain seen) vs P-256 verify", try await pairedRatio(
    { sink &+= leafKey.isValidSignature(ecdsa, for: signingInput) ? 1 : 0 },
    { sink &+= try await storeVerifier.verify(jws, as: TransactionPayload.self).productId?.count ?? 0 }
))

// The SDK's path: a 1 KiB CustomerInfo answer, verified, then parsed into CustomerInfo.
let customerInfoBody: Data = {
    let template = #"{"request_date":"2026-01-01T00:00:00Z","request_date_ms":1767225600000,"subscriber":{"entitlements":{"pro":{"expires_date":"2026-02-01T00:00:00Z","product_identifier":"pro_monthly","purchase_date":"2026-01-01T00:00:00Z"}},"first_seen":"2025-06-01T00:00:00Z","last_seen":"2026-01-01T00:00:00Z","management_url":"PADDING","non_subscriptions":{"coins_100":[{"id":"2000000000000001","is_sandbox":true,"purchase_date":"2025-12-01T00:00:00Z","store":"test_store"}]},"original_app_user_id":"user-0123456789","subscriptions":{"pro_monthly":{"expires_date":"2026-02-01T00:00:00Z","is_sandbox":true,"original_purchase_date":"2025-06-01T00:00:00Z","period_type":"normal","purchase_date":"2026-01-01T00:00:00Z","store":"test_store"}}}}"#
    // Padded to 1 KiB in a field CustomerInfo reads.
    return Data(template.replacingOccurrences(of: "PADDING", with: String(repeating: "x", count: 1024 - template.utf8.count + 7)).utf8)
}()
let customerInfoParts = SignedResponseParts(requestTime: "1767225600000", etag: "0123456789abcdef", body: customerInfoBody)
let customerInfoSignature = try signer.signature(request: request, response: customerInfoParts)
let customerInfoReceived = ReceivedResponse(
    statusCode: 200, signature: customerInfoSignature, requestTime: "1767225600000", etag: "0123456789abcdef", body: customerInfoBody
)
let bareCustomerInfoSignature = try intermediate.privateKey.signature(for: customerInfoBody)
precondition(verifier.verify(request: request, response: customerInfoReceived) == .verified)
let parsedCustomerInfo = try CustomerInfo(answer: customerInfoBody, verification: .verified, failure: nil, now: Date())
precondition(parsedCustomerInfo.entitlements["pro"] != nil)
report("verify 1 KiB CustomerInfo vs Ed25519 verify", await pairedRatio(
    { sink &+= intermediatePublicKey.isValidSignature(bareCustomerInfoSignature, for: customerInfoBody) ? 1 : 0 },
    { sink &+= verifier.verify(request: request, response: customerInfoReceived).isVerified ? 1 : 0 }
))

/// Microseconds per call of `work`, the median of `rounds` batches.
func microseconds(_ work: () throws -> Void) rethrows -> Double {
    var samples: [Double] = []
    for _ in 0..<rounds {
        let start = ContinuousClock.now
        for _ in 0..<batch { try work() }
        let elapsed = ContinuousClock.now - start
        samples.append((Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12) / Double(batch))
    }
    return samples.sorted()[samples.count / 2]
}

print(String(format: "parse + verify a %d-byte CustomerInfo answer: %.1f µs (median of %d batches of %d)",
             customerInfoBody.count, try microseconds {
                 guard verifier.verify(request: request, response: customerInfoReceived).isVerified else { return }
                 sink &+= try CustomerInfo(answer: customerInfoBody, verification: .verified, failure: nil, now: Date()).entitlements.all.count
             }, rounds, batch))
let serverBody = Data(repeating: UInt8(ascii: "x"), count: serverBodyBytes)
print(String(format: "bare Ed25519 sign of a %d-byte body: %.1f µs; bare Ed25519 verify: %.1f µs",
             serverBodyBytes, try microseconds { sink &+= try intermediate.privateKey.signature(for: serverBody).count },
             microseconds { sink &+= intermediatePublicKey.isValidSignature(bareSignature, for: body) ? 1 : 0 }))
if sink == 42 { print("") } // keeps the work observable
