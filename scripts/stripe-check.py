#!/usr/bin/env python3
"""Web purchases through Stripe against a real stand-in (issue 52, acceptance 1 and 2).

Starts `localstripe` (PyPI) and the server with the app's `stripe` settings pointed at it, and
drives Stripe with Stripe's own Python library (`stripe`, PyPI) as a team's web backend would:

- a customer subscribes (metadata `app_user_id`), the app posts the subscription id to
  `POST /v1/receipts` with `X-Platform: stripe`, and the signed CustomerInfo grants `pro`
  (store `stripe`, sandboxed: Stripe's test mode);
- a second customer subscribes on the web only: localstripe's own signed webhook
  (`customer.subscription.created`) reaches `POST /v1/notifications/stripe/{app}`, and the
  server, reading the subscription back from Stripe, grants it to the app user its metadata names;
- that subscription is cancelled at once: localstripe's `customer.subscription.deleted` ends it;
- a cancellation at the period's end (an update localstripe makes without an event) is told by
  Stripe's documented `customer.subscription.updated` payload, signed by this script: auto-renew
  goes off, access stays; resumed, it comes back on;
- a customer who subscribes without an app user id gets a redemption link from the web
  backend (secret key), and the app redeems it once (`POST /v1/subscribers/redeem_purchase`);
  used again, by anyone, it is refused with RevenueCat's codes;
- the attacks, each refused with its stable code and nothing changed: a forged event (another
  secret), a replayed one (signed ten minutes ago), one delivered twice (the second changes
  nothing), another Stripe account's event, a subscription id of another account, a price the app
  does not map, a status claimed by the client, and another customer's subscription.

    python3 scripts/stripe-check.py --binary .build/debug/countersign [--database postgres://...]
"""
import argparse
import hashlib
import hmac
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from countersign_process import app_keys, call, connect, start_server  # noqa: E402

# The stand-in and Stripe's library, pinned, in a virtual environment of their own.
PACKAGES = ["localstripe==1.15.10", "stripe==16.1.0"]
VENV = os.path.join(os.path.dirname(HERE), ".build", "stripe-venv")


def run_in_venv():
    """Runs this script again in VENV (made once, with PACKAGES) unless it already runs there."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    python = os.path.join(VENV, "bin", "python")
    marker = os.path.join(VENV, "installed-" + "-".join(PACKAGES))
    if not os.path.exists(marker):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + PACKAGES, check=True)
        open(marker, "w").close()
    os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])


SECRET_KEY = "sk_test_countersign"
WEBHOOK_SECRET = "whsec_countersign_check"
failures = []


def check(condition, message):
    print("ok  " if condition else "FAIL", message, flush=True)
    if not condition:
        failures.append(message)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_localstripe():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "localstripe", "--port", str(port), "--from-scratch"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, port
        except OSError:
            time.sleep(0.1)
    sys.exit("localstripe did not start")


def configure(data_dir, stripe_port, plan_id):
    path = os.path.join(data_dir, "countersign.json")
    configuration = json.load(open(path))
    app = configuration["apps"][0]
    app["stripe"] = {
        "secretKey": SECRET_KEY, "webhookSecrets": ["whsec_rotated_out", WEBHOOK_SECRET],
        "apiBaseURL": "http://127.0.0.1:%d" % stripe_port, "products": {plan_id: "pro_monthly"},
        "customerPortalURL": "https://billing.example.com/portal",
    }
    with open(path, "w") as handle:
        json.dump(configuration, handle, indent=1)
    return app["id"]


def post_stripe(connection, public, user, token, extra=None):
    body = dict(extra or {}, app_user_id=user, fetch_token=token)
    headers = {"Authorization": "Bearer " + public, "Content-Type": "application/json", "X-Platform": "stripe"}
    connection.request("POST", "/v1/receipts", body=json.dumps(body), headers=headers)
    response = connection.getresponse()
    return response.status, json.loads(response.read() or b"{}")


def customer_info(connection, public, user):
    status, body = call(connection, "GET", "/v1/subscribers/" + user, public)
    assert status == 200, (status, body)
    return json.loads(body)["subscriber"]


def send_event(connection, app_id, event, secret=WEBHOOK_SECRET, at=None):
    payload = json.dumps(event).encode()
    stamp = int(at if at is not None else time.time())
    signature = hmac.new(secret.encode(), b"%d." % stamp + payload, hashlib.sha256).hexdigest()
    connection.request("POST", "/v1/notifications/stripe/" + app_id, body=payload,
                       headers={"Content-Type": "application/json", "Stripe-Signature": "t=%d,v1=%s" % (stamp, signature)})
    response = connection.getresponse()
    return response.status, json.loads(response.read() or b"{}")


def event_about(subscription, kind="customer.subscription.updated", **extra):
    """An event as Stripe documents it: its id, type, and the object it is about."""
    return dict({"id": "evt_%s" % os.urandom(8).hex(), "object": "event", "type": kind, "created": int(time.time()),
                 "livemode": False, "api_version": "2024-06-20",
                 "data": {"object": {"id": subscription, "object": "subscription", "status": "active"}}}, **extra)


def wait_for(predicate, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return False


def active(info, entitlement="pro"):
    grant = info["entitlements"].get(entitlement)
    return grant is not None and (grant["expires_date"] is None or grant["expires_date"] > time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database")
    arguments = parser.parse_args()
    run_in_venv()
    global stripe
    import stripe
    data = tempfile.mkdtemp(prefix="stripe-check-")
    localstripe, stripe_port = start_localstripe()
    server = None
    try:
        stripe.api_key = SECRET_KEY
        stripe.api_base = "http://127.0.0.1:%d" % stripe_port
        product = stripe.Product.create(name="Pro")
        plan = stripe.Plan.create(id="pro_monthly_web", product=product.id, amount=999, currency="usd", interval="month")
        other = stripe.Plan.create(id="merch_monthly", product=stripe.Product.create(name="Merch").id, amount=500, currency="usd",
                                   interval="month")

        def customer():
            token = stripe.Token.create(card={"number": "4242424242424242", "exp_month": 12, "exp_year": 2030, "cvc": "123"})
            return stripe.Customer.create(source=token.id)

        if arguments.database:
            subprocess.run(["psql", "-q", arguments.database, "-c", "DROP SCHEMA public CASCADE; CREATE SCHEMA public"], check=True,
                           capture_output=True)
        process, _ = start_server(arguments.binary, data, arguments.database)
        process.terminate()
        process.wait(timeout=30)
        app_id = configure(data, stripe_port, plan.id)
        server, port = start_server(arguments.binary, data, arguments.database)
        public, secret = app_keys(data)
        connection = connect(port)
        webhook_url = "http://127.0.0.1:%d/v1/notifications/stripe/%s" % (port, app_id)
        hook = http.client.HTTPConnection("127.0.0.1", stripe_port, timeout=10)
        hook.request("POST", "/_config/webhooks/countersign", body="url=%s&secret=%s" % (webhook_url, WEBHOOK_SECRET),
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert hook.getresponse().status == 200

        # 1. Subscribed on the web, posted by the app.
        first = stripe.Subscription.create(customer=customer().id, items=[{"plan": plan.id}], metadata={"app_user_id": "web-1"})
        status, answer = post_stripe(connection, public, "web-1", first.id)
        check(status == 200, "the posted subscription answers 200 (got %d %s)" % (status, answer))
        info = answer.get("subscriber", {})
        check(active(info), "the posted subscription grants pro")
        record = info.get("subscriptions", {}).get("pro_monthly", {})
        check(record.get("store") == "stripe" and record.get("is_sandbox") is True, "stored as stripe, test mode sandboxed: %s" % record)
        check(info.get("management_url") == "https://billing.example.com/portal", "management_url is the customer portal")

        # 2. Subscribed on the web only: localstripe's signed webhook brings it in.
        second = stripe.Subscription.create(customer=customer().id, items=[{"plan": plan.id}], metadata={"app_user_id": "web-2"})
        check(wait_for(lambda: active(customer_info(connection, public, "web-2"))),
              "localstripe's customer.subscription.created grants web-2 pro without a post")

        # 3. Cancelled at once: localstripe's customer.subscription.deleted ends it.
        stripe.Subscription.delete(second.id)
        check(wait_for(lambda: not active(customer_info(connection, public, "web-2"))), "the cancellation ends web-2's access")

        # 4. Cancelled at the period's end: told by Stripe's documented event, signed here.
        stripe.Subscription.modify(first.id, cancel_at_period_end=True)
        status, body = send_event(connection, app_id, event_about(first.id))
        check(status == 200 and body.get("status") == "applied", "a signed customer.subscription.updated is applied (%d %s)" % (status, body))
        info = customer_info(connection, public, "web-1")
        check(active(info) and info["subscriptions"]["pro_monthly"]["unsubscribe_detected_at"] is not None,
              "cancel at period end: access stays, auto-renew off")

        # 4b. Resumed before the period ends: auto-renew back on.
        stripe.Subscription.modify(first.id, cancel_at_period_end=False)
        status, body = send_event(connection, app_id, event_about(first.id))
        info = customer_info(connection, public, "web-1")
        check(status == 200 and active(info) and info["subscriptions"]["pro_monthly"]["unsubscribe_detected_at"] is None,
              "resumed (cancel_at_period_end false again): auto-renew back on (%d %s)" % (status, body))
        stripe.Subscription.modify(first.id, cancel_at_period_end=True)
        send_event(connection, app_id, event_about(first.id))

        # 5. Bought on the web without an app user id: a redemption link binds it in the app.
        buyer = stripe.Customer.create(email="buyer@example.com", source=stripe.Token.create(
            card={"number": "4242424242424242", "exp_month": 12, "exp_year": 2030, "cvc": "123"}).id)
        anonymous = stripe.Subscription.create(customer=buyer.id, items=[{"plan": plan.id}])
        status, body = call(connection, "POST", "/v1/admin/stripe/redemption_links", public, {"fetch_token": anonymous.id})
        check(status == 403, "the app's public key makes no redemption link (%d)" % status)
        status, body = call(connection, "POST", "/v1/admin/stripe/redemption_links", secret, {"fetch_token": anonymous.id})
        link = json.loads(body or b"{}")
        check(status == 201 and "://redeem_web_purchase?redemption_token=" in link.get("redemption_link", ""),
              "the web backend's secret key makes a redemption link (%d %s)" % (status, link))
        check(link.get("obfuscated_email") == "b***@e******.**m", "the link names the buyer's email, obfuscated: %s" % link)
        token = link.get("redemption_token", "")

        def redeem(user, token):
            status, body = call(connection, "POST", "/v1/subscribers/redeem_purchase", public,
                                {"app_user_id": user, "redemption_token": token})
            return status, json.loads(body or b"{}")

        status, body = redeem("web-4", token)
        check(status == 200 and active(body.get("subscriber", {})), "the link redeemed by web-4 grants pro (%d)" % status)
        status, body = redeem("web-5", token)
        check(status == 403 and body.get("code") == 7852, "the same link by another user: 403/7852 (%d %s)" % (status, body))
        status, body = redeem("web-4", token)
        check(status == 403 and body.get("code") == 7849, "the same link again: 403/7849, a link works once (%d %s)" % (status, body))
        status, body = redeem("web-5", "A" * 43)
        check(status == 403 and body.get("code") == 7849, "a token the server never made: 403/7849 (%d %s)" % (status, body))
        check(not active(customer_info(connection, public, "web-5")), "no refused redemption granted anything")

        # 6. The attacks.
        before = customer_info(connection, public, "web-1")
        event = event_about(first.id)
        status, body = send_event(connection, app_id, event, secret="whsec_forged")
        check(status == 400 and body.get("code") == 4221, "a forged event is refused 400/4221 (%d %s)" % (status, body))
        status, body = send_event(connection, app_id, event, at=time.time() - 600)
        check(status == 400 and body.get("code") == 4221, "a replay signed ten minutes ago is refused 400/4221 (%d %s)" % (status, body))
        status, body = send_event(connection, app_id, event)
        status_again, body_again = send_event(connection, app_id, event)
        check(status == 200 and status_again == 200 and body_again.get("status") == "duplicate",
              "an event delivered twice changes nothing the second time (%s)" % body_again)
        status, body = send_event(connection, app_id, event_about(first.id, account="acct_someone_else"))
        check(status == 422 and body.get("code") == 4222, "another account's event is refused 422/4222 (%d %s)" % (status, body))
        status, body = post_stripe(connection, public, "web-3", "sub_NotInThisAccount")
        check(status == 422 and body.get("code") == 4224, "another account's subscription is refused 422/4224 (%d %s)" % (status, body))
        merch = stripe.Subscription.create(customer=customer().id, items=[{"plan": other.id}], metadata={"app_user_id": "web-3"})
        status, body = post_stripe(connection, public, "web-3", merch.id)
        check(status == 422 and body.get("code") == 4223, "a price the app does not map is refused 422/4223 (%d %s)" % (status, body))
        status, body = post_stripe(connection, public, "web-2", second.id, extra={"status": "active", "expires_date": "2099-01-01T00:00:00Z"})
        check(status == 200 and not active(body.get("subscriber", {})), "a cancelled subscription stays ended whatever the client claims")
        status, body = post_stripe(connection, public, "mallory", first.id)
        check(status == 409 and body.get("code") == 4210, "another customer's subscription is refused 409/4210 (%d %s)" % (status, body))
        check(not active(customer_info(connection, public, "mallory")) and not active(customer_info(connection, public, "web-3")),
              "no refused request granted anything")
        after = customer_info(connection, public, "web-1")
        check(after["subscriptions"] == before["subscriptions"], "web-1's subscription is unchanged by the attacks")
        connection.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        localstripe.terminate()
        localstripe.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
    print("stripe check: %d failures" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
