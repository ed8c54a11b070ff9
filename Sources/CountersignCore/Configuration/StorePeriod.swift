import Foundation

/// A subscription or offer period, written in configuration as an ISO 8601 duration of one unit
/// (`P3D`, `P1W`, `P1M`, `P2M`, `P3M`, `P6M`, `P1Y`), as App Store Connect offers them.
public struct StorePeriod: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Unit: String, Sendable, Hashable, Codable, CaseIterable {
        case day, week, month, year
    }

    public var value: Int
    public var unit: Unit

    public init(value: Int, unit: Unit) {
        self.value = value
        self.unit = unit
    }

    /// Reads `PnD`, `PnW`, `PnM` or `PnY` with n from 1 to 99; anything else is nil.
    public init?(iso8601 text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count >= 3, bytes.count <= 4, bytes.first == UInt8(ascii: "P"),
            let value = Int(String(decoding: bytes[1..<(bytes.count - 1)], as: UTF8.self)), value >= 1,
            bytes[1] != UInt8(ascii: "+"), bytes[1] != UInt8(ascii: "-")
        else { return nil }
        switch bytes.last {
        case UInt8(ascii: "D"): unit = .day
        case UInt8(ascii: "W"): unit = .week
        case UInt8(ascii: "M"): unit = .month
        case UInt8(ascii: "Y"): unit = .year
        default: return nil
        }
        self.value = value
    }

    public var iso8601: String {
        let letter =
            switch unit {
            case .day: "D"
            case .week: "W"
            case .month: "M"
            case .year: "Y"
            }
        return "P\(value)\(letter)"
    }

    public var description: String { iso8601 }

    /// `times` periods after `start`, by the Gregorian calendar in UTC.
    public func end(from start: Date, times: Int = 1) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let (component, amount): (Calendar.Component, Int) =
            switch unit {
            case .day: (.day, value)
            case .week: (.day, 7 * value)
            case .month: (.month, value)
            case .year: (.year, value)
            }
        return calendar.date(byAdding: component, value: amount * times, to: start) ?? start
    }
}

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
