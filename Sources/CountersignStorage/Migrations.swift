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
    static let all: [Migration] = original + later

    /// Versions 1 to 9: the schema as the first releases shaped it.
    static let original: [Migration] = [
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
