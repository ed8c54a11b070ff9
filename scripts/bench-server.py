#!/usr/bin/env python3
"""Server benchmarks with wrk (Debian package `wrk`) on loopback, reproducing BENCHMARKS.md.

    swift build -c release --product countersign
    scripts/bench-server.py --binary .build/release/countersign [--database postgres://...] [--duration 15]

For one database (SQLite by default) it starts the server, records a pro_monthly purchase for
one user, then measures at 64 connections:
  - signed   GET /v1/subscribers/{id}                         (public key, X-Nonce)
  - unsigned GET /v1/admin/customers/{id}/customer_info        (secret key; the same JSON body)
  - purchase intake: POST /v1/receipts of distinct pre-minted transactions
For each: requests/s and p50/p99 latency from wrk, and the server's CPU time per request
(user + system, from /proc/PID/stat around the run). Prints a Markdown table.
"""
import argparse
import base64
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from countersign_process import app_keys, call, connect, start_server

TICKS = os.sysconf("SC_CLK_TCK")



def cpu_seconds(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS



def signing_totals(port):
    """(sum of seconds, count) of the server's signing-time histogram."""
    connection = connect(port)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    total = float(re.search(r"^countersign_response_signing_seconds_sum (\S+)$", text, re.M).group(1))
    count = int(float(re.search(r"^countersign_response_signing_seconds_count (\S+)$", text, re.M).group(1)))
    return total, count


def parse_wrk(output):
    def latency(label):
        match = re.search(r"^\s*%s%%\s+([\d.]+)(us|ms|s)\s*$" % label, output, re.M)
        value, unit = float(match.group(1)), match.group(2)
        return value * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    requests = int(re.search(r"(\d+) requests in", output).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(r"Socket errors: (.*)", output)
    return {"requests": requests, "rate": rate, "p50": latency("50"), "p99": latency("99"),
            "non2xx": int(non_2xx.group(1)) if non_2xx else 0, "socket_errors": errors.group(1) if errors else ""}


def run_wrk(pid, url, duration, connections, headers=(), script=None):
    command = ["wrk", "-t2", "-c%d" % connections, "-d%ds" % duration, "--latency"]
    for header in headers:
        command += ["-H", header]
    if script:
        command += ["-s", script]
    command.append(url)
    before = cpu_seconds(pid)
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    used = cpu_seconds(pid) - before
    result = parse_wrk(output)
    result["cpu_us"] = used / max(result["requests"], 1) * 1e6
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database")
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--mint", type=int, default=20000, help="distinct transactions for the intake run")
    parser.add_argument("--repeat", type=int, default=3, help="alternating signed/unsigned runs; medians are reported")
    arguments = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="countersign-bench-")
    process, port = start_server(arguments.binary, data_dir, arguments.database)
    try:
        public, secret = app_keys(data_dir)
        connection = connect(port)
        user = "bench-user"
        status, body = call(connection, "POST", "/v1/test_store/purchases", public, {"app_user_id": user, "product_id": "pro_monthly"})
        status, body = call(connection, "POST", "/v1/receipts", public,
                            {"app_user_id": user, "fetch_token": json.loads(body)["signed_transaction"]})
        assert status == 200, body
        _, signed_body = call(connection, "GET", "/v1/subscribers/" + user, public)
        _, unsigned_body = call(connection, "GET", "/v1/admin/customers/%s/customer_info" % user, secret)

        # Distinct transactions for the intake run, one user each.
        lines = []
        for index in range(arguments.mint):
            status, body = call(connection, "POST", "/v1/test_store/purchases", public,
                                {"app_user_id": "intake-%d" % index, "product_id": "lifetime"})
            lines.append(json.dumps({"app_user_id": "intake-%d" % index, "fetch_token": json.loads(body)["signed_transaction"]}))
        connection.close()
        bodies = os.path.join(data_dir, "bodies.txt")
        with open(bodies, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        lua = os.path.join(data_dir, "intake.lua")
        with open(lua, "w") as handle:
            handle.write(INTAKE_LUA.replace("BODIES", bodies).replace("KEY", public))

        base = "http://127.0.0.1:%d" % port
        nonce = "X-Nonce: " + base64.b64encode(os.urandom(12)).decode()
        signed_url = base + "/v1/subscribers/" + user
        unsigned_url = base + "/v1/admin/customers/%s/customer_info" % user
        # Warm up both paths.
        run_wrk(process.pid, signed_url, 3, arguments.connections, ["Authorization: Bearer " + public, nonce])
        run_wrk(process.pid, unsigned_url, 3, arguments.connections, ["Authorization: Bearer " + secret])
        # Signed and unsigned runs alternate, so drift of the machine's speed hits both alike.
        signed_runs, unsigned_runs = [], []
        signing_before = signing_totals(port)
        for _ in range(arguments.repeat):
            signed_runs.append(run_wrk(process.pid, signed_url, arguments.duration, arguments.connections,
                                       ["Authorization: Bearer " + public, nonce]))
            unsigned_runs.append(run_wrk(process.pid, unsigned_url, arguments.duration, arguments.connections,
                                         ["Authorization: Bearer " + secret]))

        def median_run(runs):
            return {key: sorted(run[key] for run in runs)[len(runs) // 2] for key in ("rate", "p50", "p99", "cpu_us", "non2xx", "requests")} | {"socket_errors": ""}

        signing_after = signing_totals(port)
        signing_us = (signing_after[0] - signing_before[0]) / max(signing_after[1] - signing_before[1], 1) * 1e6
        results = [
            ("signed GET /v1/subscribers/{id}", len(signed_body), median_run(signed_runs)),
            ("unsigned GET /v1/admin/customers/{id}/customer_info", len(unsigned_body), median_run(unsigned_runs)),
            ("POST /v1/receipts (distinct transactions)", None,
             run_wrk(process.pid, base + "/v1/receipts", arguments.duration, arguments.connections, script=lua)),
        ]
        differences = sorted(a["cpu_us"] - b["cpu_us"] for a, b in zip(signed_runs, unsigned_runs))
        backend = "PostgreSQL" if arguments.database else "SQLite"
        print("| %s | body bytes | requests/s | p50 ms | p99 ms | server CPU µs/request | non-2xx |" % backend)
        print("|---|---|---|---|---|---|---|")
        for name, size, result in results:
            print("| %s | %s | %.0f | %.2f | %.2f | %.0f | %d |" % (
                name, size if size is not None else "–", result["rate"], result["p50"], result["p99"], result["cpu_us"], result["non2xx"]))
            if result["socket_errors"]:
                print("  socket errors:", result["socket_errors"], file=sys.stderr)
        intake = results[2][2]
        if intake["requests"] > arguments.mint:
            print("note: the intake run posted %d requests but only %d distinct transactions were minted; raise --mint"
                  % (intake["requests"], arguments.mint), file=sys.stderr)
        print("signing overhead, server CPU per request (signed minus unsigned, %d alternating pairs): median %.1f µs, range %.1f to %.1f µs"
              % (len(differences), differences[len(differences) // 2], differences[0], differences[-1]))
        print("signing CPU inside the server (its /metrics histogram, thread CPU time of message, Ed25519, blob, base64): %.1f µs per signed answer"
              % signing_us)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        shutil.rmtree(data_dir, ignore_errors=True)


INTAKE_LUA = r"""
local bodies = {}
for line in io.lines("BODIES") do bodies[#bodies + 1] = line end
local counter = 0
local thread_index = 0
local threads = 0
setup = function(thread)
  thread:set("thread_index", threads)
  threads = threads + 1
end
init = function(args)
  counter = thread_index
end
request = function()
  -- Threads take every second body, offset by their index: no two requests share a transaction.
  local body = bodies[(counter % #bodies) + 1]
  counter = counter + 2
  return wrk.format("POST", "/v1/receipts", {
    ["Authorization"] = "Bearer KEY",
    ["Content-Type"] = "application/json",
  }, body)
end
"""

if __name__ == "__main__":
    main()
