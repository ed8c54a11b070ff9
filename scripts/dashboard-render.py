#!/usr/bin/env python3
"""How long the dashboard's pages take to render, on a database filled by generate-customers.py.

    scripts/dashboard-render.py --binary .build/release/countersign --data-dir DIR [--database postgres://...]
        [--rounds 30] [--update BENCHMARKS.md --section dashboard-sqlite-1m]

Starts `countersign serve` on DIR with the dashboard's defaults (the first overview after the
start, then the overview as served once counted), then with the overview's cache off
(--dashboard-cache-seconds 0: every overview counts while it waits), signs in with the app's
secret key, and requests each page --rounds times over one keep-alive connection, one at a
time: the time to the last byte of the answer, as a browser would wait for it. Reports the
median and the 95th percentile per page, and the database's size.
"""
import argparse
import http.client
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from countersign_process import app_keys, start_listening  # noqa: E402


def sign_in(port, secret):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request("GET", "/dashboard/login")
    response = connection.getresponse()
    page = response.read().decode()
    cookie = response.getheader("Set-Cookie").split(";")[0]
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    body = urllib.parse.urlencode({"csrf_token": token, "secret_key": secret})
    connection.request("POST", "/dashboard/login", body=body,
                       headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie})
    response = connection.getresponse()
    response.read()
    if response.status != 303:
        sys.exit("error: sign-in answered %d" % response.status)
    session = [c for c in response.msg.get_all("Set-Cookie") if c.startswith("countersign_session=")][0].split(";")[0]
    return connection, session


def timed(connection, session, path):
    """(milliseconds to the last byte, body)."""
    started = time.perf_counter()
    connection.request("GET", path, headers={"Cookie": session})
    response = connection.getresponse()
    body = response.read()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status != 200:
        sys.exit("error: %s answered %d: %s" % (path, response.status, body[:200]))
    return elapsed, body


def measure(arguments, cache_seconds, pages):
    command = [arguments.binary, "serve", "--data-dir", arguments.data_dir, "--port", "0", "--log-level", "warning",
               "--dashboard-cache-seconds", str(cache_seconds)]
    if arguments.database:
        command += ["--database", arguments.database]
    process, port = start_listening(command)
    try:
        _, secret = app_keys(arguments.data_dir)
        connection, session = sign_in(port, secret)
        results = {}
        if cache_seconds > 0:
            # The first view after the start waits a moment for the counts, then goes on without
            # them; once counted, views are answered from what was counted.
            first, body = timed(connection, session, "/dashboard")
            results["overview, the first view after a start"] = [first]
            while b'id="counting"' in body:
                time.sleep(0.2)
                _, body = timed(connection, session, "/dashboard")
        for name, path in pages:
            results[name] = [timed(connection, session, path)[0] for _ in range(arguments.rounds)]
        return results
    finally:
        process.terminate()
        process.wait(timeout=60)


def database_size(arguments):
    if arguments.database:
        out = subprocess.run(["psql", "-tA", arguments.database, "-c", "SELECT pg_database_size(current_database())"],
                             capture_output=True, text=True, check=True).stdout.strip()
        return int(out)
    path = os.path.join(arguments.data_dir, "countersign.sqlite")
    return sum(os.path.getsize(path + suffix) for suffix in ("", "-wal", "-shm") if os.path.exists(path + suffix))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--database")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--user", default="bench-user", help="a customer with a long history")
    parser.add_argument("--transaction", default="2000000000035", help="a transaction id to search for")
    parser.add_argument("--update", help="a Markdown file whose marked section gets the table")
    parser.add_argument("--section", default="dashboard")
    arguments = parser.parse_args()

    pages = [
        ("overview, counting on every view (--dashboard-cache-seconds 0)", "/dashboard"),
        ("customer search by app user id prefix", "/dashboard/customers?q=user-00001"),
        ("customer search by transaction id", "/dashboard/customers?q=" + arguments.transaction),
        ("customer page (%s)" % arguments.user, "/dashboard/customers/" + urllib.parse.quote(arguments.user, safe="")),
        ("tamper telemetry", "/dashboard/failures"),
        ("keys", "/dashboard/keys"),
    ]
    uncached = measure(arguments, 0, pages)
    cached = measure(arguments, 60, [("overview as served (counts at most 60 s old, refreshed in the background)", "/dashboard")])
    kind = "PostgreSQL" if arguments.database else "SQLite"
    size = database_size(arguments)
    lines = ["| %s, %.1f GB | views | median ms | p95 ms |" % (kind, size / 1e9), "|---|---:|---:|---:|"]
    for name, samples in list(cached.items()) + list(uncached.items()):
        ordered = sorted(samples)
        p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
        lines.append("| %s | %d | %.1f | %.1f |" % (name, len(samples), statistics.median(samples), p95))
    table = "\n".join(lines)
    print(table)
    if arguments.update:
        text = open(arguments.update).read()
        start, end = "<!-- %s -->" % arguments.section, "<!-- /%s -->" % arguments.section
        block = "%s\n%s\n\n%d requests per page, one at a time over one connection, time to the last byte.\n%s" % (
            start, table, arguments.rounds, end)
        if start in text:
            text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
        else:
            text += "\n" + block + "\n"
        open(arguments.update, "w").write(text)


if __name__ == "__main__":
    main()
