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
import base64
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time


def start(binary, data_dir, database, log):
    command = [binary, "serve", "--data-dir", data_dir, "--port", "0", "--log-level", "warning"]
    if database:
        command += ["--database", database]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith("listening on http://"):
            port = int(line.strip().rsplit(":", 1)[1])
            # Keep draining stdout so the server never blocks on a full pipe.
            threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
            return process, port
    process.kill()
    sys.exit("error: the server did not start; see the log")


def request(connection, method, path, key, body=None):
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
               "X-Nonce": base64.b64encode(os.urandom(12)).decode()}
    connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    response = connection.getresponse()
    return response.status, response.read()


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
        process, port = start(arguments.binary, data_dir, arguments.database, log)
        app = json.load(open(os.path.join(data_dir, "countersign.json")))["apps"][0]
        public, secret = app["publicApiKeys"][0], app["secretApiKeys"][0]

        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        purchases = []
        for index in range(arguments.count):
            user = "crash-user-%d" % index
            status, body = request(connection, "POST", "/v1/test_store/purchases", public,
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
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            while True:
                with lock:
                    if not queue:
                        return
                    user, transaction_id, jws = queue.pop(0)
                try:
                    status, _ = request(client, "POST", "/v1/receipts", public, {"app_user_id": user, "fetch_token": jws})
                except (OSError, http.client.HTTPException):
                    client.close()
                    client = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
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

        process, port = start(arguments.binary, data_dir, arguments.database, log)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        missing = []
        for user, transaction_id in acknowledged:
            status, body = request(connection, "GET", "/v1/admin/customers/" + user, secret)
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
