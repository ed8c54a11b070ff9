#!/usr/bin/env python3
"""Checks the live server against openapi.yaml with schemathesis (from PyPI).

Starts `countersign serve` on a fresh data directory (SQLite, or --database URL), gives
schemathesis the app's public and secret keys for the two security schemes of the document, and
runs every check except positive_data_acceptance: 0 server errors, every answer's status, headers,
content type and body as documented, every schema-violating request refused, undeclared methods
answered 405.

positive_data_acceptance is left out because a schema cannot say what makes some valid-looking
requests acceptable: X-Post-Params-Hash and X-Headers-Hash are hashes of other parts of the
request, a fetch_token must be a JWS signed by Apple or the test store, and entitlements and
products come from the server's configuration. Those refusals are covered by the Swift tests.

    scripts/api-contract.py [--binary PATH] [--database URL] [--max-examples N] [--seed N]
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from countersign_process import app_keys, start_server  # noqa: E402

SCHEMATHESIS = "schemathesis==4.32.5"
VENV = os.path.join(ROOT, ".build", "schemathesis-venv")


def schemathesis_command():
    executable = os.path.join(VENV, "bin", "schemathesis")
    marker = os.path.join(VENV, SCHEMATHESIS)
    if not os.path.exists(marker):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "-q", SCHEMATHESIS], check=True)
        open(marker, "w").close()
    return executable


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=None, help="countersign binary (default: swift build's)")
    parser.add_argument("--database", default=None, help="PostgreSQL URL (default: SQLite in a temporary directory)")
    parser.add_argument("--max-examples", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None, help="fix the random seed (CI does)")
    args = parser.parse_args()
    binary = args.binary or os.path.join(
        subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip(),
        "countersign")
    schemathesis = schemathesis_command()
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data")
        server, port = start_server(binary, data, database=args.database, log_level="error")
        try:
            public_key, secret_key = app_keys(data)
            config = os.path.join(work, "schemathesis.toml")
            with open(config, "w") as file:
                file.write(f'''[auth.openapi.publicKey]
bearer = "{public_key}"

[auth.openapi.secretKey]
bearer = "{secret_key}"

# A body over the server's limit is refused with 413, a flood of reports with 429.
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "409", "413", "422", "429"]
''')
            command = [schemathesis, "--config-file", config, "run", os.path.join(ROOT, "openapi.yaml"),
                       "--url", f"http://127.0.0.1:{port}", "--checks", "all",
                       "--exclude-checks", "positive_data_acceptance",
                       "--max-examples", str(args.max_examples), "--no-color"]
            if args.seed is not None:
                command += ["--seed", str(args.seed)]
            print("== schemathesis against", "PostgreSQL" if args.database else "SQLite", flush=True)
            result = subprocess.run(command, cwd=work)
        finally:
            server.terminate()
            server.wait(timeout=30)
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()
