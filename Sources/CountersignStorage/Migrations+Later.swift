import CountersignCharts
import Foundation

extension Migrations {
    /// Versions 10 on: transfers, aliases, offerings, prices, consumption requests, imports, identity, telemetry, charts.
    static let later: [Migration] = [
        // When a chain's transfer window opened: moves within it make no further TRANSFER event
        // (one per window, however often the purchase is posted back and forth).
        Migration(
            version: 10, name: "when each chain last moved",
            statements: [
                "ALTER TABLE purchase_owners ADD COLUMN moved_at_ms BIGINT"
            ]),
        // The ids a customer was known by before logIn merged them (RevenueCat's `aliases`),
        // read by customer when a webhook is delivered; the primary key serves those reads (a
        // separate index here left SQLite re-preparing the writer's BEGIN on later purchases:
        // PurchaseRecordingTests, "prepared once, never again").
        Migration(
            version: 11, name: "customer aliases",
            statements: [
                """
                CREATE TABLE customer_aliases (
                    app_id TEXT NOT NULL,
                    app_user_id TEXT NOT NULL,
                    alias TEXT NOT NULL,
                    first_seen_ms BIGINT NOT NULL,
                    PRIMARY KEY (app_id, app_user_id, alias)
                )
                """
            ]),
        // The offering a purchase was made from (RevenueCat's `presented_offering_identifier`).
        Migration(
            version: 12, name: "the offering a purchase was made from",
            statements: ["ALTER TABLE purchases ADD COLUMN presented_offering_id TEXT"]),
        // The expiry check finds billing grace periods that ended by their end, on PostgreSQL
        // (the scale-out path). On SQLite the index is left out: its creation left SQLite
        // re-preparing the writer's BEGIN on later purchases (PurchaseRecordingTests, "prepared
        // once, never again"), and a scan of the renewal states is in-process there.
        Migration(
            version: 13, name: "subscription states by grace period end", statements: [],
            postgresStatements: ["CREATE INDEX subscription_states_by_grace ON subscription_states (grace_period_expires_ms)"]),
        // What the customer paid (the signed transaction's `price` in milliunits and its
        // `currency`), for RevenueCat's `price` of a subscription or purchase. Rows recorded
        // before read null.
        Migration(
            version: 14, name: "the price paid", statements: ["ALTER TABLE purchases ADD COLUMN price_milliunits BIGINT"]),
        Migration(
            version: 15, name: "the currency paid in", statements: ["ALTER TABLE purchases ADD COLUMN currency TEXT"]),
        // Apple's CONSUMPTION_REQUESTs to answer, kept with the notification until answered.
        Migration(
            version: 16, name: "consumption requests",
            statements: [
                """
                CREATE TABLE consumption_requests (
                    notification_uuid TEXT PRIMARY KEY,
                    app_id TEXT NOT NULL,
                    transaction_id TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    received_at_ms BIGINT NOT NULL,
                    status TEXT NOT NULL,
                    attempts INTEGER NOT NULL,
                    next_attempt_ms BIGINT NOT NULL,
                    answered_at_ms BIGINT,
                    last_status INTEGER,
                    last_error TEXT
                )
                """
            ]),
        // Records imported from another system (`countersign import revenuecat`): 1 until the App
        // Store confirms them (`countersign import appstore` replaces the row with Apple's signed
        // transaction, 0), 2 when Apple's history of the chain does not hold the transaction.
        Migration(
            version: 17, name: "imported purchases",
            statements: ["ALTER TABLE purchases ADD COLUMN imported INTEGER NOT NULL DEFAULT 0"]),
        // Events made by imported history: stored, and delivered only when the import asks.
        Migration(
            version: 18, name: "imported events", statements: ["ALTER TABLE events ADD COLUMN imported INTEGER NOT NULL DEFAULT 0"]),
        // A grant id is the app's own: one app's import of a grant `promo-1` touched another
        // app's `promo-1` while grant ids were one key for every app. SQLite cannot change a
        // primary key in place, so the table is copied (on both databases, the same statements).
        Migration(
            version: 19, name: "promotional grants keyed by app",
            statements: [
                """
                CREATE TABLE promotional_grants_by_app (
                    grant_id TEXT NOT NULL,
                    app_id TEXT NOT NULL,
                    app_user_id TEXT NOT NULL,
                    entitlement TEXT NOT NULL,
                    starts_ms BIGINT NOT NULL,
                    expires_ms BIGINT,
                    revoked_ms BIGINT,
                    created_ms BIGINT NOT NULL,
                    PRIMARY KEY (app_id, grant_id)
                )
                """,
                """
                INSERT INTO promotional_grants_by_app (grant_id, app_id, app_user_id, entitlement, starts_ms, expires_ms, revoked_ms, created_ms)
                SELECT grant_id, app_id, app_user_id, entitlement, starts_ms, expires_ms, revoked_ms, created_ms FROM promotional_grants
                """,
                "DROP TABLE promotional_grants",
                "ALTER TABLE promotional_grants_by_app RENAME TO promotional_grants",
                "CREATE INDEX promotional_grants_by_user ON promotional_grants (app_id, app_user_id)",
            ]),
        // Attribute times are the server's at most (a client's `updated_at_ms` beyond it is taken
        // as the time it arrives); one stored before that rule, dated ahead, is brought back to the
        // time of this migration so that later writes replace it.
        Migration(
            version: 20, name: "attribute times no later than the server's",
            statements: [
                "UPDATE subscriber_attributes SET updated_at_ms = $1 WHERE updated_at_ms > $1"
            ]),
        // Every alias answers as its customer: an alias belongs to one customer of an app and is
        // found by alias. The table is copied with that key (the first claim of an alias kept): an
        // index of its own, created here, left SQLite re-preparing the writer's `BEGIN` on later
        // purchases (PurchaseRecordingTests, "prepared once, never again"), a key made with the
        // table does not. An id merged by a logIn before this version (whose row stayed, and may
        // have gathered purchases and grants since) has them moved to its customer and its row
        // removed; its attributes stay under its own id (two merged ids may hold the same key, and
        // one statement cannot choose between them on both databases without failing the start).
        // logIn is noted: a customer who logged in is kept by the retention. A customer's first id
        // is kept (RevenueCat's `original_app_user_id`): the oldest of the ids merged into it.
        Migration(
            version: 21, name: "aliases answer for their customer",
            statements: [
                """
                CREATE TABLE customer_aliases_by_alias (
                    app_id TEXT NOT NULL,
                    app_user_id TEXT NOT NULL,
                    alias TEXT NOT NULL,
                    first_seen_ms BIGINT NOT NULL,
                    PRIMARY KEY (app_id, app_user_id, alias),
                    UNIQUE (app_id, alias)
                )
                """,
                """
                INSERT INTO customer_aliases_by_alias (app_id, app_user_id, alias, first_seen_ms) \
                SELECT app_id, app_user_id, alias, first_seen_ms FROM customer_aliases WHERE alias <> app_user_id \
                ORDER BY first_seen_ms, app_user_id ON CONFLICT DO NOTHING
                """,
                "DROP TABLE customer_aliases",
                "ALTER TABLE customer_aliases_by_alias RENAME TO customer_aliases",
                "ALTER TABLE customers ADD COLUMN logged_in_ms BIGINT",
                // The customer's first id (RevenueCat's `original_app_user_id`); NULL: its own.
                "ALTER TABLE customers ADD COLUMN original_app_user_id TEXT",
                """
                UPDATE customers SET original_app_user_id = (SELECT a.alias FROM customer_aliases a \
                WHERE a.app_id = customers.app_id AND a.app_user_id = customers.app_user_id AND a.first_seen_ms <= customers.first_seen_ms \
                ORDER BY a.first_seen_ms, a.alias LIMIT 1)
                """,
                """
                UPDATE customers SET logged_in_ms = last_seen_ms WHERE EXISTS \
                (SELECT 1 FROM customer_aliases a WHERE a.app_id = customers.app_id AND a.app_user_id = customers.app_user_id)
                """,
            ]
                + ["purchase_owners", "promotional_grants"].map { table in
                    """
                    UPDATE \(table) SET app_user_id = (SELECT a.app_user_id FROM customer_aliases a \
                    WHERE a.app_id = \(table).app_id AND a.alias = \(table).app_user_id) \
                    WHERE EXISTS (SELECT 1 FROM customer_aliases a WHERE a.app_id = \(table).app_id AND a.alias = \(table).app_user_id)
                    """
                } + [
                    """
                    DELETE FROM customers WHERE EXISTS \
                    (SELECT 1 FROM customer_aliases a WHERE a.app_id = customers.app_id AND a.alias = customers.app_user_id)
                    """
                ]),
        // Failure telemetry by the SDK's version and the app's, so an operator can see whose
        // answers fail before rolling out enforcement. Counts reported before are kept with
        // both unknown (empty).
        Migration(
            version: 22, name: "verification failures by SDK and app version",
            statements: [
                """
                CREATE TABLE verification_failures_by_version (
                    app_id TEXT NOT NULL,
                    day TEXT NOT NULL,
                    reason TEXT NOT NULL,
                    mode TEXT NOT NULL,
                    sdk_version TEXT NOT NULL,
                    app_version TEXT NOT NULL,
                    failure_count BIGINT NOT NULL,
                    PRIMARY KEY (app_id, day, reason, mode, sdk_version, app_version)
                )
                """,
                """
                INSERT INTO verification_failures_by_version (app_id, day, reason, mode, sdk_version, app_version, failure_count) \
                SELECT app_id, day, reason, mode, '', '', failure_count FROM verification_failures
                """,
                "DROP TABLE verification_failures",
                "ALTER TABLE verification_failures_by_version RENAME TO verification_failures",
            ]),
        // The revenue charts' facts: the country a purchase was made in (ISO 3166-1 alpha-2, from
        // Apple's storefront or RevenueCat's export) and how much of a refunded one was refunded
        // (Apple's revocationPercentage, thousandths of a percent). Rows before it have neither.
        Migration(
            version: 23, name: "purchase country and refunded share",
            statements: [
                "ALTER TABLE purchases ADD COLUMN country TEXT",
                "ALTER TABLE purchases ADD COLUMN revocation_percentage BIGINT",
            ]),
        // The revenue charts' kept sums (docs/architecture.md, "Revenue charts"): every write to
        // the records a chart reads marks its subscription or customer (triggers, so no write
        // path can forget); the server takes the marks, recomputes those customers' events and
        // moves the daily sums by the difference. Everything recorded before is marked once.
        Migration(
            version: 24, name: "revenue chart sums",
            statements: chartTables + ChartTriggers.sqlite + chartMarks(conflict: "INSERT OR IGNORE INTO"),
            postgresStatements: chartTables + ChartTriggers.postgres + chartMarks(conflict: "INSERT INTO")),
        // Redemption links of web purchases (docs/stripe.md, "Redemption links"): only the
        // SHA-256 of each token is kept, so the table gives no usable link away.
        Migration(
            version: 25, name: "web purchase redemption links",
            statements: [
                """
                CREATE TABLE web_redemptions (
                    token_hash TEXT PRIMARY KEY,
                    app_id TEXT NOT NULL,
                    subscription TEXT NOT NULL,
                    obfuscated_email TEXT,
                    created_ms BIGINT NOT NULL,
                    expires_ms BIGINT NOT NULL,
                    redeemed_by TEXT,
                    redeemed_ms BIGINT
                )
                """
            ]),
    ]
}

extension Migrations {
    /// The columns of a chart sum, in ``ChartMetrics/Field`` order.
    static let chartMetricColumns = ChartMetrics.Field.allCases.map(\.column)

    /// A customer's events are kept as one text value (`ChartEventText`); those still to come
    /// when they were computed (and pending trials) also apart, found by time and by a trial's
    /// end: keys made with the table (an event's place among its customer's makes each unique),
    /// because an index created apart left SQLite re-preparing the writer's `BEGIN` on every later
    /// purchase (PurchaseRecordingTests, "prepared once, never again"; as at versions 11 and 21).
    static let chartTables: [String] = [
        "CREATE TABLE chart_marks (app_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (app_id, kind, id))",
        "CREATE TABLE chart_units (app_id TEXT NOT NULL, unit TEXT NOT NULL, events TEXT NOT NULL, PRIMARY KEY (app_id, unit))",
        """
        CREATE TABLE chart_upcoming (
            app_id TEXT NOT NULL, unit TEXT NOT NULL, ordinal INTEGER NOT NULL, at_ms BIGINT NOT NULL, day BIGINT NOT NULL,
            product_id TEXT NOT NULL, environment TEXT NOT NULL, country TEXT NOT NULL, currency TEXT NOT NULL, bucket INTEGER NOT NULL,
            \(chartMetricColumns.map { "\($0) BIGINT NOT NULL" }.joined(separator: ", ")),
            pending_from_ms BIGINT, pending_until_ms BIGINT,
            PRIMARY KEY (app_id, unit, ordinal),
            UNIQUE (app_id, at_ms, unit, ordinal),
            UNIQUE (app_id, pending_until_ms, unit, ordinal)
        )
        """,
        """
        CREATE TABLE chart_totals (
            app_id TEXT NOT NULL, day BIGINT NOT NULL, product_id TEXT NOT NULL, environment TEXT NOT NULL, country TEXT NOT NULL,
            currency TEXT NOT NULL, bucket INTEGER NOT NULL,
            \(chartMetricColumns.map { "\($0) BIGINT NOT NULL" }.joined(separator: ", ")),
            PRIMARY KEY (app_id, day, product_id, environment, country, currency, bucket)
        )
        """,
        // One row whose update makes two servers take turns moving the sums.
        "CREATE TABLE chart_refresh (id INTEGER PRIMARY KEY, passes BIGINT NOT NULL)",
        "INSERT INTO chart_refresh (id, passes) VALUES (1, 0)",
    ]

    /// Marks every subscription and customer already recorded.
    static func chartMarks(conflict insert: String) -> [String] {
        [
            "\(insert) chart_marks (app_id, kind, id) SELECT DISTINCT app_id, 'chain', original_transaction_id FROM purchases",
            "\(insert) chart_marks (app_id, kind, id) SELECT app_id, 'customer', app_user_id FROM customers",
        ]
    }

    /// The triggers that mark what a write touched: a subscription (its transactions, renewal
    /// state or owner; and the customer an owner's change left) or a customer (created, renamed,
    /// first sight changed, deleted).
    enum ChartTriggers {
        static let tables: [(table: String, kind: String, column: String, updateOf: String)] = [
            ("purchases", "chain", "original_transaction_id", ""),
            ("subscription_states", "chain", "original_transaction_id", ""),
            ("purchase_owners", "chain", "original_transaction_id", " OF app_user_id, original_transaction_id"),
            ("customers", "customer", "app_user_id", " OF app_user_id, first_seen_ms"),
        ]

        static var sqlite: [String] {
            tables.flatMap { table, kind, column, updateOf in
                // Not `OR IGNORE`: an outer statement's conflict clause (an upsert's) overrides a
                // trigger's own on SQLite, and the mark would fail the write it follows.
                func mark(_ row: String) -> String {
                    """
                    INSERT INTO chart_marks (app_id, kind, id) SELECT \(row).app_id, '\(kind)', \(row).\(column) \
                    WHERE NOT EXISTS (SELECT 1 FROM chart_marks WHERE app_id = \(row).app_id AND kind = '\(kind)' AND id = \(row).\(column));
                    """
                }
                // An owner's change or removal also marks the customer it left.
                let left =
                    table == "purchase_owners"
                    ? """
                    INSERT INTO chart_marks (app_id, kind, id) SELECT OLD.app_id, 'customer', OLD.app_user_id WHERE OLD.app_user_id IS NOT NULL \
                    AND NOT EXISTS (SELECT 1 FROM chart_marks WHERE app_id = OLD.app_id AND kind = 'customer' AND id = OLD.app_user_id);
                    """ : ""
                return [
                    "CREATE TRIGGER chart_mark_\(table)_insert AFTER INSERT ON \(table) BEGIN \(mark("NEW")) END",
                    "CREATE TRIGGER chart_mark_\(table)_update AFTER UPDATE\(updateOf) ON \(table) BEGIN \(mark("OLD")) \(mark("NEW")) \(left) END",
                    "CREATE TRIGGER chart_mark_\(table)_delete AFTER DELETE ON \(table) BEGIN \(mark("OLD")) \(left) END",
                ]
            }
        }

        static var postgres: [String] {
            tables.flatMap { table, kind, column, updateOf in
                func mark(_ row: String) -> String {
                    "INSERT INTO chart_marks (app_id, kind, id) VALUES (\(row).app_id, '\(kind)', \(row).\(column)) ON CONFLICT DO NOTHING;"
                }
                let left =
                    table == "purchase_owners"
                    ? """
                    IF TG_OP <> 'INSERT' AND OLD.app_user_id IS NOT NULL THEN INSERT INTO chart_marks (app_id, kind, id) \
                    VALUES (OLD.app_id, 'customer', OLD.app_user_id) ON CONFLICT DO NOTHING; END IF;
                    """ : ""
                return [
                    """
                    CREATE FUNCTION chart_mark_\(table)() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                    IF TG_OP <> 'INSERT' THEN \(mark("OLD")) END IF; \(left) \
                    IF TG_OP <> 'DELETE' THEN \(mark("NEW")) END IF; \
                    RETURN NULL; END $$
                    """,
                    """
                    CREATE TRIGGER chart_mark_\(table) AFTER INSERT OR UPDATE\(updateOf) OR DELETE ON \(table) \
                    FOR EACH ROW EXECUTE FUNCTION chart_mark_\(table)()
                    """,
                ]
            }
        }
    }
}
