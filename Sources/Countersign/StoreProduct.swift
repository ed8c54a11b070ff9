import CountersignCore
import Foundation

/// A product the store sells, with RevenueCat's names.
public struct StoreProduct: Sendable, Hashable {
    /// RevenueCat's `StoreProduct.ProductType`.
    public enum ProductType: String, Sendable, Hashable, CaseIterable {
        case consumable, nonConsumable, nonRenewableSubscription, autoRenewableSubscription
    }

    public let productIdentifier: String
    public let localizedTitle: String
    public let localizedDescription: String
    public let price: Decimal
    /// The price formatted in the store's currency (`$9.99`).
    public let localizedPriceString: String
    /// ISO 4217, nil when the store does not say.
    public let currencyCode: String?
    public let productType: ProductType
    /// Nil for products that are not subscriptions.
    public let subscriptionPeriod: SubscriptionPeriod?
    public let subscriptionGroupIdentifier: String?
    /// The subscription's introductory offer, if it has one (whether this customer may have it:
    /// ``Purchases/checkTrialOrIntroDiscountEligibility(productIdentifiers:)``).
    public let introductoryDiscount: StoreProductDiscount?
    /// The subscription's promotional offers as the store describes them (StoreKit's
    /// `promotionalOffers`); sign one with ``Purchases/promotionalOffer(forProductDiscount:product:)``.
    /// The test store's catalogue describes none.
    public var discounts: [StoreProductDiscount] = []

    public init(
        productIdentifier: String, localizedTitle: String, localizedDescription: String = "", price: Decimal,
        localizedPriceString: String? = nil, currencyCode: String?, productType: ProductType,
        subscriptionPeriod: SubscriptionPeriod? = nil, subscriptionGroupIdentifier: String? = nil,
        introductoryDiscount: StoreProductDiscount? = nil
    ) {
        self.productIdentifier = productIdentifier
        self.localizedTitle = localizedTitle
        self.localizedDescription = localizedDescription
        self.price = price
        self.localizedPriceString = localizedPriceString ?? Self.format(price, currencyCode: currencyCode)
        self.currencyCode = currencyCode
        self.productType = productType
        self.subscriptionPeriod = subscriptionPeriod
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.introductoryDiscount = introductoryDiscount
    }

    /// `price` in `currencyCode`, in the device's locale.
    static func format(_ price: Decimal, currencyCode: String?) -> String {
        let formatter = NumberFormatter()
        formatter.numberStyle = .currency
        formatter.locale = Locale.current
        if let currencyCode { formatter.currencyCode = currencyCode }
        return formatter.string(from: price as NSDecimalNumber) ?? "\(price)"
    }
}

/// A subscription's period (RevenueCat's `SubscriptionPeriod`).
public struct SubscriptionPeriod: Sendable, Hashable, CustomStringConvertible {
    public enum Unit: Int, Sendable, Hashable, CaseIterable {
        case day, week, month, year
    }

    public let value: Int
    public let unit: Unit

    public init(value: Int, unit: Unit) {
        self.value = value
        self.unit = unit
    }

    init(_ period: StorePeriod) {
        let unit: Unit =
            switch period.unit {
            case .day: .day
            case .week: .week
            case .month: .month
            case .year: .year
            }
        self.init(value: period.value, unit: unit)
    }

    public var description: String { "\(value) \(unit)\(value == 1 ? "" : "s")" }

    /// The period's length in `unit`s, with RevenueCat's calendar (30-day months, 365-day
    /// years, 365 / 12 / 7 weeks a month), as its `numberOfUnitsAs(unit:)`.
    public func numberOfUnitsAs(unit target: Unit) -> Decimal {
        Decimal(value) * units(per: target)
    }

    private static func days(in unit: Unit) -> Decimal {
        switch unit {
        case .day: 1
        case .week: 7
        case .month: 30
        case .year: 365
        }
    }

    /// `price` spread over periods of one `unit`, rounded to cents (half up), as RevenueCat's
    /// `pricePerDay/Week/Month/Year(withTotalPrice:)`.
    func price(_ price: Decimal, per unit: Unit) -> Decimal {
        // Rounded by NSDecimalRound: Linux's NSDecimalNumber.dividing(by:withBehavior:) leaves
        // the quotient unrounded.
        var exact = price / (units(per: unit) * Decimal(value))
        var rounded = Decimal()
        NSDecimalRound(&rounded, &exact, 2, .plain)
        return rounded
    }

    /// How many periods of one `unit` this period's unit is. Weeks and months are related as
    /// RevenueCat relates them (365 / 12 / 7 weeks a month), not through days.
    private func units(per target: Unit) -> Decimal {
        let weeksPerMonth = Decimal(365) / 12 / 7
        let weeksPerYear = Decimal(365) / 7
        switch (unit, target) {
        case (.week, .month): return 1 / weeksPerMonth
        case (.month, .week): return weeksPerMonth
        case (.week, .year): return 1 / weeksPerYear
        case (.year, .week): return weeksPerYear
        case (.month, .year): return 1 / 12
        case (.year, .month): return 12
        default: return Self.days(in: unit) / Self.days(in: target)
        }
    }
}

extension StoreProduct {
    /// The price per day, week, month and year of a subscription (nil for other products), and
    /// the same in the product's currency, as RevenueCat's paywalls show them.
    public var pricePerDay: NSDecimalNumber? { pricePer(.day) }
    public var pricePerWeek: NSDecimalNumber? { pricePer(.week) }
    public var pricePerMonth: NSDecimalNumber? { pricePer(.month) }
    public var pricePerYear: NSDecimalNumber? { pricePer(.year) }
    public var localizedPricePerDay: String? { pricePerDay.map { Self.format($0 as Decimal, currencyCode: currencyCode) } }
    public var localizedPricePerWeek: String? { pricePerWeek.map { Self.format($0 as Decimal, currencyCode: currencyCode) } }
    public var localizedPricePerMonth: String? { pricePerMonth.map { Self.format($0 as Decimal, currencyCode: currencyCode) } }
    public var localizedPricePerYear: String? { pricePerYear.map { Self.format($0 as Decimal, currencyCode: currencyCode) } }

    private func pricePer(_ unit: SubscriptionPeriod.Unit) -> NSDecimalNumber? {
        subscriptionPeriod.map { $0.price(price, per: unit) as NSDecimalNumber }
    }
}

/// A discount on a subscription (RevenueCat's `StoreProductDiscount`): an introductory offer or
/// a promotional offer.
public struct StoreProductDiscount: Sendable, Hashable {
    public enum PaymentMode: Int, Sendable, Hashable, CaseIterable {
        case payAsYouGo, payUpFront, freeTrial
    }

    public enum DiscountType: Int, Sendable, Hashable {
        case introductory, promotional
    }

    /// Nil for an introductory offer; the offer's id for a promotional one.
    public let offerIdentifier: String?
    public let currencyCode: String?
    public let price: Decimal
    public let localizedPriceString: String
    public let paymentMode: PaymentMode
    public let subscriptionPeriod: SubscriptionPeriod
    public let numberOfPeriods: Int
    public let type: DiscountType

    public init(
        offerIdentifier: String?, currencyCode: String?, price: Decimal, paymentMode: PaymentMode,
        subscriptionPeriod: SubscriptionPeriod, numberOfPeriods: Int, type: DiscountType
    ) {
        self.offerIdentifier = offerIdentifier
        self.currencyCode = currencyCode
        self.price = price
        self.localizedPriceString = StoreProduct.format(price, currencyCode: currencyCode)
        self.paymentMode = paymentMode
        self.subscriptionPeriod = subscriptionPeriod
        self.numberOfPeriods = numberOfPeriods
        self.type = type
    }
}

extension StoreProduct {
    /// A product as the test store's catalogue describes it; nil when its fields do not parse.
    init?(testStore product: TestStoreProducts.Product) {
        guard let price = Decimal(string: product.price, locale: Locale(identifier: "en_US_POSIX")) else { return nil }
        let type: ProductType =
            switch product.type {
            case "autoRenewable": .autoRenewableSubscription
            case "nonRenewing": .nonRenewableSubscription
            case "nonConsumable": .nonConsumable
            default: .consumable
            }
        var discount: StoreProductDiscount?
        if let offer = product.introductoryOffer, let period = StorePeriod(iso8601: offer.period) {
            let mode: StoreProductDiscount.PaymentMode =
                switch offer.paymentMode {
                case .freeTrial: .freeTrial
                case .payAsYouGo: .payAsYouGo
                case .payUpFront: .payUpFront
                }
            discount = StoreProductDiscount(
                offerIdentifier: nil, currencyCode: product.currency,
                price: offer.price.flatMap { Decimal(string: $0, locale: Locale(identifier: "en_US_POSIX")) } ?? 0,
                paymentMode: mode, subscriptionPeriod: SubscriptionPeriod(period), numberOfPeriods: offer.periodCount ?? 1, type: .introductory
            )
        }
        self.init(
            productIdentifier: product.identifier, localizedTitle: product.displayName, localizedDescription: product.description,
            price: price, currencyCode: product.currency, productType: type,
            subscriptionPeriod: product.subscriptionPeriod.flatMap(StorePeriod.init(iso8601:)).map(SubscriptionPeriod.init),
            subscriptionGroupIdentifier: product.subscriptionGroup, introductoryDiscount: discount
        )
        // The test store charges a promotional offer the product's price for one period.
        if let period = subscriptionPeriod {
            discounts = (product.promotionalOffers ?? []).map { offer in
                StoreProductDiscount(
                    offerIdentifier: offer, currencyCode: product.currency, price: price, paymentMode: .payAsYouGo,
                    subscriptionPeriod: period, numberOfPeriods: 1, type: .promotional)
            }
        }
    }
}
