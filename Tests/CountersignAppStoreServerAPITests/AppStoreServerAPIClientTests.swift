import CountersignAppStore
import CountersignTesting
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import JWTKit
import Testing

@testable import CountersignAppStoreServerAPI

/// The API client against the local stand-in, over real HTTP.
@Suite("App Store Server API client")
struct AppStoreServerAPIClientTests {
    static let bundleId = "com.example.demo"
    let ca: TestStoreCA
    let apiKey = P256.Signing.PrivateKey()

    init() throws {
        // Valid from 200 days ago, so the history test can mint months of renewals in the past.
        ca = try TestStoreCA.create(name: "api", now: Date().addingTimeInterval(-200 * 86_400))
    }

    var verifier: SignedDataVerifier {
        try! SignedDataVerifier(configuration: .init(anchors: [ca.anchor], bundleId: Self.bundleId, environments: [.testStore]))
    }

    /// Runs `body` with a stand-in listening on a free port and a client pointed at it.
    func withStandIn(
        clientKey: P256.Signing.PrivateKey? = nil, bundleId: String = bundleId, now: @escaping @Sendable () -> Date = { Date() },
        _ body: @Sendable (AppStoreServerStandIn, AppStoreServerAPIClient) async throws -> Void
    ) async throws {
        let standIn = try await AppStoreServerStandIn(ca: ca, bundleId: Self.bundleId, apiKeyPEM: apiKey.pemRepresentation)
        try await standIn.makeApplication().test(.live) { client in
            var configuration = AppStoreServerAPIClient.Configuration(
                baseURL: "http://127.0.0.1:\(client.port!)", privateKeyPEM: (clientKey ?? apiKey).pemRepresentation,
                keyId: "TESTKEY123", issuerId: "57246542-96fe-1a63-e053-0824d011072a", bundleId: bundleId
            )
            configuration.now = now
            try await body(standIn, try await AppStoreServerAPIClient(configuration: configuration))
        }
    }

    @Test("Get Transaction Info returns test-store signed data that verifies and decodes to what was minted")
    func transactionInfo() async throws {
        try await withStandIn { standIn, client in
            let minted = try await standIn.add(.init(productId: "lifetime", type: .nonConsumable, bundleId: Self.bundleId))
            let response = try await client.transactionInfo(transactionId: minted.transactionId!)
            let decoded = try await verifier.verify(response.signedTransactionInfo, as: TransactionPayload.self)
            #expect(decoded.transactionId == minted.transactionId)
            #expect(decoded.productId == "lifetime")
        }
    }

    @Test("an unknown transaction is notFound with Apple's error code")
    func notFound() async throws {
        try await withStandIn { _, client in
            await #expect {
                _ = try await client.transactionInfo(transactionId: "1234567890")
            } throws: { error in
                let error = error as! AppStoreServerAPIError
                return error.kind == .notFound && error.apiErrorCode == 4_040_010
            }
        }
    }

    @Test("Get Transaction History follows revisions across pages")
    func history() async throws {
        try await withStandIn { standIn, client in
            let start = Date().addingTimeInterval(-160 * 86_400)
            let first = try await standIn.add(.init(productId: "pro_monthly", type: .autoRenewable, bundleId: Self.bundleId, purchaseDate: start))
            for month in 1...4 {
                var renewal = TestStoreCA.Purchase(productId: "pro_monthly", type: .autoRenewable, bundleId: Self.bundleId)
                renewal.originalTransactionId = first.originalTransactionId
                renewal.purchaseDate = first.purchaseDate!.addingTimeInterval(Double(month) * 31 * 86_400)
                renewal.expiresDate = renewal.purchaseDate.addingTimeInterval(31 * 86_400)
                try await standIn.add(renewal)
            }
            let page = try await client.transactionHistory(transactionId: first.transactionId!)
            #expect(page.signedTransactions.count == 2)
            #expect(page.hasMore)
            let all = try await client.allTransactions(transactionId: first.transactionId!)
            #expect(all.count == 5)
            var ids = Set<String>()
            for jws in all {
                let transaction = try await verifier.verify(jws, as: TransactionPayload.self)
                #expect(transaction.originalTransactionId == first.originalTransactionId)
                ids.insert(transaction.transactionId!)
            }
            #expect(ids.count == 5)
        }
    }

    @Test("Get All Subscription Statuses returns the latest transaction and a renewal info, both verifiable")
    func statuses() async throws {
        try await withStandIn { standIn, client in
            let minted = try await standIn.add(.init(productId: "pro_monthly", type: .autoRenewable, bundleId: Self.bundleId))
            let response = try await client.subscriptionStatuses(transactionId: minted.transactionId!)
            let last = try #require(response.data.first?.lastTransactions.first)
            #expect(last.status == 1)
            let transaction = try await verifier.verify(try #require(last.signedTransactionInfo), as: TransactionPayload.self)
            let renewal = try await verifier.verify(try #require(last.signedRenewalInfo), as: RenewalInfoPayload.self)
            #expect(transaction.transactionId == minted.transactionId)
            #expect(renewal.originalTransactionId == minted.originalTransactionId)
        }
    }

    @Test("429 maps to rateLimited with Retry-After; the next request succeeds")
    func rateLimited() async throws {
        try await withStandIn { standIn, client in
            let minted = try await standIn.add(.init(productId: "lifetime", type: .nonConsumable, bundleId: Self.bundleId))
            await standIn.rateLimitNext(1, retryAfter: 7)
            await #expect(throws: AppStoreServerAPIError(.rateLimited(retryAfter: 7), apiErrorCode: 4_290_000, message: "Rate limit exceeded.")) {
                _ = try await client.transactionInfo(transactionId: minted.transactionId!)
            }
            _ = try await client.transactionInfo(transactionId: minted.transactionId!)
        }
    }

    @Test("an expired bearer token is refused: unauthorized")
    func expiredToken() async throws {
        // The client's clock is two hours behind, so its 20-minute token expired long ago.
        try await withStandIn(now: { Date().addingTimeInterval(-7_200) }) { standIn, client in
            let minted = try await standIn.add(.init(productId: "lifetime", type: .nonConsumable, bundleId: Self.bundleId))
            await #expect {
                _ = try await client.transactionInfo(transactionId: minted.transactionId!)
            } throws: { ($0 as! AppStoreServerAPIError).kind == .unauthorized }
        }
    }

    @Test("a token signed by another key, or for another bundle, is refused")
    func wrongKeyOrBundle() async throws {
        try await withStandIn(clientKey: P256.Signing.PrivateKey()) { standIn, client in
            let minted = try await standIn.add(.init(productId: "lifetime", type: .nonConsumable, bundleId: Self.bundleId))
            await #expect { _ = try await client.transactionInfo(transactionId: minted.transactionId!) } throws: {
                ($0 as! AppStoreServerAPIError).kind == .unauthorized
            }
        }
        try await withStandIn(bundleId: "com.other") { standIn, client in
            let minted = try await standIn.add(.init(productId: "lifetime", type: .nonConsumable, bundleId: Self.bundleId))
            await #expect { _ = try await client.transactionInfo(transactionId: minted.transactionId!) } throws: {
                ($0 as! AppStoreServerAPIError).kind == .unauthorized
            }
        }
    }

    @Test("a transaction id that is not digits never reaches a URL")
    func badTransactionId() async throws {
        try await withStandIn { standIn, client in
            for id in ["", "../v1/x", "12 34", "１２"] {
                await #expect { _ = try await client.transactionInfo(transactionId: id) } throws: {
                    ($0 as! AppStoreServerAPIError).kind == .badRequest
                }
            }
            #expect(await standIn.requestCount == 0)
        }
    }

    @Test("the bearer token carries Apple's claims and header, and is reused until near expiry")
    func tokenClaims() async throws {
        let start = Date(timeIntervalSince1970: 1_767_225_600)
        let clock = ManualClock(start)
        let source = try await AppStoreServerAPITokenSource(
            privateKeyPEM: apiKey.pemRepresentation, keyId: "TESTKEY123", issuerId: "issuer", bundleId: Self.bundleId,
            lifetime: 1_200, now: { clock.now }
        )
        let token = try await source.token()
        let keys = JWTKeyCollection()
        let claims = try await keys.unverified(token, as: AppStoreServerAPIClaims.self)
        #expect(claims.iss.value == "issuer")
        #expect(claims.aud.value == ["appstoreconnect-v1"])
        #expect(claims.bid == Self.bundleId)
        #expect(claims.iat.value == start)
        #expect(claims.exp.value == start.addingTimeInterval(1_200))
        let header = try JSONSerialization.jsonObject(with: Data(base64URL: String(token.split(separator: ".")[0]))!) as! [String: Any]
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == "TESTKEY123")
        #expect(header["typ"] as? String == "JWT")

        clock.now = start.addingTimeInterval(600)
        #expect(try await source.token() == token)
        clock.now = start.addingTimeInterval(1_150)
        #expect(try await source.token() != token)
    }

    @Test("Retry-After is read as seconds or as an HTTP date")
    func retryAfter() {
        #expect(AppStoreServerAPIClient.retryAfterSeconds("120") == 120)
        #expect(AppStoreServerAPIClient.retryAfterSeconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0)
        #expect(AppStoreServerAPIClient.retryAfterSeconds("soon") == nil)
    }
}

extension Data {
    init?(base64URL text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        self.init(base64Encoded: base64)
    }
}
