import CountersignCore
import CountersignTesting
import Foundation
import Testing

@testable import Countersign

/// RevenueCat's own JSON fixtures (Tests/Fixtures/revenuecat, MIT), decoded by the SDK and held to
/// the values RevenueCat's tests assert of them; each test names RevenueCat's.
@Suite("RevenueCat's fixtures")
struct RevenueCatFixtureTests {
    static let body = Fixtures.data("revenuecat/Offerings.json")

    /// A store that knows every product the fixture names.
    static func offerings() throws -> Offerings {
        let ids = [
            "com.revenuecat.monthly_4.99.1_week_intro", "com.revenuecat.yearly_10.99.2_week_intro",
            "com.revenuecat.other_product", "com.revenuecat.other_product_2",
        ]
        let products = Dictionary(
            uniqueKeysWithValues: ids.map {
                ($0, StoreProduct(productIdentifier: $0, localizedTitle: $0, price: 1, currencyCode: "USD", productType: .nonConsumable))
            })
        return try Offerings(answer: body, verification: .verified, products: products)
    }

    @Test("Offerings.json decodes whole, paywalls and all (RevenueCat: OfferingsDecodingTests.testDecodesAllOfferings)")
    func allOfferings() throws {
        let offerings = try Self.offerings()
        #expect(offerings.currentOfferingID == "default")
        #expect(Set(offerings.all.keys) == ["default", "alternate", "paywall", "metadata", "nullmetadata", "invalid_paywall"])
    }

    @Test("the first offering (RevenueCat: OfferingsDecodingTests.testDecodesFirstOffering)")
    func firstOffering() throws {
        let offering = try #require(try Self.offerings()["default"])
        #expect(offering.serverDescription == "standard set of packages")
        #expect(offering.metadata.isEmpty)
        #expect(offering.availablePackages.map(\.identifier) == ["$rc_monthly", "$rc_annual"])
        #expect(
            offering.availablePackages.map(\.storeProduct.productIdentifier)
                == ["com.revenuecat.monthly_4.99.1_week_intro", "com.revenuecat.yearly_10.99.2_week_intro"])
        #expect(offering.monthly?.packageType == .monthly && offering.annual?.packageType == .annual)
    }

    @Test("metadata of every JSON type (RevenueCat: OfferingsDecodingTests.testDecodesMetadataOffering)")
    func metadataOffering() throws {
        let offering = try #require(try Self.offerings()["metadata"])
        #expect(offering.serverDescription == "offering with metadata")
        let metadata = offering.metadata
        #expect(metadata.count == 6)
        #expect(metadata["int"] as? Int == 5)
        #expect(metadata["double"] as? Double == 5.5)
        #expect(metadata["boolean"] as? Bool == true)
        #expect(metadata["string"] as? String == "five")
        #expect(metadata["array"] as? [String] == ["five"])
        #expect(metadata["dictionary"] as? [String: String] == ["string": "five"])
        #expect(offering.getMetadataValue(for: "string", default: "none") == "five")
        #expect(offering.getMetadataValue(for: "int", default: 0) == 5)
        #expect(offering.getMetadataValue(for: "missing", default: "none") == "none")
        #expect(offering.getMetadataValue(for: "string", default: 0) == 0, "a value of another type gives the default")
        #expect(offering.availablePackages.map(\.identifier) == ["$rc_lifetime"])
    }

    @Test("null metadata is empty (RevenueCat: OfferingsDecodingTests.testDecodesNullMetadataOffering)")
    func nullMetadataOffering() throws {
        let offering = try #require(try Self.offerings()["nullmetadata"])
        #expect(offering.serverDescription == "offering with null metadata")
        #expect(offering.metadata.isEmpty)
        #expect(offering.lifetime?.storeProduct.productIdentifier == "com.revenuecat.other_product")
    }

    // MARK: CustomerInfo.json

    static func customerInfo() throws -> CustomerInfo {
        try CustomerInfo(
            answer: Fixtures.data("revenuecat/CustomerInfo.json"), verification: .notRequested, failure: nil,
            now: Date(timeIntervalSince1970: 1_646_761_378))
    }

    static func date(_ text: String) -> Date? { WireDate.parse(text) }

    @Test("CustomerInfo.json's request date (RevenueCat: CustomerInfoDecodingTests.testRequestDate)")
    func customerInfoRequestDate() throws {
        // RevenueCat reads the whole-second request_date; the SDK keeps request_date_ms's milliseconds.
        #expect(try Self.customerInfo().requestDate.timeIntervalSince1970.rounded(.down) == 1_646_761_378)
    }

    @Test("CustomerInfo.json's subscriber (RevenueCat: CustomerInfoDecodingTests.testSubscriberData)")
    func customerInfoSubscriber() throws {
        let info = try Self.customerInfo()
        #expect(info.firstSeen == Self.date("2022-03-08T17:42:58Z"))
        #expect(info.managementURL == URL(string: "https://apps.apple.com/account/subscriptions"))
        #expect(info.originalAppUserId == "$RCAnonymousID:5b6fdbac3a0c4f879e43d269ecdf9ba1")
        #expect(info.originalApplicationVersion == "1.0")
        #expect(info.originalPurchaseDate == Self.date("2022-04-12T00:03:24Z"))
    }

    @Test("CustomerInfo.json's one-time purchases (RevenueCat: CustomerInfoDecodingTests.testNonSubscriptions)")
    func customerInfoNonSubscriptions() throws {
        let purchases = try Self.customerInfo().nonSubscriptions
        #expect(purchases.count == 1)
        let tip = try #require(purchases.first)
        #expect(tip.productIdentifier == "com.revenuecat.product.tip")
        #expect(tip.purchaseDate == Self.date("2022-02-11T00:03:28Z"))
        #expect(tip.transactionIdentifier == "17459f5ff7")
        #expect(tip.store == .appStore)
        #expect(tip.isSandbox == false)
    }

    @Test("CustomerInfo.json's subscriptions (RevenueCat: CustomerInfoDecodingTests.testSubscriptions)")
    func customerInfoSubscriptions() throws {
        let info = try Self.customerInfo()
        #expect(
            info.allPurchasedProductIdentifiers == [
                "com.revenuecat.monthly_4.99.1_week_intro", "com.revenuecat.ABCDNA12U.ProductName", "com.revenuecat.product.tip",
            ])
        #expect(info.expirationDate(forProductIdentifier: "com.revenuecat.monthly_4.99.1_week_intro") == Self.date("2022-04-12T00:03:35Z"))
        #expect(info.expirationDate(forProductIdentifier: "com.revenuecat.product.tip") == nil)
        #expect(Set(info.entitlements.all.keys) == ["premium", "tip"])
    }

    @Test("CustomerInfo.json's entitlements (RevenueCat: CustomerInfoDecodingTests.testEntitlements)")
    func customerInfoEntitlements() throws {
        let info = try Self.customerInfo()
        // RevenueCat's test reads the entitlement's own `expires_date` from the response; the
        // EntitlementInfo takes the subscription's (RevenueCat's EntitlementInfo.init), and is
        // judged by the entitlement's.
        let wire = try JSONDecoder().decode(SubscriberResponse.self, from: Fixtures.data("revenuecat/CustomerInfo.json"))
        #expect(wire.subscriber.entitlements["premium"]?.expiresDate == "1990-08-30T02:40:36Z")
        #expect(wire.subscriber.entitlements["tip"]?.expiresDate == nil)
        let premium = try #require(info.entitlements["premium"])
        #expect(premium.expirationDate == Self.date("2022-04-12T00:03:35Z"))
        #expect(premium.productIdentifier == "com.revenuecat.monthly_4.99.1_week_intro")
        #expect(premium.latestPurchaseDate == Self.date("1990-08-30T02:40:36Z"))
        #expect(premium.isActive == false)
        let tip = try #require(info.entitlements["tip"])
        #expect(tip.expirationDate == nil)
        #expect(tip.productIdentifier == "com.revenuecat.product.tip")
        #expect(tip.latestPurchaseDate == Self.date("1990-09-30T02:40:36Z"))
        #expect(tip.isActive == true)
    }

    @Test("a body that is not a CustomerInfo is refused (RevenueCat: CustomerInfoDecodingTests.testFailsToDecode)")
    func customerInfoFailsToDecode() {
        #expect(throws: (any Error).self) {
            _ = try CustomerInfo(answer: Data("[]".utf8), verification: .notRequested, failure: nil, now: Date())
        }
    }
}
