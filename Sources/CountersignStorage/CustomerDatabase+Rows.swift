import CountersignAppStore
import CountersignCore
import CountersignLedger
import CountersignServerCore
import Foundation

/// The rows a purchase writes: the customer, the purchase, its chain's owner. Each statement is
/// one text for both databases (``SQLStatement``), kept prepared by its text on SQLite; those of
/// the hottest paths also run as named prepared statements on PostgreSQL (``PreparedSQL``).
extension CustomerDatabase {
    /// Notes a visit of the customer (at most one write an hour), adding them when unknown.
    @discardableResult
    static func touchCustomer(_ sql: any SQLExecutor, app: String, user: String, now: Date) async throws -> (first: Date, last: Date) {
        if let (firstSeen, lastSeen) = try await sql.first(
            """
            SELECT first_seen_ms, last_seen_ms FROM customers WHERE app_id = \(bind: app) AND app_user_id = \(bind: user)
            """, { (try $0.int64("first_seen_ms"), try $0.int64("last_seen_ms")) })
        {
            // At most one write an hour per customer: a CustomerInfo fetch stays a read.
            guard !isRecent(lastSeen, now: now) else {
                return (Date(epochMilliseconds: firstSeen), Date(epochMilliseconds: lastSeen))
            }
            try await sql.run(touchCustomerStatement(app: app, user: user, now: now))
            return (Date(epochMilliseconds: firstSeen), now)
        }
        try await sql.run(insertCustomerStatement(app: app, user: user, now: now))
        return (now, now)
    }

    static func touchCustomerStatement(app: String, user: String, now: Date) -> SQLStatement {
        SQLStatement(touchCustomerSQL, [.text(app), .text(user), .integer(now.epochMilliseconds)])
    }

    static let touchCustomerSQL = "UPDATE customers SET last_seen_ms = $3 WHERE app_id = $1 AND app_user_id = $2"

    /// A customer seen for the first time (nothing when another request just added them). With
    /// ``importCustomerSQL``, a known customer first seen later than `now` is moved back to it.
    static func insertCustomerStatement(app: String, user: String, now: Date, sql: String = insertCustomerSQL) -> SQLStatement {
        SQLStatement(
            sql,
            [
                .text(app), .text(user), .text(AppAccountToken.forAppUserID(user).uuidString.lowercased()), .integer(now.epochMilliseconds),
            ])
    }

    static let insertCustomerSQL = insertCustomerPrefix + "DO NOTHING"
    static let importCustomerSQL =
        insertCustomerPrefix + "DO UPDATE SET first_seen_ms = excluded.first_seen_ms WHERE customers.first_seen_ms > excluded.first_seen_ms"
    private static let insertCustomerPrefix =
        "INSERT INTO customers (app_id, app_user_id, app_account_token, first_seen_ms, last_seen_ms) "
        + "VALUES ($1, $2, $3, $4, $4) ON CONFLICT (app_id, app_user_id) "

    static func customer(_ sql: any SQLExecutor, app: String, token: String) async throws -> String? {
        try await sql.first("SELECT app_user_id FROM customers WHERE app_id = \(bind: app) AND app_account_token = \(bind: token)") {
            try $0.string("app_user_id")
        }
    }

    static func insertPurchaseStatement(_ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) -> SQLStatement {
        SQLStatement(insertPurchaseSQL, PurchaseRow(transaction, app: app.id, now: now).values(PurchaseRow.columns))
    }

    static let insertPurchaseSQL =
        "INSERT INTO purchases (\(PurchaseRow.columns.joined(separator: ", "))) "
        + "VALUES (\(PurchaseRow.columns.indices.map { "$\($0 + 1)" }.joined(separator: ", ")))"

    /// The revocation a copy of a stored transaction leaves, as SQL over the stored row: the
    /// copy's own (`revocation`), else the stored one when it is no earlier than the copy was
    /// signed (`signed`): a copy never undoes a later fact. A refund (imported, notified or
    /// signed) stands until a copy signed after it says otherwise, as Apple's copy after a
    /// reversed refund does. ``EventRules/change(of:stored:now:)`` decides the same.
    static func keptRevocation(_ row: PurchaseRow) -> SQLStatement {
        "COALESCE(\(bind: row["revocation_date_ms"]), CASE WHEN revocation_date_ms >= \(bind: row["signed_date_ms"]) THEN revocation_date_ms END)"
    }

    /// `column = value` for each of `columns`, from `row`, separated by commas.
    static func assignments(_ columns: [String], from row: PurchaseRow) -> SQLStatement {
        columns.enumerated().reduce(into: SQLStatement("")) { list, column in
            list = list + "\(raw: column.offset == 0 ? "" : ", ")\(raw: column.element) = \(bind: row[column.element])"
        }
    }

    /// The store's signed copy of a transaction stored as imported: every field takes the signed
    /// copy's value but a later revocation (``keptRevocation(_:)``), and the row is no longer
    /// marked imported (the offering it was bought from and when it was first recorded stay).
    static func confirmImportedStatement(_ transaction: VerifiedTransaction, app: AppConfiguration, now: Date) -> SQLStatement {
        let row = PurchaseRow(transaction, app: app.id, now: now)
        let replaced = [
            "original_transaction_id", "product_id", "product_type", "purchase_date_ms", "expires_date_ms", "signed_date_ms",
            "app_account_token", "signed_transaction", "is_upgraded", "period_type", "ownership_type", "price_milliunits", "currency",
            "country", "revocation_percentage",
        ]
        return "UPDATE purchases SET \(assignments(replaced, from: row)), revocation_date_ms = \(keptRevocation(row)), imported = 0 "
            + "WHERE transaction_id = \(bind: row["transaction_id"]) AND app_id = \(bind: row["app_id"]) "
            + "AND environment = \(bind: row["environment"]) AND imported <> 0"
    }

    /// A copy of a stored transaction signed later than the stored one: every field Apple may
    /// change after the purchase takes the newer copy's value (expiry, which an extension moves;
    /// revocation, unless the stored one is later than the copy; upgrade flag; period type; the
    /// signed copy itself). The condition keeps an older copy from undoing a newer one.
    static func refreshPurchaseStatement(_ transaction: VerifiedTransaction, app: String, now: Date) -> SQLStatement {
        let row = PurchaseRow(transaction, app: app, now: now)
        let changed = ["is_upgraded", "signed_date_ms", "expires_date_ms", "signed_transaction", "period_type", "revocation_percentage"]
        return "UPDATE purchases SET \(assignments(changed, from: row)), revocation_date_ms = \(keptRevocation(row)) "
            + "WHERE app_id = \(bind: row["app_id"]) AND environment = \(bind: row["environment"]) "
            + "AND transaction_id = \(bind: row["transaction_id"]) AND signed_date_ms < \(bind: row["signed_date_ms"])"
    }

    static func insertOwnerStatement(app: String, chain: String, user: String, now: Date) -> SQLStatement {
        SQLStatement(insertOwnerSQL, [.text(app), .text(chain), .text(user), .integer(now.epochMilliseconds)])
    }

    static let insertOwnerSQL = """
        INSERT INTO purchase_owners (app_id, original_transaction_id, app_user_id, updated_at_ms) VALUES ($1, $2, $3, $4)
        """

    /// A chain's new owner; `opensWindow`: the move opens a transfer window (its time noted).
    static func updateOwnerStatement(app: String, chain: String, user: String, now: Date, opensWindow: Bool) -> SQLStatement {
        SQLStatement(
            "UPDATE purchase_owners SET app_user_id = $3, updated_at_ms = $4\(opensWindow ? ", moved_at_ms = $4" : "") "
                + "WHERE app_id = $1 AND original_transaction_id = $2",
            [.text(app), .text(chain), .text(user), .integer(now.epochMilliseconds)])
    }
}

/// A purchase row's values by column name, from a verified transaction: the one place where a
/// transaction's fields meet the `purchases` table's columns. Statements bind from it by name.
struct PurchaseRow {
    /// The columns a new purchase fills, in the order ``CustomerDatabase/insertPurchaseSQL`` lists them.
    static let columns = [
        "transaction_id", "app_id", "original_transaction_id", "product_id", "product_type", "environment", "purchase_date_ms",
        "expires_date_ms", "revocation_date_ms", "signed_date_ms", "app_account_token", "signed_transaction", "recorded_at_ms",
        "is_upgraded", "period_type", "ownership_type", "presented_offering_id", "price_milliunits", "currency", "imported", "country",
        "revocation_percentage",
    ]

    private let values: [String: SQLValue]

    init(_ transaction: VerifiedTransaction, app: String, now: Date) {
        let payload = transaction.payload
        values = [
            "transaction_id": .text(transaction.transactionId), "app_id": .text(app),
            "original_transaction_id": .text(transaction.originalTransactionId), "product_id": .text(transaction.productId),
            "product_type": .text(transaction.kind.rawValue), "environment": .text(transaction.environment),
            "purchase_date_ms": .integer(payload.purchaseDate.map(\.epochMilliseconds)),
            "expires_date_ms": .integer(payload.expiresDate.map(\.epochMilliseconds)),
            "revocation_date_ms": .integer(payload.revocationDate.map(\.epochMilliseconds)),
            "signed_date_ms": .integer((payload.signedDate ?? now).epochMilliseconds), "app_account_token": .text(payload.appAccountToken),
            "signed_transaction": .text(transaction.jws), "recorded_at_ms": .integer(now.epochMilliseconds),
            "is_upgraded": .integer((payload.isUpgraded ?? false) ? 1 : 0), "period_type": .text(payload.periodType),
            "ownership_type": .text(payload.inAppOwnershipType == .familyShared ? "FAMILY_SHARED" : "PURCHASED"),
            "presented_offering_id": .text(transaction.presentedOfferingId),
            // A price without a currency, or a currency without a price, is stored as neither.
            "price_milliunits": .integer(payload.currency == nil ? nil : payload.price),
            "currency": .text(payload.price == nil ? nil : payload.currency),
            "imported": .integer(transaction.isImported ? 1 : 0),
            "country": .text(Storefront.countryCode(payload.storefront)),
            // Only beside a revocation, and only a share (0 to 100 %): anything else is no share.
            "revocation_percentage": .integer(
                payload.revocationDate == nil ? nil : payload.revocationPercentage.flatMap { (0...100_000).contains($0) ? $0 : nil }),
        ]
    }

    /// The value of `column` (every column of ``columns`` has one).
    subscript(column: String) -> SQLValue {
        guard let value = values[column] else { preconditionFailure("a purchase row has no column \(column)") }
        return value
    }

    /// The values of `columns`, in their order.
    func values(_ columns: [String]) -> [SQLValue] { columns.map { self[$0] } }
}
