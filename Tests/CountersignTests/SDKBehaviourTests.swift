import CountersignCore
import CountersignProxy
import CountersignTesting
import Foundation
import Testing

@testable import Countersign

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Offline entitlements, mode changes, purchases under enforced failures, updates and the cache
/// rule, each against the live server through the proxy.
@Suite("SDK behaviour")
struct SDKBehaviourTests {
    @Test("server down after a purchase: no cache → entitlements verified on the device; a cached verified answer → the cache, still verified")
    func offline() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .informational, user: "offline-user", storage: "offline")
            let bought = try await purchases.purchase(productID: "pro_monthly")
            #expect(bought.customerInfo.entitlements["pro"]?.isActive == true)
            #expect(bought.customerInfo.entitlements.verification == .verified)

            harness.proxy.attack = .serverDown
            await purchases.invalidateCustomerInfoCache()
            let onDevice = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(onDevice.entitlements.verification == .verifiedOnDevice)
            #expect(onDevice.entitlements["pro"]?.isActive == true)
            #expect(onDevice.entitlements["pro"]?.verification == .verifiedOnDevice)
            #expect(onDevice.activeSubscriptions == ["pro_monthly"])

            harness.proxy.attack = .none
            let fetched = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(fetched.entitlements.verification == .verified)
            harness.proxy.attack = .serverDown
            // The cache answers the default policy; a current answer asked for is never the
            // cache, as RevenueCat's: on-device entitlements stand in.
            let cached = try await purchases.customerInfo(fetchPolicy: .cachedOrFetched)
            #expect(cached.entitlements.verification == .verified)
            #expect(cached.entitlements["pro"]?.isActive == true)
            #expect(cached.requestDate == fetched.requestDate)
            let current = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(current.entitlements.verification == .verifiedOnDevice && current.entitlements["pro"]?.isActive == true)
        }
    }

    @Test("finding 6: enforced, a device clock past the signing key's life falls back to the verified cache, caches nothing, and checks again")
    func enforcedCannotVerify() async throws {
        try await SDKHarness.run { harness in
            try await harness.givePro(to: "skewed")
            let failures = FailureLog()
            let purchases = try harness.purchases(mode: .enforced, user: "skewed", storage: "skewed") { configuration in
                configuration.verificationFailureHandler = { failures.add($0) }
                configuration.reportsVerificationFailures = false
            }
            let fetched = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(fetched.entitlements.verification == .verified && fetched.entitlements["pro"]?.isActive == true)

            // The device clock runs past the intermediate's expiry (the server's does not).
            let expiry = harness.server.keys.currentSigner.key.certificate.expirationDate
            harness.clock.now = expiry.addingTimeInterval(86_400)
            // A current answer was asked for: not the unverifiable one, and not the cache.
            do {
                let fallback = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                #expect(fallback.entitlements.verification == .verifiedOnDevice)
            } catch let error as PurchasesError {
                guard case .offline = error else { Issue.record("threw \(error)"); return }
            }
            #expect(failures.all.map(\.reason) == [.deviceClockOutsideValidity])
            // The default policy answers from the verified cache.
            let fallback = try await purchases.customerInfo(fetchPolicy: .cachedOrFetched)
            #expect(fallback.entitlements.verification == .verified)
            #expect(fallback.requestDate == fetched.requestDate, "the cached answer, not the unverifiable one")
            // Nothing of it was cached: the cache still holds the first answer.
            #expect(try await purchases.customerInfo(fetchPolicy: .fromCacheOnly).requestDate == fetched.requestDate)

            // Without a cache it is the on-device path, then an offline error: never signatureVerificationFailed.
            purchases.invalidateCustomerInfoCache()
            do {
                let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
                #expect(info.entitlements.verification == .verifiedOnDevice)
            } catch let error as PurchasesError {
                guard case .offline = error else { Issue.record("threw \(error)"); return }
            }

            // The clock set right, the next call checks again and verifies.
            harness.clock.now = Date()
            #expect(try await purchases.customerInfo(fetchPolicy: .fetchCurrent).entitlements.verification == .verified)
        }
    }

    @Test("server down with neither cache nor purchases: an offline error, nothing granted")
    func offlineWithNothing() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "nobody", storage: "nothing")
            harness.proxy.attack = .serverDown
            await #expect(throws: PurchasesError.self) { try await purchases.customerInfo() }
        }
    }

    @Test("data cached while disabled is notRequested after switching to informational, and the next fetch sends no ETag")
    func modeChange() async throws {
        try await SDKHarness.run { harness in
            let disabled = try harness.purchases(mode: .disabled, user: "switcher", storage: "switch")
            #expect(try await disabled.customerInfo(fetchPolicy: .fetchCurrent).entitlements.verification == .notRequested)
            _ = try await disabled.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(harness.proxy.seenRequests.last?.etag != nil, "disabled mode reuses its ETag")

            let informational = try harness.purchases(mode: .informational, user: "switcher", storage: "switch")
            #expect(try await informational.customerInfo(fetchPolicy: .fromCacheOnly).entitlements.verification == .notRequested)
            let before = harness.proxy.seenRequests.count
            let fresh = try await informational.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(fresh.entitlements.verification == .verified)
            let sent = harness.proxy.seenRequests.dropFirst(before).filter { $0.path == "/v1/subscribers/switcher" }
            #expect(sent.count == 1)
            #expect(sent.first?.etag == nil)
        }
    }

    @Test("enforced failure during a purchase leaves the transaction unfinished; the next sync posts and finishes it")
    func enforcedPurchase() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "buyer", storage: "enforced")
            harness.proxy.attack = .grantEntitlement
            await #expect(throws: PurchasesError.signatureVerificationFailed(path: "/v1/receipts", statusCode: 200, reason: .payloadMismatch)) {
                try await purchases.purchase(productID: "lifetime")
            }
            #expect(try await purchases.configuration.store.unfinishedTransactions().count == 1)

            harness.proxy.attack = .none
            let synced = try await purchases.syncPurchases()
            #expect(synced.entitlements.verification == .verified)
            #expect(synced.entitlements["pro"]?.isActive == true)
            #expect(try await purchases.configuration.store.unfinishedTransactions().isEmpty)
        }
    }

    @Test("with purchasesAreCompletedBy myApp the SDK records and never finishes")
    func myAppFinishes() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .informational, user: "self-finisher", storage: "myapp") {
                $0.purchasesAreCompletedBy = .myApp
            }
            let bought = try await purchases.purchase(productID: "lifetime")
            #expect(bought.customerInfo.entitlements["pro"]?.isActive == true)
            #expect(try await purchases.configuration.store.unfinishedTransactions().map(\.transactionId) == [bought.transaction.transactionId])
        }
    }

    @Test("the stream yields after a purchase, a restore, logIn and a changed fetch")
    func stream() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .informational, user: nil, storage: "stream")
            #expect(await purchases.isAnonymous)
            let stream = await purchases.customerInfoStream
            var iterator = stream.makeAsyncIterator()

            _ = try await purchases.purchase(productID: "lifetime")
            #expect(await iterator.next()?.entitlements["pro"]?.isActive == true)

            _ = try await purchases.restorePurchases()
            #expect(await iterator.next()?.entitlements["pro"]?.isActive == true)

            let anonymous = await purchases.appUserID
            let (loggedIn, created) = try await purchases.logIn("stream-user")
            #expect(created)
            // RevenueCat's `originalAppUserId`: the merged customer's first id, the anonymous one.
            #expect(loggedIn.originalAppUserId == anonymous)
            #expect(loggedIn.entitlements["pro"]?.isActive == true, "the anonymous purchase merged into the new user")
            #expect(await iterator.next()?.originalAppUserId == anonymous)

            // A fetch whose answer changed (a promotional grant appeared) yields; an unchanged one does not.
            try await harness.server.store.grantPromotional(app: harness.app, user: "stream-user", entitlement: "vip", expires: nil, now: Date())
            _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(await iterator.next()?.entitlements.all.keys.contains("vip") == true)
        }
    }

    @Test("an unchanged customer is answered 304: the SDK sends its ETag and keeps the cached data, verified")
    func notModified() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "etag-user", storage: "etag")
            _ = try await purchases.purchase(productID: "lifetime")
            let first = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            harness.serverClock.now += 2  // the server's request date moves on
            let again = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            let sent = harness.proxy.seenRequests.filter { $0.path == "/v1/subscribers/etag-user" }
            #expect(sent.last?.etag != nil)
            #expect(sent.last?.upstreamStatus == 304)
            #expect(again.entitlements.verification == .verified)
            #expect(again.entitlements["pro"]?.isActive == true)
            #expect(again.rawData == first.rawData)
        }
    }

    @Test("cachedOrFetched answers a stale cache at once and refreshes it in the background; notStaleCachedOrFetched waits (injected clock)")
    func cacheFreshness() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .informational, user: "clocked", storage: "clock")
            func fetches() -> Int { harness.proxy.seenRequests.filter { $0.path == "/v1/subscribers/clocked" }.count }
            let first = try await purchases.customerInfo()
            #expect(fetches() == 1)
            harness.clock.now += 4 * 60 + 59
            _ = try await purchases.customerInfo()
            #expect(fetches() == 1, "fresh for 5 minutes")
            harness.clock.now += 2
            // Stale: the cached value comes back at once, and a refresh runs in the background.
            let stale = try await purchases.customerInfo()
            #expect(stale.requestDate == first.requestDate)
            await purchases.backgroundRefresh?.value
            #expect(fetches() == 2)
            #expect(await purchases.backgroundRefresh == nil)
            // notStaleCachedOrFetched takes the now fresh cache, and waits for the server once it is stale.
            _ = try await purchases.customerInfo(fetchPolicy: .notStaleCachedOrFetched)
            #expect(fetches() == 2)
            harness.clock.now += 5 * 60 + 1
            _ = try await purchases.customerInfo(fetchPolicy: .notStaleCachedOrFetched)
            #expect(fetches() == 3)
            await purchases.invalidateCustomerInfoCache()
            _ = try await purchases.customerInfo()
            #expect(fetches() == 4, "no cache: fetched and waited for")
        }
    }

    final class Received: PurchasesDelegate, Sendable {
        let infos = Collected<CustomerInfo>()
        /// Whether each call came on the main queue (the main actor's).
        let onMain = Collected<Bool>()
        func purchases(_ purchases: Purchases, receivedUpdated customerInfo: CustomerInfo) {
            onMain.add(Received.isOnMainQueue)
            infos.add(customerInfo)
        }

        /// The main actor runs its jobs on the main dispatch queue; on Linux a program's async
        /// main hands that queue to a thread other than its first, so `Thread.isMainThread`
        /// cannot tell, and the queue's own mark is asked instead.
        static let mainQueueKey = DispatchSpecificKey<Bool>()
        static var isOnMainQueue: Bool { DispatchQueue.getSpecific(key: mainQueueKey) == true }
    }

    @Test("a new stream subscriber and a newly set delegate get the current value first")
    func currentValueFirst() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "current", storage: "current")
            _ = try await purchases.purchase(productID: "lifetime")
            var iterator = await purchases.customerInfoStream.makeAsyncIterator()
            let first = await iterator.next()
            #expect(first?.originalAppUserId == "current")
            #expect(first?.entitlements["pro"]?.isActive == true)
            DispatchQueue.main.setSpecific(key: Received.mainQueueKey, value: true)
            let delegate = Received()
            await purchases.setDelegate(delegate)
            #expect(try await waitUntil(limit: .seconds(30)) { !delegate.infos.all.isEmpty })
            #expect(delegate.infos.all.map(\.originalAppUserId) == ["current"])
            // On the main actor, as RevenueCat calls its delegate; so are completion handlers.
            #expect(delegate.onMain.all == [true])
            let onMain = Collected<Bool>()
            purchases.getCustomerInfo { info, _ in onMain.add(Received.isOnMainQueue && info != nil) }
            #expect(try await waitUntil(limit: .seconds(30)) { !onMain.all.isEmpty })
            #expect(onMain.all == [true])
            // After a restart (a new instance on the same storage) the cached value is the current one.
            let restarted = try harness.purchases(mode: .enforced, user: "current", storage: "current")
            var again = await restarted.customerInfoStream.makeAsyncIterator()
            #expect(await again.next()?.entitlements["pro"]?.isActive == true)
        }
    }

    @Test("a cached CustomerInfo is fresh for 5 minutes in the foreground and 25 hours in the background, as RevenueCat's")
    func backgroundFreshness() async throws {
        try await SDKHarness.run { harness in
            try await harness.givePro(to: "backgrounded")
            let purchases = try harness.purchases(mode: .enforced, user: "backgrounded", storage: "backgrounded")
            func asked() -> Int { harness.proxy.seenRequests.filter { $0.path == "/v1/subscribers/backgrounded" }.count }
            _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            let start = asked()
            purchases.applicationDidEnterBackground()
            harness.clock.now += 3_600
            #expect(try await purchases.customerInfo(fetchPolicy: .notStaleCachedOrFetched).entitlements["pro"]?.isActive == true)
            #expect(asked() == start, "an hour old in the background: fresh")
            harness.clock.now += 25 * 3_600
            _ = try await purchases.customerInfo(fetchPolicy: .notStaleCachedOrFetched)
            #expect(asked() == start + 1, "26 hours old: stale")
            // Back in the foreground the cache (just fetched) is fresh; five minutes later it is not.
            purchases.applicationWillEnterForeground()
            try await Task.sleep(for: .milliseconds(300))
            #expect(asked() == start + 1)
            harness.clock.now += 6 * 60
            _ = try await purchases.customerInfo(fetchPolicy: .notStaleCachedOrFetched)
            #expect(asked() == start + 2, "six minutes old in the foreground: stale")
        }
    }

    @Test("identical reads in flight share one request, as RevenueCat's SDK shares them; a read asked after the answer sends its own")
    func sharedReads() async throws {
        try await SDKHarness.run { harness in
            try await harness.givePro(to: "shared")
            let purchases = try harness.purchases(mode: .enforced, user: "shared", storage: "shared") { configuration in
                configuration.retryBaseDelay = .milliseconds(300)
            }
            func asked() -> Int { harness.proxy.seenRequests.filter { $0.path == "/v1/subscribers/shared" }.count }
            // The first answer is a 503: the read waits 300 ms before asking again, and the
            // seven asked meanwhile wait for it rather than send their own.
            harness.proxy.failNext(1, status: 503)
            let infos = try await withThrowingTaskGroup(of: CustomerInfo.self) { group in
                for _ in 0..<8 { group.addTask { try await purchases.customerInfo(fetchPolicy: .fetchCurrent) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(infos.count == 8 && infos.allSatisfy { $0.entitlements["pro"]?.isActive == true })
            #expect(asked() == 2, "one 503 and one answer for eight reads")
            _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            #expect(asked() == 3)
        }
    }

    @Test("a forged Retry-After (nan, 1e400, -5, 1e300) is ignored, not converted to an integer that stops the app")
    func hostileRetryAfter() throws {
        func header(_ value: String) throws -> TimeInterval? {
            let url = try #require(URL(string: "https://example.com/v1/subscribers/a"))
            return Backend.retryAfter(
                try #require(HTTPURLResponse(url: url, statusCode: 503, httpVersion: nil, headerFields: ["Retry-After": value])))
        }
        for value in ["nan", "NaN", "inf", "1e400", "-5", "1e300", "-0.5", "3601"] {
            #expect(try header(value) == nil, "\(value)")
        }
        #expect(try header("2") == 2)
        #expect(try header(" 0 ") == 0)
    }
}
