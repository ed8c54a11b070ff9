#!/usr/bin/env python3
"""Fills a Countersign database as a real app's would, for the benchmarks at scale.

    scripts/generate-customers.py --binary .build/release/countersign --data-dir DIR [--database postgres://...]
        [--customers 1000000] [--purchases 3000000] [--grants 50000] [--jws-bytes 3300] [--seed 1] [--check]

The server itself creates the schema (it starts once on DIR and is stopped), then the rows go in
straight through the database's bulk path: Python's sqlite3 in one transaction for the embedded
database, `psql` with COPY for PostgreSQL. What the rows look like:

  - customers: app user ids of two kinds (three in ten anonymous `$RCAnonymousID:` ids, the rest
    logged-in ids), their app account tokens derived as the SDK derives them (UUID v5), first and
    last seen over the last three years;
  - purchases: one in ten customers subscribes to `pro_monthly` and renews month after month for
    up to three years (a chain: one original transaction, one row per renewal, the last one maybe
    expired, refunded now and then), a share of the others bought `lifetime` or coins; the
    total comes to --purchases. Each row carries a signed transaction of --jws-bytes of
    incompressible base64 (a real App Store JWS with its certificate chain is about 3.3 KB), so
    the tables have a real app's size on disk; the server never reads that column on the paths
    measured;
  - purchase owners (one per chain), subscription states (renewal status of each chain),
    --grants promotional grants spread over the customers, and the webhook events of the last
    30 days (a purchase, renewal or refund in that window makes one, as the server does), which
    the dashboard's daily charts count.

Prints the counts, the time taken and the database size, and the id of one subscribed customer
with a long renewal history (`bench-user` is one too: bench-server.py reads it).
"""
import argparse
import base64
import io
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
import uuid

from countersign_process import app_keys, call, connect, start_server

NAMESPACE = uuid.UUID(bytes=bytes([0x6F, 0x1B, 0x6A, 0x52, 0x3C, 0x0E, 0x4A, 0x8D, 0x9E, 0x21, 0x57, 0xC4, 0x0B, 0x3D, 0x88, 0x12]))
DAY_MS = 86_400_000
MONTH_MS = 30 * DAY_MS


def token(user):
    return str(uuid.uuid5(NAMESPACE, user))


def event(app_id, user, kind, product, transaction, original, at_ms, extra=""):
    """An events row shaped as the server stores it (the body as RevenueCat's webhook)."""
    event_id = str(uuid.uuid5(NAMESPACE, "%s-%s" % (kind, transaction)))
    body = ('{"api_version":"1.0","event":{"id":"%s","type":"%s","app_id":"%s","app_user_id":"%s","original_app_user_id":"%s",'
            '"aliases":["%s"],"product_id":"%s","entitlement_ids":["pro"],"period_type":"NORMAL","purchased_at_ms":%d,'
            '"environment":"PRODUCTION","store":"APP_STORE","transaction_id":"%s","original_transaction_id":"%s",'
            '"event_timestamp_ms":%d%s}}') % (event_id, kind, app_id, user, user, user, product, at_ms, transaction, original, at_ms, extra)
    return "events", (event_id, app_id, user, kind, body, at_ms)


def rows(arguments, app_id, now_ms):
    """Yields (table, row tuple) in an order that satisfies no constraint but primary keys."""
    rng = random.Random(arguments.seed)
    window = now_ms - 30 * DAY_MS
    jws_pool = [base64.b64encode(os.urandom(arguments.jws_bytes * 3 // 4)).decode() for _ in range(4096)]
    three_years = 3 * 365 * DAY_MS
    purchases_left = arguments.purchases
    subscribers = max(1, arguments.customers // 10)
    # Renewals per subscriber so that chains make up about five sixths of the purchases.
    renewals_mean = max(1, (arguments.purchases * 5 // 6) // subscribers)
    transaction = 2_000_000_000_000
    for index in range(arguments.customers):
        if index == 0:
            user = "bench-user"
        elif rng.random() < 0.3:
            user = "$RCAnonymousID:%032x" % rng.getrandbits(128)
        else:
            user = "user-%07d" % index
        first_seen = now_ms - rng.randrange(three_years)
        last_seen = rng.randrange(first_seen, now_ms + 1)
        yield "customers", (app_id, user, token(user), first_seen, last_seen)
        remaining_customers = arguments.customers - index
        if index < subscribers or index == 0:
            count = min(purchases_left, max(1, int(rng.expovariate(1 / renewals_mean)) if index else 36))
            if count == 0:
                continue
            original = str(transaction)
            start = now_ms - count * MONTH_MS + rng.randrange(MONTH_MS)
            refunded_at = start + (count - 1) * MONTH_MS + DAY_MS if rng.random() < 0.02 else None
            for renewal in range(count):
                purchase = start + renewal * MONTH_MS
                revoked = refunded_at if renewal == count - 1 else None
                yield "purchases", (str(transaction), app_id, original, "pro_monthly", "autoRenewable", "Production",
                                    purchase, purchase + MONTH_MS, revoked, purchase, token(user),
                                    jws_pool[transaction % len(jws_pool)], purchase, 0, "normal", "PURCHASED")
                if window <= purchase <= now_ms:
                    yield event(app_id, user, "RENEWAL" if renewal else "INITIAL_PURCHASE", "pro_monthly", transaction, original, purchase)
                if revoked is not None and window <= revoked <= now_ms:
                    yield event(app_id, user, "CANCELLATION", "pro_monthly", transaction, original, revoked,
                                ',"cancel_reason":"CUSTOMER_SUPPORT"')
                transaction += 1
            purchases_left -= count
            yield "purchase_owners", (app_id, original, user, start)
            will_renew = 1 if rng.random() < 0.8 else 0
            yield "subscription_states", (app_id, original, will_renew, 0, None, start + (count - 1) * MONTH_MS)
        elif purchases_left > 0 and rng.random() < min(1.0, purchases_left / remaining_customers):
            product, kind = ("lifetime", "nonConsumable") if rng.random() < 0.5 else ("coins_100", "consumable")
            purchase = rng.randrange(first_seen, last_seen + 1)
            yield "purchases", (str(transaction), app_id, str(transaction), product, kind, "Production",
                                purchase, None, None, purchase, token(user),
                                jws_pool[transaction % len(jws_pool)], purchase, 0, None, "PURCHASED")
            yield "purchase_owners", (app_id, str(transaction), user, purchase)
            if window <= purchase <= now_ms:
                yield event(app_id, user, "NON_RENEWING_PURCHASE", product, transaction, transaction, purchase)
            transaction += 1
            purchases_left -= 1
        if index % max(1, arguments.customers // arguments.grants) == 7 and arguments.grants > 0:
            starts = rng.randrange(first_seen, now_ms + 1)
            yield "promotional_grants", ("grant-%d" % index, app_id, user, "pro", starts,
                                         starts + rng.choice([7, 30, 365]) * DAY_MS, None, starts)


COLUMNS = {
    "customers": ("app_id", "app_user_id", "app_account_token", "first_seen_ms", "last_seen_ms"),
    "purchases": ("transaction_id", "app_id", "original_transaction_id", "product_id", "product_type", "environment",
                  "purchase_date_ms", "expires_date_ms", "revocation_date_ms", "signed_date_ms", "app_account_token",
                  "signed_transaction", "recorded_at_ms", "is_upgraded", "period_type", "ownership_type"),
    "purchase_owners": ("app_id", "original_transaction_id", "app_user_id", "updated_at_ms"),
    "subscription_states": ("app_id", "original_transaction_id", "auto_renew_status", "in_billing_retry",
                            "grace_period_expires_ms", "state_signed_date_ms"),
    "promotional_grants": ("grant_id", "app_id", "app_user_id", "entitlement", "starts_ms", "expires_ms", "revoked_ms", "created_ms"),
    "events": ("event_id", "app_id", "app_user_id", "event_type", "body", "created_at_ms"),
}


def fill_sqlite(path, generated):
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=OFF")
    statements = {table: "INSERT INTO %s (%s) VALUES (%s)" % (table, ", ".join(columns), ", ".join("?" * len(columns)))
                  for table, columns in COLUMNS.items()}
    counts = dict.fromkeys(COLUMNS, 0)
    batch = {table: [] for table in COLUMNS}
    for table, row in generated:
        batch[table].append(row)
        counts[table] += 1
        if len(batch[table]) >= 10_000:
            connection.executemany(statements[table], batch[table])
            batch[table].clear()
    for table, pending in batch.items():
        connection.executemany(statements[table], pending)
    connection.commit()
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.execute("ANALYZE")
    connection.commit()
    connection.close()
    return counts


def copy_text(value):
    if value is None:
        return "\\N"
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def fill_postgres(url, generated):
    """COPY per table, through one psql per table fed from buffered text."""
    buffers = {table: io.StringIO() for table in COLUMNS}
    counts = dict.fromkeys(COLUMNS, 0)
    processes = {}

    def flush(table):
        if table not in processes:
            processes[table] = subprocess.Popen(
                ["psql", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", "COPY %s (%s) FROM STDIN" % (table, ", ".join(COLUMNS[table]))],
                stdin=subprocess.PIPE, text=True)
        processes[table].stdin.write(buffers[table].getvalue())
        buffers[table].seek(0)
        buffers[table].truncate()

    for table, row in generated:
        buffers[table].write("\t".join(copy_text(value) for value in row) + "\n")
        counts[table] += 1
        if counts[table] % 20_000 == 0:
            flush(table)
    for table in COLUMNS:
        flush(table)
        processes[table].stdin.close()
        if processes[table].wait() != 0:
            sys.exit("error: COPY into %s failed" % table)
    subprocess.run(["psql", "-q", url, "-c", "VACUUM (ANALYZE) " + ", ".join(COLUMNS)], check=True)
    return counts


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--database", help="postgres:// URL; the embedded SQLite database of --data-dir when left out")
    parser.add_argument("--customers", type=int, default=1_000_000)
    parser.add_argument("--purchases", type=int, default=3_000_000)
    parser.add_argument("--grants", type=int, default=50_000)
    parser.add_argument("--jws-bytes", type=int, default=3300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--check", action="store_true",
                        help="then start the server on the filled database and read bench-user's CustomerInfo back")
    arguments = parser.parse_args()

    os.makedirs(arguments.data_dir, exist_ok=True)
    # The server creates the schema and the configuration, then stops.
    process, _ = start_server(arguments.binary, arguments.data_dir, arguments.database)
    process.terminate()
    process.wait(timeout=30)
    app_id = json.load(open(os.path.join(arguments.data_dir, "countersign.json")))["apps"][0]["id"]
    now_ms = int(time.time() * 1000)
    started = time.time()
    generated = rows(arguments, app_id, now_ms)
    if arguments.database:
        counts = fill_postgres(arguments.database, generated)
        size = subprocess.run(["psql", "-tA", arguments.database, "-c", "SELECT pg_database_size(current_database())"],
                              capture_output=True, text=True, check=True).stdout.strip()
        size = int(size)
    else:
        path = os.path.join(arguments.data_dir, "countersign.sqlite")
        counts = fill_sqlite(path, generated)
        size = sum(os.path.getsize(path + suffix) for suffix in ("", "-wal", "-shm") if os.path.exists(path + suffix))
    print("rows: " + ", ".join("%s %d" % item for item in counts.items()))
    print("took %.0f s; database size %.2f GB (%d bytes)" % (time.time() - started, size / 1e9, size))
    print("a subscriber with 36 renewals: bench-user")
    if arguments.check:
        check(arguments)


def check(arguments):
    """The server reads what was written as its own: bench-user's CustomerInfo lists its chain."""
    process, port = start_server(arguments.binary, arguments.data_dir, arguments.database)
    try:
        _, secret = app_keys(arguments.data_dir)
        status, body = call(connect(port), "GET", "/v1/admin/customers/bench-user/customer_info", secret)
        if status != 200:
            sys.exit("error: bench-user's CustomerInfo answered %d: %s" % (status, body[:300]))
        subscriptions = json.loads(body)["subscriber"]["subscriptions"]
        if "pro_monthly" not in subscriptions:
            sys.exit("error: bench-user's CustomerInfo lacks its pro_monthly chain: %s" % body[:300])
        print("check: the server reads bench-user's pro_monthly chain back (expires %s)" % subscriptions["pro_monthly"]["expires_date"])
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    main()
