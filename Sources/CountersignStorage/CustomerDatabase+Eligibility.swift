import CountersignCore
import CountersignServerCore
import Foundation

extension CustomerDatabase {
    /// Each product's introductory offer eligibility for `user`: ineligible once the customer owns
    /// (or owned) any transaction of a product in the same subscription group (a product without
    /// a group is a group of its own); `noIntroOfferExists` for a product without an offer.
    public func introductoryOfferEligibility(app: AppConfiguration, user: String, products: [AppConfiguration.Product]) async throws -> [String:
        IntroEligibilityStatus]
    {
        let owned: Set<String> = try await database.withConnection { sql in
            let user = try await Self.customerId(sql, app: app.id, user: user)
            return Set(
                try await sql.all("SELECT DISTINCT p.product_id FROM \(Self.ownedPurchases(app: app.id, user: user))") { try $0.string("product_id") }
            )
        }
        func group(_ product: AppConfiguration.Product) -> String { product.subscriptionGroup ?? "product:" + product.id }
        let ownedGroups = Set(app.products.filter { owned.contains($0.id) && $0.type == .autoRenewable }.map(group))
        var answer: [String: IntroEligibilityStatus] = [:]
        for product in products {
            answer[product.id] =
                product.introductoryOffer == nil
                ? .noIntroOfferExists
                : ownedGroups.contains(group(product)) ? .ineligible : .eligible
        }
        return answer
    }
}
