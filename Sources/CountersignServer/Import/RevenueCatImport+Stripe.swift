import CountersignImportFormats
import CountersignServerCore
import Foundation

/// RevenueCat's export rows with `store = stripe` (docs/stripe.md, "Imports").
extension RevenueCatImport {
    /// A `store = stripe` row as the app's: its product through `stripe.products` (RevenueCat
    /// names a Stripe product by Stripe's id; an app product id is taken as it is), its
    /// environment `Stripe`, or `StripeTest` for a sandbox row. The subscription
    /// (`original_store_transaction_id`, `sub_…`) is then confirmed from Stripe's API
    /// (``confirmStripe(_:now:)``).
    static func stripeRow(_ row: RevenueCatExportRow, app: AppConfiguration) throws(RevenueCatExportRow.Refusal) -> RevenueCatExportRow {
        guard let settings = app.stripe else {
            throw RevenueCatExportRow.Refusal("store 'stripe': app '\(app.id)' does not sell through Stripe (no stripe in its configuration)")
        }
        guard row.originalTransactionId.hasPrefix("sub_"), StripeSettings.isToken(row.originalTransactionId) else {
            throw RevenueCatExportRow.Refusal("store 'stripe': original_store_transaction_id must be a Stripe subscription id (sub_…)")
        }
        var row = row
        row.productId = settings.products[row.productId] ?? row.productId
        row.environment = row.environment == .sandbox ? .stripeTest : .stripe
        return row
    }

    /// Reads each imported Stripe subscription from Stripe's API and applies what it says now,
    /// as the reconciliation does: its current period confirmed (the imported row of that period
    /// keeps its id), a renewal, a cancellation or a plan change since the export taken in. A
    /// subscription Stripe cannot read is reported, its imported rows kept.
    func confirmStripe(_ subscriptions: Set<String>, now: Date) async -> (confirmed: Int, unconfirmed: [String]) {
        guard let stripe, !subscriptions.isEmpty else { return (0, []) }
        var confirmed = 0
        var unconfirmed: [String] = []
        for subscription in subscriptions.sorted() {
            do {
                try await stripe.refresh(subscription: subscription, app: app, now: now)
                confirmed += 1
            } catch {
                unconfirmed.append("\(subscription): \(error)")
            }
        }
        return (confirmed, unconfirmed)
    }
}
