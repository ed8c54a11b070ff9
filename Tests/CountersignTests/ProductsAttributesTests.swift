import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import Countersign

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A store that does not know some products (as App Store does not know a product that is not
/// approved yet), around the test store.
struct PartialStore: PurchaseStore {
    let base: TestStore
    let hidden: Set<String>
    var isTestStore: Bool { true }
    func products(_ identifiers: [String]) async throws -> [StoreProduct] {
        try await base.products(identifiers).filter { !hidden.contains($0.productIdentifier) }
    }
    func purchase(_ productId: String, appUserID: String, appAccountToken: UUID) async throws -> StoreTransaction {
        try await base.purchase(productId, appUserID: appUserID, appAccountToken: appAccountToken)
    }
    func currentEntitlements() async throws -> [StoreTransaction] { try await base.currentEntitlements() }
    func unfinishedTransactions() async throws -> [StoreTransaction] { try await base.unfinishedTransactions() }
    func finish(_ transaction: StoreTransaction) async throws { try await base.finish(transaction) }
}

@Suite("Products, eligibility and attributes")
struct ProductsAttributesTests {
    @Test("packages carry the store's product with RevenueCat's names; a product the store does not know leaves its package out")
    func products() async throws {
        try await SDKHarness.run { harness in
            var configuration = try harness.configuration(mode: .enforced, user: "shopper", storage: "shopper")
            let base = try TestStore(
                serverURL: harness.serverURL, apiKey: harness.apiKey, rootPublicKeys: [harness.rootKey],
                directory: configuration.storageDirectory)
            configuration.store = PartialStore(base: base, hidden: ["lifetime"])
            let purchases = try Purchases(configuration: configuration)
            let offering = try #require(try await purchases.offerings().current)
            #expect(offering.metadata["headline"] as? String == "Unlock every Pro feature")
            #expect(offering.availablePackages.map(\.identifier) == ["$cs_monthly"], "the lifetime package is left out")
            #expect(offering.lifetime == nil)
            let monthly = try #require(offering.monthly)
            let product = monthly.storeProduct
            #expect(product.productIdentifier == "pro_monthly")
            #expect(product.localizedTitle == "Pro Monthly")
            #expect(product.localizedDescription == "Every Pro feature, renewed each month")
            #expect(product.price == Decimal(string: "9.99"))
            #expect(product.currencyCode == "USD")
            #expect(product.productType == .autoRenewableSubscription)
            #expect(product.subscriptionPeriod == SubscriptionPeriod(value: 1, unit: .month))
            #expect(product.subscriptionGroupIdentifier == "pro")
            #expect(monthly.localizedPriceString.contains("9.99"))
            #expect(monthly.offeringIdentifier == "default")
            let trial = try #require(product.introductoryDiscount)
            #expect(trial.paymentMode == .freeTrial)
            #expect(trial.price == 0)
            #expect(trial.subscriptionPeriod == SubscriptionPeriod(value: 1, unit: .week))
            #expect(trial.type == .introductory)

            // purchase(package:) buys the package's product, with RevenueCat's tuple.
            let result = try await purchases.purchase(package: monthly)
            #expect(result.transaction?.productId == "pro_monthly")
            #expect(!result.userCancelled)
            #expect(result.customerInfo.entitlements["pro"]?.isActive == true)

            // RevenueCat's completion-handler shape works too.
            let viaCompletion: Offerings? = await withCheckedContinuation { continuation in
                purchases.getOfferings { offerings, _ in continuation.resume(returning: offerings) }
            }
            #expect(viaCompletion?.current?.monthly?.storeProduct == product)
            #expect(await purchases.products(["coins_100", "nope"]).map(\.productIdentifier) == ["coins_100"])
        }
    }

    @Test(
        "intro offer eligibility comes from the customer's history in the subscription group, in a signed answer",
        arguments: TestDatabaseKind.available)
    func eligibility(_ database: TestDatabaseKind) async throws {
        try await SDKHarness.run(database: database) { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "newcomer", storage: "newcomer")
            let before = await purchases.checkTrialOrIntroDiscountEligibility(productIdentifiers: ["pro_monthly", "lifetime", "unknown_product"])
            #expect(before["pro_monthly"]?.status == .eligible)
            #expect(before["lifetime"]?.status == .noIntroOfferExists)
            #expect(before["unknown_product"]?.status == .unknown)

            let (bought, info) = try await purchases.purchase(productID: "pro_monthly")
            #expect(info.entitlements["pro"]?.periodType == .trial, "the eligible customer got the free week")
            let after = await purchases.checkTrialOrIntroDiscountEligibility(productIdentifiers: ["pro_monthly"])
            #expect(after["pro_monthly"]?.status == .ineligible, "one introductory offer per subscription group")
            // RevenueCat's one-product form.
            let monthly = try #require(await purchases.products(["pro_monthly"]).first)
            #expect(await purchases.checkTrialOrIntroDiscountEligibility(product: monthly) == .ineligible)
            #expect(bought.productId == "pro_monthly")

            // A tampered answer is never believed: enforced mode gives unknown, not eligible.
            harness.proxy.attack = .stripSignature
            let tampered = await purchases.checkTrialOrIntroDiscountEligibility(productIdentifiers: ["pro_monthly"])
            #expect(tampered["pro_monthly"]?.status == .unknown)
        }
    }

    @Test(
        "subscriber attributes are sent, stored, shown by the admin API; reserved and malformed keys are refused",
        arguments: TestDatabaseKind.available)
    func attributes(_ database: TestDatabaseKind) async throws {
        try await SDKHarness.run(database: database) { harness in
            let purchases = try harness.purchases(mode: .enforced, user: "attributed", storage: "attributed")
            purchases.setAttributes(["favourite_colour": "blue", "$bogus": "x", "": "empty key"])
            // RevenueCat's current form (`Purchases.shared.attribution.…`) and its older one.
            purchases.attribution.setEmail("someone@example.com")
            purchases.setDisplayName("Someone")
            #expect(purchases.unsyncedAttributes.keys.sorted().allSatisfy { ["favourite_colour", "$email", "$displayName"].contains($0) })
            try await purchases.syncAttributes()
            #expect(purchases.unsyncedAttributes.isEmpty)

            let record = try await Self.admin(harness, "/v1/admin/customers/attributed")
            let stored = try #require(record["subscriber_attributes"] as? [String: [String: Any]])
            #expect(stored["favourite_colour"]?["value"] as? String == "blue")
            #expect(stored["$email"]?["value"] as? String == "someone@example.com")
            #expect(stored["$displayName"]?["value"] as? String == "Someone")
            #expect(stored["$bogus"] == nil && stored[""] == nil, "refused keys never left the device")

            // An empty value deletes.
            purchases.setAttributes(["favourite_colour": ""])
            try await purchases.syncAttributes()
            let afterDelete = try await Self.admin(harness, "/v1/admin/customers/attributed")
            #expect((afterDelete["subscriber_attributes"] as? [String: Any])?["favourite_colour"] == nil)

            // The server refuses a reserved key by name (a client that skips the SDK's checks).
            var request = URLRequest(url: harness.serverURL.appendingPathComponent("/v1/subscribers/attributed/attributes"))
            request.httpMethod = "POST"
            request.setValue("Bearer \(harness.apiKey)", forHTTPHeaderField: "Authorization")
            request.httpBody = Data(#"{"attributes":{"$rc_secret":{"value":"x","updated_at_ms":1}}}"#.utf8)
            let (data, response) = try await URLSession.shared.data(for: request)
            #expect((response as? HTTPURLResponse)?.statusCode == 400)
            let refusal = try JSONDecoder().decode(APIError.self, from: data)
            #expect(refusal.code == APIErrorCode.invalidSubscriberAttributes.rawValue)
            #expect(refusal.message.contains("$rc_secret"))
            #expect(
                PurchasesError.server(statusCode: 400, code: refusal.code, message: refusal.message).errorCode == .invalidSubscriberAttributesError)

            // A missing value is refused, not read as a deletion (null deletes).
            request.httpBody = Data(#"{"attributes":{"$email":{"updated_at_ms":1}}}"#.utf8)
            let (_, missing) = try await URLSession.shared.data(for: request)
            #expect((missing as? HTTPURLResponse)?.statusCode == 400)
            let kept = try await Self.admin(harness, "/v1/admin/customers/attributed")
            #expect((kept["subscriber_attributes"] as? [String: [String: Any]])?["$email"]?["value"] as? String == "someone@example.com")

            // What is set just before a logIn is sent for the user who set it.
            purchases.setAttributes(["plan_hint": "yearly"])
            _ = try await purchases.logIn("attributed-elsewhere")
            let before = try await Self.admin(harness, "/v1/admin/customers/attributed")
            #expect((before["subscriber_attributes"] as? [String: [String: Any]])?["plan_hint"]?["value"] as? String == "yearly")
        }
    }

    static func admin(_ harness: SDKHarness, _ path: String) async throws -> [String: Any] {
        var request = URLRequest(url: harness.serverURL.appendingPathComponent(path))
        request.setValue("Bearer \(harness.app.secretApiKeys[0])", forHTTPHeaderField: "Authorization")
        let (data, _) = try await URLSession.shared.data(for: request)
        return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    }
}

/// A store whose purchases fail as StoreKit can fail them.
struct FailingStore: PurchaseStore {
    let base: TestStore
    let failure: StoreFailure
    var isTestStore: Bool { true }
    func products(_ identifiers: [String]) async throws -> [StoreProduct] { try await base.products(identifiers) }
    func purchase(_ productId: String, appUserID: String, appAccountToken: UUID) async throws -> StoreTransaction {
        throw failure.error(productId: productId, detail: "the store said no")
    }
    func currentEntitlements() async throws -> [StoreTransaction] { [] }
    func unfinishedTransactions() async throws -> [StoreTransaction] { [] }
    func finish(_ transaction: StoreTransaction) async throws {}
}

@Suite("StoreKit's errors as RevenueCat's")
struct StoreFailureTests {
    @Test("each StoreKit failure has RevenueCat's code (StoreKitError+Extensions.swift); a cancel is userCancelled in the completion")
    func storeFailures() async throws {
        let expected: [StoreFailure: ErrorCode] = [
            .userCancelled: .purchaseCancelledError, .networkError: .networkError, .systemError: .storeProblemError,
            .notAvailableInStorefront: .productNotAvailableForPurchaseError, .notEntitled: .storeProblemError, .unknown: .storeProblemError,
            .unsupported: .unknownError, .invalidQuantity: .storeProblemError, .productUnavailable: .productNotAvailableForPurchaseError,
            .purchaseNotAllowed: .purchaseNotAllowedError, .ineligibleForOffer: .ineligibleError,
            .invalidOfferIdentifier: .invalidPromotionalOfferError, .invalidOfferPrice: .invalidPromotionalOfferError,
            .invalidOfferSignature: .invalidPromotionalOfferError, .missingOfferParameters: .invalidPromotionalOfferError,
        ]
        for (failure, code) in expected {
            #expect(failure.error(productId: "p", detail: "").errorCode == code, "\(failure)")
        }
        #expect(ErrorCode.ineligibleError.rawValue == 18 && ErrorCode.invalidPromotionalOfferError.rawValue == 34)

        try await SDKHarness.run { harness in
            for failure in [StoreFailure.userCancelled, .networkError] {
                var configuration = try harness.configuration(mode: .enforced, user: "failing", storage: "failing-\(failure)")
                let base = try TestStore(
                    serverURL: harness.serverURL, apiKey: harness.apiKey, rootPublicKeys: [harness.rootKey],
                    directory: configuration.storageDirectory)
                configuration.store = FailingStore(base: base, failure: failure)
                let purchases = try Purchases(configuration: configuration)
                let product = try #require(await purchases.products(["pro_monthly"]).first)
                let outcome = Collected<(code: ErrorCode?, userCancelled: Bool)>()
                purchases.purchase(product: product) { _, _, error, userCancelled in
                    outcome.add(((error as? PurchasesError)?.errorCode, userCancelled))
                }
                #expect(try await waitUntil(limit: .seconds(30)) { !outcome.all.isEmpty })
                #expect(outcome.all.first?.code == expected[failure])
                #expect(outcome.all.first?.userCancelled == (failure == .userCancelled))
            }
        }
    }
}

@Suite("Price per period")
struct PricePerPeriodTests {
    static func product(_ price: String, _ period: SubscriptionPeriod?) -> StoreProduct {
        StoreProduct(
            productIdentifier: "p", localizedTitle: "P", price: Decimal(string: price)!, currencyCode: "USD",
            productType: period == nil ? .nonConsumable : .autoRenewableSubscription, subscriptionPeriod: period)
    }

    @Test("prices per day, week, month and year with RevenueCat's calendar (30-day months, 365 / 12 / 7 weeks a month), to the cent")
    func pricePerPeriod() {
        let monthly = Self.product("9.99", SubscriptionPeriod(value: 1, unit: .month))
        #expect(monthly.pricePerMonth == NSDecimalNumber(string: "9.99"))
        #expect(monthly.pricePerYear == NSDecimalNumber(string: "119.88"))
        #expect(monthly.pricePerWeek == NSDecimalNumber(string: "2.3"))  // 9.99 / 4.345…
        #expect(monthly.pricePerDay == NSDecimalNumber(string: "0.33"))
        let yearly = Self.product("59.99", SubscriptionPeriod(value: 1, unit: .year))
        #expect(yearly.pricePerMonth == NSDecimalNumber(string: "5"))  // 4.999…, half up
        #expect(yearly.pricePerWeek == NSDecimalNumber(string: "1.15"))  // 59.99 / 52.142…
        #expect(yearly.pricePerDay == NSDecimalNumber(string: "0.16"))
        let quarterly = Self.product("24.99", SubscriptionPeriod(value: 3, unit: .month))
        #expect(quarterly.pricePerMonth == NSDecimalNumber(string: "8.33"))
        #expect(SubscriptionPeriod(value: 2, unit: .week).numberOfUnitsAs(unit: .day) == 14)
        #expect(SubscriptionPeriod(value: 1, unit: .year).numberOfUnitsAs(unit: .month) == 12)
        #expect(Self.product("4.99", nil).pricePerMonth == nil)
        #expect(monthly.localizedPricePerYear?.contains("119.88") == true)
    }
}
