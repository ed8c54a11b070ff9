"""The differential cases through a running server: what it accepts and records must be exactly
what Apple's library accepts.

Transactions go to `POST /v1/receipts`, notifications with a `data` section to
`POST /v1/notifications/apple`, in a Sandbox app and in a Production app (with its Apple ID), on
the embedded SQLite database and on each PostgreSQL URL given. A refusal must carry Apple's
status in `store_status` (or be a deliberate difference, by `store_reason`).
"""
import base64
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from countersign_process import call, connect, start_server  # noqa: E402

from run import judge  # noqa: E402

SERVER_CONFIGURATIONS = {"sandbox": ["Sandbox"], "production": ["Production"]}


def deployment(root_der, bundle_id, app_apple_id, environments):
    return {
        "appleRootCertificates": [base64.b64encode(root_der).decode()],
        "apps": [{
            "id": "differential", "bundleId": bundle_id, "appAppleId": app_apple_id,
            "publicApiKeys": ["pk_differential"], "secretApiKeys": ["sk_differential"],
            "environments": environments, "transferBehavior": "transfer",
            "products": [{"id": "pro_monthly", "type": "autoRenewable", "entitlements": ["pro"]},
                         {"id": "coins_100", "type": "consumable", "entitlements": []},
                         {"id": "lifetime", "type": "nonConsumable", "entitlements": ["pro"]}],
            "offerings": [],
        }],
    }


def post(connection, case, index):
    """(outcome, reason, recorded): OK or the store_status the server answered with."""
    if case["kind"] == "transaction":
        user = "differential-%d" % index
        status, body = call(connection, "POST", "/v1/receipts", "pk_differential",
                            {"app_user_id": user, "fetch_token": case["jws"]})
    else:
        connection.request("POST", "/v1/notifications/apple", body=json.dumps({"signedPayload": case["jws"]}),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        status, body = response.status, response.read()
    try:
        answer = json.loads(body)
    except ValueError:
        answer = {}
    if status == 200:
        recorded = True
        if case["kind"] == "transaction":
            subscriber = answer.get("subscriber", {})
            owned = list(subscriber.get("subscriptions", {})) + list(subscriber.get("non_subscriptions", {}))
            recorded = bool(owned)
        return "OK", "", recorded
    if status >= 500:
        return "SERVER_ERROR(%d)" % status, "", False
    return answer.get("store_status") or "HTTP_%d_%s" % (status, answer.get("code")), answer.get("store_reason", ""), False


def run(binary, work, cases, root_der, bundle_id, app_apple_id, results, database):
    """Runs the server-bound cases; prints disagreements; True when there are none."""
    expected = {(result["configuration"], result["case"]): result["apple"] for result in results}
    label = "PostgreSQL" if database else "SQLite"
    failures = runs = accepted = 0
    for configuration_name, environments in SERVER_CONFIGURATIONS.items():
        data_dir = tempfile.mkdtemp(prefix="differential-server-", dir=work)
        with open(os.path.join(data_dir, "countersign.json"), "w") as file:
            json.dump(deployment(root_der, bundle_id, app_apple_id, environments), file)
        if database:
            reset_postgres(database)
        process, port = start_server(binary, data_dir, database=database)
        try:
            connection = connect(port)
            for index, case in enumerate(cases):
                if not case.get("server", case["kind"] == "transaction"):
                    continue
                apple = expected[(configuration_name, case["name"])]
                ours, reason, recorded = post(connection, case, index)
                verdict = judge(apple, ours, reason)
                if ours == "OK" and not recorded:
                    verdict = "DISAGREE"  # accepted but not recorded
                if ours.startswith("HTTP_") and apple != "OK":
                    verdict = "agree"  # refused before verification (no app for its bundle id)
                runs += 1
                accepted += ours == "OK"
                if verdict == "DISAGREE":
                    failures += 1
                    print("DISAGREE server/%s %-12s %-58s apple=%-24s server=%s %s" % (
                        label, configuration_name, case["name"], apple, ours, reason))
        finally:
            process.terminate()
            process.wait(timeout=30)
    print("== server path (%s): %d posts, %d accepted and recorded, %d disagreements" % (label, runs, accepted, failures))
    return failures == 0


def reset_postgres(url):
    """Empties the test database so each configuration starts fresh."""
    subprocess.run(["psql", url.split("?")[0], "-q", "-c", "DROP SCHEMA public CASCADE; CREATE SCHEMA public;"],
                   check=True, capture_output=True)

