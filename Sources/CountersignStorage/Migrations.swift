import Foundation

/// Versioned schema migrations, run at start. Each version runs once, in its own transaction,
/// recorded in `schema_migrations`; several servers starting at once on PostgreSQL take turns
/// through an advisory lock.
enum Migrations {
    struct Migration: Sendable {
        let version: Int
        let name: String
        let statements: [String]
        /// PostgreSQL's statements where they differ (SQLite cannot alter a column in place).
        var postgresStatements: [String]? = nil

        func statements(for dialect: Database.Dialect) -> [String] {
            dialect == .postgres ? postgresStatements ?? statements : statements
        }
    }

    /// The schema. Types are chosen to mean the same on SQLite and PostgreSQL (TEXT, BIGINT,
    /// INTEGER); times are milliseconds since 1970. Uniqueness of transaction ids and
    /// notification ids is enforced here, by primary keys.
    static let all: [Migration] = [
        Migration(
            version: 1, name: "purchases, customers, notifications",
            statements: [
                """
                CREATE TABLE customers (
                    app_id TEXT NOT NULL,
                    app_user_id TEXT NOT NULL,
                    app_account_token TEXT NOT NULL,
                    first_seen_ms BIGINT NOT NULL,
                    last_seen_ms BIGINT NOT NULL,
                    PRIMARY KEY (app_id, app_user_id)
                )
                """,
                "CREATE INDEX customers_by_token ON customers (app_id, app_account_token)",
                """
                CREATE TABLE purchases (
                    transaction_id TEXT PRIMARY KEY,
                    app_id TEXT NOT NULL,
                    original_transaction_id TEXT NOT NULL,
                    product_id TEXT NOT NULL,
                    product_type TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    purchase_date_ms BIGINT,
                    expires_date_ms BIGINT,
                    revocation_date_ms BIGINT,
                    signed_date_ms BIGINT NOT NULL,
                    app_account_token TEXT,
                    signed_transaction TEXT NOT NULL,
                    recorded_at_ms BIGINT NOT NULL
                )
                """,
                "CREATE INDEX purchases_by_original ON purchases (app_id, original_transaction_id)",
                """
                CREATE TABLE purchase_owners (
                    app_id TEXT NOT NULL,
                    original_transaction_id TEXT NOT NULL,
                    app_user_id TEXT NOT NULL,
                    updated_at_ms BIGINT NOT NULL,
                    PRIMARY KEY (app_id, original_transaction_id)
                )
                """,
                "CREATE INDEX purchase_owners_by_user ON purchase_owners (app_id, app_user_id)",
                """
                CREATE TABLE subscription_states (
                    app_id TEXT NOT NULL,
                    original_transaction_id TEXT NOT NULL,
                    auto_renew_status INTEGER,
                    in_billing_retry INTEGER NOT NULL DEFAULT 0,
                    grace_period_expires_ms BIGINT,
                    state_signed_date_ms BIGINT NOT NULL,
                    PRIMARY KEY (app_id, original_transaction_id)
                )
                """,
                """
                CREATE TABLE notifications (
                    notification_uuid TEXT PRIMARY KEY,
                    app_id TEXT NOT NULL,
                    notification_type TEXT NOT NULL,
                    subtype TEXT,
                    signed_date_ms BIGINT NOT NULL,
                    received_at_ms BIGINT NOT NULL
                )
                """,
                """
                CREATE TABLE promotional_grants (
                    grant_id TEXT PRIMARY KEY,
                    app_id TEXT NOT NULL,
                    app_user_id TEXT NOT NULL,
                    entitlement TEXT NOT NULL,
                    starts_ms BIGINT NOT NULL,
                    expires_ms BIGINT,
                    revoked_ms BIGINT,
                    created_ms BIGINT NOT NULL
                )
                """,
                "CREATE INDEX promotional_grants_by_user ON promotional_grants (app_id, app_user_id)",
            ]),
        Migration(
            version: 2, name: "verification failure telemetry",
            statements: [
                """
                CREATE TABLE verification_failures (
                    app_id TEXT NOT NULL,
                    day TEXT NOT NULL,
                    reason TEXT NOT NULL,
                    mode TEXT NOT NULL,
                    failure_count BIGINT NOT NULL,
                    PRIMARY KEY (app_id, day, reason, mode)
                )
                """
            ]),
        // A deleted customer's purchases stay recorded and owned by nobody: NULL, which no
        // `app_user_id = ?` matches (it used to be the id `$CSDeleted`, which a client could ask for).
        // Upgraded transactions are marked, so the old product stops granting at the upgrade.
        Migration(
            version: 3, name: "purchases owned by nobody; upgraded transactions",
            statements: [
                """
                CREATE TABLE purchase_owners_v3 (
                    app_id TEXT NOT NULL,
                    original_transaction_id TEXT NOT NULL,
                    app_user_id TEXT,
                    updated_at_ms BIGINT NOT NULL,
                    PRIMARY KEY (app_id, original_transaction_id)
                )
                """,
                """
                INSERT INTO purchase_owners_v3 (app_id, original_transaction_id, app_user_id, updated_at_ms)
                SELECT app_id, original_transaction_id, CASE WHEN app_user_id = '$CSDeleted' THEN NULL ELSE app_user_id END, updated_at_ms
                FROM purchase_owners
                """,
                "DROP TABLE purchase_owners",
                "ALTER TABLE purchase_owners_v3 RENAME TO purchase_owners",
                "CREATE INDEX purchase_owners_by_user ON purchase_owners (app_id, app_user_id)",
                "ALTER TABLE purchases ADD COLUMN is_upgraded INTEGER NOT NULL DEFAULT 0",
            ],
            postgresStatements: [
                "ALTER TABLE purchase_owners ALTER COLUMN app_user_id DROP NOT NULL",
                "UPDATE purchase_owners SET app_user_id = NULL WHERE app_user_id = '$CSDeleted'",
                "ALTER TABLE purchases ADD COLUMN is_upgraded INTEGER NOT NULL DEFAULT 0",
            ]),
        Migration(
            version: 4, name: "period and ownership types of purchases",
            statements: [
                "ALTER TABLE purchases ADD COLUMN period_type TEXT",
                "ALTER TABLE purchases ADD COLUMN ownership_type TEXT",
            ]),
        // The test store's side of StoreKit: what each store account (a device's Apple ID) hears
        // through `Transaction.updates`, purchases waiting for Ask-to-Buy approval, and
        // subscriber attributes.
        Migration(
            version: 5, name: "test store accounts, pending purchases, subscriber attributes",
            statements: [
                """
                CREATE TABLE test_store_feed (
                    app_id TEXT NOT NULL,
                    store_account TEXT NOT NULL,
                    sequence BIGINT NOT NULL,
                    transaction_id TEXT NOT NULL,
                    original_transaction_id TEXT NOT NULL,
                    signed_transaction TEXT NOT NULL,
                    created_at_ms BIGINT NOT NULL,
                    PRIMARY KEY (app_id, store_account, sequence)
                )
                """,
                "CREATE INDEX test_store_feed_by_original ON test_store_feed (app_id, original_transaction_id)",
                """
                CREATE TABLE test_store_pending (
                    pending_id TEXT PRIMARY KEY,
                    app_id TEXT NOT NULL,
                    store_account TEXT NOT NULL,
                    product_id TEXT NOT NULL,
                    app_account_token TEXT,
                    created_at_ms BIGINT NOT NULL
                )
                """,
                "CREATE INDEX test_store_pending_by_account ON test_store_pending (app_id, store_account)",
                """
                CREATE TABLE subscriber_attributes (
                    app_id TEXT NOT NULL,
                    app_user_id TEXT NOT NULL,
                    attribute_key TEXT NOT NULL,
                    attribute_value TEXT,
                    updated_at_ms BIGINT NOT NULL,
                    PRIMARY KEY (app_id, app_user_id, attribute_key)
                )
                """,
            ]),
        // Webhooks: every event stored in the transaction that made its change (the outbox), one
        // delivery row per configured endpoint; the event's `seq` orders a customer's deliveries.
        // Purchases are found by expiry for the server's own expiration check; chains asked of
        // the App Store Server API are noted so they are not asked again too soon.
        Migration(
            version: 6, name: "events and webhook deliveries", statements: eventTables(seq: "seq INTEGER PRIMARY KEY AUTOINCREMENT"),
            postgresStatements: eventTables(seq: "seq BIGSERIAL PRIMARY KEY")),
        // The dashboard: sign-in sessions (the token's SHA-256 only, never the token) and events
        // by time for the daily charts (active customers are counted through purchases_by_expiry:
        // one more index on purchases would cost every purchase a write).
        Migration(
            version: 7, name: "dashboard sessions and the dashboard's indexes",
            statements: [
                """
                CREATE TABLE dashboard_sessions (
                    session_hash TEXT PRIMARY KEY,
                    app_ids TEXT NOT NULL,
                    current_app TEXT NOT NULL,
                    csrf_token TEXT NOT NULL,
                    created_ms BIGINT NOT NULL,
                    expires_ms BIGINT NOT NULL
                )
                """,
                "CREATE INDEX dashboard_sessions_by_expiry ON dashboard_sessions (expires_ms)",
                // Covering for the daily counts: only a CANCELLATION's row is read (for its reason).
                "CREATE INDEX events_by_time ON events (app_id, created_at_ms, event_type)",
            ]),
        // A signed transaction (about 3.5 KB of base64, its certificate chain included) does not
        // compress: PostgreSQL ran pglz over each one, found no gain and stored it out of line as
        // it was (BENCHMARKS.md, decision 11). Out of line without the attempt;
        // rows written before keep their form. SQLite has no such setting.
        Migration(
            version: 8, name: "signed transactions stored out of line uncompressed", statements: [],
            postgresStatements: [
                "ALTER TABLE purchases ALTER COLUMN signed_transaction SET STORAGE EXTERNAL",
                "ALTER TABLE test_store_feed ALTER COLUMN signed_transaction SET STORAGE EXTERNAL",
            ]),
        // A transaction id is unique within one app's environment, not across a deployment:
        // Xcode numbers its transactions 0, 1, 2… for every app, and data signed for one app
        // must never reach another's rows. The id leads the key, so a read of a chain by app
        // (`purchases_by_original`) is never planned as a scan of the key's app prefix. SQLite
        // cannot change a primary key in place: the table is copied (its columns as versions 1, 3
        // and 4 left them).
        Migration(
            version: 9, name: "purchases keyed by app, environment and transaction id",
            statements: [
                """
                CREATE TABLE purchases_v9 (
                    transaction_id TEXT NOT NULL,
                    app_id TEXT NOT NULL,
                    original_transaction_id TEXT NOT NULL,
                    product_id TEXT NOT NULL,
                    product_type TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    purchase_date_ms BIGINT,
                    expires_date_ms BIGINT,
                    revocation_date_ms BIGINT,
                    signed_date_ms BIGINT NOT NULL,
                    app_account_token TEXT,
                    signed_transaction TEXT NOT NULL,
                    recorded_at_ms BIGINT NOT NULL,
                    is_upgraded INTEGER NOT NULL DEFAULT 0,
                    period_type TEXT,
                    ownership_type TEXT,
                    PRIMARY KEY (transaction_id, app_id, environment)
                )
                """,
                "INSERT INTO purchases_v9 SELECT transaction_id, app_id, original_transaction_id, product_id, product_type, environment, "
                    + "purchase_date_ms, expires_date_ms, revocation_date_ms, signed_date_ms, app_account_token, signed_transaction, "
                    + "recorded_at_ms, is_upgraded, period_type, ownership_type FROM purchases",
                "DROP TABLE purchases",
                "ALTER TABLE purchases_v9 RENAME TO purchases",
                "CREATE INDEX purchases_by_original ON purchases (app_id, original_transaction_id)",
                "CREATE INDEX purchases_by_expiry ON purchases (expires_date_ms)",
            ],
            postgresStatements: [
                "ALTER TABLE purchases DROP CONSTRAINT purchases_pkey",
                "ALTER TABLE purchases ADD PRIMARY KEY (transaction_id, app_id, environment)",
            ]),
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
    ]

    /// Version 6 with `seq`, the one column whose definition differs between the databases.
    static func eventTables(seq: String) -> [String] {
        [
            """
            CREATE TABLE events (
                \(seq),
                event_id TEXT NOT NULL UNIQUE,
                app_id TEXT NOT NULL,
                app_user_id TEXT,
                event_type TEXT NOT NULL,
                body TEXT NOT NULL,
                created_at_ms BIGINT NOT NULL
            )
            """,
            "CREATE INDEX events_by_user ON events (app_id, app_user_id, seq)",
            """
            CREATE TABLE webhook_deliveries (
                event_id TEXT NOT NULL,
                endpoint TEXT NOT NULL,
                app_id TEXT NOT NULL,
                ordering_key TEXT NOT NULL,
                status TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                next_attempt_ms BIGINT NOT NULL,
                lease_until_ms BIGINT,
                last_error TEXT,
                last_status INTEGER,
                delivered_at_ms BIGINT,
                created_at_ms BIGINT NOT NULL,
                PRIMARY KEY (event_id, endpoint)
            )
            """,
            "CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_ms)",
            "CREATE INDEX webhook_deliveries_in_order ON webhook_deliveries (app_id, endpoint, ordering_key, status)",
            "CREATE INDEX purchases_by_expiry ON purchases (expires_date_ms)",
            "CREATE TABLE event_checks (name TEXT PRIMARY KEY, through_ms BIGINT NOT NULL)",
            """
            CREATE TABLE chain_checks (
                app_id TEXT NOT NULL,
                original_transaction_id TEXT NOT NULL,
                checked_at_ms BIGINT NOT NULL,
                PRIMARY KEY (app_id, original_transaction_id)
            )
            """,
        ]
    }

    /// Applies the migrations not yet applied, each in its transaction, at `now` (the caller's
    /// clock: recorded as `applied_at_ms`, and bound as `$1` to a statement that names it).
    static func run(on database: Database, migrations: [Migration] = all, now: Date) async throws {
        let time = now.epochMilliseconds
        try await database.withConnection { sql in
            try await sql.run(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version INTEGER PRIMARY KEY,
                    name TEXT NOT NULL,
                    applied_at_ms BIGINT NOT NULL
                )
                """)
        }
        for migration in migrations {
            try await database.transaction { sql in
                try await sql.lockForMigration()
                let applied = try await sql.first("SELECT version FROM schema_migrations WHERE version = \(bind: migration.version)") { _ in true }
                guard applied == nil else { return }
                for statement in migration.statements(for: sql.dialect) {
                    try await sql.run(SQLStatement(statement, statement.contains("$1") ? [.integer(time)] : []))
                }
                try await sql.run(
                    """
                    INSERT INTO schema_migrations (version, name, applied_at_ms) \
                    VALUES (\(bind: migration.version), \(bind: migration.name), \(bind: time))
                    """)
            }
        }
    }

    /// The versions recorded as applied.
    static func appliedVersions(on database: Database) async throws -> [Int] {
        try await database.withConnection { sql in
            try await sql.all("SELECT version FROM schema_migrations ORDER BY version") { try $0.int("version") }
        }
    }
}
