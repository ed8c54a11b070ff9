#!/usr/bin/env python3
"""PostgreSQL restarted while purchases are posted: every answer is prompt and honest.

Workers post distinct purchases (minted first by the server's test store) while PostgreSQL is
restarted under them (`pg_ctlcluster VERSION main restart` unless --restart says otherwise,
so it runs where the cluster belongs to the machine, as in CI). Each post must get, within
--deadline seconds:
- 200 (acknowledged), or
- 503 with `Retry-After` and code 5033 (the database is away; nothing was changed), which the
  worker retries after `Retry-After`, as the SDK does.
No 500, no other answer, no post left without an answer; afterwards every purchase is recorded
for its user (read through the admin API), and the server recovered without a restart of its own.

    scripts/postgres-restart.py --binary PATH --database URL [--count 2000] [--restart "COMMAND"]
"""
import argparse
import base64
import glob
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from countersign_process import app_keys, call, connect, start_server


def default_restart():
    versions = sorted(glob.glob("/usr/lib/postgresql/*"), key=lambda path: int(os.path.basename(path)))
    if not versions:
        sys.exit("error: no PostgreSQL under /usr/lib/postgresql; pass --restart")
    return "pg_ctlcluster %s main restart" % os.path.basename(versions[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", required=True, help="postgres://... of a database this script may fill")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--deadline", type=float, default=15, help="seconds a post may take to be answered")
    parser.add_argument("--restart", default=None, help="the command that restarts PostgreSQL")
    arguments = parser.parse_args()
    restart = arguments.restart or default_restart()

    data_dir = tempfile.mkdtemp(prefix="countersign-pg-restart-")
    log = open(os.path.join(data_dir, "server.log"), "a")
    process, port = start_server(arguments.binary, data_dir, arguments.database, stderr=log)
    try:
        public, secret = app_keys(data_dir)
        connection = connect(port)
        purchases = []
        for index in range(arguments.count):
            user = "restart-user-%d" % index
            status, body = call(connection, "POST", "/v1/test_store/purchases", public, {"app_user_id": user, "product_id": "lifetime"})
            if status != 200:
                sys.exit("error: minting failed with %d: %s" % (status, body[:200]))
            purchases.append((user, json.loads(body)["transaction_id"], json.loads(body)["signed_transaction"]))
        connection.close()

        lock = threading.Lock()
        queue = list(purchases)
        acknowledged, problems, unavailable, slowest = [], [], [0], [0.0]
        restarted = threading.Event()

        def receipt(client, user, jws):
            """POST /v1/receipts; (status, Retry-After, body)."""
            headers = {"Authorization": "Bearer " + public, "Content-Type": "application/json",
                       "X-Nonce": base64.b64encode(os.urandom(12)).decode()}
            client.request("POST", "/v1/receipts", body=json.dumps({"app_user_id": user, "fetch_token": jws}), headers=headers)
            response = client.getresponse()
            return response.status, response.getheader("Retry-After"), response.read()

        def post(client, user, jws):
            """Posts until acknowledged; each answer must come within the deadline."""
            while True:
                started = time.time()
                try:
                    status, retry_after, body = receipt(client, user, jws)
                except OSError as error:
                    return "no answer within %.0f s (%s)" % (arguments.deadline, error)
                with lock:
                    slowest[0] = max(slowest[0], time.time() - started)
                if status == 200:
                    return None
                answer = json.loads(body) if body.startswith(b"{") else {}
                if status != 503 or answer.get("code") != 5033:
                    return "answered %d: %s" % (status, body[:160])
                if retry_after is None or not retry_after.isdigit():
                    return "503 without Retry-After"
                with lock:
                    unavailable[0] += 1
                time.sleep(min(int(retry_after), 5))

        def worker():
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=arguments.deadline)
            while True:
                with lock:
                    if not queue:
                        return
                    user, transaction_id, jws = queue.pop(0)
                    if len(queue) == arguments.count // 3 and not restarted.is_set():
                        restarted.set()
                        threading.Thread(target=lambda: subprocess.run(restart, shell=True, check=True)).start()
                problem = post(client, user, jws)
                with lock:
                    if problem:
                        problems.append("%s: %s" % (user, problem))
                    else:
                        acknowledged.append((user, transaction_id))
                if problem:
                    client.close()
                    client = http.client.HTTPConnection("127.0.0.1", port, timeout=arguments.deadline)

        threads = [threading.Thread(target=worker) for _ in range(arguments.workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if not restarted.is_set():
            sys.exit("error: PostgreSQL was never restarted")
        if process.poll() is not None:
            sys.exit("error: the server exited (%s)" % process.returncode)

        # Every purchase is recorded for its user (the server reconnected by itself).
        connection = connect(port)
        missing = []
        for user, transaction_id, _ in purchases:
            status, body = call(connection, "GET", "/v1/admin/customers/" + user, secret)
            ids = [t["transaction_id"] for t in json.loads(body).get("transactions", [])] if status == 200 else []
            if transaction_id not in ids:
                missing.append(user)
        print("== PostgreSQL restarted under %d posts from %d workers: %d acknowledged, %d answers of 503 + Retry-After (retried), "
              "slowest answer %.1f s, %d problems, %d missing" % (
                  arguments.count, arguments.workers, len(acknowledged), unavailable[0], slowest[0], len(problems), len(missing)))
        if problems or missing:
            for line in problems[:20]:
                print("  ", line, file=sys.stderr)
            if missing:
                print("   missing:", ", ".join(missing[:20]), file=sys.stderr)
            print("   server log:", log.name, file=sys.stderr)
            sys.exit(1)
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            # A request still in flight holds graceful shutdown up: say so, and stop it.
            process.kill()
            process.wait()
            sys.exit("error: the server did not stop within 60 s of SIGTERM (a request never ended)")


if __name__ == "__main__":
    main()
