import CountersignTesting
import Foundation
import Testing
import X509

@testable import CountersignAppStore

@Suite("Test store")
struct TestStoreTests {
    static func verifier(_ ca: TestStoreCA, environments: Set<AppStoreEnvironment> = [.testStore, .sandbox]) throws -> SignedDataVerifier {
        try SignedDataVerifier(configuration: .init(anchors: [ca.anchor], bundleId: "com.example.demo", environments: environments))
    }

    @Test("a minted transaction verifies with the deployment's root and decodes to what was minted")
    func roundTrip() async throws {
        let token = UUID()
        var purchase = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: "com.example.demo", appAccountToken: token)
        purchase.purchaseDate = Date(timeIntervalSince1970: 1_767_225_600.123)
        let ca = try TestStoreCA.create(name: "test", now: purchase.purchaseDate)
        let (jws, minted) = try ca.mintTransaction(purchase)
        let decoded = try await Self.verifier(ca).verify(jws, as: TransactionPayload.self)
        #expect(decoded == minted.roundedToMilliseconds())
        #expect(decoded.productId == "pro_monthly")
        #expect(decoded.environment == .testStore)
        #expect(decoded.appAccountToken == token.uuidString.lowercased())
        #expect(decoded.expiresDate == Date(timeIntervalSince1970: 1_769_904_000.123))
        #expect(decoded.type == .autoRenewable)
    }

    @Test("the same JWS against Apple's root is VERIFICATION_FAILURE")
    func appleRootRejects() async throws {
        let ca = try TestStoreCA.create(name: "test")
        let (jws, _) = try ca.mintTransaction(.init(productId: "lifetime", type: .nonConsumable, bundleId: "com.example.demo"))
        let apple = AppleVectors.appleRoot
        let verifier = try SignedDataVerifier(
            configuration: .init(
                anchors: [TrustAnchor(certificate: apple, environments: [.production, .sandbox])],
                bundleId: "com.example.demo", appAppleId: 1, environments: [.production, .sandbox, .testStore]
            ))
        await #expect(throws: SignedDataError.status(.verificationFailure)) { _ = try await verifier.verify(jws, as: TransactionPayload.self) }
    }

    @Test("another deployment's test store root does not verify it")
    func otherDeployment() async throws {
        let ours = try TestStoreCA.create(name: "ours")
        let theirs = try TestStoreCA.create(name: "theirs")
        let (jws, _) = try theirs.mintTransaction(.init(productId: "lifetime", type: .nonConsumable, bundleId: "com.example.demo"))
        await #expect(throws: SignedDataError.status(.verificationFailure)) {
            _ = try await Self.verifier(ours).verify(jws, as: TransactionPayload.self)
        }
    }

    @Test("the test store root cannot vouch for Sandbox or Production data")
    func testStoreCannotMintSandbox() async throws {
        let ca = try TestStoreCA.create(name: "test")
        var purchase = TestStoreCA.Purchase(productId: "lifetime", type: .nonConsumable, bundleId: "com.example.demo")
        purchase.environment = .sandbox
        let (jws, _) = try ca.mintTransaction(purchase)
        await #expect(throws: SignedDataError.status(.invalidEnvironment)) {
            _ = try await Self.verifier(ca).verify(jws, as: TransactionPayload.self)
        }
    }

    @Test("an app that does not list TestStore refuses test-store purchases")
    func appWithoutTestStore() async throws {
        let ca = try TestStoreCA.create(name: "test")
        let (jws, _) = try ca.mintTransaction(.init(productId: "lifetime", type: .nonConsumable, bundleId: "com.example.demo"))
        await #expect(throws: SignedDataError.status(.invalidEnvironment)) {
            _ = try await Self.verifier(ca, environments: [.sandbox]).verify(jws, as: TransactionPayload.self)
        }
    }

    @Test("notifications and renewal infos are minted and verified the same way, nested data on its own")
    func notification() async throws {
        let ca = try TestStoreCA.create(name: "test")
        let (transaction, payload) = try ca.mintTransaction(.init(productId: "pro_monthly", type: .autoRenewable, bundleId: "com.example.demo"))
        let renewal = try ca.sign(
            RenewalInfoPayload(
                originalTransactionId: payload.originalTransactionId!, productId: "pro_monthly", environment: .testStore, signedDate: Date()))
        var data = NotificationPayload.NotificationData(bundleId: "com.example.demo", environment: .testStore)
        data.signedTransactionInfo = transaction
        data.signedRenewalInfo = renewal
        let jws = try ca.sign(NotificationPayload(notificationType: .didRenew, notificationUUID: UUID().uuidString, data: data, signedDate: Date()))
        let verified = try await Self.verifier(ca).verifyNotification(jws)
        #expect(verified.notification.notificationType == .didRenew)
        #expect(verified.transaction?.transactionId == payload.transactionId)
        #expect(verified.renewalInfo?.autoRenewStatus == 1)
    }

    @Test("a saved CA loads back and keeps verifying what it minted; keys are 0600")
    func saveAndLoad() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("teststore-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let created = try TestStoreCA.loadOrCreate(in: directory, name: "saved")
        let loaded = try TestStoreCA.loadOrCreate(in: directory, name: "saved")
        #expect(loaded.root == created.root)
        let (jws, _) = try loaded.mintTransaction(.init(productId: "coins_100", type: .consumable, bundleId: "com.example.demo"))
        _ = try await Self.verifier(created).verify(jws, as: TransactionPayload.self)
        let permissions =
            try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent("keys.json").path)[.posixPermissions] as? NSNumber
        #expect(permissions?.intValue == 0o600)
    }

    @Test("unknown enum values from a newer Apple payload are kept, not rejected")
    func forwardCompatible() throws {
        let json =
            #"{"transactionId":"1","originalTransactionId":"1","productId":"p","type":"Brand-New Type","environment":"Sandbox","inAppOwnershipType":"SOMETHING_NEW","signedDate":1767225600000,"unknownField":42}"#
        let payload = try AppStoreJSON.makeDecoder().decode(TransactionPayload.self, from: Data(json.utf8))
        #expect(payload.type == ProductType(rawValue: "Brand-New Type"))
        #expect(payload.inAppOwnershipType?.rawValue == "SOMETHING_NEW")
        let notification = #"{"notificationType":"SOMETHING_LATER","notificationUUID":"u","signedDate":1}"#
        #expect(
            try AppStoreJSON.makeDecoder().decode(NotificationPayload.self, from: Data(notification.utf8)).notificationType.rawValue
                == "SOMETHING_LATER")
    }
}
