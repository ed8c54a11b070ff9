#!/usr/bin/env python3
"""Cluster check: mixed load through nginx on two instances, one restarted midway.

    scripts/cluster-test.py [--duration 300] [--workers 8] [--throughput]

Starts the cluster with scripts/cluster.sh (PostgreSQL, two instances, nginx), checks that a
purchase posted to one instance is in the other's next answer, then runs worker threads through
nginx for --duration seconds, each request one of:
  - a read (GET /v1/subscribers/{id}) of a customer with recorded purchases: it must answer 200,
    verify against the cluster's root key, and list every purchase recorded for that customer
    so far, on whichever instance recorded it;
  - a purchase: minted by the test store (POST /v1/test_store/purchases), then posted
    (POST /v1/receipts): 200, verified, and remembered;
  - a renewal of a recorded subscription (POST /v1/admin/test_store/renew), which the server
    records at once as an App Store DID_RENEW notification would be.
At half time instance 1 is restarted gracefully (SIGTERM, then started again); near the end
instance 2 is. Afterwards every remembered purchase and renewal must be in the database
(admin API). Exit status 0 only with 0 failed requests, 0 unverified answers and 0 lost
purchases. --throughput also measures signed CustomerInfo reads with wrk: one instance alone
against two behind nginx.
"""
import argparse
import base64
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
except ImportError:
    # Ed25519 for the answers' check comes from PyPI's cryptography, in a virtual environment
    # of our own when this Python lacks it.
    VENV = os.path.join(HERE, "..", ".build", "cluster-venv")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        raise
    if not os.path.exists(os.path.join(VENV, "bin", "python")):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "-q", "--disable-pip-version-check", "cryptography"], check=True)
    os.execv(os.path.join(VENV, "bin", "python"), [os.path.join(VENV, "bin", "python"), os.path.abspath(__file__)] + sys.argv[1:])

from countersign_process import app_keys  # noqa: E402

CLUSTER = os.path.join(HERE, "cluster.sh")


def cluster(*arguments, environment):
    subprocess.run([CLUSTER, *arguments], check=True, env=environment)


def verify(root, api_key, nonce, path, headers, body):
    """The answer's X-Signature checked against the root key as docs/wire-format.md says;
    returns the reason it fails, or None."""
    signature = headers.get("x-signature")
    if signature is None:
        return "missingSignature"
    raw = base64.b64decode(signature)
    if len(raw) != 180:
        return "malformedSignature"
    intermediate, expiration, root_signature = raw[0:32], raw[32:36], raw[36:100]
    salt, answer_signature = raw[100:116], raw[116:180]
    try:
        root.verify(root_signature, expiration + intermediate)
    except InvalidSignature:
        return "untrustedRoot"
    if int.from_bytes(expiration, "little") * 86400 < time.time():
        return "intermediateExpired"
    request_time = headers.get("x-request-time", "")
    if not re.fullmatch(r"[1-9][0-9]{0,15}", request_time):
        return "malformedRequestTime"
    message = (salt + api_key.encode() + nonce + path.encode() + request_time.encode()
               + headers.get("x-etag", "").encode() + body)
    try:
        Ed25519PublicKey.from_public_bytes(intermediate).verify(answer_signature, message)
    except InvalidSignature:
        return "payloadMismatch"
    return None


class Client:
    """One keep-alive connection to nginx; every failure is counted, never retried."""

    def __init__(self, port, root, stats):
        self.port, self.root, self.stats = port, root, stats
        self.connection = None

    def call(self, method, path, key, body=None, signed=True):
        nonce = os.urandom(12)
        headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
                   "X-Nonce": base64.b64encode(nonce).decode()}
        try:
            if self.connection is None:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            response = self.connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as error:
            self.connection = None
            self.stats.fail("%s %s: %s" % (method, path, error))
            return None
        if response.status != 200:
            self.stats.fail("%s %s: HTTP %d %s" % (method, path, response.status, data[:160]))
            return None
        if signed:
            reason = verify(self.root, key, nonce, path, {k.lower(): v for k, v in response.getheaders()}, data)
            if reason:
                self.stats.fail("%s %s: does not verify (%s)" % (method, path, reason), unverified=True)
                return None
        self.stats.ok(method, path)
        return json.loads(data)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"read": 0, "purchase": 0, "renewal": 0, "other": 0}
        self.failures, self.unverified = [], 0

    def ok(self, method, path):
        kind = ("read" if method == "GET" else "purchase" if path == "/v1/receipts"
                else "renewal" if path.endswith("/renew") else "other")
        with self.lock:
            self.counts[kind] += 1

    def fail(self, message, unverified=False):
        with self.lock:
            self.failures.append(message)
            self.unverified += unverified


def listed(info):
    """Product ids a CustomerInfo lists (subscriptions and other purchases)."""
    subscriber = info["subscriber"]
    return set(subscriber.get("subscriptions", {})) | set(subscriber.get("non_subscriptions", {}))


def run_load(port, root, public, secret, duration, workers, restarts, environment):
    stats, lock = Stats(), threading.Lock()
    customers = {}  # user -> {"products": set, "transactions": set (every recorded id)}
    users = []  # the keys of customers, for a cheap random pick
    subscriptions = []  # (user, original transaction id)
    stop = threading.Event()

    def purchase(client, rng, index):
        user = "cluster-%d-%d" % (index, rng.randrange(1 << 30))
        product = rng.choice(["pro_monthly", "pro_monthly", "lifetime", "coins_100"])
        minted = client.call("POST", "/v1/test_store/purchases", public,
                             {"app_user_id": user, "product_id": product}, signed=True)
        if minted is None:
            return
        info = client.call("POST", "/v1/receipts", public, {"app_user_id": user, "fetch_token": minted["signed_transaction"]})
        if info is None:
            return
        if product not in listed(info):
            stats.fail("the receipt answer for %s does not list %s" % (user, product))
        with lock:
            customers[user] = {"products": {product}, "transactions": {minted["transaction_id"]}}
            users.append(user)
            if product == "pro_monthly":
                subscriptions.append((user, minted.get("original_transaction_id", minted["transaction_id"])))

    def renew(client, rng):
        with lock:
            if not subscriptions:
                return
            user, original = rng.choice(subscriptions)
        changed = client.call("POST", "/v1/admin/test_store/renew", secret, {"original_transaction_id": original}, signed=False)
        if changed is None:
            return
        with lock:
            customers[user]["transactions"].update(t["transaction_id"] for t in changed["transactions"])

    def read(client, rng):
        with lock:
            if not users:
                return
            user = rng.choice(users)
            products = set(customers[user]["products"])
        info = client.call("GET", "/v1/subscribers/" + user, public)
        if info is None:
            return
        if not products <= listed(info):
            stats.fail("the read of %s lists %s, recorded %s" % (user, sorted(listed(info)), sorted(products)))

    def worker(index):
        rng = random.Random(index)
        client = Client(port, root, stats)
        while not stop.is_set():
            choice = rng.random()
            if choice < 0.6:
                read(client, rng)
            elif choice < 0.9:
                purchase(client, rng, index)
            else:
                renew(client, rng)
            if not customers:
                purchase(client, rng, index)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(workers)]
    started = time.time()
    for thread in threads:
        thread.start()
    for at, instance in restarts:
        time.sleep(max(0, started + at * duration - time.time()))
        print("restarting instance %d at %.0f s" % (instance, time.time() - started), flush=True)
        cluster("restart", str(instance), environment=environment)
    time.sleep(max(0, started + duration - time.time()))
    stop.set()
    for thread in threads:
        thread.join()
    return stats, customers, time.time() - started


def lost_purchases(port, secret, customers):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    lost = []
    for user, recorded in customers.items():
        connection.request("GET", "/v1/admin/customers/" + user, headers={"Authorization": "Bearer " + secret})
        response = connection.getresponse()
        body = response.read()
        stored = {t["transaction_id"] for t in json.loads(body).get("transactions", [])} if response.status == 200 else set()
        lost.extend((user, t) for t in recorded["transactions"] - stored)
    return lost


def wrk_throughput(port, public, user, seconds):
    output = subprocess.run(
        ["wrk", "-t", "2", "-c", "64", "-d", "%ds" % seconds, "-H", "Authorization: Bearer " + public,
         "http://127.0.0.1:%d/v1/subscribers/%s" % (port, user)],
        check=True, capture_output=True, text=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([0-9.]+)", output).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return rate, int(errors.group(1)) if errors else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=300, help="seconds of mixed load")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--throughput", action="store_true", help="also compare one instance with two (wrk)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    arguments = parser.parse_args()

    environment = dict(os.environ, CLUSTER_PORT=str(arguments.port))
    directory = environment.setdefault("CLUSTER_DIR", "/tmp/countersign-cluster")
    try:
        # Inside the try: a start that fails half-way (nginx's port taken) stops what it started.
        cluster("start", environment=environment)
        root = Ed25519PublicKey.from_public_bytes(base64.b64decode(open(os.path.join(directory, "root.pub")).read().strip()))
        public, secret = app_keys(os.path.join(directory, "data"))
        # A purchase posted to one instance is in the very next answer of the other.
        for poster, reader in [(1, 2), (2, 1)]:
            stats = Stats()
            user = "cross-instance-%d" % poster
            client = Client(arguments.port + poster, root, stats)
            minted = client.call("POST", "/v1/test_store/purchases", public, {"app_user_id": user, "product_id": "lifetime"})
            if minted is not None:
                client.call("POST", "/v1/receipts", public, {"app_user_id": user, "fetch_token": minted["signed_transaction"]})
            info = Client(arguments.port + reader, root, stats).call("GET", "/v1/subscribers/" + user, public)
            if stats.failures or info is None or "lifetime" not in listed(info):
                sys.exit("error: a purchase posted to instance %d is not in instance %d's answer: %s" % (poster, reader, stats.failures or info))
        print("a purchase posted to either instance is in the other's next answer (verified)")
        stats, customers, took = run_load(arguments.port, root, public, secret, arguments.duration, arguments.workers,
                                          [(0.5, 1), (0.8, 2)], environment)
        lost = lost_purchases(arguments.port, secret, customers)
        recorded = sum(len(c["transactions"]) for c in customers.values())
        total = sum(stats.counts.values()) + len(stats.failures)
        print("cluster: %.0f s of mixed load through nginx on 2 instances, each restarted once: %d requests "
              "(%.0f/s; %d reads, %d test-store mints, %d purchases posted, %d renewals), %d failed, %d unverified; %d transactions recorded, %d lost"
              % (took, total, total / took, stats.counts["read"], stats.counts["other"], stats.counts["purchase"], stats.counts["renewal"],
                 len(stats.failures), stats.unverified, recorded, len(lost)))
        for failure in stats.failures[:10]:
            print("  failed:", failure)
        for user, transaction in lost[:10]:
            print("  lost: %s %s" % (user, transaction))
        if arguments.throughput:
            user = next(iter(customers))
            both, errors_both = wrk_throughput(arguments.port, public, user, 15)
            one, errors_one = wrk_throughput(arguments.port + 1, public, user, 15)
            print("throughput (signed CustomerInfo, wrk 64 connections, 15 s): one instance direct %.0f/s, "
                  "two behind nginx %.0f/s (%.2fx); non-2xx: %d / %d" % (one, both, both / one, errors_one, errors_both))
        if stats.failures or lost or not customers:
            sys.exit(1)
    finally:
        if not arguments.keep:
            cluster("stop", environment=environment)


if __name__ == "__main__":
    main()
