import CountersignAppStore
import CountersignCore
import CountersignProxy
import CountersignTesting
import Foundation
import Testing

@testable import Countersign

/// A RevenueCat app moved to Countersign, as its customers meet it: a server that hiccups, a
/// purchase while it is down, the launch, and the users and subscribers RevenueCat left on the
/// device. Over real HTTP through the tampering proxy.
@Suite("Moving from RevenueCat")
struct MoveFromRevenueCatTests {
    /// Collects what a delegate hears.
    final class Listener: PurchasesDelegate, @unchecked Sendable {
        let heard = Collected<CustomerInfo>()
        func purchases(_ purchases: Purchases, receivedUpdated customerInfo: CustomerInfo) { heard.add(customerInfo) }
    }

    @Test("503 then 200, and 429 then 200: the SDK tries again and gets the signed answer; past its retries, the cache answers")
    func retries() async throws {
        try await SDKHarness.run { harness in
            try await harness.givePro(to: "retrying")
            let purchases = try harness.purchases(mode: .enforced, user: "retrying", storage: "retries")
            for status in [503, 429] {
                harness.proxy.failNext(2, status: status)
                let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                #expect(info.entitlements.verification == .verified && info.entitlements["pro"]?.isActive == true, "\(status)")
            }
            let seen = harness.proxy.seenRequests.filter { $0.path == "/v1/subscribers/retrying" }.map(\.upstreamStatus)
            #expect(seen == [503, 503, 200, 429, 429, 304])  // the second answer unchanged: a signed 304
            // Three refusals in a row outlast two retries: a current answer is not to be had (the
            // store holds nothing to stand in: an offline error), and the cache still answers
            // the default policy.
            harness.proxy.failNext(3)
            do {
                let current = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                #expect(current.entitlements.verification == .verifiedOnDevice)
            } catch let error as PurchasesError {
                guard case .offline = error else { Issue.record("threw \(error)"); return }
            }
            #expect(try await purchases.customerInfo(fetchPolicy: .cachedOrFetched).entitlements.verification == .verified)
            // A purchase posted while the server hiccups is recorded once, through the retries.
            harness.proxy.failNext(2)
            let bought = try await purchases.purchase(productID: "coins_100")
            #expect(bought.customerInfo.entitlements.verification == .verified)
            #expect(try await purchases.configuration.store.unfinishedTransactions().isEmpty)
        }
    }

    @Test(
        "a purchase while the server is down answers the entitlement verified on the device, stays unfinished, and is recorded once the server is back"
    )
    func purchaseWhileDown() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "charged", storage: "charged")
            // A launch that reached the server cached the signed product→entitlement mapping.
            _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            harness.proxy.attack = .serverDown
            let bought = try await purchases.purchase(productID: "pro_monthly")
            #expect(bought.customerInfo.entitlements.verification == .verifiedOnDevice)
            #expect(bought.customerInfo.entitlements["pro"]?.isActive == true)
            let store = purchases.configuration.store
            #expect(try await store.unfinishedTransactions().map(\.transactionId) == [bought.transaction.transactionId])
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: bought.transaction.transactionId) == 0)

            harness.proxy.attack = .none
            let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(info.entitlements.verification == .verified && info.entitlements["pro"]?.isActive == true)
            #expect(try await store.unfinishedTransactions().isEmpty)
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: bought.transaction.transactionId) == 1)
        }
    }

    @Test("a second purchase of a product already being bought is refused with operationAlreadyInProgressForProductError")
    func concurrentPurchase() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "twice", storage: "twice") { $0.retryBaseDelay = .milliseconds(400) }
            harness.proxy.failNext(1)
            async let first = purchases.purchase(productID: "lifetime")
            try await Task.sleep(for: .milliseconds(100))
            do {
                _ = try await purchases.purchase(productID: "lifetime")
                Issue.record("the second purchase went ahead")
            } catch {
                #expect(error as? PurchasesError == .operationAlreadyInProgress(productId: "lifetime"))
                #expect((error as? PurchasesError)?.errorCode == .operationAlreadyInProgressForProductError)
            }
            #expect(try await first.customerInfo.entitlements["pro"]?.isActive == true)
            // Once it is done, the product can be bought again.
            harness.proxy.attack = .none
            #expect(try await purchases.purchase(productID: "coins_100").customerInfo.entitlements.verification == .verified)
        }
    }

    @Test("at launch the SDK fetches CustomerInfo: a delegate set after configure gets it without asking")
    func launchFetch() async throws {
        try await SDKHarness.run { harness in
            try await harness.givePro(to: "launched")
            let purchases = try harness.purchases(mode: .enforced, user: "launched", storage: "launch") { $0.launchRequests = true }
            let listener = Listener()
            purchases.delegate = listener
            await purchases.launchWork?.value
            let heard = try #require(listener.heard.all.last)
            #expect(heard.entitlements["pro"]?.isActive == true && heard.entitlements.verification == .verified)
            #expect(harness.proxy.seenRequests.contains { $0.path == "/v1/subscribers/launched" })
        }
    }

    @Test(
        "moving: RevenueCat's stored $RCAnonymousID stays the user, and a subscriber who bought before the move is entitled on the first launch without Restore"
    )
    func movedSubscriber() async throws {
        try await SDKHarness.run { harness in
            let suite = "countersign-test-\(UUID().uuidString)"
            let defaults = try #require(UserDefaults(suiteName: suite))
            defer { defaults.removePersistentDomain(forName: suite) }
            let revenueCatID = "$RCAnonymousID:" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            defaults.set(revenueCatID, forKey: RevenueCatIdentity.key)

            // The subscription RevenueCat's app bought and finished: in the store account, never seen by this server.
            let storage = harness.directory.appendingPathComponent("sdk-moved")
            let store = try TestStore(serverURL: harness.serverURL, apiKey: harness.apiKey, rootPublicKeys: [harness.rootKey], directory: storage)
            let (jws, payload) = try harness.server.testStore!.mintTransaction(
                .init(productId: "pro_monthly", type: .autoRenewable, bundleId: harness.app.bundleId))
            try store.deliver(signedTransaction: jws)
            for transaction in try await store.unfinishedTransactions() { try await store.finish(transaction) }
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: payload.transactionId!) == 0)

            let purchases = try harness.purchases(mode: .enforced, user: nil, storage: "moved") { configuration in
                configuration.revenueCatDefaults = [suite]
                configuration.launchRequests = true
            }
            #expect(purchases.appUserID == revenueCatID)
            #expect(purchases.isAnonymous)
            await purchases.launchWork?.value
            let info = try await purchases.customerInfo(fetchPolicy: .fromCacheOnly)
            #expect(info.originalAppUserId == revenueCatID)
            #expect(info.entitlements["pro"]?.isActive == true && info.entitlements.verification == .verified)
            #expect(try await harness.server.store.purchaseCount(app: harness.app.id, transactionId: payload.transactionId!) == 1)

            // The next launch keeps the id on its own and posts nothing again.
            let posts = harness.proxy.seenRequests.filter { $0.path == "/v1/receipts" }.count
            let again = try harness.purchases(mode: .enforced, user: nil, storage: "moved") { configuration in
                configuration.revenueCatDefaults = []
                configuration.launchRequests = true
            }
            await again.launchWork?.value
            #expect(again.appUserID == revenueCatID)
            #expect(harness.proxy.seenRequests.filter { $0.path == "/v1/receipts" }.count == posts)
            // Logging in merges RevenueCat's anonymous user into the named one, purchases and all.
            let named = try await again.logIn("moved-user")
            #expect(named.customerInfo.entitlements["pro"]?.isActive == true && named.customerInfo.entitlements.verification == .verified)
        }
    }

    @Test("$RCAnonymousID ids are anonymous ids; other $RC ids stay reserved")
    func revenueCatAnonymousIds() {
        #expect(ReservedAppUserID.isAnonymous("$RCAnonymousID:1af512a3b9c848899fe427f39dd69f2b"))
        #expect(!ReservedAppUserID.isReserved("$RCAnonymousID:1af512a3b9c848899fe427f39dd69f2b"))
        for reserved in [
            "$RCAnonymousID:abc", "$RCAnonymousID:1AF512A3B9C848899FE427F39DD69F2B", "$RCAnonymousID:1af512a3b9c848899fe427f39dd69f2b0",
            "$RCsomething",
        ] {
            #expect(ReservedAppUserID.isReserved(reserved), "\(reserved)")
        }
        #expect(RevenueCatIdentity.storedAppUserID(in: []) == nil)
    }

    @Test("offerings: from memory while fresh, from the disk cache when the server is down after a restart")
    func offeringsCache() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "shopper", storage: "offerings")
            #expect(purchases.cachedOfferings == nil)
            let fetched = try await purchases.offerings()
            #expect(fetched.current?.availablePackages.isEmpty == false)
            #expect(purchases.cachedOfferings == fetched)
            let asked = { harness.proxy.seenRequests.filter { $0.path.hasSuffix("/offerings") }.count }
            let before = asked()
            #expect(try await purchases.offerings() == fetched)
            #expect(asked() == before, "fresh offerings come from memory")

            // The app restarts while the server is down: the disk cache serves the paywall.
            harness.proxy.attack = .serverDown
            let restarted = try harness.purchases(mode: .enforced, user: "shopper", storage: "offerings")
            let offline = try await restarted.offerings()
            #expect(offline.current?.identifier == fetched.current?.identifier)
            #expect(offline.current?.availablePackages.map(\.id) == fetched.current?.availablePackages.map(\.id))
            // Nothing cached for another user: the outage is an error there.
            let stranger = try harness.purchases(mode: .enforced, user: "stranger", storage: "offerings-stranger")
            await #expect(throws: PurchasesError.self) { _ = try await stranger.offerings() }
        }
    }
}
