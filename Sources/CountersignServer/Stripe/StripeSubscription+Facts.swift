import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

extension AppStoreEnvironment {
    /// A Stripe subscription of a live-mode account.
    static let stripe: Self = "Stripe"
    /// A Stripe subscription of test mode (`is_sandbox` in CustomerInfo, `SANDBOX` in events).
    static let stripeTest: Self = "StripeTest"
}

/// What a Stripe subscription says now, as the ledger takes a store's word: the transaction of
/// its current period and its renewal state. The same rules then decide ownership, entitlements
/// and events as for App Store purchases (docs/stripe.md, "What each state becomes").
struct StripeFacts: Sendable {
    var transaction: VerifiedTransaction
    var renewal: RenewalInfoPayload
    /// The app user id the subscription's metadata names, when it names one.
    var appUserId: String?
    /// After a plan change within the period: the period's earlier transaction, now marked
    /// upgraded and ended at the change (as Apple marks the transaction an upgrade replaces).
    var replaced: VerifiedTransaction?
    /// The chain's owner as stored before this read (nil: none, or nothing stored).
    var storedOwner: String?
}

extension Stripe.Subscription {
    /// How long access lasts past a period's end while Stripe retries a failed payment
    /// (`past_due`): RevenueCat's billing-issue grace period.
    static let billingGrace: TimeInterval = 7 * 86_400

    /// The facts of this subscription for `app`, read at `now`; `refund` is a charge of its
    /// current period refunded (when, and how much of it in thousandths of a percent, nil for
    /// all of it). Throws when Stripe's answer names a price the app does not map, or lacks a
    /// period. The period's transaction is the subscription's id for its first period (as an App
    /// Store chain's first transaction is the chain's), `<id>_<period start>` for each later one.
    func facts(app: AppConfiguration, settings: StripeSettings, now: Date, refund: (date: Date, percentage: Int64?)? = nil) throws(APIError)
        -> StripeFacts
    {
        var (payload, renewal, appUserId) = try payloads(app: app, settings: settings, now: now)
        if let refund { Self.refund(&payload, refund) }
        return StripeFacts(transaction: try Self.verified(payload, app: app), renewal: renewal, appUserId: appUserId)
    }

    /// The payloads ``facts(app:settings:now:refund:)`` makes its transaction and renewal state
    /// of, and the metadata's app user id.
    func payloads(app: AppConfiguration, settings: StripeSettings, now: Date) throws(APIError)
        -> (TransactionPayload, RenewalInfoPayload, String?)
    {
        guard let price else { throw APIError(.stripeAPIFailed, "Stripe's subscription \(id) has no price") }
        guard let productId = settings.products[price.id] ?? price.product.flatMap({ settings.products[$0.id] }) else {
            throw APIError(.stripeProductNotMapped, "Stripe price \(price.id) is not one of the app's stripe.products")
        }
        guard let start = periodStart, let end = periodEnd, end > start else {
            throw APIError(.stripeAPIFailed, "Stripe's subscription \(id) has no current period")
        }
        let environment: AppStoreEnvironment = livemode == true ? .stripe : .stripeTest
        let periodStart = Date(timeIntervalSince1970: TimeInterval(start))
        var payload = TransactionPayload(
            transactionId: startDate == start ? id : "\(id)_\(start)", originalTransactionId: id, bundleId: app.bundleId, productId: productId,
            purchaseDate: periodStart, type: .autoRenewable, environment: environment, signedDate: now)
        payload.originalPurchaseDate = startDate.map { Date(timeIntervalSince1970: TimeInterval($0)) } ?? periodStart
        var expires = end
        // Cancelled at once (or ended): access ends when Stripe ended it.
        if let ended = endedAt, ["canceled", "incomplete_expired"].contains(status) { expires = min(expires, max(ended, start)) }
        payload.expiresDate = Date(timeIntervalSince1970: TimeInterval(expires))
        if status == "trialing" {
            payload.offerType = 1
            payload.offerDiscountType = "FREE_TRIAL"
            payload.price = 0
        } else {
            payload.price = Self.milliunits(price.unitAmount ?? price.amount, currency: price.currency)
        }
        payload.currency = price.currency?.uppercased()
        let appUserId = metadata?[settings.metadataKey].flatMap { $0.isEmpty ? nil : $0 }
        // The metadata's app user binds the purchase as an app account token does: posted by
        // anyone else, it is refused (purchase_status 409).
        payload.appAccountToken = appUserId.map { AppAccountToken.forAppUserID($0).uuidString.lowercased() }
        var renewal = RenewalInfoPayload(originalTransactionId: id, productId: productId, environment: environment, signedDate: now)
        let ended = ["canceled", "incomplete_expired", "unpaid"].contains(status)
        renewal.autoRenewStatus = cancelAtPeriodEnd == true || ended ? 0 : 1
        renewal.isInBillingRetryPeriod = status == "past_due"
        if status == "past_due" { renewal.gracePeriodExpiresDate = Date(timeIntervalSince1970: TimeInterval(end) + Self.billingGrace) }
        renewal.renewalDate = payload.expiresDate
        return (payload, renewal, appUserId)
    }

    /// Marks `payload` refunded: at `refund.date`, in full or (a share in thousandths of a
    /// percent) in part, as Apple's `REFUND_FULL` and `REFUND_PRORATED`.
    static func refund(_ payload: inout TransactionPayload, _ refund: (date: Date, percentage: Int64?)) {
        payload.revocationDate = refund.date
        payload.revocationReason = 0
        payload.revocationType = refund.percentage == nil ? "REFUND_FULL" : "REFUND_PRORATED"
        payload.revocationPercentage = refund.percentage
    }

    static func verified(_ payload: TransactionPayload, app: AppConfiguration) throws(APIError) -> VerifiedTransaction {
        do {
            return try VerifiedTransaction(jws: "", payload: payload, app: app)
        } catch {
            throw APIError(error)
        }
    }

    /// Currencies Stripe counts in whole units (its "zero-decimal currencies"), and those with
    /// three decimals; every other in hundredths.
    static let zeroDecimal: Set<String> = [
        "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF",
    ]
    static let threeDecimal: Set<String> = ["BHD", "JOD", "KWD", "OMR", "TND"]

    /// Stripe's amount (in the currency's smallest unit) in thousandths of the currency, as
    /// Apple's `price`; nil without one, or past the ledger's price range.
    static func milliunits(_ amount: Int64?, currency: String?) -> Int64? {
        guard let amount, amount >= 0, let currency = currency?.uppercased() else { return nil }
        let factor: Int64 = zeroDecimal.contains(currency) ? 1000 : threeDecimal.contains(currency) ? 1 : 10
        let (milliunits, overflow) = amount.multipliedReportingOverflow(by: factor)
        return overflow || !VerifiedTransaction.priceRange.contains(milliunits) ? nil : milliunits
    }
}
