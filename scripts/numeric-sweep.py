#!/usr/bin/env python3
"""Sends the extreme numbers to every numeric input of a live server and of the import.

Swift stops the process on an arithmetic overflow and on a Double -> integer conversion out of
range, so a number from outside that reaches arithmetic can stop every app's server. This sweep
keeps that class from coming back (docs/operations.md, "Numbers from outside"):

- the API: every numeric field of every request body, and every numeric query parameter, that
  openapi.yaml documents (and every string field that carries a number: a timestamp, a time in
  milliseconds) gets each extreme value. Each answer must be below 500 and, when 4xx, carry a
  stable integer `code`; the server must still be running after the last one and answer
  /v1/health.
- the import: every numeric and date column of RevenueCat's export read by
  `countersign import revenuecat` gets each extreme value, a row each. The command must end with
  exit code 0 or 3 (rows refused by line), never by a signal; then every imported customer is
  read back over HTTP, each answer below 500.

The app is configured with an In-App Purchase key and a promotional offer, so the offer's
timestamp reaches the check it once overflowed in.

    scripts/numeric-sweep.py [--binary PATH] [--database URL]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.parse
import uuid

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from countersign_process import app_keys, call, connect, start_server  # noqa: E402

# Written into the JSON as they are (Python would rewrite -0 and 1e-320).
EXTREMES = [
    "9223372036854775807", "-9223372036854775807", "-9223372036854775808", "9223372036854775808",
    "18446744073709551616", "1e308", "-1e308", "1e30", "-1e30", "-0", "1e-320", "0", "-1",
]
# For string-typed numbers (and an integer field sent as a string).
DIGIT_STRINGS = ['"%s"' % value for value in
                 ["9223372036854775807", "-9223372036854775807", "-9223372036854775808", "18446744073709551616",
                  "99999999999999999999999999", "-0", "1e308", "0"]]
# String fields that carry a number.
NUMERIC_STRING_NAMES = ("timestamp", "_ms")

OFFER_KEY_ID = "SWEEPKEY01"
PLACEHOLDER = "__sweep_value__"


class Spec:
    """openapi.yaml with its references resolved on demand."""

    def __init__(self, path):
        self.document = yaml.safe_load(open(path))

    def resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            target = self.document
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part]
            node = target
        return node

    def operations(self):
        for path, item in self.document["paths"].items():
            for method, operation in item.items():
                if method in ("get", "post", "put", "patch", "delete"):
                    yield path, method.upper(), operation


def types_of(schema):
    kind = schema.get("type")
    return set(kind) if isinstance(kind, list) else {kind} if kind else set()


def plausible(name, schema, spec, slots, trail):
    """A value for `schema` that gets a request past its other checks; every numeric place it
    holds is noted in `slots` as (trail, kind)."""
    schema = spec.resolve(schema)
    if "oneOf" in schema or "anyOf" in schema:
        return plausible(name, (schema.get("oneOf") or schema.get("anyOf"))[0], spec, slots, trail)
    kinds = types_of(schema)
    if "object" in kinds or "properties" in schema:
        value = {}
        for key, child in (schema.get("properties") or {}).items():
            value[key] = plausible(key, child, spec, slots, trail + [key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and not value:
            key = "$displayName" if name == "attributes" else "sweep"
            value[key] = plausible(key, extra, spec, slots, trail + [key])
        return value
    if "array" in kinds:
        return [plausible(name, schema.get("items", {}), spec, slots, trail + [0])]
    if kinds & {"integer", "number"}:
        slots.append((trail, "number"))
        return max(1, schema.get("minimum", 1))
    if "boolean" in kinds:
        return False
    if "enum" in schema:
        return schema["enum"][0]
    if any(marker in name for marker in NUMERIC_STRING_NAMES):
        slots.append((trail, "string"))
    return {
        "app_user_id": "sweep-user", "new_app_user_id": "sweep-other", "product_id": "pro_monthly",
        "product_identifier": "pro_monthly", "offer_identifier": "winback", "promotional_offer_identifier": "winback",
        "promotional_offer_key_identifier": OFFER_KEY_ID, "promotional_offer_nonce": str(uuid.uuid4()),
        "promotional_offer_timestamp": "1", "promotional_offer_signature": "MEUCIQ==",
        "app_account_token": str(uuid.uuid4()), "store_account": "sweep-account", "value": "sweep", "mode": "enforced",
        "path": "/v1/subscribers/sweep-user", "reason": "signature_mismatch",
    }.get(name, "sweep")


def with_placeholder(body, trail):
    """`body` with the place at `trail` holding the placeholder."""
    body = json.loads(json.dumps(body))
    node = body
    for key in trail[:-1]:
        node = node[key]
    node[trail[-1]] = PLACEHOLDER
    return body


def concrete_path(path):
    return (path.replace("{app_user_id}", "sweep-user").replace("{entitlement}", "pro")
            .replace("{store_account}", "sweep-account").replace("{event_id}", str(uuid.uuid4())))


class Sweep:
    def __init__(self, port, process, public_key, secret_key):
        self.port, self.process = port, process
        self.keys = {"publicKey": public_key, "secretKey": secret_key}
        self.sent = 0
        self.failures = []
        self.inputs = set()

    def send(self, method, path, key, body_text, what):
        connection = connect(self.port)
        headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json",
                   "X-Nonce": "c3dlZXAtbm9uY2UtMTIz"}
        try:
            connection.request(method, path, body=body_text, headers=headers)
            response = connection.getresponse()
            status, answer = response.status, response.read()
        except Exception as error:  # the server went away mid-request
            self.failures.append(f"{what}: no answer ({error})")
            return
        finally:
            connection.close()
        self.sent += 1
        if status >= 500:
            self.failures.append(f"{what}: {status} {answer[:200]!r}")
        elif status >= 400:
            try:
                code = json.loads(answer).get("code")
            except ValueError:
                code = None
            if not isinstance(code, int):
                self.failures.append(f"{what}: {status} without a code: {answer[:200]!r}")
        if self.process.poll() is not None:
            self.failures.append(f"{what}: the server exited ({self.process.returncode})")
            raise SystemExit("\n".join(self.failures))

    def api(self, spec):
        fields = 0
        for path, method, operation in spec.operations():
            schemes = [name for requirement in operation.get("security", []) for name in requirement] or ["publicKey"]
            keys = [self.keys[name] for name in schemes if name in self.keys]
            content = ((operation.get("requestBody") or {}).get("content") or {}).get("application/json")
            bodies = []
            if content:
                schema = spec.resolve(content["schema"])
                for alternative in schema.get("oneOf") or [schema]:
                    slots = []
                    base = plausible("", alternative, spec, slots, [])
                    bodies.append((base, slots))
            queries = [spec.resolve(p) for p in operation.get("parameters", [])]
            queries = [p for p in queries if p.get("in") == "query" and types_of(spec.resolve(p["schema"])) & {"integer", "number"}]
            url = concrete_path(path)
            for key in keys:
                for base, slots in bodies:
                    for trail, kind in slots:
                        fields += 1
                        self.inputs.add(f"{method} {path} {'.'.join(map(str, trail))}")
                        values = DIGIT_STRINGS if kind == "string" else EXTREMES + DIGIT_STRINGS
                        text = json.dumps(with_placeholder(base, trail))
                        for value in values:
                            self.send(method, url, key, text.replace(json.dumps(PLACEHOLDER), value),
                                      f"{method} {path} {'.'.join(map(str, trail))}={value}")
                for parameter in queries:
                    fields += 1
                    self.inputs.add(f"{method} {path}?{parameter['name']}")
                    for value in EXTREMES + [v.strip('"') for v in DIGIT_STRINGS]:
                        query = urllib.parse.urlencode({parameter["name"]: value})
                        self.send(method, f"{url}?{query}", key, None, f"{method} {path}?{parameter['name']}={value}")
        return fields


# The import's numeric and date columns, and what each gets besides the extremes.
IMPORT_PRICE_COLUMNS = ["purchase_price_in_purchased_currency", "price_in_purchased_currency"]
IMPORT_DATE_COLUMNS = ["start_time", "end_time", "grace_period_end_time", "effective_end_time", "refunded_at", "first_seen_time", "updated_at"]
IMPORT_DATES = [
    "9999-12-31 23:59:59", "0000-01-01 00:00:00", "0000-02-29 00:00:00", "9999-12-31 23:59:59.999999999",
    "2023-01-01 00:00:00.9999999999999999999", "2023-01-01 00:00:00.99999999999999999999999999", "99999-01-01 00:00:00",
    "-001-01-01 00:00:00", "2023-01-01T00:00:00.5Z",
]
IMPORT_NUMBERS = [v.strip('"') for v in EXTREMES + DIGIT_STRINGS] + ["NaN", "nan", "Infinity", "-inf", "1e-320", "999999999.9995", "0.0005"]
IMPORT_HEADER = ["rc_original_app_user_id", "product_identifier", "store", "is_sandbox", "store_transaction_id",
                 "original_store_transaction_id", "is_auto_renewable", "purchased_currency"] + IMPORT_PRICE_COLUMNS + IMPORT_DATE_COLUMNS


def import_export(work):
    """An export with a row per (column, value); returns its path and the customers' ids."""
    rows, users = [",".join(IMPORT_HEADER)], []
    cases = [(column, value) for column in IMPORT_PRICE_COLUMNS for value in IMPORT_NUMBERS]
    cases += [(column, value) for column in IMPORT_DATE_COLUMNS for value in IMPORT_DATES + IMPORT_NUMBERS]
    for index, (column, value) in enumerate(cases):
        user = f"sweep-{index}"
        users.append(user)
        product, renewing = ("pro_monthly", "t") if column in ("end_time", "grace_period_end_time", "effective_end_time") else ("lifetime", "f")
        row = {"rc_original_app_user_id": user, "product_identifier": product, "store": "app_store", "is_sandbox": "t",
               "store_transaction_id": str(900000 + index), "original_store_transaction_id": str(900000 + index),
               "is_auto_renewable": renewing, "purchased_currency": "USD", "start_time": "2026-01-01 00:00:00"}
        if renewing == "t":
            row["end_time"] = "2026-02-01 00:00:00"
        row[column] = value
        rows.append(",".join(row.get(name, "") for name in IMPORT_HEADER))
    path = os.path.join(work, "extremes.csv")
    with open(path, "w") as file:
        file.write("\n".join(rows) + "\n")
    return path, users, len(cases)


def configure(binary, data, database):
    """A data directory whose first app has an In-App Purchase key and a promotional offer."""
    server, _ = start_server(binary, data, database=database, log_level="error")
    server.terminate()
    server.wait(timeout=30)
    key = subprocess.run(["openssl", "ecparam", "-genkey", "-name", "prime256v1", "-noout"], capture_output=True, check=True).stdout
    pem = subprocess.run(["openssl", "pkcs8", "-topk8", "-nocrypt"], input=key, capture_output=True, check=True).stdout
    with open(os.path.join(data, "sweep-iap.p8"), "wb") as file:
        file.write(pem)
    path = os.path.join(data, "countersign.json")
    config = json.load(open(path))
    app = config["apps"][0]
    app["inAppPurchaseKey"] = {"keyId": OFFER_KEY_ID, "issuerId": "57246542-96fe-1a63-e053-0824d011072a", "privateKeyFile": "sweep-iap.p8"}
    for product in app["products"]:
        if product["id"] == "pro_monthly":
            product["promotionalOffers"] = ["winback"]
    with open(path, "w") as file:
        json.dump(config, file, indent=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=None, help="countersign binary (default: swift build's)")
    parser.add_argument("--database", default=None, help="PostgreSQL URL (default: SQLite in a temporary directory)")
    args = parser.parse_args()
    binary = args.binary or os.path.join(
        subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip(),
        "countersign")
    label = "PostgreSQL" if args.database else "SQLite"
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data")
        configure(binary, data, args.database)
        database = ["--database", args.database] if args.database else []

        # The import first (the server is not running; SQLite has one writer).
        export, users, rows = import_export(work)
        run = subprocess.run([binary, "import", "revenuecat", "--data-dir", data, "--transactions", export] + database,
                             capture_output=True, text=True)
        refused = sum(1 for line in run.stdout.splitlines() if ": refused: " in line)
        failures = []
        if run.returncode not in (0, 3):
            failures.append(f"import: exit code {run.returncode}\n{run.stderr[-2000:]}")

        server, port = start_server(binary, data, database=args.database, log_level="error")
        try:
            public_key, secret_key = app_keys(data)
            sweep = Sweep(port, server, public_key, secret_key)
            for user in users:
                sweep.send("GET", f"/v1/subscribers/{user}", public_key, None, f"import read-back of {user}")
                sweep.send("GET", f"/v1/admin/customers/{user}", secret_key, None, f"import admin read-back of {user}")
            fields = sweep.api(Spec(os.path.join(ROOT, "openapi.yaml")))
            connection = connect(port)
            status, _ = call(connection, "GET", "/v1/health", public_key)
            if status != 200:
                failures.append(f"/v1/health answered {status} after the sweep")
            if server.poll() is not None:
                failures.append(f"the server exited ({server.returncode})")
        finally:
            server.terminate()
            server.wait(timeout=30)
        failures += sweep.failures
        for line in sorted(sweep.inputs):
            print("   ", line)
        print(f"== {label}: {fields} numeric inputs of the API, {sweep.sent} requests; import of {rows} rows "
              f"(exit {run.returncode}, {refused} refused by line, {len(users)} customers read back)")
        if failures:
            print("\n".join(failures[:40]), file=sys.stderr)
            sys.exit(f"{len(failures)} failures")
        print("no 5xx, every refusal with a code, the server up throughout")


if __name__ == "__main__":
    main()
