import Foundation

/// The parts of Stripe's API objects the server reads (Stripe's API reference: Subscription,
/// Checkout Session, Invoice, Charge, Event). Stripe adds fields freely, so only these are
/// decoded; an id Stripe may give as a string or as the expanded object decodes either way.
enum Stripe {
    struct Subscription: Decodable, Sendable, Equatable {
        var id: String
        var customer: Reference
        /// `trialing`, `active`, `past_due`, `unpaid`, `canceled`, `incomplete`,
        /// `incomplete_expired`, `paused`.
        var status: String
        var cancelAtPeriodEnd: Bool?
        var canceledAt: Int64?
        var endedAt: Int64?
        var startDate: Int64?
        var trialStart: Int64?
        var trialEnd: Int64?
        /// The period, on the subscription in API versions before 2025-03-31 and on each item
        /// from then on.
        var currentPeriodStart: Int64?
        var currentPeriodEnd: Int64?
        var items: List<Item>
        var metadata: [String: String]?
        var latestInvoice: Reference?
        var livemode: Bool?

        enum CodingKeys: String, CodingKey {
            case id, customer, status, items, metadata, livemode
            case cancelAtPeriodEnd = "cancel_at_period_end", canceledAt = "canceled_at", endedAt = "ended_at", startDate = "start_date"
            case trialStart = "trial_start", trialEnd = "trial_end", currentPeriodStart = "current_period_start"
            case currentPeriodEnd = "current_period_end", latestInvoice = "latest_invoice"
        }

        struct Item: Decodable, Sendable, Equatable {
            var id: String?
            var price: Price?
            var plan: Price?
            var currentPeriodStart: Int64?
            var currentPeriodEnd: Int64?

            enum CodingKeys: String, CodingKey {
                case id, price, plan, currentPeriodStart = "current_period_start", currentPeriodEnd = "current_period_end"
            }
        }

        /// A price, or the plan older API versions name it by.
        struct Price: Decodable, Sendable, Equatable {
            var id: String
            var product: Reference?
            var unitAmount: Int64?
            var amount: Int64?
            var currency: String?
            var recurring: Recurring?
            var interval: String?
            var intervalCount: Int?

            enum CodingKeys: String, CodingKey {
                case id, product, amount, currency, recurring, interval, unitAmount = "unit_amount", intervalCount = "interval_count"
            }

            struct Recurring: Decodable, Sendable, Equatable {
                var interval: String?
                var intervalCount: Int?

                enum CodingKeys: String, CodingKey {
                    case interval, intervalCount = "interval_count"
                }
            }
        }

        var item: Item? { items.data.first }
        var price: Price? { item?.price ?? item?.plan }
        var periodStart: Int64? { item?.currentPeriodStart ?? currentPeriodStart }
        var periodEnd: Int64? { item?.currentPeriodEnd ?? currentPeriodEnd }
    }

    struct CheckoutSession: Decodable, Sendable {
        var id: String
        var mode: String?
        var subscription: Reference?
        var clientReferenceId: String?
        var metadata: [String: String]?

        enum CodingKeys: String, CodingKey {
            case id, mode, subscription, metadata, clientReferenceId = "client_reference_id"
        }
    }

    /// A customer: the email a redemption link's expiry names, obfuscated.
    struct Customer: Decodable, Sendable {
        var id: String
        var email: String?
    }

    struct Invoice: Decodable, Sendable {
        var id: String
        var subscription: Reference?
        var parent: Parent?
        var lines: List<Line>?

        /// An invoice line: the period it bills (for a subscription's, the period paid for).
        struct Line: Decodable, Sendable, Equatable {
            var period: Period?
            struct Period: Decodable, Sendable, Equatable {
                var start: Int64?
                var end: Int64?
            }
        }

        /// The start of the period the invoice paid for (its first line's).
        var paidPeriodStart: Int64? { lines?.data.first?.period?.start }

        /// Where API versions from 2025-03-31 put an invoice's subscription.
        struct Parent: Decodable, Sendable {
            var subscriptionDetails: Details?
            struct Details: Decodable, Sendable { var subscription: Reference? }

            enum CodingKeys: String, CodingKey {
                case subscriptionDetails = "subscription_details"
            }
        }

        var subscriptionId: String? { subscription?.id ?? parent?.subscriptionDetails?.subscription?.id }
    }

    struct Charge: Decodable, Sendable {
        var id: String
        var amount: Int64?
        var amountRefunded: Int64?
        var refunded: Bool?
        /// Gone from API versions 2025-03-31 on: the invoice is then found through the payment
        /// intent's invoice payment.
        var invoice: Reference?
        var paymentIntent: Reference?
        var created: Int64?

        enum CodingKeys: String, CodingKey {
            case id, amount, refunded, invoice, created, amountRefunded = "amount_refunded", paymentIntent = "payment_intent"
        }
    }

    /// A payment of an invoice (API versions 2025-03-31 on): which invoice a payment intent paid.
    struct InvoicePayment: Decodable, Sendable, Equatable {
        var invoice: Reference?
    }

    struct Dispute: Decodable, Sendable {
        var id: String
        var charge: Reference?
        var status: String?
    }

    /// A webhook event: its type, the object it is about, and the account it came from.
    struct Event: Decodable, Sendable {
        var id: String
        var type: String
        var created: Int64?
        var account: String?
        var livemode: Bool?
        var data: DataObject

        struct DataObject: Decodable, Sendable {
            var object: ObjectHeader
        }

        /// What every object has: its id and its kind, and the few links the server follows.
        struct ObjectHeader: Decodable, Sendable {
            var id: String?
            var object: String?
            var subscription: Reference?
            var invoice: Reference?
            var charge: Reference?
            var parent: Invoice.Parent?
            var status: String?
        }
    }

    struct List<Element: Decodable & Sendable & Equatable>: Decodable, Sendable, Equatable {
        var data: [Element]
    }

    /// An id, given by Stripe as the id or as the expanded object.
    struct Reference: Decodable, Sendable, Equatable {
        var id: String

        init(id: String) { self.id = id }

        init(from decoder: any Decoder) throws {
            if let id = try? decoder.singleValueContainer().decode(String.self) {
                self.id = id
            } else {
                struct Expanded: Decodable { var id: String }
                id = try Expanded(from: decoder).id
            }
        }
    }

    /// Each type names its snake_case keys itself: a decoder that converts every key of
    /// Stripe's large objects (most of them never read) cost a tenth of an event's CPU.
    static func decoder() -> JSONDecoder { JSONDecoder() }
}
