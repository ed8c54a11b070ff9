#!/usr/bin/env python3
"""Crash durability check: kill -9 the server while a client posts distinct purchases, restart
it, and check that every purchase that got a 200 is in the database.

    scripts/crash-durability.py --binary .build/debug/countersign [--database postgres://...] [--count 1000]

The purchases are minted by the server's own test store (POST /v1/test_store/purchases) before
the run; then worker threads post them (POST /v1/receipts), one user per purchase, and the
server is killed with SIGKILL after a random number of acknowledged posts. After a restart on
the same data directory (and database), the admin API must list every acknowledged transaction
for its user. Exit status 0 only when none is missing.
"""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

from countersign_process import app_keys, call, connect, start_server




def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", help="postgres://... (default: SQLite in the data directory)")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=None)
    arguments = parser.parse_args()
    rng = random.Random(arguments.seed)

    data_dir = tempfile.mkdtemp(prefix="countersign-crash-")
    log = open(os.path.join(data_dir, "server.log"), "a")
    try:
        process, port = start_server(arguments.binary, data_dir, arguments.database, stderr=log)
        public, secret = app_keys(data_dir)

        connection = connect(port)
        purchases = []
        for index in range(arguments.count):
            user = "crash-user-%d" % index
            status, body = call(connection, "POST", "/v1/test_store/purchases", public,
                                   {"app_user_id": user, "product_id": rng.choice(["pro_monthly", "lifetime", "coins_100"])})
            if status != 200:
                sys.exit("error: minting failed with %d: %s" % (status, body[:200]))
            answer = json.loads(body)
            purchases.append((user, answer["transaction_id"], answer["signed_transaction"]))
        connection.close()

        kill_after = rng.randint(arguments.count // 5, arguments.count * 3 // 5)
        acknowledged, lock, killed = [], threading.Lock(), threading.Event()
        queue = list(purchases)

        def worker():
            client = connect(port)
            while True:
                with lock:
                    if not queue:
                        return
                    user, transaction_id, jws = queue.pop(0)
                try:
                    status, _ = call(client, "POST", "/v1/receipts", public, {"app_user_id": user, "fetch_token": jws})
                except (OSError, http.client.HTTPException):
                    client.close()
                    client = connect(port)
                    continue
                if status == 200:
                    with lock:
                        acknowledged.append((user, transaction_id))
                        if len(acknowledged) >= kill_after and not killed.is_set():
                            killed.set()
                            process.send_signal(signal.SIGKILL)

        threads = [threading.Thread(target=worker) for _ in range(arguments.workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        process.wait()
        if not killed.is_set():
            sys.exit("error: the server was never killed (only %d acknowledged)" % len(acknowledged))

        process, port = start_server(arguments.binary, data_dir, arguments.database, stderr=log)
        connection = connect(port)
        missing = []
        for user, transaction_id in acknowledged:
            status, body = call(connection, "GET", "/v1/admin/customers/" + user, secret)
            ids = [t["transaction_id"] for t in json.loads(body).get("transactions", [])] if status == 200 else []
            if transaction_id not in ids:
                missing.append((user, transaction_id))
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        backend = "PostgreSQL" if arguments.database else "SQLite"
        print("crash durability (%s): killed with SIGKILL after %d acknowledged posts (of %d minted); "
              "%d acknowledged in total, %d missing after restart"
              % (backend, kill_after, arguments.count, len(acknowledged), len(missing)))
        if missing:
            print("missing:", missing[:10])
            sys.exit(1)
    finally:
        log.close()
        if os.environ.get("KEEP_DATA") is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
