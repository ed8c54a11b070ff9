import CountersignAppStore
import CountersignCore
import CountersignServerCore
import CountersignTesting
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import Countersign
@testable import CountersignServer
@testable import CountersignStorage

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Customer lifecycles real apps meet, from RevenueCat's documentation of app user ids, logIn,
/// restores, transfers, reinstalls, Family Sharing and refunds: the SDK and a live server over
/// real HTTP, on SQLite and PostgreSQL. A device is an SDK storage directory; a store account
/// (an Apple ID) is a test-store ledger that several devices can share. The lifecycle
/// table is rendered from ``scenarios``, the rows these tests check.
@Suite("Customer lifecycles", .serialized)
struct LifecycleTests {
    static let scenarios: [(name: String, story: String, expected: String)] = [
        (
            "reinstall", "an anonymous user buys, reinstalls (new anonymous id, same store account) and restores",
            "the new anonymous id has `pro` (default `transfer`): a token of an anonymous id pins nothing"
        ),
        (
            "logInThenRestore", "an anonymous user buys, logs in as alice, restores later",
            "alice keeps `pro`; the purchase never moves back to the anonymous id"
        ),
        (
            "logInThenRenewal", "as above, then a renewal carrying the anonymous id's token arrives (SDK sync and App Store notification)",
            "alice keeps `pro`"
        ),
        (
            "secondDevice", "alice buys on one device, signs in on a second device with the same store account and restores",
            "`already_recorded`; alice has `pro` on both"
        ),
        (
            "familySharing", "bob, in alice's family, gets his own family-shared transaction and restores",
            "both have `pro`; alice's purchase does not move"
        ),
        (
            "restoreByAnotherUser", "a purchase made anonymously is restored by dave on another device, under each transfer behaviour",
            "`transfer`: dave gets it; `keepWithOriginal` and `transferIfNoActive` (still active): 409/4209, the first owner keeps it"
        ),
        (
            "restoreOfSignedInPurchase", "alice buys signed in; dave restores it on her device",
            "409/4210 under every behaviour: alice keeps it"
        ),
        (
            "refundDuringGrace", "a subscription in its billing grace period is refunded",
            "access ends at once on the server and in the SDK"
        ),
        ("refundReversed", "a refund is reversed (`REFUND_REVERSED`)", "access comes back"),
        (
            "upgrade", "basic is upgraded to premium in the same subscription group",
            "`premium` active, `basic` no longer granted from the upgrade on"
        ),
        (
            "unknownProduct", "a purchase of a product the app does not configure",
            "recorded, listed by the admin API, grants nothing; the store transaction is finished"
        ),
        (
            "deletedCustomer", "a customer is deleted; another user restores their purchase",
            "`$CSDeleted` is refused (400/4008); under `transfer` the new user gets the purchase"
        ),
        (
            "logInDuringFetch", "logIn while a CustomerInfo fetch is in flight",
            "each answer is cached and delivered only for the user it was fetched for"
        ),
    ]

    static func table() -> String {
        (["| scenario | what happens | expected |", "|---|---|---|"]
            + scenarios.map { "| `\($0.name)` | \($0.story) | \($0.expected) |" }).joined(separator: "\n")
    }

    // MARK: The world

    struct World: Sendable {
        let server: CountersignServer
        let url: URL
        let directory: URL
        var app: AppConfiguration { server.deployment.apps[0] }
        var ca: TestStoreCA { server.testStore! }
        var rootKey: String { server.keys.managedRootPublicKey!.rawRepresentation.base64EncodedString() }

        func store(account: String) throws -> TestStore {
            try TestStore(
                serverURL: url, apiKey: app.publicApiKeys[0], rootPublicKeys: [rootKey],
                directory: directory.appendingPathComponent("account-\(account)"))
        }

        /// An app on a device: its own storage, signed in to `account` in the store.
        /// A device after its launch: the launch's own reads and posts are done, so none of them
        /// is still in flight when a scenario changes the server (a read in flight is shared by a
        /// later `fetchCurrent`, which would then answer from before the change).
        func device(_ name: String, account: String, user: String? = nil) async throws -> Purchases {
            var configuration = Configuration(
                apiKey: app.publicApiKeys[0], appUserID: user, serverURL: url, rootPublicKeys: [rootKey],
                store: try store(account: account), storageDirectory: directory.appendingPathComponent("device-\(name)")
            )
            configuration.entitlementVerificationMode = .enforced
            configuration.reportsVerificationFailures = false
            let purchases = try Purchases(configuration: configuration)
            await purchases.launchWork?.value
            return purchases
        }

        func mint(
            _ product: String, type: ProductType = .autoRenewable, token: UUID? = nil, chain: String? = nil,
            purchased: Date = Date(), expires: Date? = nil, edit: (inout TransactionPayload) -> Void = { _ in }
        ) throws -> (jws: String, payload: TransactionPayload) {
            var purchase = TestStoreCA.Purchase(
                productId: product, type: type, bundleId: app.bundleId, appAccountToken: token, purchaseDate: purchased)
            purchase.originalTransactionId = chain
            purchase.expiresDate = expires
            var (_, payload) = try ca.mintTransaction(purchase, signedDate: Date().addingTimeInterval(-1))
            edit(&payload)
            return (try ca.sign(payload), payload)
        }

        func notify(_ type: NotificationType, subtype: NotificationSubtype? = nil, transaction: String?, renewal: RenewalInfoPayload? = nil)
            async throws
        {
            var data = NotificationPayload.NotificationData(bundleId: app.bundleId, environment: .testStore)
            data.signedTransactionInfo = transaction
            data.signedRenewalInfo = try renewal.map { try ca.sign($0) }
            let jws = try ca.sign(
                NotificationPayload(notificationType: type, subtype: subtype, notificationUUID: UUID().uuidString, data: data, signedDate: Date()))
            let reply = try await http("POST", "/v1/notifications/apple", body: try JSONSerialization.data(withJSONObject: ["signedPayload": jws]))
            #expect(reply.status == 200, "notification \(type.rawValue): \(String(decoding: reply.body, as: UTF8.self))")
        }

        func http(_ method: String, _ path: String, key: String? = nil, body: Data? = nil) async throws -> (status: Int, body: Data) {
            var request = URLRequest(url: URL(string: url.absoluteString + path)!)
            request.httpMethod = method
            request.httpBody = body
            if let key { request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization") }
            let (data, response) = try await URLSession.shared.data(for: request)
            return ((response as! HTTPURLResponse).statusCode, data)
        }

        /// Whether the server itself (admin API, unsigned CustomerInfo) says `user` has `entitlement` now.
        func serverSays(_ user: String, has entitlement: String) async throws -> Bool {
            let reply = try await http("GET", "/v1/admin/customers/\(user.pathSegment)/customer_info", key: app.secretApiKeys[0])
            guard reply.status == 200 else { return false }
            let info = try CustomerInfo(answer: reply.body, verification: .notRequested, failure: nil, now: Date())
            return info.entitlements[entitlement]?.isActive == true
        }
    }

    static func run(
        _ kind: TestDatabaseKind, transferBehavior: AppConfiguration.TransferBehavior = .transfer,
        _ body: @Sendable @escaping (World) async throws -> Void
    ) async throws {
        try await FreshDatabase.with(kind) { location, directory in
            var app = AppConfiguration.makeDemo()
            app.transferBehavior = transferBehavior
            app.products += [
                .init(id: "basic_yearly", type: .autoRenewable, entitlements: ["basic"]),
                .init(id: "premium_monthly", type: .autoRenewable, entitlements: ["premium"]),
            ]
            try FileManager.default.createDirectory(at: directory.appendingPathComponent("server"), withIntermediateDirectories: true)
            try DeploymentConfiguration(apps: [app]).save(toDataDirectory: directory.appendingPathComponent("server"))
            var configuration = ServerConfiguration(dataDirectory: directory.appendingPathComponent("server"))
            configuration.database = location
            try await LiveServer.run(configuration) { server, client in
                try await body(World(server: server, url: URL(string: "http://127.0.0.1:\(client.port!)")!, directory: directory))
            }
        }
    }

    static func pro(_ purchases: Purchases, _ entitlement: String = "pro") async throws -> Bool {
        let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
        #expect(info.entitlements.verification == .verified)
        return info.entitlements[entitlement]?.isActive == true
    }

    // MARK: The scenarios

    @Test("reinstall", arguments: TestDatabaseKind.available)
    func reinstall(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let before = try await world.device("phone", account: "apple-id-1")
            _ = try await before.purchase(productID: "pro_monthly")
            let oldId = await before.appUserID
            let after = try await world.device("phone-reinstalled", account: "apple-id-1")
            #expect(await after.appUserID != oldId)
            let restored = try await after.restorePurchases()
            #expect(restored.entitlements["pro"]?.isActive == true)
            #expect(restored.entitlements.verification == .verified)
            #expect(try await Self.pro(after))
            #expect(try await !world.serverSays(oldId, has: "pro"))
        }
    }

    @Test("logInThenRestore", arguments: TestDatabaseKind.available)
    func logInThenRestore(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let phone = try await world.device("phone", account: "apple-id-1")
            _ = try await phone.purchase(productID: "pro_monthly")
            let anonymous = await phone.appUserID
            #expect(try await phone.logIn("alice").customerInfo.entitlements["pro"]?.isActive == true)
            let restored = try await phone.restorePurchases()
            #expect(restored.entitlements["pro"]?.isActive == true)
            #expect(try await world.serverSays("alice", has: "pro"))
            // The anonymous id is an alias of alice now: it answers as alice (RevenueCat's aliases).
            #expect(try await world.serverSays(anonymous, has: "pro"))
        }
    }

    @Test("logInThenRenewal", arguments: TestDatabaseKind.available)
    func logInThenRenewal(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let phone = try await world.device("phone", account: "apple-id-1")
            let bought = try await phone.purchase(productID: "pro_monthly")
            let anonymous = await phone.appUserID
            _ = try await phone.logIn("alice")
            // The renewal carries the token of the anonymous id that bought the subscription.
            let renewal = try world.mint(
                "pro_monthly", token: AppAccountToken.forAppUserID(anonymous), chain: bought.transaction.originalTransactionId,
                purchased: Date().addingTimeInterval(-60), expires: Date().addingTimeInterval(40 * 86_400))
            try world.store(account: "apple-id-1").deliver(signedTransaction: renewal.jws)
            #expect(try await phone.syncPurchases().entitlements["pro"]?.isActive == true)
            try await world.notify(.didRenew, transaction: renewal.jws)
            #expect(try await Self.pro(phone))
            #expect(try await world.serverSays("alice", has: "pro"))
            #expect(try await world.serverSays(anonymous, has: "pro"), "an alias of alice")
        }
    }

    @Test("secondDevice", arguments: TestDatabaseKind.available)
    func secondDevice(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let phone = try await world.device("phone", account: "apple-id-1", user: "alice")
            _ = try await phone.purchase(productID: "lifetime")
            let tablet = try await world.device("tablet", account: "apple-id-1", user: "alice")
            #expect(try await tablet.restorePurchases().entitlements["pro"]?.isActive == true)
            #expect(try await Self.pro(phone))
            #expect(try await Self.pro(tablet))
        }
    }

    @Test("familySharing", arguments: TestDatabaseKind.available)
    func familySharing(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let alice = try await world.device("alice-phone", account: "apple-id-alice", user: "alice")
            _ = try await alice.purchase(productID: "pro_monthly")
            // Apple gives each family member a transaction of their own.
            let shared = try world.mint("pro_monthly", expires: Date().addingTimeInterval(30 * 86_400)) { $0.inAppOwnershipType = .familyShared }
            try world.store(account: "apple-id-bob").deliver(signedTransaction: shared.jws)
            let bob = try await world.device("bob-phone", account: "apple-id-bob", user: "bob")
            #expect(try await bob.restorePurchases().entitlements["pro"]?.isActive == true)
            #expect(try await Self.pro(alice))
            #expect(try await Self.pro(bob))
        }
    }

    @Test(
        "restoreByAnotherUser", arguments: TestDatabaseKind.available,
        [AppConfiguration.TransferBehavior.transfer, .keepWithOriginal, .transferIfNoActive])
    func restoreByAnotherUser(_ kind: TestDatabaseKind, behavior: AppConfiguration.TransferBehavior) async throws {
        try await Self.run(kind, transferBehavior: behavior) { world in
            let first = try await world.device("phone", account: "apple-id-1")
            _ = try await first.purchase(productID: "pro_monthly")
            let firstOwner = await first.appUserID
            let dave = try await world.device("laptop", account: "apple-id-1", user: "dave")
            if behavior == .transfer {
                #expect(try await dave.restorePurchases().entitlements["pro"]?.isActive == true)
                #expect(try await !world.serverSays(firstOwner, has: "pro"))
            } else {
                await #expect { try await dave.restorePurchases() } throws: { error in
                    if case PurchasesError.server(409, 4209?, _) = error { return true } else { return false }
                }
                #expect(try await !Self.pro(dave))
                #expect(try await world.serverSays(firstOwner, has: "pro"))
            }
        }
    }

    @Test(
        "restoreOfSignedInPurchase", arguments: TestDatabaseKind.available,
        [AppConfiguration.TransferBehavior.transfer, .keepWithOriginal, .transferIfNoActive])
    func restoreOfSignedInPurchase(_ kind: TestDatabaseKind, behavior: AppConfiguration.TransferBehavior) async throws {
        try await Self.run(kind, transferBehavior: behavior) { world in
            let alice = try await world.device("phone", account: "apple-id-1", user: "alice")
            _ = try await alice.purchase(productID: "pro_monthly")
            let dave = try await world.device("phone-dave", account: "apple-id-1", user: "dave")
            await #expect { try await dave.restorePurchases() } throws: { error in
                if case PurchasesError.server(409, 4210?, _) = error { return true } else { return false }
            }
            #expect(try await Self.pro(alice))
            #expect(try await !world.serverSays("dave", has: "pro"))
        }
    }

    @Test("refundDuringGrace", arguments: TestDatabaseKind.available)
    func refundDuringGrace(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let phone = try await world.device("phone", account: "apple-id-1", user: "grace")
            // A month's subscription that ended an hour ago; renewal failed, Apple grants 6 days of grace.
            let lapsed = try world.mint(
                "pro_monthly", token: AppAccountToken.forAppUserID("grace"),
                purchased: Date().addingTimeInterval(-31 * 86_400), expires: Date().addingTimeInterval(-3_600))
            try world.store(account: "apple-id-1").deliver(signedTransaction: lapsed.jws)
            _ = try await phone.syncPurchases()
            var renewal = RenewalInfoPayload(
                originalTransactionId: lapsed.payload.originalTransactionId!, productId: "pro_monthly",
                environment: .testStore, signedDate: Date().addingTimeInterval(-1))
            renewal.autoRenewStatus = 1
            renewal.isInBillingRetryPeriod = true
            renewal.gracePeriodExpiresDate = Date().addingTimeInterval(6 * 86_400)
            try await world.notify(.didFailToRenew, subtype: .gracePeriod, transaction: nil, renewal: renewal)
            #expect(try await Self.pro(phone), "in the grace period")
            var refunded = lapsed.payload
            refunded.revocationDate = Date().addingTimeInterval(-60)
            refunded.revocationReason = 1
            refunded.signedDate = Date()
            try await world.notify(.refund, transaction: try world.ca.sign(refunded))
            #expect(try await !world.serverSays("grace", has: "pro"))
            #expect(try await !Self.pro(phone), "the SDK ends access at once too")
        }
    }

    @Test("refundReversed", arguments: TestDatabaseKind.available)
    func refundReversed(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let phone = try await world.device("phone", account: "apple-id-1", user: "rita")
            let bought = try await phone.purchase(productID: "lifetime")
            let verifier = try SignedDataVerifier(configuration: .init(anchors: [world.ca.anchor], bundleId: nil, environments: [.testStore]))
            let payload = try await verifier.verify(bought.transaction.jws, as: TransactionPayload.self)
            var refunded = payload
            refunded.revocationDate = Date().addingTimeInterval(-60)
            refunded.signedDate = Date()
            try await world.notify(.refund, transaction: try world.ca.sign(refunded))
            #expect(try await !Self.pro(phone))
            var reinstated = payload
            reinstated.signedDate = Date().addingTimeInterval(1)
            try await world.notify(.refundReversed, transaction: try world.ca.sign(reinstated))
            #expect(try await Self.pro(phone))
            // The refund arriving again, late, changes nothing: the reversal was signed after it.
            try await world.notify(.refund, transaction: try world.ca.sign(refunded))
            #expect(try await Self.pro(phone))
        }
    }

    @Test("upgrade", arguments: TestDatabaseKind.available)
    func upgrade(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let phone = try await world.device("phone", account: "apple-id-1", user: "uma")
            let token = AppAccountToken.forAppUserID("uma")
            let basic = try world.mint(
                "basic_yearly", token: token, purchased: Date().addingTimeInterval(-86_400), expires: Date().addingTimeInterval(364 * 86_400))
            try world.store(account: "apple-id-1").deliver(signedTransaction: basic.jws)
            #expect(try await phone.syncPurchases().entitlements["basic"]?.isActive == true)
            // The upgrade: a new transaction in the same chain, ending sooner than the old one would have.
            let premium = try world.mint(
                "premium_monthly", token: token, chain: basic.payload.originalTransactionId,
                purchased: Date().addingTimeInterval(-60), expires: Date().addingTimeInterval(30 * 86_400))
            try world.store(account: "apple-id-1").deliver(signedTransaction: premium.jws)
            let after = try await phone.syncPurchases()
            #expect(after.entitlements["premium"]?.isActive == true)
            #expect(after.entitlements["basic"]?.isActive != true)
            // Apple's copy of the old transaction marked upgraded changes nothing more.
            var upgraded = basic.payload
            upgraded.isUpgraded = true
            upgraded.revocationDate = Date().addingTimeInterval(-60)
            upgraded.signedDate = Date()
            try await world.notify(.didChangeRenewalPref, subtype: .upgrade, transaction: try world.ca.sign(upgraded))
            #expect(try await Self.pro(phone, "premium"))
            #expect(try await !Self.pro(phone, "basic"))
        }
    }

    @Test("unknownProduct", arguments: TestDatabaseKind.available)
    func unknownProduct(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let phone = try await world.device("phone", account: "apple-id-1", user: "victor")
            let mystery = try world.mint("mystery_pack", type: .nonConsumable, token: AppAccountToken.forAppUserID("victor"))
            let store = try world.store(account: "apple-id-1")
            try store.deliver(signedTransaction: mystery.jws)
            let info = try await phone.syncPurchases()
            #expect(info.entitlements.active.isEmpty)
            #expect(info.allPurchasedProductIdentifiers.contains("mystery_pack"))
            #expect(try await store.unfinishedTransactions().isEmpty, "recorded, so finished")
            let admin = try await world.http("GET", "/v1/admin/customers/victor", key: world.app.secretApiKeys[0])
            #expect(admin.status == 200)
            #expect(String(decoding: admin.body, as: UTF8.self).contains("mystery_pack"))
            // Through a notification, with nobody known to own it: recorded all the same.
            let orphan = try world.mint("mystery_box", type: .nonConsumable)
            try await world.notify(.oneTimeCharge, transaction: orphan.jws)
            #expect(try await world.server.store.purchaseCount(app: world.app.id, transactionId: orphan.payload.transactionId!) == 1)
        }
    }

    @Test("deletedCustomer", arguments: TestDatabaseKind.available)
    func deletedCustomer(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            let erin = try await world.device("phone", account: "apple-id-1", user: "erin")
            _ = try await erin.purchase(productID: "lifetime")
            #expect(try await world.http("DELETE", "/v1/admin/customers/erin", key: world.app.secretApiKeys[0]).status == 200)
            let reserved = try await world.http("GET", "/v1/subscribers/%24CSDeleted", key: world.app.publicApiKeys[0])
            #expect(reserved.status == 400)
            #expect(try JSONDecoder().decode(APIError.self, from: reserved.body).code == APIErrorCode.reservedAppUserId.rawValue)
            let frank = try await world.device("phone-frank", account: "apple-id-1", user: "frank")
            #expect(try await frank.restorePurchases().entitlements["pro"]?.isActive == true)
        }
    }

    @Test("logInDuringFetch", arguments: TestDatabaseKind.available)
    func logInDuringFetch(_ kind: TestDatabaseKind) async throws {
        try await Self.run(kind) { world in
            try await world.server.store.grantPromotional(app: world.app, user: "paid", entitlement: "pro", expires: nil, now: Date())
            for round in 0..<10 {
                let phone = try await world.device("phone-\(round)", account: "apple-id-\(round)")
                let anonymous = await phone.appUserID
                let seen = Seen()
                let stream = await phone.customerInfoStream
                let listener = Task { for await info in stream { seen.add(info.originalAppUserId) } }
                async let fetch = phone.customerInfo(fetchPolicy: .fetchCurrent)
                async let login = phone.logIn("paid")
                let (fetched, _) = try await (fetch, login)
                // The anonymous id's answer: its own before the merge, or, served after it, the
                // merged customer's (the id is then paid's alias, RevenueCat's rule), never another's.
                if fetched.originalAppUserId == anonymous {
                    #expect(fetched.entitlements["pro"]?.isActive != true)
                } else {
                    #expect(fetched.originalAppUserId == "paid" && fetched.entitlements["pro"]?.isActive == true)
                    #expect(fetched.entitlements.verification == .verified)
                }
                #expect(await phone.appUserID == "paid")
                let cached = try await phone.customerInfo(fetchPolicy: .fromCacheOnly)
                #expect(cached.originalAppUserId == "paid")
                #expect(cached.entitlements["pro"]?.isActive == true)
                try await Task.sleep(for: .milliseconds(20))
                listener.cancel()
                // After logIn the stream only ever saw the new user.
                #expect(seen.all.drop { $0 == anonymous }.allSatisfy { $0 == "paid" }, "\(seen.all)")
            }
        }
    }

    typealias Seen = Collected<String>

    // MARK: The docs table (docs/sdk.md)

    static let projectRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("docs/sdk.md's lifecycle table is the table these tests check")
    func document() throws {
        let section = GeneratedDocSection(name: "lifecycles", generatedBy: "LifecycleTests", expected: Self.table())
        let current = try #require(
            try section.current(in: Self.projectRoot.appendingPathComponent("docs/sdk.md")), "docs/sdk.md lacks the lifecycle markers")
        #expect(current == Self.table(), "docs/sdk.md's lifecycle table is out of date; regenerate with COUNTERSIGN_WRITE_DOCS=1")
    }
}
