import CountersignAppStore
import CountersignCore
import CountersignTesting
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import CountersignServer
@testable import CountersignStorage

/// App Store Server Notifications V2, minted by the test store, change CustomerInfo as the
/// rules say; duplicates and late arrivals change nothing.
extension ReceiptTests {
    static let day: TimeInterval = 86_400

    /// u1 owns a pro_monthly chain that started `ageDays` ago and expires `expiresInDays` from now.
    static func subscribe(_ harness: Harness, ageDays: Double, expiresInDays: Double) async throws -> TransactionPayload {
        var purchase = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId)
        purchase.purchaseDate = Date().addingTimeInterval(-ageDays * day)
        purchase.expiresDate = Date().addingTimeInterval(expiresInDays * day)
        let (jws, payload) = try harness.ca.mintTransaction(purchase, signedDate: Date())
        #expect(try await harness.post(user: "u1", jws: jws).status == 200)
        return payload
    }

    /// A renewal transaction of `original`'s chain.
    static func renewal(_ harness: Harness, of original: TransactionPayload, expiresInDays: Double) throws -> (
        jws: String, payload: TransactionPayload
    ) {
        var purchase = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId)
        purchase.originalTransactionId = original.originalTransactionId
        purchase.purchaseDate = Date().addingTimeInterval((expiresInDays - 30) * day)
        purchase.expiresDate = Date().addingTimeInterval(expiresInDays * day)
        return try harness.ca.mintTransaction(purchase, signedDate: Date())
    }

    /// The same transaction as Apple sends it after a refund: with a revocation date.
    static func refunded(_ harness: Harness, _ transaction: TransactionPayload) throws -> String {
        var refunded = transaction
        refunded.revocationDate = Date().addingTimeInterval(-60)
        refunded.revocationReason = 1
        refunded.signedDate = Date()
        return try harness.ca.sign(refunded)
    }

    static func notify(
        _ harness: Harness, _ type: NotificationType, subtype: NotificationSubtype? = nil, uuid: String = UUID().uuidString,
        transaction: String? = nil, renewal: RenewalInfoPayload? = nil
    ) async throws -> Int {
        var data = NotificationPayload.NotificationData(bundleId: harness.app.bundleId, environment: .testStore)
        data.signedTransactionInfo = transaction
        data.signedRenewalInfo = try renewal.map { try harness.ca.sign($0) }
        let jws = try harness.ca.sign(
            NotificationPayload(notificationType: type, subtype: subtype, notificationUUID: uuid, data: data, signedDate: Date()))
        let body = try JSONSerialization.data(withJSONObject: ["signedPayload": jws])
        return try await harness.client.execute(
            uri: "/v1/notifications/apple", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(data: body)
        ) { Int($0.status.code) }
    }

    static func renewalInfo(
        _ original: TransactionPayload, signedAgo: TimeInterval = 0, autoRenew: Int = 1, graceDays: Double? = nil, billingRetry: Bool = false
    ) -> RenewalInfoPayload {
        var info = RenewalInfoPayload(
            originalTransactionId: original.originalTransactionId!, productId: "pro_monthly",
            environment: .testStore, signedDate: Date().addingTimeInterval(-signedAgo))
        info.autoRenewStatus = autoRenew
        info.gracePeriodExpiresDate = graceDays.map { Date().addingTimeInterval($0 * day) }
        info.isInBillingRetryPeriod = billingRetry
        return info
    }

    static func proActive(_ harness: Harness) async throws -> Bool {
        let info = try await harness.customerInfo("u1")
        guard let pro = entitlement(info, "pro") else { return false }
        guard let expires = pro["expires_date"] as? String else { return true }
        let grace = (pro["grace_period_expires_date"] as? String).flatMap(WireDate.parse)
        return max(WireDate.parse(expires)!, grace ?? .distantPast) > Date()
    }

    @Test("a renewal notification extends access; a refund notification ends it", arguments: TestDatabaseKind.available)
    func renewalThenRefund(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind) { harness in
            let original = try await Self.subscribe(harness, ageDays: 35, expiresInDays: -5)
            #expect(try await Self.proActive(harness) == false)
            let renewal = try Self.renewal(harness, of: original, expiresInDays: 25)
            #expect(try await Self.notify(harness, .didRenew, transaction: renewal.jws, renewal: Self.renewalInfo(original)) == 200)
            #expect(try await Self.proActive(harness) == true)
            #expect(try await Self.notify(harness, .refund, transaction: try Self.refunded(harness, renewal.payload)) == 200)
            #expect(try await Self.proActive(harness) == false)
        }
    }

    @Test("a refund of the first transaction ends access at its revocation date", arguments: TestDatabaseKind.available)
    func refundOfCurrent(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind) { harness in
            let original = try await Self.subscribe(harness, ageDays: 5, expiresInDays: 25)
            #expect(try await Self.proActive(harness) == true)
            #expect(try await Self.notify(harness, .refund, transaction: try Self.refunded(harness, original)) == 200)
            let pro = try #require(Self.entitlement(try await harness.customerInfo("u1"), "pro"))
            #expect(WireDate.parse(pro["expires_date"] as! String)! < Date())
        }
    }

    @Test("grace period keeps access after a failed renewal; expiry ends it", arguments: TestDatabaseKind.available)
    func graceThenExpiry(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind) { harness in
            let original = try await Self.subscribe(harness, ageDays: 31, expiresInDays: -1)
            #expect(try await Self.proActive(harness) == false)
            let grace = Self.renewalInfo(original, signedAgo: 60, graceDays: 5, billingRetry: true)
            #expect(try await Self.notify(harness, .didFailToRenew, subtype: .gracePeriod, renewal: grace) == 200)
            #expect(try await Self.proActive(harness) == true)
            let expired = Self.renewalInfo(original, autoRenew: 0, billingRetry: false)
            #expect(try await Self.notify(harness, .expired, subtype: .billingRetry, renewal: expired) == 200)
            #expect(try await Self.proActive(harness) == false)
        }
    }

    @Test(
        "the same notification twice changes nothing the second time; an older one after a newer one does not roll back",
        arguments: TestDatabaseKind.available)
    func idempotentAndOrdered(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind) { harness in
            let original = try await Self.subscribe(harness, ageDays: 31, expiresInDays: -1)
            let uuid = UUID().uuidString
            let expired = Self.renewalInfo(original, signedAgo: 60, autoRenew: 0)
            #expect(try await Self.notify(harness, .expired, uuid: uuid, renewal: expired) == 200)
            // Same UUID, other content: already stored, so ignored.
            let grace = Self.renewalInfo(original, signedAgo: 0, graceDays: 5, billingRetry: true)
            #expect(try await Self.notify(harness, .didFailToRenew, uuid: uuid, renewal: grace) == 200)
            #expect(try await Self.proActive(harness) == false)
            // A newer state applies; an older one arriving late does not undo it.
            #expect(try await Self.notify(harness, .didFailToRenew, subtype: .gracePeriod, renewal: grace) == 200)
            #expect(try await Self.proActive(harness) == true)
            #expect(try await Self.notify(harness, .expired, renewal: Self.renewalInfo(original, signedAgo: 3_600, autoRenew: 0)) == 200)
            #expect(try await Self.proActive(harness) == true)
        }
    }

    @Test("forged, foreign and malformed notifications are refused and store nothing", arguments: TestDatabaseKind.available)
    func badNotifications(_ kind: TestDatabaseKind) async throws {
        try await Self.withHarness(kind) { harness in
            let attacker = try TestStoreCA.create(name: "attacker")
            let data = NotificationPayload.NotificationData(bundleId: harness.app.bundleId, environment: .testStore)
            let forged = try attacker.sign(
                NotificationPayload(notificationType: .refund, notificationUUID: UUID().uuidString, data: data, signedDate: Date()))
            let other = NotificationPayload.NotificationData(bundleId: "com.other.app", environment: .testStore)
            let foreign = try harness.ca.sign(
                NotificationPayload(notificationType: .test, notificationUUID: UUID().uuidString, data: other, signedDate: Date()))
            for (body, code) in [
                (try JSONSerialization.data(withJSONObject: ["signedPayload": forged]), APIErrorCode.invalidStoreSignature),
                (try JSONSerialization.data(withJSONObject: ["signedPayload": foreign]), .wrongApp),
                (Data("not json".utf8), .malformedJSON),
                (Data(#"{"signedPayload":"a.b.c"}"#.utf8), .invalidStoreSignature),
                (Data(#"{"signedPayload":1}"#.utf8), .invalidField),
                (Data(#"{"signedPayload":"a","signed\u0050ayload":"b"}"#.utf8), .duplicateJSONKey),
            ] {
                let status = try await harness.client.execute(uri: "/v1/notifications/apple", method: .post, body: ByteBuffer(data: body)) {
                    response in
                    #expect((try? JSONDecoder().decode(APIError.self, from: Data(response.body.readableBytesView)))?.code == code.rawValue)
                    return Int(response.status.code)
                }
                #expect(status == code.httpStatus)
            }
            let stored = try await harness.server.database.withConnection { sql in
                try await sql.first("SELECT COUNT(*) AS n FROM notifications") { try $0.int("n") }
            }
            #expect(stored == 0)
        }
    }
}
