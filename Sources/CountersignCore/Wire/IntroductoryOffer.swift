import Foundation

/// A subscription's introductory offer, as App Store Connect defines one: set in
/// an app's configuration, listed by `GET /v1/test_store/products`.
public struct IntroductoryOffer: Codable, Sendable, Hashable {
    public enum PaymentMode: String, Codable, Sendable, Hashable, CaseIterable {
        case freeTrial, payAsYouGo, payUpFront

        /// The `offerDiscountType` App Store transactions carry.
        public var offerDiscountType: String {
            switch self {
            case .freeTrial: "FREE_TRIAL"
            case .payAsYouGo: "PAY_AS_YOU_GO"
            case .payUpFront: "PAY_UP_FRONT"
            }
        }
    }

    public var paymentMode: PaymentMode
    /// ISO 8601 duration of one offer period.
    public var period: String
    /// How many periods the offer lasts (pay as you go); 1 otherwise.
    public var periodCount: Int?
    /// Price per period as decimal text; `"0"` for a free trial.
    public var price: String?

    public init(paymentMode: PaymentMode, period: String, periodCount: Int? = nil, price: String? = nil) {
        self.paymentMode = paymentMode
        self.period = period
        self.periodCount = periodCount
        self.price = price
    }
}
