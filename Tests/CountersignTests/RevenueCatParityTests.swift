import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import Countersign

/// `Purchases.logLevel` and `Purchases.logHandler`, as RevenueCat's: over real HTTP the handler
/// sees the configuration, each request with its status and verification result, purchases and
/// verification failures, and never the API key or a whole signed transaction.
@Suite("SDK logging", .serialized)
struct LoggingTests {
    @Test("the log handler sees requests, purchases and failures at their levels, and no secret")
    func handlerSeesTheFlow() async throws {
        let lines = Collected<(LogLevel, String)>()
        let previous = (Purchases.logLevel, Purchases.logHandler)
        defer { (Purchases.logLevel, Purchases.logHandler) = previous }
        Purchases.logLevel = .debug
        Purchases.logHandler = { level, message in lines.add((level, message)) }
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .informational, user: "logged", storage: "logging")
            let (transaction, _) = try await purchases.purchase(productID: "lifetime")
            harness.proxy.attack = .grantEntitlement
            _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            let all = lines.all
            #expect(all.contains { $0.0 == .info && $0.1.hasPrefix("configured for 127.0.0.1") })
            #expect(all.contains { $0.0 == .info && $0.1 == "recording transaction \(transaction.transactionId) of lifetime" })
            #expect(all.contains { $0.0 == .debug && $0.1 == "POST /v1/receipts → 200, verification: verified" })
            #expect(all.contains { $0.0 == .debug && $0.1 == "GET /v1/subscribers/logged → 200, verification: failed (payloadMismatch)" })
            #expect(
                all.contains {
                    $0.0 == .warn && $0.1 == "signature verification failed for /v1/subscribers/logged (200): payloadMismatch [informational]"
                })
            for (_, message) in all {
                #expect(!message.contains(harness.apiKey), "an API key was logged: \(message)")
                #expect(!message.contains(transaction.jws), "a signed transaction was logged: \(message)")
            }
        }
    }

    @Test("messages below the level never reach the handler")
    func levelFilters() {
        let lines = Collected<(LogLevel, String)>()
        let previous = (Purchases.logLevel, Purchases.logHandler)
        defer { (Purchases.logLevel, Purchases.logHandler) = previous }
        Purchases.logHandler = { level, message in lines.add((level, message)) }
        Purchases.logLevel = .warn
        for level in LogLevel.allCases { SDKLog.log(level, "at \(level)") }
        #expect(lines.all.map(\.0) == [.warn, .error])
        #expect(LogLevel.allCases.sorted() == [.verbose, .debug, .info, .warn, .error])
    }
}

/// The tests that configure `Purchases.shared`, one at a time (it is one global).
@Suite("Shared instance", .serialized)
struct SharedInstanceTests {
    @Test("configure makes Purchases.shared, and isConfigured says so")
    func configureMakesShared() async throws {
        try await SDKHarness.run { harness in
            let purchases = try Purchases.configure(validating: try harness.configuration(mode: .enforced, user: "shared", storage: "shared"))
            #expect(Purchases.isConfigured)
            #expect(Purchases.shared === purchases)
            #expect(try await Purchases.shared.customerInfo(fetchPolicy: .fetchCurrent).entitlements.verification == .verified)
        }
    }

    @Test("RevenueCat's configure form: Configuration.Builder, a non-throwing configure, top-level Package and Offering, cachedCustomerInfo")
    func builderForm() async throws {
        try await SDKHarness.run { harness in
            try await harness.givePro(to: "built")
            let storage = harness.directory.appendingPathComponent("sdk-builder")
            let store = try TestStore(serverURL: harness.serverURL, apiKey: harness.apiKey, rootPublicKeys: [harness.rootKey], directory: storage)
            // As RevenueCat's documentation writes it, plus the server and its root key.
            let purchases = Purchases.configure(
                with: Configuration.Builder(withAPIKey: harness.apiKey)
                    .with(appUserID: "built")
                    .with(serverURL: harness.proxyURL)
                    .with(rootPublicKeys: [harness.rootKey])
                    .with(storageDirectory: storage)
                    .with(store: store)
                    .with(entitlementVerificationMode: .enforced)
                    .with(purchasesAreCompletedBy: .revenueCat, storeKitVersion: .storeKit2)
                    .build()
            )
            #expect(Purchases.shared === purchases)
            #expect(purchases.configuration.entitlementVerificationMode == .enforced)
            #expect(purchases.cachedCustomerInfo == nil)
            let info = try await Purchases.shared.customerInfo()
            #expect(info.entitlements["pro"]?.isActive == true && info.entitlements.verification == .verified)
            #expect(purchases.cachedCustomerInfo?.entitlements["pro"]?.isActive == true)
            let firstSeen: Date = info.firstSeen
            #expect(abs(firstSeen.timeIntervalSinceNow) < 3_600, "the purchase made this customer just now")
            let offering: Offering = try #require(try await purchases.offerings().current)
            let packages: [Package] = offering.availablePackages
            #expect(packages.map(\.id) == packages.map(\.identifier))
            #expect(offering.id == offering.identifier)
        }
    }
}

@Suite("Error codes")
struct ErrorCodeTests {
    /// Catches one call's error by its code, as RevenueCat's documentation does.
    static func code(_ body: () async throws -> Void) async -> ErrorCode? {
        do {
            try await body()
            return nil
        } catch ErrorCode.signatureVerificationFailed {
            return .signatureVerificationFailed
        } catch ErrorCode.offlineConnectionError {
            return .offlineConnectionError
        } catch ErrorCode.noCachedCustomerInfo {
            return .noCachedCustomerInfo
        } catch {
            return .unknownError  // not matched by any catch ErrorCode.x above
        }
    }

    @Test("catch ErrorCode.x works over real HTTP: tampering in enforced mode, no server and no cache, nothing cached")
    func catchByCode() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "coded", storage: "coded")
            #expect(await Self.code { _ = try await purchases.customerInfo(fetchPolicy: .fromCacheOnly) } == .noCachedCustomerInfo)
            harness.proxy.attack = .grantEntitlement
            #expect(await Self.code { _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent) } == .signatureVerificationFailed)
            harness.proxy.attack = .serverDown
            #expect(await Self.code { _ = try await purchases.customerInfo(fetchPolicy: .fetchCurrent) } == .offlineConnectionError)
        }
    }

    @Test(
        "the server's refusals map onto RevenueCat's codes",
        arguments: [
            (APIErrorCode.purchaseOwnedByAnotherUser, ErrorCode.receiptAlreadyInUseError),
            (.purchaseBoundToAnotherUser, .receiptAlreadyInUseError),
            (.invalidStoreSignature, .invalidReceiptError),
            (.wrongEnvironment, .invalidReceiptError),
            (.unknownProduct, .productNotAvailableForPurchaseError),
            (.invalidAPIKey, .invalidCredentialsError),
            (.wrongKeyKind, .invalidCredentialsError),
            (.reservedAppUserId, .invalidAppUserIdError),
            (.rateLimited, .unknownBackendError),
        ])
    func serverCodes(_ server: APIErrorCode, _ expected: ErrorCode) {
        let error = PurchasesError.server(statusCode: server.httpStatus, code: server.rawValue, message: "")
        #expect(error.errorCode == expected)
        #expect(expected ~= error)
        #expect(!(ErrorCode.purchaseCancelledError ~= error))
    }

    @Test("codes keep RevenueCat's numbers where the names are RevenueCat's")
    func numbers() {
        #expect(ErrorCode.purchaseCancelledError.rawValue == 1)
        #expect(ErrorCode.receiptAlreadyInUseError.rawValue == 7)
        #expect(ErrorCode.paymentPendingError.rawValue == 20)
        #expect(ErrorCode.configurationError.rawValue == 23)
        #expect(ErrorCode.offlineConnectionError.rawValue == 35)
        #expect(ErrorCode.signatureVerificationFailed.rawValue == 37)
        #expect(ErrorCode(rawValue: 7) == .receiptAlreadyInUseError)
        #expect(ErrorCode(rawValue: 13) == nil)
        #expect(Set(ErrorCode.allCases.map(\.rawValue)).count == ErrorCode.allCases.count)
    }
}

@Suite("Restore")
struct RestoreTests {
    @Test("restore goes on past a transaction the server refuses, records the rest and logs what failed")
    func restoreContinuesPastFailures() async throws {
        try await SDKHarness.run { harness in
            // One store account (a shared test-store ledger): alice's purchase is bound to her by
            // its app account token, so the server refuses it for bob; bob's own is recorded.
            let alice = try harness.purchases(mode: .enforced, user: "alice", storage: "family")
            let (alicePurchase, _) = try await alice.purchase(productID: "lifetime")
            let bob = try harness.purchases(mode: .enforced, user: "bob", storage: "family")
            _ = try await bob.purchase(productID: "pro_monthly")
            let info = try await bob.restorePurchases()
            #expect(info.originalAppUserId == "bob")
            #expect(info.allPurchasedProductIdentifiers.contains("pro_monthly"))
            #expect(!info.allPurchasedProductIdentifiers.contains("lifetime"), "alice's purchase stays hers")
            let refusals = harness.proxy.seenRequests.filter { $0.path == "/v1/receipts" && $0.upstreamStatus == 409 }
            #expect(!refusals.isEmpty, "alice's transaction \(alicePurchase.transactionId) was posted for bob and refused")
        }
    }
}

@Suite("The whole CustomerInfo")
struct FullCustomerInfoTests {
    @Test("RevenueCat's subscriber fields read as RevenueCat's SDK reads them")
    func revenueCatFields() throws {
        let body = Data(
            #"""
            {"request_date":"2026-01-01T00:00:00Z","request_date_ms":1767225600000,"subscriber":{"original_app_user_id":"u1",
             "first_seen":"2025-01-01T00:00:00Z","original_purchase_date":"2025-02-01T00:00:00Z","management_url":"https://apps.apple.com/account/subscriptions",
             "entitlements":{"pro":{"product_identifier":"pro_monthly","purchase_date":"2025-12-15T00:00:00Z","expires_date":"2026-01-15T00:00:00Z"},
                             "gift":{"product_identifier":"rc_promo_gift_lifetime","purchase_date":"2025-12-01T00:00:00Z","expires_date":null},
                             "orphan":{"product_identifier":"nowhere","purchase_date":"2025-12-01T00:00:00Z","expires_date":null}},
             "subscriptions":{"pro_monthly":{"purchase_date":"2025-12-15T00:00:00Z","original_purchase_date":"2025-03-15T00:00:00Z",
               "expires_date":"2026-01-15T00:00:00Z","period_type":"trial","store":"app_store","is_sandbox":true,"ownership_type":"FAMILY_SHARED",
               "unsubscribe_detected_at":"2025-12-20T00:00:00Z","billing_issues_detected_at":null},
               "old_yearly":{"purchase_date":"2024-01-01T00:00:00Z","original_purchase_date":"2024-01-01T00:00:00Z","expires_date":"2025-01-01T00:00:00Z",
               "period_type":"normal","store":"app_store","is_sandbox":false},
               "rc_promo_gift_lifetime":{"purchase_date":"2025-12-01T00:00:00Z","original_purchase_date":"2025-12-01T00:00:00Z",
               "expires_date":null,"period_type":"normal","store":"promotional","is_sandbox":false}},
             "non_subscriptions":{"coins":[{"id":"t2","purchase_date":"2025-06-01T00:00:00Z","store":"app_store","is_sandbox":false},
                                          {"id":"t1","purchase_date":"2025-05-01T00:00:00Z","store":"app_store","is_sandbox":false}]}}}
            """#.utf8)
        let info = try CustomerInfo(answer: body, verification: .verified, failure: nil, now: Date(timeIntervalSince1970: 1_767_225_600))
        let pro = try #require(info.entitlements["pro"])
        #expect(pro.periodType == .trial)
        #expect(pro.store == .appStore)
        #expect(pro.isSandbox)
        #expect(pro.ownershipType == .familyShared)
        #expect(pro.originalPurchaseDate == WireDate.parse("2025-03-15T00:00:00Z"))
        #expect(pro.unsubscribeDetectedAt == WireDate.parse("2025-12-20T00:00:00Z"))
        #expect(pro.billingIssueDetectedAt == nil)
        #expect(!pro.willRenew, "unsubscribed")
        #expect(info.entitlements["gift"]?.store == .promotional)
        #expect(info.entitlements["gift"]?.isActive == true && info.entitlements["gift"]?.willRenew == false)
        // An entitlement whose product is neither a subscription nor a one-time purchase is left
        // out, as RevenueCat's EntitlementInfos leaves it out.
        #expect(info.entitlements["orphan"] == nil)
        #expect(info.managementURL == URL(string: "https://apps.apple.com/account/subscriptions"))
        #expect(info.originalPurchaseDate == WireDate.parse("2025-02-01T00:00:00Z"))
        #expect(info.latestExpirationDate == WireDate.parse("2026-01-15T00:00:00Z"))
        #expect(info.expirationDate(forEntitlement: "pro") == WireDate.parse("2026-01-15T00:00:00Z"))
        #expect(info.expirationDate(forEntitlement: "gift") == nil)
        #expect(info.nonSubscriptions.map(\.transactionIdentifier) == ["t1", "t2"])
        #expect(info.nonSubscriptions.allSatisfy { $0.productIdentifier == "coins" })
    }

    @Test("over real HTTP: a test-store subscription and a consumable show their store, sandbox flag, dates and non-subscriptions")
    func overHTTP() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "whole", storage: "whole")
            _ = try await purchases.purchase(productID: "pro_monthly")
            let (coins, _) = try await purchases.purchase(productID: "coins_100")
            let info = try await purchases.customerInfo(fetchPolicy: .fetchCurrent)
            let pro = try #require(info.entitlements["pro"])
            #expect(pro.store == .testStore)
            #expect(pro.isSandbox)
            // The demo app's pro_monthly has a free week for a customer's first subscription in its group.
            #expect(pro.periodType == .trial)
            if let start = pro.latestPurchaseDate, let end = pro.expirationDate {
                #expect(abs(end.timeIntervalSince(start) - 7 * 86_400) < 1, "the trial lasts the configured P1W")
            } else {
                Issue.record("a trial has a purchase and an expiry date")
            }
            #expect(pro.ownershipType == .purchased)
            #expect(pro.originalPurchaseDate != nil)
            #expect(pro.willRenew)
            #expect(info.latestExpirationDate == pro.expirationDate)
            #expect(info.nonSubscriptions.map(\.transactionIdentifier) == [coins.transactionId])
            #expect(info.nonSubscriptions.first?.store == .testStore)
        }
    }
}

@Suite("Cancelled and pending purchases")
struct CancelAndPendTests {
    @Test("a cancel and a pending purchase throw their codes, post nothing and grant nothing; then a purchase goes through")
    func cancelAndPend() async throws {
        try await SDKHarness.run { harness in
            let directory = harness.directory.appendingPathComponent("sdk-cancel")
            let store = try TestStore(serverURL: harness.serverURL, apiKey: harness.apiKey, rootPublicKeys: [harness.rootKey], directory: directory)
            var configuration = Configuration(
                apiKey: harness.apiKey, appUserID: "hesitant", serverURL: harness.proxyURL, rootPublicKeys: [harness.rootKey],
                store: store, storageDirectory: directory
            )
            configuration.entitlementVerificationMode = .enforced
            let purchases = try Purchases(configuration: configuration)
            let offerings = try await purchases.offerings()
            let package = try #require(offerings.current?.packages.first { $0.productIdentifier == "pro_monthly" })
            func receipts() -> Int { harness.proxy.seenRequests.filter { $0.path == "/v1/receipts" }.count }

            store.nextPurchaseOutcome = .cancel
            await #expect { _ = try await purchases.purchase(package: package) } throws: { ErrorCode.purchaseCancelledError ~= $0 }
            store.nextPurchaseOutcome = .pend
            do {
                _ = try await purchases.purchase(package: package)
                Issue.record("a pending purchase returned")
            } catch ErrorCode.paymentPendingError {
                // RevenueCat's documented way to tell it apart.
            }
            #expect(receipts() == 0, "nothing posted")
            #expect(try await store.currentEntitlements().isEmpty, "nothing bought")
            #expect(try await purchases.customerInfo(fetchPolicy: .fetchCurrent).entitlements["pro"]?.isActive != true)

            store.nextPurchaseOutcome = .succeed
            let (transaction, info, userCancelled) = try await purchases.purchase(package: package)
            #expect(!userCancelled)
            #expect(transaction?.productId == "pro_monthly")
            #expect(info.entitlements["pro"]?.isActive == true)
            #expect(receipts() == 1)
        }
    }
}

@Suite("Offerings")
struct OfferingsTests {
    @Test("offerings read with RevenueCat's names over real HTTP: current, subscript, package types and shortcuts")
    func names() async throws {
        try await SDKHarness.run { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "shopper", storage: "offerings")
            let offerings = try await purchases.offerings()
            #expect(offerings.verification == .verified)
            let current = try #require(offerings.current)
            #expect(offerings["default"] == current)
            #expect(offerings.offering(identifier: "nope") == nil)
            #expect(current.availablePackages.map(\.identifier) == ["$cs_monthly", "$cs_lifetime"])
            #expect(current.monthly?.productIdentifier == "pro_monthly")
            #expect(current.lifetime?.productIdentifier == "lifetime")
            #expect(current.annual == nil)
            #expect(current["$cs_lifetime"]?.packageType == .lifetime)
            #expect(current.package(identifier: "$cs_monthly")?.packageType == .monthly)
        }
    }

    @Test(
        "package types from identifiers, ours and RevenueCat's",
        arguments: [
            ("$cs_monthly", PackageType.monthly), ("$rc_annual", .annual), ("$cs_six_month", .sixMonth), ("$rc_three_month", .threeMonth),
            ("$cs_two_month", .twoMonth), ("$rc_weekly", .weekly), ("$cs_lifetime", .lifetime), ("pro_bundle", .custom), ("$cs_fortnight", .custom),
            ("", .unknown),
        ])
    func packageTypes(_ identifier: String, _ expected: PackageType) {
        #expect(PackageType(identifier: identifier) == expected)
    }
}
