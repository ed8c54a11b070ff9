#!/usr/bin/env python3
"""The revenue charts' render time as a ratio to the customer page, in one run (issue 51).

Serves an existing data directory (filled by scripts/generate-customers.py) with the server pinned
to one core and waits for it to bring the charts' daily sums up to date with every record (the
marks the generator's writes left; the rate is printed), signs in to the dashboard, then times, alternating so the machine's drift touches
both alike: the customer page of `bench-user` (`/dashboard/customers/bench-user`), the charts
overview (`/dashboard/charts`, every chart from one read) and each chart's page over the last
12 months by month. Prints a Markdown table of medians and their ratio to the customer page's.

    python3 scripts/bench-charts.py --binary .build/release/countersign --data-dir DIR [--database URL] [--rounds 15]
"""
import argparse
import http.client
import importlib.util
import os
import sqlite3
import statistics
import subprocess
import time

from countersign_process import app_keys, start_server

CHARTS = ["revenue", "mrr", "active_subscriptions", "active_trials", "new_customers", "churn", "refunds", "trial_conversion"]


def marks_left(arguments):
    """How many marks the server has still to take (chart_marks' rows)."""
    if arguments.database:
        done = subprocess.run(["psql", "-Atq", arguments.database, "-c", "SELECT COUNT(*) FROM chart_marks"],
                              capture_output=True, text=True, check=True)
        return int(done.stdout.strip())
    path = os.path.join(arguments.data_dir, "countersign.sqlite")
    with sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=60) as connection:
        return connection.execute("SELECT COUNT(*) FROM chart_marks").fetchone()[0]


def wait_for_sums(arguments):
    """Waits while the server's ChartTotalsService takes the marks; prints the rate."""
    started, first = time.perf_counter(), marks_left(arguments)
    left = first
    while left > 0:
        time.sleep(5)
        left = marks_left(arguments)
        print("  %d marks left after %.0f s" % (left, time.perf_counter() - started), flush=True)
    elapsed = time.perf_counter() - started
    if first:
        print("caught up %d marks in %.0f s (%.0f a second, server on one core)" % (first, elapsed, first / elapsed))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--database")
    parser.add_argument("--rounds", type=int, default=15)
    arguments = parser.parse_args()
    spec = importlib.util.spec_from_file_location("chart_check", os.path.join(os.path.dirname(os.path.abspath(__file__)), "chart-check.py"))
    chart_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chart_check)

    server, port = start_server(arguments.binary, arguments.data_dir, arguments.database, cpus="0")
    try:
        wait_for_sums(arguments)
        _, secret = app_keys(arguments.data_dir)
        cookie = chart_check.dashboard_session(port, secret)
        # A chart over a million customers' purchases takes longer than the scripts' usual 30 s.
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
        targets = [("customer page (`/dashboard/customers/bench-user`)", "/dashboard/customers/bench-user"),
                   ("charts overview, 12 months by month", "/dashboard/charts?resolution=month")]
        targets += [("%s, 12 months by month" % chart, "/dashboard/charts/%s?resolution=month" % chart) for chart in CHARTS]
        times = {path: [] for _, path in targets}
        for round_index in range(arguments.rounds + 1):
            for _, path in targets:
                started = time.perf_counter()
                connection.request("GET", path, headers={"Cookie": cookie})
                response = connection.getresponse()
                response.read()
                elapsed = time.perf_counter() - started
                assert response.status == 200, (path, response.status)
                if round_index > 0:  # the first round warms the caches
                    times[path].append(elapsed)
        connection.close()
    finally:
        server.terminate()
        server.wait(timeout=900)
    base = statistics.median(times[targets[0][1]])
    print("| page | median ms | ratio to the customer page |")
    print("|---|---:|---:|")
    for label, path in targets:
        median = statistics.median(times[path])
        print("| %s | %.1f | %.1f× |" % (label, median * 1000, median / base))


if __name__ == "__main__":
    main()
