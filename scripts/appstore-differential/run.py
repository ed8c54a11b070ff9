#!/usr/bin/env python3
"""App Store differential suite: Apple's own verifier and Countersign on the same signed cases.

Makes a look-alike Apple PKI, signs cases of every kind Apple sends (valid and hostile), then
verifies each with Apple's `SignedDataVerifier` (app-store-server-library, pinned below, installed
into a virtual environment by this script) and with `countersign store verify`, in several
configurations. With --server it also posts them to a running server (`POST /v1/receipts`,
`POST /v1/notifications/apple`) and checks that it records exactly what Apple accepts.

Fails (exit 1) on any disagreement that is not one of DIFFERENCES below. A corpus made elsewhere
runs the same way: --corpus DIR with DIR/cases.json ([{"name", "kind", "jws"}]) and DIR/root.der.

    python3 scripts/appstore-differential/run.py --binary .build/debug/countersign [--server] [--database URL]
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

LIBRARY = "app-store-server-library==3.1.2"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VENV = os.path.join(HERE, "..", "..", ".build", "appstore-differential-venv")

# Where Countersign refuses on purpose what Apple's library accepts. Only this direction is
# allowed: Countersign never accepts what Apple refuses.
DIFFERENCES = {
    "future-signed-date": "A signedDate more than 5 minutes ahead of the clock is refused. Apple's library validates "
                          "the chain at whatever date the payload claims, so data dated into a leaf's future "
                          "validity passes there; genuine App Store data is signed in the past.",
    "padded-base64url": "JWS segments must be unpadded base64url (RFC 7515 section 2). PyJWT strips '=' padding, "
                        "which gives one token several spellings (several cache keys and replay ids).",
    "duplicate-key": "A JSON object that names a key twice is refused, in the header and the payload. Python keeps "
                     "the last value, other readers the first: the same signed bytes could mean two things.",
    "text-encoding": "JSON text must be UTF-8 without a byte-order mark, NUL bytes or lone surrogate escapes. "
                     "Python's json.loads also guesses UTF-16/32 and skips a BOM; App Store data is plain UTF-8.",
    "field-type": "Fields must have the JSON type Apple documents. Apple's model layer (cattrs) converts instead: "
                  "a number sent as a string passes there, and so would bool('false') == True.",
}

CONFIGURATIONS = {
    "sandbox": {"environment": "Sandbox", "app_apple_id": None},
    "sandbox-with-app-apple-id": {"environment": "Sandbox", "app_apple_id": "APP"},
    "production": {"environment": "Production", "app_apple_id": "APP"},
    "production-without-app-apple-id": {"environment": "Production", "app_apple_id": None},
}


def ensure_venv(venv):
    """Re-runs this script inside a virtual environment holding Apple's library."""
    python = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    check = subprocess.run([python, "-m", "pip", "show", "app-store-server-library"], capture_output=True, text=True)
    if "Version: " + LIBRARY.split("==")[1] not in check.stdout:
        subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", LIBRARY], check=True)
    os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])


def apple_outcome(case, configuration, root_der, bundle_id, app_apple_id):
    """What Apple's SignedDataVerifier says: OK, a VerificationStatus name, CONFIG (refuses to be
    configured so) or ERROR:<exception> (its model layer threw)."""
    from appstoreserverlibrary.models.Environment import Environment
    from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier, VerificationException
    try:
        verifier = SignedDataVerifier([root_der], False, Environment(configuration["environment"]), bundle_id,
                                      app_apple_id if configuration["app_apple_id"] else None)
    except ValueError:
        return "CONFIG"
    method = {"transaction": verifier.verify_and_decode_signed_transaction,
              "renewalInfo": verifier.verify_and_decode_renewal_info,
              "notification": verifier.verify_and_decode_notification,
              "appTransaction": verifier.verify_and_decode_app_transaction}[case["kind"]]
    try:
        method(case["jws"])
        return "OK"
    except VerificationException as error:
        return error.status.name
    except Exception as error:  # noqa: BLE001 - any other refusal is still a refusal
        return "ERROR:" + type(error).__name__


def countersign_command(binary, path, kind, root_path, configuration, bundle_id, app_apple_id):
    command = [binary, "store", "verify", path, "--root", root_path, "--bundle-id", bundle_id,
               "--environment", configuration["environment"], "--kind", kind]
    if configuration["app_apple_id"]:
        command += ["--app-apple-id", str(app_apple_id)]
    return command


def countersign_outcome(command):
    """(outcome, reason, text): OK, the status Countersign prints ('error: STATUS (reason): detail')
    or CONFIG (it refuses the configuration, exit 2)."""
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode == 0:
        return "OK", "", ""
    text = (result.stdout + result.stderr).strip()
    if result.returncode == 2 and "configuration" in text:
        return "CONFIG", "", text
    for line in text.splitlines():
        if result.returncode == 1 and line.startswith("error: "):
            status, _, rest = line[len("error: "):].partition(" ")
            reason = rest[1:rest.index(")")] if rest.startswith("(") and ")" in rest else ""
            return status.rstrip(":"), reason, line
    return "CRASH(%d)" % result.returncode, "", text


def is_refusal(outcome):
    return outcome not in ("OK", "CONFIG") and not outcome.startswith("CRASH")


def judge(apple, ours, reason):
    """'agree', 'allowed' (we refuse on purpose, for a documented reason) or 'DISAGREE'."""
    if apple == ours:
        return "agree"
    if apple.startswith("ERROR:") and is_refusal(ours):
        return "agree"  # Apple's model layer threw (no status); we refuse too
    if is_refusal(ours) and reason in DIFFERENCES:
        return "allowed"
    return "DISAGREE"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, help="the countersign executable")
    parser.add_argument("--venv", default=DEFAULT_VENV, help="where to keep the virtual environment")
    parser.add_argument("--corpus", help="run a corpus from elsewhere instead of the generated cases")
    parser.add_argument("--bundle-id", help="the corpus's bundle id (default: the generated cases')")
    parser.add_argument("--app-apple-id", type=int, help="the corpus's app Apple id")
    parser.add_argument("--work", help="keep the cases and results here (default: a temporary directory)")
    parser.add_argument("--server", action="store_true", help="also run the cases through a live server")
    parser.add_argument("--database", action="append", default=[], help="a PostgreSQL URL for the server path (repeatable)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    ensure_venv(os.path.abspath(args.venv))

    sys.path.insert(0, HERE)
    import cases as generator

    binary = os.path.abspath(args.binary)
    work = args.work or tempfile.mkdtemp(prefix="appstore-differential-")
    os.makedirs(work, exist_ok=True)
    if args.corpus:
        with open(os.path.join(args.corpus, "cases.json")) as file:
            case_list = json.load(file)
        with open(os.path.join(args.corpus, "root.der"), "rb") as file:
            root_der = file.read()
        bundle_id = args.bundle_id or generator.BUNDLE_ID
        app_apple_id = args.app_apple_id or generator.APP_APPLE_ID
    else:
        pki, generated = generator.make_cases()
        case_list = [case.as_json() | {"server": case.server} for case in generated]
        root_der = pki.root.der
        bundle_id, app_apple_id = generator.BUNDLE_ID, generator.APP_APPLE_ID
        with open(os.path.join(work, "cases.json"), "w") as file:
            json.dump(case_list, file, indent=1)
    root_path = os.path.join(work, "root.der")
    with open(root_path, "wb") as file:
        file.write(root_der)
    for index, case in enumerate(case_list):
        case["path"] = os.path.join(work, "case-%03d.jws" % index)
        with open(case["path"], "w") as file:
            file.write(case["jws"])

    jobs = []
    for configuration_name, configuration in CONFIGURATIONS.items():
        for case in case_list:
            jobs.append((configuration_name, configuration, case))

    def run(job):
        configuration_name, configuration, case = job
        apple = apple_outcome(case, configuration, root_der, bundle_id, app_apple_id)
        ours, reason, detail = countersign_outcome(countersign_command(binary, case["path"], case["kind"], root_path,
                                                                       configuration, bundle_id, app_apple_id))
        return configuration_name, case, apple, ours, reason, detail

    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for configuration_name, case, apple, ours, reason, detail in pool.map(run, jobs):
            verdict = judge(apple, ours, reason)
            # A case made to show a deliberate difference must show that one, not another.
            if verdict == "allowed" and case.get("deliberate") not in (None, reason):
                verdict = "DISAGREE"
            results.append({"configuration": configuration_name, "case": case["name"], "kind": case["kind"],
                            "apple": apple, "countersign": ours, "reason": reason, "verdict": verdict,
                            "detail": detail})
            if verdict == "DISAGREE" or args.verbose:
                print("%-8s %-32s %-58s apple=%-24s countersign=%-24s %s" % (
                    verdict, configuration_name, case["name"], apple, ours, detail[:160]))
    with open(os.path.join(work, "results.json"), "w") as file:
        json.dump(results, file, indent=1)

    counts = {}
    for result in results:
        counts[result["verdict"]] = counts.get(result["verdict"], 0) + 1
    accepted = sum(1 for result in results if result["apple"] == "OK")
    print("== App Store differential: %d cases x %d configurations = %d runs; Apple accepts %d; "
          "agree %d, deliberate differences %d, disagreements %d (results in %s)" % (
              len(case_list), len(CONFIGURATIONS), len(results), accepted, counts.get("agree", 0),
              counts.get("allowed", 0), counts.get("DISAGREE", 0), work))
    for reason in DIFFERENCES:
        shown = sum(1 for result in results if result["verdict"] == "allowed" and result["reason"] == reason)
        accepted_by_apple = sum(1 for result in results if result["verdict"] == "allowed" and result["reason"] == reason
                                and result["apple"] == "OK")
        print("   deliberate %-20s %3d runs (%d that Apple accepts)" % (reason, shown, accepted_by_apple))
    failed = counts.get("DISAGREE", 0) > 0
    if args.server:
        import server_path
        for database in [None] + args.database:
            failed |= not server_path.run(binary, work, case_list, root_der, bundle_id, app_apple_id, results, database)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
