#!/usr/bin/env python3
"""Import throughput as a ratio to purchase intake, both measured in one run (its last results: docs/benchmark-history.md, "Importing from RevenueCat").

    swift build -c release --product countersign
    scripts/bench-import.py --binary .build/release/countersign [--database postgres://...] [--transactions 100000] \
        [--import-connections N]

On one database (SQLite by default; --database is emptied first) and one data directory:
  1. intake: `countersign serve` pinned to core 0, wrk on core 1 posting distinct pre-minted
     test-store purchases to POST /v1/receipts for --duration seconds: purchases recorded a second;
  2. import: the server stopped, `countersign import revenuecat` pinned to core 0 imports an
     export written by generate-revenuecat-export.py (--transactions rows) into a second app of
     the same configuration: rows taken a second (wall time of the command, refused rows
     excluded), and the same for a second run of the file (nothing to change).
The ratio is import rows/s over intake purchases/s. PostgreSQL shares wrk's core, as in
bench-server.py. Prints a Markdown table.
"""
import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote

from countersign_process import app_keys, call, connect, start_server

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_server", os.path.join(HERE, "bench-server.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def add_import_app(data_dir):
    """A second app, `imported`: the products and environments the generator's rows are for."""
    path = os.path.join(data_dir, "countersign.json")
    configuration = json.load(open(path))
    app = json.loads(json.dumps(configuration["apps"][0]))
    app["id"] = "imported"
    app["bundleId"] = "com.example.imported"
    app["environments"] = ["Production", "Sandbox"]
    app["appAppleId"] = 1234567890
    app["publicApiKeys"] = [key + "i" for key in app["publicApiKeys"]]
    app["secretApiKeys"] = [key + "i" for key in app["secretApiKeys"]]
    app["products"] = [
        {"id": "pro_monthly", "type": "autoRenewable", "entitlements": ["pro"]},
        {"id": "pro_yearly", "type": "autoRenewable", "entitlements": ["pro"]},
        {"id": "lifetime", "type": "nonConsumable", "entitlements": ["pro", "premium"]},
        {"id": "coins_100", "type": "consumable", "entitlements": []},
    ]
    app["offerings"] = []
    app.pop("inAppPurchaseKey", None)
    configuration["apps"].append(app)
    json.dump(configuration, open(path, "w"), indent=2)


def timed_import(binary, data_dir, database, export, connections):
    command = ["taskset", "-c", bench.SERVER_CPU, binary, "import", "revenuecat", "--data-dir", data_dir, "--app", "imported",
               "--transactions", export]
    if database:
        command += ["--database", database]
    if connections:
        command += ["--database-connections", str(connections)]
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if result.returncode not in (0, 3):
        sys.exit("error: the import failed:\n" + result.stdout + result.stderr)
    refused = [int(line.split(":")[0][5:]) for line in result.stdout.splitlines() if ": refused: " in line]
    return elapsed, refused, result.stdout.splitlines()[-8:]


def verify(binary, data_dir, database, expected):
    """Every expected customer's entitlements through GET /v1/subscribers/{id} (the imported
    app's secret key), judged at the answer's request date by the generator's grant windows."""
    process, port = start_server(binary, data_dir, database)
    try:
        secret = json.load(open(os.path.join(data_dir, "countersign.json")))["apps"][1]["secretApiKeys"][0]
        connection = connect(port)
        wrong = []
        for user, window in expected["windows"].items():
            status, body = call(connection, "GET", "/v1/subscribers/" + quote(user, safe=""), secret)
            if status != 200:
                wrong.append("%s: status %d" % (user, status))
                continue
            answer = json.loads(body)
            at = answer["request_date_ms"]

            def active(expires):
                if expires is None:
                    return True
                moment = datetime.datetime.fromisoformat(expires.replace("Z", "+00:00"))
                return moment.timestamp() * 1000 > at

            found = sorted(name for name, entitlement in answer["subscriber"]["entitlements"].items()
                           if active(entitlement.get("expires_date")))
            wanted = sorted(name for name, end in window.items() if end is None or end > at)
            if found != wanted:
                wrong.append("%s: %s where %s was expected" % (user, found, wanted))
        connection.close()
        return wrong
    finally:
        process.terminate()
        process.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database")
    parser.add_argument("--transactions", type=int, default=100_000)
    parser.add_argument("--customers", type=int, default=30_000)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--mint", type=int, default=30_000)
    parser.add_argument("--import-connections", type=int,
                        help="the import's --database-connections (its customers at once); default: the command's own")
    parser.add_argument("--verify", action="store_true",
                        help="after the runs, check every customer's entitlements and the refused lines against the generator's")
    arguments = parser.parse_args()

    work = tempfile.mkdtemp(prefix="countersign-bench-import-")
    export = os.path.join(work, "export.csv.gz")
    subprocess.run([sys.executable, os.path.join(HERE, "generate-revenuecat-export.py"), "--out", export, "--expected",
                    os.path.join(work, "expected.json"), "--transactions", str(arguments.transactions), "--customers",
                    str(arguments.customers), "--now-ms", str(int(time.time() * 1000))], check=True)
    expected = json.load(open(os.path.join(work, "expected.json")))
    rows = expected["rows"]
    data_dir = os.path.join(work, "data")
    if arguments.database:
        bench.empty_database(arguments.database)
    pinned = bench.pin_postgres(bench.WRK_CPU) if arguments.database else {}
    try:
        process, port = start_server(arguments.binary, data_dir, arguments.database, cpus=bench.SERVER_CPU)
        public, _ = app_keys(data_dir)
        connection = connect(port)
        lines = bench.mint_intake(connection, public, arguments.mint, "intake-%d" % int(time.time()))
        connection.close()
        bodies = os.path.join(work, "bodies.txt")
        with open(bodies, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        lua = os.path.join(work, "intake.lua")
        with open(lua, "w") as handle:
            handle.write(bench.INTAKE_LUA.replace("BODIES", bodies).replace("KEY", public))
        intake = bench.run_wrk(process.pid, "http://127.0.0.1:%d/v1/receipts" % port, arguments.duration, arguments.connections, script=lua)
        process.terminate()
        process.wait()
        add_import_app(data_dir)
        first, refused, summary = timed_import(arguments.binary, data_dir, arguments.database, export, arguments.import_connections)
        second, _, _ = timed_import(arguments.binary, data_dir, arguments.database, export, arguments.import_connections)
    finally:
        bench.restore_postgres(pinned)
    if arguments.verify:
        wrong = verify(arguments.binary, data_dir, arguments.database, expected)
        print("verified %d customers: %d wrong %s" % (len(expected["windows"]), len(wrong), wrong[:5]), file=sys.stderr)
        print("refused lines as expected: %s (%d)" % (refused == expected["refused_lines"], len(refused)), file=sys.stderr)
        if wrong or refused != expected["refused_lines"]:
            sys.exit("error: the import did not give what the generator expects")
    refused = len(refused)
    taken = rows - refused
    print("\n".join(summary), file=sys.stderr)
    print("| %s | per second | ratio to intake |" % ("PostgreSQL" if arguments.database else "SQLite"))
    print("|---|---:|---:|")
    print("| POST /v1/receipts intake (distinct purchases, wrk, %d connections) | %.0f | 1.00 |" % (arguments.connections, intake["rate"]))
    print("| `import revenuecat`, first run (%d rows taken of %d) | %.0f | %.2f |" % (taken, rows, taken / first, taken / first / intake["rate"]))
    print("| `import revenuecat`, second run of the same file (nothing changes) | %.0f | %.2f |" % (taken / second, taken / second / intake["rate"]))
    if intake["requests"] > arguments.mint:
        print("\nNote: intake posted %d requests for %d minted transactions (raise --mint)." % (intake["requests"], arguments.mint))


if __name__ == "__main__":
    main()
