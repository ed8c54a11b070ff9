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
}
