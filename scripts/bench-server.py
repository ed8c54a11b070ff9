#!/usr/bin/env python3
"""Server benchmarks with wrk (Debian package `wrk`) on loopback, reproducing BENCHMARKS.md.

    swift build -c release --product countersign
    swift build -c release --package-path Benchmarks --product FloorServer
    scripts/bench-server.py --binary .build/release/countersign --floor Benchmarks/.build/release/FloorServer \
        [--baseline OLD-BINARY] [--database postgres://...] [--data-dir DIR] [--duration 10] [--repeat 3] [--update BENCHMARKS.md]

The server under test and the floor server are pinned to core 0 (taskset), wrk to core 1, so
the server's CPU time per request is measured on one core while the load generator has the
other; both run one event loop there (`serve` counts its allowed cores itself, the floor is told). For one database (SQLite by default; --data-dir reuses a filled one, see
generate-customers.py; without it, --database is emptied first: dropped and created again) it
starts the server, records a pro_monthly purchase for `bench-user`,
then measures at 64 connections, in rounds (every target once per round, --repeat rounds, the
median of each reported), so the machine's drift hits all targets alike:
  - floor: the FloorServer of Benchmarks/ (Hummingbird, a fixed 1 KiB body, one Ed25519
    signature per answer), the least a signed answer costs on this stack;
  - signed GET /v1/health (no database);
  - signed GET /v1/subscribers/{id} (public key, X-Nonce): CustomerInfo;
  - unsigned GET /v1/admin/customers/{id}/customer_info (secret key; the same JSON body);
  - app launches: signed GET /v1/subscribers/{id}, each with the ETag the device cached at
    its last launch (X-ETag), over a mix of devices: 70% returning customers who never bought,
    20% returning buyers, 10% first launches (an id never seen); the share of signed 304s is
    reported under the table (a returning customer whose answer is unchanged gets one);
  - first launches: signed GET /v1/subscribers/{id} of a fresh install's anonymous id, made
    up anew by each request, without an ETag (the customer recorded at first sight);
then once: purchase intake, POST /v1/receipts of distinct pre-minted transactions.
--fill N measures flatness in customers instead (SQLite or PostgreSQL): the floor and signed
CustomerInfo of `bench-user` in rounds with that one customer, then N customers, each with
its own purchase, posted through POST /v1/receipts (a pro_monthly subscription each, the App
Store's commonest purchase), a minute's wait (the server's periodic work, the expiry check
included, runs meanwhile as in production), and the same rounds again; reported: the cost
(server CPU per request) and the p99 at N customers as ratios to the one-customer run.
--baseline BINARY runs a second build beside it (the one before a change), on the same data
directory and database, each of its targets measured in the same rounds right beside the same
target of the build under test (which of the two goes first alternates by round): rows labelled
before/after, so a change is judged by two ratios to one floor, taken seconds apart.
For each: requests/s and p50/p99 latency from wrk, and the server process's CPU time per
request (user + system from /proc/PID/stat around the run, divided by the requests done) with
its ratio to the floor's; with --database also the CPU time of all PostgreSQL processes per request
(PostgreSQL is pinned to wrk's core for the run and given back its cores after, so the server's
core is its own, as with a database on another machine; --postgres-anywhere leaves it unpinned;
before the rounds, after the setup's writes, PostgreSQL is settled: a CHECKPOINT, then no
autovacuum worker running). Prints a Markdown table; --update FILE replaces the table between
`<!-- bench-server:sqlite -->` (or `:postgresql`, `:sqlite-1m`, ... with --label) and
`<!-- /bench-server:... -->` in FILE.
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
from urllib.parse import urlparse

from countersign_process import app_keys, call, connect, start_listening, start_server

SERVER_CPU = "0"
WRK_CPU = "1"

TICKS = os.sysconf("SC_CLK_TCK")



def cpu_seconds(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS



def postgres_cpu_seconds():
    """User + system CPU seconds of every running PostgreSQL process (its backends, WAL writer, ...)."""
    total = 0
    for pid in postgres_pids():
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue  # gone meanwhile
    return total


def postgres_pids():
    """The ids of every running PostgreSQL process."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if open("/proc/%s/comm" % entry).read().strip() == "postgres":
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def pin_postgres(cpus):
    """Pins every PostgreSQL process (the postmaster too, so new backends inherit it) to `cpus`;
    returns their affinities before, for restore_postgres."""
    before = {}
    for pid in postgres_pids():
        try:
            before[pid] = os.sched_getaffinity(pid)
            os.sched_setaffinity(pid, {int(cpu) for cpu in cpus.split(",")})
        except OSError:
            continue  # gone meanwhile, or not ours to pin
    return before


def empty_database(url):
    """Drops and creates the database of `url` (as the postgres superuser, owned by the URL's user)."""
    name = urlparse(url).path.lstrip("/")
    owner = urlparse(url).username
    subprocess.run(["su", "postgres", "-c", "dropdb --if-exists %s && createdb -O %s %s" % (name, owner, name)], check=True)


def settle_postgres(url, limit=600):
    """Waits until PostgreSQL's background work is done before a measurement: a CHECKPOINT (the
    dirty pages of filling or of the last run written out), then no autovacuum worker running
    (an intake run leaves enough new rows to start one, which on wrk's core took CPU from wrk
    and, on a 13.8 GB database this VM does not cache, read the disk during the next run's
    reads). Returns the seconds waited."""
    started = time.time()
    subprocess.run(["su", "postgres", "-c", "psql -qc CHECKPOINT"], check=True)
    query = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
    while time.time() - started < limit:
        workers = subprocess.run(["psql", url, "-Atc", query], check=True, capture_output=True, text=True).stdout.strip()
        if workers == "0":
            break
        time.sleep(2)
    return time.time() - started


def restore_postgres(before):
    everything = os.sched_getaffinity(0) | {int(SERVER_CPU), int(WRK_CPU)}
    for pid in postgres_pids():
        try:
            os.sched_setaffinity(pid, before.get(pid, everything))
        except OSError:
            continue


def purchase_outcomes(port):
    """{outcome: count} of the server's purchases counter."""
    connection = connect(port)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    return {match.group(1): int(float(match.group(2)))
            for match in re.finditer(r'^countersign_purchases_total\{[^}]*outcome="([^"]+)"[^}]*\} (\S+)$', text, re.M)}


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
    """One wrk run; with a script that prints `STATUS <code> <count>` lines (LAUNCH_LUA), also
    the answers by status."""
    command = ["taskset", "-c", WRK_CPU, "wrk", "-t2", "-c%d" % connections, "-d%ds" % duration, "--latency"]
    for header in headers:
        command += ["-H", header]
    if script:
        command += ["-s", script]
    command.append(url)
    before, database_before = cpu_seconds(pid), postgres_cpu_seconds()
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    used, database_used = cpu_seconds(pid) - before, postgres_cpu_seconds() - database_before
    result = parse_wrk(output)
    result["statuses"] = {int(code): int(count) for code, count in re.findall(r"^STATUS (\d+) (\d+)$", output, re.M)}
    result["cpu_us"] = used / max(result["requests"], 1) * 1e6
    result["database_cpu_us"] = database_used / max(result["requests"], 1) * 1e6
    return result


def floor_command(floor):
    """The floor server's command: with as many event loops as the cores it is pinned to, the
    count `countersign serve` chooses for itself from its CPU affinity (NIO alone would start
    one per core of the machine)."""
    return ["env", "NIO_SINGLETON_GROUP_LOOP_COUNT=%d" % len(SERVER_CPU.split(",")), floor, "0"]


def pid_is_server(name):
    """Whether a row measures Countersign (the floor never touches the database)."""
    return not name.startswith("floor")


def median(values):
    """The middle value (the upper of the two middle ones for an even count)."""
    values = sorted(values)
    return values[len(values) // 2]


def median_run(runs):
    keys = ("rate", "p50", "p99", "cpu_us", "database_cpu_us", "non2xx", "requests")
    statuses = {}
    for run in runs:
        for code, count in run.get("statuses", {}).items():
            statuses[code] = statuses.get(code, 0) + count
    return {key: median(run[key] for run in runs) for key in keys} | {"socket_errors": "", "statuses": statuses}


def buy(connection, public, user, product):
    """A test-store purchase of `product` minted for `user` and posted to POST /v1/receipts."""
    status, body = call(connection, "POST", "/v1/test_store/purchases", public, {"app_user_id": user, "product_id": product})
    assert status == 200, body
    status, body = call(connection, "POST", "/v1/receipts", public,
                        {"app_user_id": user, "fetch_token": json.loads(body)["signed_transaction"]})
    assert status == 200, body


def mint_intake(connection, public, count, prefix):
    """Distinct test-store transactions, one user each, as request bodies for POST /v1/receipts."""
    lines = []
    for index in range(count):
        user = "%s-%d" % (prefix, index)
        status, body = call(connection, "POST", "/v1/test_store/purchases", public, {"app_user_id": user, "product_id": "lifetime"})
        assert status == 200, body
        lines.append(json.dumps({"app_user_id": user, "fetch_token": json.loads(body)["signed_transaction"]}))
    return lines


def replace_section(path, label, table):
    text = open(path).read()
    begin, end = "<!-- bench-server:%s -->" % label, "<!-- /bench-server:%s -->" % label
    if begin not in text or end not in text:
        sys.exit("error: %s has no %s ... %s section" % (path, begin, end))
    before, rest = text.split(begin, 1)
    _, after = rest.split(end, 1)
    open(path, "w").write(before + begin + "\n" + table + "\n" + end + after)


class Server:
    """One `countersign serve` under test: its label (before/after, or none), process and port."""

    def __init__(self, label, binary, data_dir, database):
        self.label = label
        self.process, self.port = start_server(binary, data_dir, database, cpus=SERVER_CPU)
        self.intake_script = None

    def prefix(self, name):
        return "%s: %s" % (self.label, name) if self.label else name

    def prepare(self, work, keys, user, nonce, mint):
        """The server's three read targets; mints its own distinct transactions for intake
        (written to a wrk script in `work`)."""
        public, secret = keys
        connection = connect(self.port)
        _, signed_body = call(connection, "GET", "/v1/subscribers/" + user, public)
        _, unsigned_body = call(connection, "GET", "/v1/admin/customers/%s/customer_info" % user, secret)
        _, health_body = call(connection, "GET", "/v1/health", public)
        lines = mint_intake(connection, public, mint, "intake-%s%d" % (self.label, int(time.time())))
        connection.close()
        bodies = os.path.join(work, "bodies%s.txt" % self.label)
        with open(bodies, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        self.intake_script = os.path.join(work, "intake%s.lua" % self.label)
        with open(self.intake_script, "w") as handle:
            handle.write(INTAKE_LUA.replace("BODIES", bodies).replace("KEY", public))
        launch_script = self.launch_devices(work, public, nonce)
        base = "http://127.0.0.1:%d" % self.port
        pid = self.process.pid
        return [
            (self.prefix("signed GET /v1/health"), len(health_body), pid, base + "/v1/health", [nonce], None),
            (self.prefix("signed GET /v1/subscribers/{id} (CustomerInfo)"), len(signed_body), pid,
             base + "/v1/subscribers/" + user, ["Authorization: Bearer " + public, nonce], None),
            (self.prefix("unsigned GET /v1/admin/customers/{id}/customer_info"), len(unsigned_body), pid,
             base + "/v1/admin/customers/%s/customer_info" % user, ["Authorization: Bearer " + secret], None),
            (self.prefix(LAUNCHES), None, pid, base + "/v1/subscribers/launch", [], launch_script),
            (self.prefix(FIRST_LAUNCHES), None, pid, base + "/v1/subscribers/first", [], self.first_launch_script(work, public, nonce)),
        ]

    def first_launch_script(self, work, public, nonce):
        """The wrk script of first launches: each request a fresh install's anonymous id (as the
        SDK makes one, `$RCAnonymousID:` and 32 hex digits), without an ETag."""
        script = os.path.join(work, "first%s.lua" % self.label)
        with open(script, "w") as handle:
            handle.write(FIRST_LAUNCH_LUA.replace("KEY", public).replace("NONCE", nonce.split(": ", 1)[1])
                         .replace("TAG", "%08x" % (int(time.time() * 1000) % 0xFFFFFFFF)).replace("LABEL", "1" if self.label == "before" else "2"))
        return script

    def launch_devices(self, work, public, nonce, returning=1400, buyers=400, first=200):
        """The devices of the launch workload, each launched once already (its ETag cached, as
        the SDK caches it): returning customers who never bought, buyers, and first launches
        (`NEW`: an id never seen, made up anew by each request). Returns the wrk script."""
        connection = connect(self.port)
        tag = "%s%d" % (self.label, int(time.time()))
        lines = []

        def launched(user):
            connection.request("GET", "/v1/subscribers/" + user, headers={"Authorization": "Bearer " + public,
                                                                         "X-Nonce": nonce.split(": ", 1)[1]})
            response = connection.getresponse()
            response.read()
            assert response.status == 200, response.status
            return "/v1/subscribers/%s\t%s" % (user, response.getheader("X-ETag") or "")

        for index in range(returning):
            lines.append(launched("launch-%s-free-%d" % (tag, index)))
        for index in range(buyers):
            user = "launch-%s-buyer-%d" % (tag, index)
            buy(connection, public, user, "lifetime")
            lines.append(launched(user))
        lines += ["NEW\t"] * first
        connection.close()
        # Interleaved, so every stretch of the run has the mix.
        lines = [lines[(index * 7919) % len(lines)] for index in range(len(lines))]
        devices = os.path.join(work, "devices%s.txt" % self.label)
        with open(devices, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        script = os.path.join(work, "launch%s.lua" % self.label)
        with open(script, "w") as handle:
            handle.write(LAUNCH_LUA.replace("DEVICES", devices).replace("KEY", public).replace("NONCE", nonce.split(": ", 1)[1])
                         .replace("TAG", tag))
        return script

    def intake(self, duration, connections):
        """One intake run and the purchase outcomes it counted."""
        outcomes_before = purchase_outcomes(self.port)
        result = run_wrk(self.process.pid, "http://127.0.0.1:%d/v1/receipts" % self.port, duration, connections,
                         script=self.intake_script)
        counted = {outcome: count - outcomes_before.get(outcome, 0) for outcome, count in purchase_outcomes(self.port).items()}
        return result, {outcome: count for outcome, count in counted.items() if count}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--baseline", help="another build (the one before a change), measured in the same rounds on the same "
                                           "data; rows are labelled before/after")
    parser.add_argument("--floor", required=True, help="the FloorServer executable of Benchmarks/")
    parser.add_argument("--database")
    parser.add_argument("--data-dir", help="an existing data directory (a filled database); a fresh one when left out")
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--mint", type=int, default=30000, help="distinct transactions for the intake run")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians are reported")
    parser.add_argument("--postgres-anywhere", action="store_true",
                        help="leave PostgreSQL unpinned (by default it is pinned to wrk's core for the run)")
    parser.add_argument("--label", help="the section of --update (default: sqlite or postgresql)")
    parser.add_argument("--update", help="a Markdown file whose bench-server section gets the table")
    parser.add_argument("--fill", type=int, help="measure flatness: CustomerInfo at one customer, then after this many "
                                                 "customers posted through POST /v1/receipts")
    arguments = parser.parse_args()
    if arguments.fill:
        return flatness(arguments)

    data_dir = arguments.data_dir or tempfile.mkdtemp(prefix="countersign-bench-")
    if arguments.database and not arguments.data_dir:
        # A fresh data directory goes with an empty database: what an earlier run left there
        # (bench-user's purchase of that run, its intake) would be read as this one's.
        empty_database(arguments.database)
    # PostgreSQL shares wrk's core, so the server's core is the server's alone, as with a
    # database on another machine (its CPU is still measured and reported).
    pinned = pin_postgres(WRK_CPU) if arguments.database and not arguments.postgres_anywhere else {}
    # The build under test starts first (it migrates the database); a baseline shares its data
    # directory and database, so both answer from the same rows (bench-user included).
    servers = [Server("after" if arguments.baseline else "", arguments.binary, data_dir, arguments.database)]
    if arguments.baseline:
        servers.insert(0, Server("before", arguments.baseline, data_dir, arguments.database))
    floor, floor_port = start_listening(floor_command(arguments.floor), cpus=SERVER_CPU)
    try:
        public, secret = app_keys(data_dir)
        user = "bench-user"
        connection = connect(servers[-1].port)
        buy(connection, public, user, "pro_monthly")
        connection.close()
        work = tempfile.mkdtemp(prefix="countersign-bench-work-")
        nonce = "X-Nonce: " + base64.b64encode(os.urandom(12)).decode()
        floor_target = ("floor: Hummingbird, fixed 1 KiB body + one Ed25519 signature", 1024, floor.pid,
                        "http://127.0.0.1:%d/" % floor_port, [], None)
        # Grouped by kind: a baseline's health beside the build's health, and so on.
        kinds = [list(kind) for kind in zip(*(server.prepare(work, (public, secret), user, nonce, arguments.mint)
                                               for server in servers))]
        targets = [floor_target] + [target for kind in kinds for target in kind]
        if arguments.database:
            # The mint's writes are checkpointed and vacuumed now, not during the first targets.
            waited = settle_postgres(arguments.database)
            print("PostgreSQL settled in %.0f s (checkpoint, no autovacuum running)" % waited, file=sys.stderr)

        for _, _, pid, url, headers, script in targets:  # warm up
            run_wrk(pid, url, 3, arguments.connections, headers, script)
        runs = {name: [] for name, *_ in targets}
        signing_before = [signing_totals(server.port) for server in servers]
        for round_index in range(arguments.repeat):
            # The builds of a kind run back to back, which one first alternating by round, so
            # neither is always the later one (nearer the next floor, further from this one).
            order = [floor_target] + [target for kind in kinds for target in (kind if round_index % 2 == 0 else kind[::-1])]
            for name, _, pid, url, headers, script in order:
                runs[name].append(run_wrk(pid, url, arguments.duration, arguments.connections, headers, script))
        signing = []
        for server, before in zip(servers, signing_before):
            after = signing_totals(server.port)
            signing.append((server, (after[0] - before[0]) / max(after[1] - before[1], 1) * 1e6))
        intakes, outcomes = [], []
        for server in servers:
            intake, counted = server.intake(arguments.duration, arguments.connections)
            intakes.append((server.prefix("POST /v1/receipts (distinct transactions)"), None, intake))
            outcomes.append((server, counted))

        results = [(name, size, median_run(runs[name])) for name, size, *_ in targets]
        # A target's ratio is the median of its ratios to the floor round by round (the floor ran
        # seconds before it), so a slow minute of the shared machine moves both sides of a ratio.
        floor_runs = runs[targets[0][0]]
        for name, _, result in results:
            result["ratio"] = median([run["cpu_us"] / floor["cpu_us"] for run, floor in zip(runs[name], floor_runs)])
        for intake in intakes:
            intake[2]["ratio"] = intake[2]["cpu_us"] / results[0][2]["cpu_us"]
        results += intakes
        table = render(arguments, results, signing, outcomes)
        print(table)
        if arguments.update:
            replace_section(arguments.update, arguments.label or ("postgresql" if arguments.database else "sqlite"), table)
        shutil.rmtree(work, ignore_errors=True)
    finally:
        restore_postgres(pinned)
        for running in [server.process for server in servers] + [floor]:
            running.send_signal(signal.SIGTERM)
            running.wait(timeout=30)
        if not arguments.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)


def fill_customers(port, public, count, prefix, workers=8):
    """`count` customers, each with a pro_monthly subscription minted by the test store and
    posted to POST /v1/receipts, `workers` at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def one(start):
        connection = connect(port)
        for index in range(start, count, workers):
            buy(connection, public, "%s-%d" % (prefix, index), "pro_monthly")
        connection.close()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(workers)))


def flatness(arguments):
    """--fill: CustomerInfo's cost and p99 at one customer and at `arguments.fill` customers,
    in one run (see the module's documentation)."""
    data_dir = tempfile.mkdtemp(prefix="countersign-bench-")
    if arguments.database:
        empty_database(arguments.database)
    pinned = pin_postgres(WRK_CPU) if arguments.database and not arguments.postgres_anywhere else {}
    server = Server("", arguments.binary, data_dir, arguments.database)
    floor, floor_port = start_listening(floor_command(arguments.floor), cpus=SERVER_CPU)
    try:
        public, _ = app_keys(data_dir)
        connection = connect(server.port)
        buy(connection, public, "bench-user", "pro_monthly")
        _, signed_body = call(connection, "GET", "/v1/subscribers/bench-user", public)
        connection.close()
        nonce = "X-Nonce: " + base64.b64encode(os.urandom(12)).decode()
        floor_target = ("floor", floor.pid, "http://127.0.0.1:%d/" % floor_port, [])
        info = ("info", server.process.pid, "http://127.0.0.1:%d/v1/subscribers/bench-user" % server.port,
                ["Authorization: Bearer " + public, nonce])

        def rounds():
            runs = {"floor": [], "info": []}
            for name, pid, url, headers in (floor_target, info):
                run_wrk(pid, url, 3, arguments.connections, headers)  # warm up
            for _ in range(arguments.repeat):
                for name, pid, url, headers in (floor_target, info):
                    runs[name].append(run_wrk(pid, url, arguments.duration, arguments.connections, headers))
            result = median_run(runs["info"])
            result["ratio"] = median([run["cpu_us"] / floor["cpu_us"] for run, floor in zip(runs["info"], runs["floor"])])
            return median_run(runs["floor"]), result

        one_floor, one = rounds()
        started = time.time()
        fill_customers(server.port, public, arguments.fill, "fill-%d" % int(started))
        filled_in = time.time() - started
        if arguments.database:
            settle_postgres(arguments.database)
        time.sleep(60)
        many_floor, many = rounds()
        backend = "PostgreSQL" if arguments.database else "SQLite"
        lines = [
            "| %s, %d connections | body bytes | requests/s | p50 ms | p99 ms | server CPU µs/request | ratio to floor |" % (
                backend, arguments.connections),
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, result in (("floor, before the fill", one_floor), ("signed CustomerInfo, 1 customer", one),
                             ("floor, after the fill", many_floor),
                             ("signed CustomerInfo, %d customers more (a minute after the fill)" % arguments.fill, many)):
            lines.append("| %s | %s | %.0f | %.2f | %.2f | %.0f | %s |" % (
                name, len(signed_body) if name.startswith("signed") else 1024, result["rate"], result["p50"], result["p99"],
                result["cpu_us"], "%.2f×" % result["ratio"] if "ratio" in result else "1.00×"))
        lines.append("")
        lines.append("Filled through POST /v1/receipts in %.0f s. At %d customers against one: cost (ratio to the floor) %.2f×, "
                     "p99 %.2f× (%.2f ms against %.2f ms). Medians of %d rounds of %d s." % (
                         filled_in, arguments.fill, many["ratio"] / one["ratio"], many["p99"] / one["p99"], many["p99"], one["p99"],
                         arguments.repeat, arguments.duration))
        table = "\n".join(lines)
        print(table)
        if arguments.update:
            replace_section(arguments.update, arguments.label or ("flat-postgresql" if arguments.database else "flat-sqlite"), table)
    finally:
        restore_postgres(pinned)
        for running in (server.process, floor):
            running.send_signal(signal.SIGTERM)
            running.wait(timeout=30)
        shutil.rmtree(data_dir, ignore_errors=True)


def render(arguments, results, signing, outcomes):
    """The Markdown table of `results` and the notes under it."""
    backend = "PostgreSQL" if arguments.database else "SQLite"
    out = []
    postgres = bool(arguments.database)
    out.append("| %s, %d connections | body bytes | requests/s | p50 ms | p99 ms | server CPU µs/request | ratio to floor |%s non-2xx |"
               % (backend, arguments.connections, " PostgreSQL CPU µs/request |" if postgres else ""))
    out.append("|---|---:|---:|---:|---:|---:|---:|%s---:|" % ("---:|" if postgres else ""))
    for name, size, result in results:
        database = (" %.0f |" % result["database_cpu_us"] if pid_is_server(name) else " – |") if postgres else ""
        out.append("| %s | %s | %.0f | %.2f | %.2f | %.0f | %.2f× |%s %d |" % (
            name, size if size is not None else "–", result["rate"], result["p50"], result["p99"], result["cpu_us"],
            result["ratio"], database, result["non2xx"]))
        if result["socket_errors"]:
            print("  socket errors:", name, result["socket_errors"], file=sys.stderr)
    out.append("")
    out.append("Medians of %d rounds of %d s (intake: one run; a ratio is the median of the rounds' ratios to the floor); signing inside "
               "the server (its /metrics histogram, monotonic clock): %s µs per signed answer." % (
                   arguments.repeat, arguments.duration,
                   ", ".join("%s%.1f" % (server.label + " " if server.label else "", us) for server, us in signing)))
    out.append("Intake outcomes (the server's purchases counter): %s." % "; ".join(
        (server.label + ": " if server.label else "") + (", ".join("%s %d" % item for item in sorted(counted.items())) or "none")
        for server, counted in outcomes))
    for name, _, result in results:
        if name.endswith(LAUNCHES) and result["statuses"]:
            answered = sum(result["statuses"].values())
            out.append("%s: %.1f%% signed 304s of %d answers (%s)." % (
                name, 100.0 * result["statuses"].get(304, 0) / answered, answered,
                ", ".join("%d: %d" % item for item in sorted(result["statuses"].items()))))
        if name.endswith("(distinct transactions)") and result["requests"] > arguments.mint:
            out.append("Note: %s posted %d requests but only %d distinct transactions were minted; the rest were "
                       "repeats (raise --mint)." % (name, result["requests"], arguments.mint))
    return "\n".join(out)


LAUNCHES = "app launches (the cached X-ETag; 70% free, 20% buyers, 10% new)"
FIRST_LAUNCHES = "first launches (a new anonymous id, no X-ETag)"

LAUNCH_LUA = r"""
local devices = {}
for line in io.lines("DEVICES") do devices[#devices + 1] = line end
local counter = 0
local statuses = {}
-- Globals, read back by done() through thread:get.
threads = {}
setup = function(thread)
  thread:set("thread_index", #threads)
  table.insert(threads, thread)
end
init = function(args)
  counter = thread_index
end
request = function()
  local device = devices[(counter % #devices) + 1]
  counter = counter + 2
  local path, etag = device:match("^([^\t]*)\t(.*)$")
  if path == "NEW" then
    path = "/v1/subscribers/launch-TAG-new-" .. thread_index .. "-" .. counter
  end
  local headers = {["Authorization"] = "Bearer KEY", ["X-Nonce"] = "NONCE"}
  if etag ~= "" then headers["X-ETag"] = etag end
  return wrk.format("GET", path, headers)
end
response = function(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  answered = statuses
end
done = function(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("answered") or {}) do
      total[status] = (total[status] or 0) + count
    end
  end
  for status, count in pairs(total) do
    io.write(string.format("STATUS %d %d\n", status, count))
  end
end
"""

FIRST_LAUNCH_LUA = r"""
local counter = 0
threads = 0
setup = function(thread)
  thread:set("thread_index", threads)
  threads = threads + 1
end
request = function()
  counter = counter + 1
  -- 32 lowercase hex digits, unique to this run, build, thread and request.
  local id = string.format("TAG%01d%07x%016x", LABEL, thread_index, counter)
  return wrk.format("GET", "/v1/subscribers/%24RCAnonymousID%3A" .. id, {["Authorization"] = "Bearer KEY", ["X-Nonce"] = "NONCE"})
end
"""

INTAKE_LUA = r"""
local bodies = {}
for line in io.lines("BODIES") do bodies[#bodies + 1] = line end
local counter = 0
-- A global, not a local: thread:set writes the thread's global (a local of the same name would
-- hide it, and every thread would post the same bodies).
threads = 0
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
