import CountersignAppStore
import CountersignCore
import CountersignLedger
import Foundation

extension EventTransaction {
    /// The columns of the table `p` (`purchases`) that ``init(stored:)`` reads.
    static let storedColumns = """
        p.transaction_id, p.original_transaction_id, p.product_id, p.environment, p.period_type, p.purchase_date_ms, \
        p.expires_date_ms, p.signed_transaction, p.presented_offering_id
        """

    /// A stored transaction: the row's dates and period (kept current by later-signed copies),
    /// with the price, currency, storefront, offer and ownership of its stored signed copy
    /// (verified when it was stored; read again here without a second check).
    init(stored row: some StoredRow) throws {
        let transactionId = try row.string("transaction_id")
        let original = try row.string("original_transaction_id")
        if let jws = try row.text("signed_transaction"), let data = try? UnverifiedJWS(jws).payload,
            let payload = try? AppStoreJSON.decode(TransactionPayload.self, from: data)
        {
            self.init(payload, transactionId: transactionId, originalTransactionId: original)
        } else {
            self.init(
                transactionId: transactionId, originalTransactionId: original, productId: "", environment: "", periodType: "normal",
                purchasedAtMs: nil, expiresAtMs: nil)
        }
        productId = try row.string("product_id")
        environment = try row.string("environment")
        periodType = try row.text("period_type") ?? "normal"
        purchasedAtMs = try row.integer("purchase_date_ms")
        expiresAtMs = try row.integer("expires_date_ms")
        presentedOfferingId = try row.text("presented_offering_id")
    }
}
