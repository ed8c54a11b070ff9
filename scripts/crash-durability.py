#!/usr/bin/env python3
"""Crash durability check: kill -9 the server while a client posts distinct purchases, restart
it, and check that every purchase that got a 200 is in the database, and (with --webhooks) that
the event of every one of them reaches the app's webhook endpoint after the restart.

    scripts/crash-durability.py --binary .build/debug/countersign [--database postgres://...] [--count 1000] [--webhooks]

The purchases are minted by the server's own test store (POST /v1/test_store/purchases) before
the run; then worker threads post them (POST /v1/receipts), one user per purchase, and the
server is killed with SIGKILL after a random number of acknowledged posts. After a restart on
the same data directory (and database), the admin API must list every acknowledged transaction
for its user. Exit status 0 only when none is missing.

With --webhooks the app posts its events to a receiver run by this script, which answers 503
until the kill, so deliveries are pending (some mid-attempt) when the server dies; after the
restart it answers 200, and every acknowledged purchase's event must arrive, duplicates only
under the same event id.
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

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from countersign_process import app_keys, call, connect, start_server


class Receiver:
    """A webhook endpoint: records every event it is sent; answers 503 until `accepting` is set."""

    def __init__(self):
        self.events, self.lock, self.accepting, self.attempts = [], threading.Lock(), threading.Event(), 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.attempts += 1
                if not receiver.accepting.is_set():
                    self.send_response(503)
                    self.end_headers()
                    return
                event = json.loads(body)["event"]
                with receiver.lock:
                    receiver.events.append((event["id"], event.get("app_user_id"), event["type"]))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/hooks" % self.server.server_address[1]


def add_webhook(data_dir, url):
    """Points the app's webhooks at `url`, retried every 2 seconds for a minute."""
    path = os.path.join(data_dir, "countersign.json")
    configuration = json.load(open(path))
    configuration["apps"][0]["webhooks"] = [{"url": url, "retryScheduleSeconds": [2] * 30}]
    with open(path, "w") as handle:
        json.dump(configuration, handle)




def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", help="postgres://... (default: SQLite in the data directory)")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--webhooks", action="store_true", help="also check that every acknowledged purchase's event is delivered")
    arguments = parser.parse_args()
    rng = random.Random(arguments.seed)

    data_dir = tempfile.mkdtemp(prefix="countersign-crash-")
    log = open(os.path.join(data_dir, "server.log"), "a")
    try:
        process, port = start_server(arguments.binary, data_dir, arguments.database, stderr=log)
        public, secret = app_keys(data_dir)
        receiver = None
        if arguments.webhooks:
            receiver = Receiver()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
            add_webhook(data_dir, receiver.url)
            process, port = start_server(arguments.binary, data_dir, arguments.database, stderr=log)

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
        killed_at = [0]
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
                        # With webhooks, only once deliveries are under way (some pending, some mid-attempt).
                        deliveries_started = receiver is None or receiver.attempts > 0
                        if len(acknowledged) >= kill_after and deliveries_started and not killed.is_set():
                            killed.set()
                            killed_at[0] = len(acknowledged)
                            process.send_signal(signal.SIGKILL)

        threads = [threading.Thread(target=worker) for _ in range(arguments.workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if receiver and not killed.is_set():
            # Every purchase was posted before the first delivery attempt: kill once they begin.
            deadline = time.time() + 15
            while receiver.attempts == 0 and time.time() < deadline:
                time.sleep(0.05)
            killed.set()
            killed_at[0] = len(acknowledged)
            process.send_signal(signal.SIGKILL)
        process.wait()
        if not killed.is_set():
            sys.exit("error: the server was never killed (only %d acknowledged)" % len(acknowledged))

        attempts_before_kill = receiver.attempts if receiver else 0
        if receiver:
            receiver.accepting.set()
        process, port = start_server(arguments.binary, data_dir, arguments.database, stderr=log)
        connection = connect(port)
        missing = []
        for user, transaction_id in acknowledged:
            status, body = call(connection, "GET", "/v1/admin/customers/" + user, secret)
            ids = [t["transaction_id"] for t in json.loads(body).get("transactions", [])] if status == 200 else []
            if transaction_id not in ids:
                missing.append((user, transaction_id))
        undelivered, split = [], []
        if receiver:
            # A delivery leased by the killed server waits out its lease (90 s) before it is sent again.
            users = set(user for user, _ in acknowledged)
            deadline = time.time() + 240
            while time.time() < deadline:
                with receiver.lock:
                    delivered = set(user for _, user, _ in receiver.events)
                if users <= delivered:
                    break
                time.sleep(0.5)
            with receiver.lock:
                events = list(receiver.events)
            undelivered = sorted(users - set(user for _, user, _ in events))
            ids_by_user = {}
            for event_id, user, _ in events:
                ids_by_user.setdefault(user, set()).add(event_id)
            # Each user has one purchase, so one event: two ids for one user would be a duplicate
            # that a receiver deduplicating on the id could not recognise.
            split = [user for user, ids in ids_by_user.items() if len(ids) > 1]
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        backend = "PostgreSQL" if arguments.database else "SQLite"
        if receiver:
            print("webhooks (%s): %d attempts answered 503 before the kill; after the restart %d deliveries for %d "
                  "acknowledged purchases, %d repeated with the same id, %d undelivered, %d with two ids"
                  % (backend, attempts_before_kill, len(events), len(acknowledged), len(events) - len(set(e[0] for e in events)),
                     len(undelivered), len(split)))
            if undelivered or split:
                print("undelivered:", undelivered[:10], "split:", split[:10])
                sys.exit(1)
        print("crash durability (%s): killed with SIGKILL after %d acknowledged posts (of %d minted); "
              "%d acknowledged in total, %d missing after restart"
              % (backend, killed_at[0], arguments.count, len(acknowledged), len(missing)))
        if missing:
            print("missing:", missing[:10])
            sys.exit(1)
    finally:
        log.close()
        if os.environ.get("KEEP_DATA") is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
