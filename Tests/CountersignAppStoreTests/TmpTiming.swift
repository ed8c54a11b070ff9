@testable import CountersignAppStore
import Foundation
import Testing

@Test func tmpTiming() async throws {
    let ca = try TestStoreCA.create(name: "benchmark")
    let (jws, _) = try ca.mintTransaction(.init(productId: "pro_monthly", type: .autoRenewable, bundleId: "com.example.demo"))
    let verifier = try SignedDataVerifier(configuration: .init(anchors: [ca.anchor], bundleId: "com.example.demo", environments: [.testStore]))
    _ = try await verifier.verify(jws, as: TransactionPayload.self)
    let clock = ContinuousClock()
    var t = clock.now
    for _ in 0..<200 { _ = try await verifier.verify(jws, as: TransactionPayload.self) }
    print("verify", (clock.now - t) / 200)
    t = clock.now
    for _ in 0..<200 { _ = try CompactJWS(jws) }
    print("parse", (clock.now - t) / 200)
    let token = try CompactJWS(jws)
    t = clock.now
    for _ in 0..<200 { _ = try AppStoreJSON.makeDecoder().decode(TransactionPayload.self, from: token.payload()) }
    print("payload decode", (clock.now - t) / 200)
    t = clock.now
    for _ in 0..<200 { _ = try await verifier.validateChain(token.header().x5c, at: Date()) }
    print("chain", (clock.now - t) / 200)
}
