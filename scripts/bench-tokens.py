#!/usr/bin/env python3
"""Entitlement token issuance and the verification policy header, as ratios to the signing floor
in one run.

    scripts/bench-tokens.py --binary .build/release/countersign --floor Benchmarks/.build/release/FloorServer \
        [--database postgres://...] [--duration 10] [--repeat 3] [--update BENCHMARKS.md]

The server (SQLite in a fresh data directory, or --database) and the floor server run pinned to
core 0, wrk to core 1, as in scripts/bench-server.py, whose measuring functions this uses. Targets,
each against a customer with an active subscription:
  - floor: Hummingbird, a fixed 1 KiB body, one Ed25519 signature;
  - signed CustomerInfo (GET /v1/subscribers/{id}), without and with X-Accept-Verification-Policy
    (the app states a 10 % enforced rollout): what the policy header costs;
  - POST /v1/subscribers/{id}/entitlement_token: a read of the customer, one token signed (an
    Ed25519 signature over its header and claims) and the signed answer around it (a second).
Each row: requests/s, p50/p99, server CPU µs per request and its ratio to the floor's (the median
of the rounds' ratios). --update replaces the table between `<!-- bench-server:tokens -->` and
`<!-- /bench-server:tokens -->` in FILE (`:tokens-postgresql` with --database).
"""
import argparse
import base64
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from countersign_process import app_keys, call, connect, start_listening, start_server  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_server", os.path.join(HERE, "bench-server.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

TOKEN_LUA = r"""
request = function()
  return wrk.format("POST", "PATH", {["Authorization"] = "Bearer KEY", ["X-Nonce"] = "NONCE",
    ["Content-Type"] = "application/json"}, '{"audience":"api.example.com"}')
end
"""


def configure(binary, data_dir, database):
    """The demo configuration with tokens and a policy (a first start writes it)."""
    server, _ = start_server(binary, data_dir, database)
    server.terminate()
    server.wait()
    path = os.path.join(data_dir, "countersign.json")
    configuration = json.load(open(path))
    configuration["apps"][0]["entitlementTokens"] = {"audiences": ["api.example.com"]}
    configuration["apps"][0]["verificationPolicy"] = {"mode": "enforced", "rolloutPercent": 10}
    json.dump(configuration, open(path, "w"), indent=2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--floor", required=True)
    parser.add_argument("--database")
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--update")
    arguments = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="countersign-bench-tokens-")
    if arguments.database:
        bench.empty_database(arguments.database)
    configure(arguments.binary, data_dir, arguments.database)
    server, port = start_server(arguments.binary, data_dir, arguments.database, cpus=bench.SERVER_CPU)
    floor, floor_port = start_listening(bench.floor_command(arguments.floor), cpus=bench.SERVER_CPU)
    try:
        public, _ = app_keys(data_dir)
        user = "bench-user"
        connection = connect(port)
        status, body = call(connection, "POST", "/v1/test_store/purchases", public, {"app_user_id": user, "product_id": "pro_monthly"})
        status, body = call(connection, "POST", "/v1/receipts", public,
                            {"app_user_id": user, "fetch_token": json.loads(body)["signed_transaction"]})
        assert status == 200, body
        status, token_body = call(connection, "POST", "/v1/subscribers/%s/entitlement_token" % user, public,
                                  {"audience": "api.example.com"})
        assert status == 200, token_body
        _, info_body = call(connection, "GET", "/v1/subscribers/" + user, public)
        connection.close()
        nonce = base64.b64encode(os.urandom(12)).decode()
        work = tempfile.mkdtemp(prefix="countersign-bench-tokens-work-")
        script = os.path.join(work, "token.lua")
        with open(script, "w") as handle:
            handle.write(TOKEN_LUA.replace("PATH", "/v1/subscribers/%s/entitlement_token" % user).replace("KEY", public)
                         .replace("NONCE", nonce))
        base = "http://127.0.0.1:%d" % port
        auth = ["Authorization: Bearer " + public, "X-Nonce: " + nonce]
        targets = [
            ("floor: Hummingbird, fixed 1 KiB body + one Ed25519 signature", 1024, floor.pid, "http://127.0.0.1:%d/" % floor_port, [], None),
            ("signed GET /v1/subscribers/{id} (CustomerInfo)", len(info_body), server.pid, base + "/v1/subscribers/" + user, auth, None),
            ("the same, asking for the verification policy", len(info_body), server.pid, base + "/v1/subscribers/" + user,
             auth + ["X-Accept-Verification-Policy: 1"], None),
            ("POST /v1/subscribers/{id}/entitlement_token", len(token_body), server.pid, base + "/v1/subscribers/x", [], script),
        ]
        for _, _, pid, url, headers, lua in targets:  # warm up
            bench.run_wrk(pid, url, 3, arguments.connections, headers, lua)
        runs = {name: [] for name, *_ in targets}
        for _ in range(arguments.repeat):
            for name, _, pid, url, headers, lua in targets:
                runs[name].append(bench.run_wrk(pid, url, arguments.duration, arguments.connections, headers, lua))
    finally:
        for process in (server, floor):
            process.terminate()
            process.wait()
    floor_runs = runs[targets[0][0]]
    lines = ["| %s, %d connections | body bytes | requests/s | p50 ms | p99 ms | server CPU µs/request | ratio to floor | non-2xx |"
             % ("PostgreSQL" if arguments.database else "SQLite", arguments.connections),
             "|---|---|---|---|---|---|---|---|"]
    for name, size, *_ in targets:
        ratio = bench.median([run["cpu_us"] / floor["cpu_us"] for run, floor in zip(runs[name], floor_runs)])
        result = bench.median_run(runs[name])
        lines.append("| %s | %d | %.0f | %.2f | %.2f | %.1f | %.2fx | %d |" % (
            name, size, result["rate"], result["p50"], result["p99"], result["cpu_us"], ratio, result["non2xx"]))
    lines.append("")
    lines.append("Medians of %d rounds of %d s; a ratio is the median of the rounds' ratios to the floor, measured in the same run."
                 % (arguments.repeat, arguments.duration))
    table = "\n".join(lines)
    print(table)
    if arguments.update:
        bench.replace_section(arguments.update, "tokens-postgresql" if arguments.database else "tokens", table)


if __name__ == "__main__":
    main()
