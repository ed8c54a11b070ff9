@testable import Countersign
import CountersignCore
import CountersignProxy
import Foundation
import Testing

/// Enforced mode never acts on an unsigned answer (real-world correctness, item 5).
@Suite("Forged refusals")
struct RefusalTests {
    @Test("enforcedNeverActsOnUnsigned: a forged 422 {code: 4201} leaves the purchase unfinished; the next sync records it", arguments: [EntitlementVerificationMode.enforced, .informational])
    func enforcedNeverActsOnUnsigned(mode: EntitlementVerificationMode) async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: mode, user: "buyer-\(mode)", storage: "refusal-\(mode)") { $0.reportsVerificationFailures = false }
            harness.proxy.attack = .forgeRefusal
            await #expect(throws: PurchasesError.self) { try await purchases.purchase(productID: "lifetime") }
            let unfinished = try await purchases.configuration.store.unfinishedTransactions()
            #expect(unfinished.count == 1, "the forged refusal must not finish the purchase")
            harness.proxy.attack = .none
            let info = try await purchases.syncPurchases()
            #expect(info.entitlements["pro"]?.isActive == true)
            #expect(info.entitlements.verification == .verified)
            #expect(try await purchases.configuration.store.unfinishedTransactions().isEmpty)
        }
    }

    @Test("a device clock set back cannot revive an expired intermediate once a later answer verified")
    func verifiedTimeFloor() throws {
        let root = RootSigningKey()
        let today = UInt32(Date().timeIntervalSince1970 / 86_400)
        let expired = try root.issueIntermediate(expirationDays: today - 2)
        let signer = ResponseSigner(key: expired)
        let request = SignedRequestParts(authValue: "k", nonce: SignedRequestParts.makeNonce(), path: "/v1/subscribers/u")
        // Signed three days ago, while the intermediate was valid.
        let signedAt = String(Int64((Date().timeIntervalSince1970 - 3 * 86_400) * 1000))
        let body = Data(#"{"a":1}"#.utf8)
        let signature = try signer.signature(request: request, response: SignedResponseParts(requestTime: signedAt, body: body))
        let response = ReceivedResponse(statusCode: 200, signature: signature, requestTime: signedAt, etag: nil, body: body)
        var configuration = SignatureVerifier.Configuration(rootKeys: [root.publicKey])
        let setBack = Date().addingTimeInterval(-4 * 86_400)
        configuration.now = { setBack }
        #expect(SignatureVerifier(configuration: configuration).verify(request: request, response: response) == .verified,
                "without a floor, a clock set back accepts the replay")
        configuration.verifiedTimeFloor = { Date() }
        #expect(SignatureVerifier(configuration: configuration).verify(request: request, response: response) == .failed(.intermediateExpired))
    }
}

