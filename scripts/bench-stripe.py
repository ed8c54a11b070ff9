#!/usr/bin/env python3
"""Stripe webhook intake as a ratio to the floor in one run (issue 52, acceptance 4).

    scripts/bench-stripe.py --binary .build/release/countersign --floor Benchmarks/.build/release/FloorServer \
        [--database postgres://...] [--duration 10] [--repeat 3] [--subscriptions 1000] [--update BENCHMARKS.md]

The server (SQLite in a fresh data directory, or --database) and the floor server run pinned to
core 0, wrk, a stand-in of Stripe's API and PostgreSQL to core 1, as in scripts/bench-server.py, whose
measuring functions this uses. The stand-in (Node.js, its built-in modules only) answers
`GET /v1/subscriptions/sub_bench_N` with an active subscription of web user N, the same object
every time, as fast as Node answers anything: what the server spends reading Stripe is its own
client's work, what Stripe would spend is not counted (the ratio is of the server's CPU alone).
Targets, in rounds (each once per round, the median of --repeat rounds reported):
  - floor: Hummingbird, a fixed 1 KiB body, one Ed25519 signature;
  - a signed `customer.subscription.updated` about one of --subscriptions known subscriptions,
    each event a new id: the signature checked, the subscription read back from the stand-in,
    its state applied and the event's id stored in one transaction;
  - the same events with a forged signature: refused (400) before anything is read.
The events are signed when the run starts (Stripe's five minutes of tolerance cover the run).
Each row: requests/s, p50/p99, server CPU µs per request and its ratio to the floor's. --update
replaces the table between `<!-- bench-server:stripe -->` and `<!-- /bench-server:stripe -->`
(`:stripe-postgresql` with --database).
"""
import argparse
import hashlib
import hmac
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from countersign_process import connect, start_listening, start_server  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_server", os.path.join(HERE, "bench-server.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

SECRET = "whsec_bench"

STAND_IN = r"""
const http = require("http");
const start = Math.floor(Date.now() / 1000) - 86400, end = start + 30 * 86400;
const server = http.createServer((request, response) => {
  const match = /^\/v1\/subscriptions\/(sub_bench_\d+)$/.exec(request.url);
  if (!match) { response.writeHead(404, {"Content-Type": "application/json"}); response.end('{"error":{}}'); return; }
  const id = match[1];
  const body = JSON.stringify({id, object: "subscription", customer: "cus_" + id, status: "active", cancel_at_period_end: false,
    current_period_start: start, current_period_end: end, start_date: start, livemode: false,
    metadata: {app_user_id: "web-" + id.slice(10)},
    items: {object: "list", data: [{id: "si_" + id, price: {id: "price_monthly", product: "prod_pro", unit_amount: 999, currency: "usd"}}]}});
  response.writeHead(200, {"Content-Type": "application/json"});
  response.end(body);
});
server.listen(0, "127.0.0.1", () => console.log("listening on http://127.0.0.1:" + server.address().port));
"""

EVENTS_LUA = r"""
local lines = {}
for line in io.lines("EVENTS") do lines[#lines + 1] = line end
local counter = 0
threads = 0
setup = function(thread)
  thread:set("thread_index", threads)
  threads = threads + 1
end
init = function(args)
  counter = thread_index
end
request = function()
  -- Threads take every second event, offset by their index: no event is sent twice.
  local line = lines[(counter % #lines) + 1]
  counter = counter + 2
  local tab = line:find("\t", 1, true)
  return wrk.format("POST", "PATH", {["Stripe-Signature"] = line:sub(1, tab - 1), ["Content-Type"] = "application/json"},
    line:sub(tab + 1))
end
"""


def signed_events(count, subscriptions, secret, prefix):
    """`count` events about the subscriptions in turn, each a new id, as `signature TAB body` lines."""
    stamp = int(time.time())
    lines = []
    for index in range(count):
        subscription = "sub_bench_%d" % (index % subscriptions)
        body = json.dumps({"id": "evt_%s_%d" % (prefix, index), "object": "event", "type": "customer.subscription.updated",
                           "created": stamp, "livemode": False,
                           "data": {"object": {"id": subscription, "object": "subscription"}}}, separators=(",", ":"))
        mac = hmac.new(secret.encode(), b"%d." % stamp + body.encode(), hashlib.sha256).hexdigest()
        lines.append("t=%d,v1=%s\t%s" % (stamp, mac, body))
    return lines


def configure(binary, data_dir, database, stand_in_port):
    server, _ = start_server(binary, data_dir, database)
    server.terminate()
    server.wait()
    path = os.path.join(data_dir, "countersign.json")
    configuration = json.load(open(path))
    configuration["apps"][0]["stripe"] = {
        "secretKey": "sk_test_bench", "webhookSecrets": [SECRET], "apiBaseURL": "http://127.0.0.1:%d" % stand_in_port,
        "products": {"price_monthly": "pro_monthly"}}
    json.dump(configuration, open(path, "w"), indent=2)
    return configuration["apps"][0]["id"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--floor", required=True)
    parser.add_argument("--database")
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--subscriptions", type=int, default=1000)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--update")
    arguments = parser.parse_args()
    work = tempfile.mkdtemp(prefix="countersign-bench-stripe-")
    data_dir = os.path.join(work, "data")
    os.makedirs(data_dir)
    script = os.path.join(work, "stand-in.js")
    open(script, "w").write(STAND_IN)
    stand_in, stand_in_port = start_listening(["node", script], cpus=bench.WRK_CPU)
    if arguments.database:
        bench.empty_database(arguments.database)
    # PostgreSQL on wrk's core, as bench-server.py puts it: the server's core is its own.
    pinned = bench.pin_postgres(bench.WRK_CPU) if arguments.database else {}
    server = floor = None
    try:
        app_id = configure(arguments.binary, data_dir, arguments.database, stand_in_port)
        server, port = start_server(arguments.binary, data_dir, arguments.database, cpus=bench.SERVER_CPU)
        floor, floor_port = start_listening(bench.floor_command(arguments.floor), cpus=bench.SERVER_CPU)
        path = "/v1/notifications/stripe/" + app_id
        # Every subscription once, so the rounds measure events about subscriptions the server knows.
        connection = connect(port)
        for line in signed_events(arguments.subscriptions, arguments.subscriptions, SECRET, "setup"):
            signature, body = line.split("\t", 1)
            connection.request("POST", path, body=body, headers={"Stripe-Signature": signature, "Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200 and b'"applied"' in response.read(), "the setup event was not applied"
        connection.close()
        scripts = {}
        for name, secret in (("signed", SECRET), ("forged", "whsec_forged")):
            events = os.path.join(work, name + ".tsv")
            open(events, "w").write("\n".join(signed_events(arguments.events, arguments.subscriptions, secret, name)) + "\n")
            scripts[name] = os.path.join(work, name + ".lua")
            open(scripts[name], "w").write(EVENTS_LUA.replace("EVENTS", events).replace("PATH", path))
        if arguments.database:
            bench.settle_postgres(arguments.database)
        base = "http://127.0.0.1:%d" % port
        targets = [
            ("floor: Hummingbird, fixed 1 KiB body + one Ed25519 signature", floor.pid, "http://127.0.0.1:%d/" % floor_port, None),
            ("signed customer.subscription.updated, read back from Stripe's API and applied", server.pid, base + path, scripts["signed"]),
            ("the same events with a forged signature (refused, 400)", server.pid, base + path, scripts["forged"]),
        ]
        runs = {name: [] for name, *_ in targets}
        for _ in range(arguments.repeat):
            for name, pid, url, lua in targets:
                runs[name].append(bench.run_wrk(pid, url, arguments.duration, arguments.connections, (), lua))
    finally:
        for process in (server, floor, stand_in):
            if process is not None:
                process.terminate()
                process.wait()
        bench.restore_postgres(pinned)
    floor_runs = runs[targets[0][0]]
    database = " PostgreSQL CPU µs/request |" if arguments.database else ""
    lines = ["| %s, %d connections | requests/s | p50 ms | p99 ms | server CPU µs/request | ratio to floor |%s non-2xx |"
             % ("PostgreSQL" if arguments.database else "SQLite", arguments.connections, database),
             "|---|---|---|---|---|---|%s---|" % ("---|" if arguments.database else "")]
    for name, *_ in targets:
        ratio = bench.median([run["cpu_us"] / floor["cpu_us"] for run, floor in zip(runs[name], floor_runs)])
        result = bench.median_run(runs[name])
        lines.append("| %s | %.0f | %.2f | %.2f | %.1f | %.2fx |%s %d |" % (
            name, result["rate"], result["p50"], result["p99"], result["cpu_us"], ratio,
            " %.0f |" % result["database_cpu_us"] if arguments.database else "", result["non2xx"]))
    lines.append("")
    lines.append("Medians of %d rounds of %d s over %d subscriptions; a ratio is the median of the rounds' ratios to the floor, "
                 "measured in the same run." % (arguments.repeat, arguments.duration, arguments.subscriptions))
    table = "\n".join(lines)
    print(table)
    if arguments.update:
        bench.replace_section(arguments.update, "stripe-postgresql" if arguments.database else "stripe", table)


if __name__ == "__main__":
    main()
