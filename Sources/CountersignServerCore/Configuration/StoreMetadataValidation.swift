import CountersignCore
import Foundation

extension DeploymentConfiguration {
    /// Checks what JSON types cannot: prices are plain non-negative decimals, currencies three
    /// capital letters, periods ones ``StorePeriod`` reads, periods only on subscriptions.
    func validateStoreMetadata() throws(ConfigurationError) {
        func isPrice(_ text: String) -> Bool {
            let parts = text.split(separator: ".", omittingEmptySubsequences: false)
            guard (1...2).contains(parts.count), !parts[0].isEmpty, parts.allSatisfy({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }) else {
                return false
            }
            return parts.count == 1 || (1...4).contains(parts[1].count)
        }
        for app in apps {
            for product in app.products {
                let name = "app '\(app.id)' product '\(product.id)'"
                if let price = product.price, !isPrice(price) { throw ConfigurationError("\(name): price '\(price)' is not a decimal like 9.99") }
                if let currency = product.currency, currency.utf8.count != 3 || !currency.utf8.allSatisfy({ (65...90).contains($0) }) {
                    throw ConfigurationError("\(name): currency '\(currency)' is not an ISO 4217 code like USD")
                }
                if let period = product.subscriptionPeriod {
                    guard StorePeriod(iso8601: period) != nil else {
                        throw ConfigurationError("\(name): subscriptionPeriod '\(period)' is not one of P1W, P1M, P1Y…")
                    }
                    guard product.type == .autoRenewable || product.type == .nonRenewing else {
                        throw ConfigurationError("\(name): only subscriptions have a subscriptionPeriod")
                    }
                }
                if let offer = product.introductoryOffer {
                    guard product.type == .autoRenewable else {
                        throw ConfigurationError("\(name): only auto-renewable subscriptions have an introductoryOffer")
                    }
                    guard StorePeriod(iso8601: offer.period) != nil else {
                        throw ConfigurationError("\(name): introductoryOffer.period '\(offer.period)' is not one of P3D, P1W, P1M…")
                    }
                    if let count = offer.periodCount, !(1...12).contains(count) {
                        throw ConfigurationError("\(name): introductoryOffer.periodCount must be 1 to 12")
                    }
                    if let price = offer.price, !isPrice(price) {
                        throw ConfigurationError("\(name): introductoryOffer.price '\(price)' is not a decimal like 0.99")
                    }
                }
            }
        }
    }
}
