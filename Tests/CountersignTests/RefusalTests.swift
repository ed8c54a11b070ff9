import CountersignCore
import CountersignProxy
import CountersignServerCore
import Foundation
import Testing

@testable import Countersign

/// Enforced mode never acts on an unsigned answer (real-world correctness, item 5).
@Suite("Forged refusals")
struct RefusalTests {
    @Test(
        "enforcedNeverActsOnUnsigned: a forged 422 {code: 4201} leaves the purchase unfinished; the next sync records it",
        arguments: [EntitlementVerificationMode.enforced, .informational])
    func enforcedNeverActsOnUnsigned(mode: EntitlementVerificationMode) async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: mode, user: "buyer-\(mode)", storage: "refusal-\(mode)") {
                $0.reportsVerificationFailures = false
            }
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

    @Test(
        "finding 7: a signed refusal caused by the server's clock (data dated ahead of it) leaves the paid transaction unfinished; posted again later, it is recorded"
    )
    func serverClockBehind() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "early-buyer", storage: "clock-behind")
            // The store's clock is an hour ahead of the server's: so is the transaction's signedDate.
            let ahead = harness.serverClock.now.addingTimeInterval(3_600)
            let (jws, _) = try harness.server.testStore!.mintTransaction(
                .init(productId: "lifetime", type: .nonConsumable, bundleId: harness.app.bundleId, purchaseDate: ahead), signedDate: ahead)
            let store = try #require(purchases.configuration.store as? TestStore)
            try store.deliver(signedTransaction: jws)
            do {
                _ = try await purchases.syncPurchases()
                Issue.record("the server took data dated an hour ahead of its clock")
            } catch PurchasesError.server(let status, let code, _) {
                #expect(status == 422 && code == APIErrorCode.signedDateAhead.rawValue)
            }
            #expect(try await store.unfinishedTransactions().count == 1, "a clock refusal must not finish a paid transaction")
            // The server's clock catches up: the next sync records and finishes it.
            harness.serverClock.now = ahead.addingTimeInterval(60)
            let info = try await purchases.syncPurchases()
            #expect(info.entitlements["pro"]?.isActive == true && info.entitlements.verification == .verified)
            #expect(try await store.unfinishedTransactions().isEmpty)
        }
    }

    @Test("refusals that finish a transaction are the transaction's own and final; clock and configuration ones are not")
    func finalRefusals() {
        let final = APIErrorCode.allCases.filter(\.refusesPurchaseForGood)
        #expect(Set(final) == [.invalidStoreSignature, .wrongApp, .purchaseOwnedByAnotherUser, .purchaseBoundToAnotherUser])
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
        #expect(
            SignatureVerifier(configuration: configuration).verify(request: request, response: response) == .verified,
            "without a floor, a clock set back accepts the replay")
        configuration.verifiedTimeFloor = { Date() }
        #expect(SignatureVerifier(configuration: configuration).verify(request: request, response: response) == .failed(.intermediateExpired))
    }
}
