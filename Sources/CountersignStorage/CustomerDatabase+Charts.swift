import CountersignCharts
import Foundation

/// What the revenue charts are computed from: stored transactions with their chain's renewal
/// state and their owner's first sight, and the first sight of customers. The kept sums
/// (`+ChartTotals`) read them a customer at a time; the full computation, every one of an app.
extension CustomerDatabase {
    /// Every transaction of `app`, in one statement (the full computation the kept sums are
    /// held equal to).
    public func chartTransactions(app: String) async throws -> [ChartTransaction] {
        try await database.withConnection { sql in try await Self.readChartTransactions(app: app, "1 = 1", sql) }
    }

    /// The transactions of `app` that `condition` holds for (over `p`, the purchase, and `o`, its
    /// owner), in one statement. A transaction of a kind the charts do not know is left out.
    static func readChartTransactions(app: String, _ condition: SQLStatement, _ sql: any SQLExecutor) async throws -> [ChartTransaction] {
        var transactions: [ChartTransaction] = []
        try await sql.query(
            """
            SELECT p.transaction_id, p.original_transaction_id, p.product_id, p.product_type, p.environment, \
            COALESCE(p.purchase_date_ms, p.signed_date_ms) AS purchase_ms, p.expires_date_ms, p.revocation_date_ms, p.is_upgraded, \
            p.period_type, p.ownership_type, p.price_milliunits, p.currency, s.auto_renew_status, s.grace_period_expires_ms, \
            o.app_user_id AS owner, c.first_seen_ms, p.country, p.revocation_percentage \
            FROM purchases p \
            LEFT JOIN subscription_states s ON s.app_id = p.app_id AND s.original_transaction_id = p.original_transaction_id \
            LEFT JOIN purchase_owners o ON o.app_id = p.app_id AND o.original_transaction_id = p.original_transaction_id \
            LEFT JOIN customers c ON c.app_id = o.app_id AND c.app_user_id = o.app_user_id \
            WHERE p.app_id = \(bind: app) AND \(condition)
            """
        ) { row in
            guard let kind = ChartTransaction.Kind(rawValue: try row.string("product_type")) else { return }
            transactions.append(
                ChartTransaction(
                    transactionId: try row.string("transaction_id"), originalTransactionId: try row.string("original_transaction_id"),
                    productId: try row.string("product_id"), kind: kind, environment: try row.string("environment"),
                    purchaseMs: try row.int64("purchase_ms"), expiresMs: try row.integer("expires_date_ms"),
                    revokedMs: try row.integer("revocation_date_ms"), isUpgraded: try row.integer("is_upgraded") == 1,
                    periodType: try row.text("period_type") ?? "normal", isFamilyShared: try row.text("ownership_type") == "FAMILY_SHARED",
                    priceMilliunits: try row.integer("price_milliunits"), currency: try row.text("currency"),
                    gracePeriodEndMs: try row.integer("grace_period_expires_ms"),
                    willRenew: try row.integer("auto_renew_status").map { $0 == 1 }, ownerFirstSeenMs: try row.integer("first_seen_ms"),
                    owner: try row.text("owner"), revocationPercentage: try row.integer("revocation_percentage"),
                    country: try row.text("country")))
        }
        return transactions
    }

    /// When each customer of `app` first seen in `[fromMs, toMs)` was first seen (an alias is no
    /// customer of its own: it has no row).
    public func customersFirstSeen(app: String, fromMs: Int64, toMs: Int64) async throws -> [Int64] {
        try await database.withConnection { sql in
            try await sql.all(
                """
                SELECT first_seen_ms FROM customers \
                WHERE app_id = \(bind: app) AND first_seen_ms >= \(bind: fromMs) AND first_seen_ms < \(bind: toMs)
                """
            ) { row in try row.int64("first_seen_ms") }
        }
    }
}
