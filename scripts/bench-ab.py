#!/usr/bin/env python3
"""A/B of signed CustomerInfo reads between server binaries, in one run, for the comparisons in
BENCHMARKS.md ("same hour, A/B").

    scripts/bench-ab.py --floor Benchmarks/.build/release/FloorServer /tmp/countersign-before .build/release/countersign \
        [--database postgres://...] [--rounds 3] [--duration 8]

One data directory (and with --database one PostgreSQL database, emptied first: the test store's
keys are the data directory's) holds two customers made through the first binary: `ab-one` with
one `pro_monthly` purchase and `ab-long` with that purchase and 36 renewals (37 rows, as
`bench-user` of the 1M database). Then in rounds, the floor and each binary in turn are started
pinned to core 0 and measured with wrk on core 1 (64 connections), a short warm-up first, so the
machine's drift hits every binary alike; the medians per binary and customer are printed with
the server's CPU per read and its ratio to the floor's. With --database PostgreSQL is pinned to
wrk's core for the run, as bench-server.py does. A binary may be a wrapper script that `exec`s
the server (to A/B settings through the environment): the measured process is the one started.
"""
import argparse
import base64
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from countersign_process import app_keys, call, connect, start_listening, start_server  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_server", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench-server.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

CUSTOMERS = (("ab-one", 0), ("ab-long", 36))


def make_customers(binary, data_dir, database):
    process, port = start_server(binary, data_dir, database, cpus=bench.SERVER_CPU)
    try:
        public, secret = app_keys(data_dir)
        connection = connect(port)
        for user, renewals in CUSTOMERS:
            status, body = call(connection, "POST", "/v1/test_store/purchases", public, {"app_user_id": user, "product_id": "pro_monthly"})
            assert status == 200, body
            purchase = json.loads(body)
            status, body = call(connection, "POST", "/v1/receipts", public, {"app_user_id": user, "fetch_token": purchase["signed_transaction"]})
            assert status == 200, body
            for _ in range(renewals):
                status, body = call(connection, "POST", "/v1/admin/test_store/renew", secret,
                                    {"original_transaction_id": purchase["transaction_id"]})  # a first purchase starts its chain
                assert status == 200, body
        connection.close()
        return public
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--floor", required=True, help="the FloorServer executable of Benchmarks/")
    parser.add_argument("--database", help="postgres:// URL of a database to empty and use")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--connections", type=int, default=64)
    arguments = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="countersign-ab-")
    if arguments.database:
        bench.empty_database(arguments.database)
    pinned = bench.pin_postgres(bench.WRK_CPU) if arguments.database else {}
    try:
        public = make_customers(arguments.binaries[0], data_dir, arguments.database)
        nonce = "X-Nonce: " + base64.b64encode(os.urandom(12)).decode()
        headers = ["Authorization: Bearer " + public, nonce]
        floor_runs, runs = [], {}
        for _ in range(arguments.rounds):
            floor, floor_port = start_listening(bench.floor_command(arguments.floor), cpus=bench.SERVER_CPU)
            floor_runs.append(bench.run_wrk(floor.pid, "http://127.0.0.1:%d/" % floor_port, arguments.duration, arguments.connections))
            floor.send_signal(signal.SIGTERM)
            floor.wait(timeout=30)
            for index, binary in enumerate(arguments.binaries):
                process, port = start_server(binary, data_dir, arguments.database, cpus=bench.SERVER_CPU)
                try:
                    for user, _ in CUSTOMERS:
                        url = "http://127.0.0.1:%d/v1/subscribers/%s" % (port, user)
                        bench.run_wrk(process.pid, url, 2, arguments.connections, headers)  # warm up
                        runs.setdefault((index, user), []).append(
                            bench.run_wrk(process.pid, url, arguments.duration, arguments.connections, headers))
                finally:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=30)
        floor_cpu = statistics.median(run["cpu_us"] for run in floor_runs)
        print("floor: %.0f µs of CPU a request (median of %d)" % (floor_cpu, arguments.rounds))
        print("| binary | customer | requests/s | p99 ms | server CPU µs/read | ratio to floor | PostgreSQL CPU µs/read | non-2xx |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for (index, user), measured in sorted(runs.items()):
            median = bench.median_run(measured)
            print("| %d: %s | %s | %.0f | %.2f | %.0f | %.2f× | %s | %d |" % (
                index, arguments.binaries[index], user, median["rate"], median["p99"], median["cpu_us"], median["cpu_us"] / floor_cpu,
                "%.0f" % median["database_cpu_us"] if arguments.database else "–", median["non2xx"]))
    finally:
        bench.restore_postgres(pinned)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
