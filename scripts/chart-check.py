#!/usr/bin/env python3
"""The revenue charts against an independent computation (issue 51, acceptance 1).

A seeded generator writes five months of history as RevenueCat's transactions export: customers
first seen over the months, prices in several currencies converted by dated rate tables (the
yen in neither, the pound only in the older: missing from then on), free
trials that convert and that lapse, monthly, weekly and yearly subscriptions that renew, lapse
into a grace period, expire and come back, monthly ones upgraded to yearly partway through a
month, refunds, family sharing, one-time purchases (all on the App Store's sandbox side, the one
an app may take beside the test store). It is imported with `countersign import revenuecat`;
then a second file arrives late and out of order (renewals held back, later copies of rows now
refunded), as notifications do; then the test store sells a few purchases today, refunds 40 % of
one (Apple's prorated refund), and a few apps launch for the first time.

From the same generated records this script computes every point of every chart itself, from
RevenueCat's definitions as docs/dashboard.md states them, by brute force (each period, each
subscription, each transaction: none of the server's sweeps or indexes), and compares:

- the admin API's JSON (`GET /v1/admin/charts/{chart}`) for every chart by day, week and month,
  unfiltered and filtered by product, environment, store and country;
- the dashboard's CSV download (`/dashboard/charts/{chart}?format=csv`, signed in with the secret
  key) for every chart by week.

The server answers from the daily sums it keeps as records change (docs/architecture.md,
"Revenue charts"); this is the check that they equal the definitions over the records.
Numbers are compared as the server writes them (dollars to the cent, rates to four decimals).
Exit 0 when every point agrees, 1 otherwise (each disagreement printed).

    python3 scripts/chart-check.py --binary .build/debug/countersign [--database postgres://...] [--seed 51]
"""
import argparse
import base64
import calendar
import csv
import http.client
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

from countersign_process import app_keys, call, connect, start_server

DAY = 86_400_000
PRODUCTS = {
    # id: (kind, days a period, ISO period, US dollar price)
    "pro_weekly": ("autoRenewable", 7, "P1W", "2.99"),
    "pro_monthly": ("autoRenewable", 30, "P1M", "9.99"),
    "pro_yearly": ("autoRenewable", 365, "P1Y", "59.99"),
    "lifetime": ("nonConsumable", None, None, "49.99"),
    "coins_100": ("consumable", None, None, "0.99"),
}
# Prices in each currency; JPY has no rate in the configuration (counted apart, never guessed).
LOCAL_PRICES = {
    "USD": {"pro_weekly": "2.99", "pro_monthly": "9.99", "pro_yearly": "59.99", "lifetime": "49.99", "coins_100": "0.99"},
    "EUR": {"pro_weekly": "2.99", "pro_monthly": "9.49", "pro_yearly": "54.99", "lifetime": "44.99", "coins_100": "0.99"},
    "GBP": {"pro_weekly": "2.49", "pro_monthly": "7.99", "pro_yearly": "49.99", "lifetime": "39.99", "coins_100": "0.89"},
    "JPY": {"pro_weekly": "400", "pro_monthly": "1500", "pro_yearly": "9800", "lifetime": "7000", "coins_100": "160"},
}
# The dated rate tables: RATES_BEFORE until this day of the history, then RATES (no yen in either;
# no pound in the later one: a pound price from that day on is missing, not converted at the old rate).
RATES_BEFORE = {"EUR": 1.05, "GBP": 1.25}
RATE_CHANGE_DAY = 45
RATES = {"EUR": 1.08}
COMMISSION = 0.15
# The app leaves the Small Business Program on this day of the history (`commissionChanges`).
COMMISSION_CHANGE_DAY = 75
COMMISSION_AFTER = 0.3
CHARTS = ["revenue", "mrr", "active_subscriptions", "active_trials", "new_customers", "churn", "refunds", "trial_conversion"]
COLUMNS = {
    "revenue": [("revenue_usd", "usd"), ("proceeds_usd", "usd"), ("transactions", "count"), ("unpriced_transactions", "count")],
    "mrr": [("mrr_usd", "usd"), ("active_subscriptions", "count"), ("unpriced_subscriptions", "count")],
    "active_subscriptions": [("active_subscriptions", "count")],
    "active_trials": [("active_trials", "count")],
    "new_customers": [("new_customers", "count")],
    "churn": [("actives", "count"), ("churned", "count"), ("resubscribed", "count"), ("churn_rate", "rate")],
    "refunds": [("transactions", "count"), ("refunded", "count"), ("refund_rate", "rate")],
    "trial_conversion": [("new_customers", "count"), ("trials", "count"), ("converted", "count"), ("pending", "count"),
                         ("abandoned", "count"), ("start_rate", "rate"), ("conversion_rate", "rate")],
}


# --- Dates -------------------------------------------------------------------------------------

def day_text(ms):
    return time.strftime("%Y-%m-%d", time.gmtime(ms // 1000))


def day_start(ms):
    return ms - ms % DAY


def periods(from_ms, to_ms, resolution):
    """[(label, start, end)] of the periods holding from_ms .. to_ms (day starts), whole."""
    def start_of(ms):
        if resolution == "day":
            return day_start(ms)
        if resolution == "week":
            days = ms // DAY
            return (days - (days + 3) % 7) * DAY  # Monday; 1970-01-01 was a Thursday
        t = time.gmtime(ms // 1000)
        return calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)) * 1000

    def after(ms):
        if resolution == "day":
            return ms + DAY
        if resolution == "week":
            return ms + 7 * DAY
        t = time.gmtime(ms // 1000)
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        return calendar.timegm((year, month, 1, 0, 0, 0)) * 1000

    out = []
    start = start_of(from_ms)
    while start <= to_ms:
        end = after(start)
        out.append((day_text(start), start, end))
        start = end
    return out


def stamp(ms):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000))


# --- The history -------------------------------------------------------------------------------

class History:
    """Every transaction the server will hold, as plain records, and the customers' first sight."""

    def __init__(self):
        self.transactions = {}  # id -> record
        self.customers = {}  # app user id -> first seen ms
        self.rows_first = []  # export rows of the first file
        self.rows_late = []  # export rows of the late file

    def add(self, record, late=False):
        self.transactions[record["id"]] = record
        (self.rows_late if late else self.rows_first).append(dict(record))


def generate(seed, window_start, window_end, customers):
    """The history: `customers` customers first seen in [window_start, window_end)."""
    rng = random.Random(seed)
    history = History()
    serial = [0]

    def next_id():
        serial[0] += 1
        return "20000%010d" % serial[0]

    for index in range(customers):
        user = "cust-%04d" % index
        seen = window_start + rng.randrange((window_end - window_start) // 60_000) * 60_000
        history.customers[user] = seen
        # An app takes App Store purchases of one side (Production or Sandbox) beside the test
        # store's only on the sandbox side: the history is the sandbox's, the test store sells today.
        environment = "Sandbox"
        currency = rng.choice(["USD", "USD", "USD", "EUR", "GBP", "JPY"])
        country = {"USD": "US", "EUR": rng.choice(["DE", "FR"]), "GBP": "GB", "JPY": "JP"}[currency]
        family = rng.random() < 0.04
        roll = rng.random()

        def record(product, start, end=None, trial=False, chain=None, refunded=None, grace=None):
            ident = next_id()
            price = "0" if trial else LOCAL_PRICES[currency][product]
            return {
                "id": ident, "chain": chain or ident, "product": product, "kind": PRODUCTS[product][0], "environment": environment,
                "purchase": start, "expires": max(end, grace) if grace else end, "end_time": end, "grace": grace, "refunded": refunded,
                "trial": trial, "family": family, "price": price, "currency": currency, "owner": user, "first_seen": seen,
                "country": country,
            }

        if roll < 0.30:
            continue  # a customer who bought nothing (not in RevenueCat's export: seen only through the first launch)
        if roll < 0.40:
            product = rng.choice(["lifetime", "coins_100"])
            start = seen + rng.randrange(3 * DAY // 60_000) * 60_000
            refunded = start + rng.randrange(1, 5) * DAY if rng.random() < 0.2 else None
            history.add(record(product, start, refunded=refunded if refunded and refunded < window_end else None))
            continue
        product = rng.choice(["pro_weekly", "pro_monthly", "pro_monthly", "pro_yearly"])
        length = PRODUCTS[product][1] * DAY
        start = seen + rng.randrange(2 * DAY // 60_000) * 60_000
        chain = None
        first = True
        if rng.random() < 0.45:  # a free trial first
            trial_end = start + 7 * DAY
            trial = record(product, start, trial_end, trial=True)
            history.add(trial)
            chain = trial["id"]
            if rng.random() < 0.45 or trial_end >= window_end:
                continue  # lapsed (or still running at the end of the history)
            start = trial_end
        renewals = rng.randrange(1, 8)
        for number in range(renewals):
            if start >= window_end:
                break
            end = start + length
            refunded = None
            if rng.random() < 0.06:
                refunded = start + rng.randrange(1, 6) * DAY
                refunded = refunded if refunded < window_end else None
            grace = end + 6 * DAY if number == renewals - 1 and rng.random() < 0.15 else None
            late = not first and rng.random() < 0.15  # a renewal whose notification comes late
            one = record(product, start, end, chain=chain, refunded=refunded, grace=grace)
            history.add(one, late=late)
            chain = chain or one["id"]
            first = False
            start = end
            if rng.random() < 0.12:  # expires, comes back after a gap
                start = end + rng.randrange(3, 25) * DAY
            if product == "pro_monthly" and rng.random() < 0.1:  # upgraded to yearly partway through the month
                start = one["purchase"] + rng.randrange(1, length // 60_000) * 60_000
                product, length = "pro_yearly", PRODUCTS["pro_yearly"][1] * DAY
    # Refunds learnt late: later copies of rows, now refunded.
    paid = [t for t in history.transactions.values() if not t["trial"] and t["refunded"] is None and t["purchase"] + 2 * DAY < window_end]
    for one in rng.sample(paid, min(len(paid), max(3, len(paid) // 25))):
        one["refunded"] = one["purchase"] + 2 * DAY
        history.rows_late.append(dict(one, updated=one["refunded"] + DAY))
    return history


def export(rows, path):
    """RevenueCat's transactions export of `rows` (the columns the import reads)."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([
            "rc_original_app_user_id", "rc_last_seen_app_user_id_alias", "first_seen_time", "product_identifier", "start_time",
            "end_time", "grace_period_end_time", "store", "is_auto_renewable", "is_trial_period", "is_in_intro_offer_period",
            "is_sandbox", "store_transaction_id", "original_store_transaction_id", "refunded_at", "purchased_currency",
            "purchase_price_in_purchased_currency", "ownership_type", "updated_at", "country",
        ])
        for row in rows:
            writer.writerow([
                row["owner"], row["owner"], stamp(row["first_seen"]), row["product"], stamp(row["purchase"]),
                stamp(row["end_time"]) if row["end_time"] else "", stamp(row["grace"]) if row["grace"] else "", "app_store",
                "true" if row["kind"] == "autoRenewable" else "false", "true" if row["trial"] else "false", "false",
                "true" if row["environment"] == "Sandbox" else "false", row["id"], row["chain"],
                stamp(row["refunded"]) if row["refunded"] else "", row["currency"], row["price"],
                "FAMILY_SHARED" if row["family"] else "PURCHASED", stamp(row.get("updated") or row["purchase"]), row["country"],
            ])


# --- The independent computation ---------------------------------------------------------------

def milliunits(text):
    whole, _, fraction = text.partition(".")
    return int(whole) * 1000 + int((fraction + "000")[:3])


def round_away(value):
    """Round half away from zero, exactly (Swift's `rounded()`)."""
    floor = math.floor(value)
    return int(floor + 1 if value - floor >= 0.5 else floor) if value >= 0 else -round_away(-value)


RATE_CHANGE_MS = [None]


def usd_rate(currency, day_ms):
    """US dollars per unit on the day starting at `day_ms`: the table of that day (the older one
    before the change, which is also the oldest); None when that table has none."""
    if currency == "USD":
        return 1.0
    return (RATES_BEFORE if day_ms < RATE_CHANGE_MS[0] else RATES).get(currency)


def usd_micros(milli, currency, day_ms, factor=1.0):
    """`milli` thousandths of `currency` in micro-dollars at `day_ms`'s rate, rounded; None without a rate."""
    rate = usd_rate(currency, day_ms)
    if rate is None:
        return None
    return round_away(float(milli) * 1000 * rate * factor)


def price_milli(t):
    """The price as money: None without a price or currency (or past a billion units)."""
    if t["price"] is None or not t["currency"]:
        return None
    milli = milliunits(t["price"])
    return milli if abs(milli) <= 10**12 else None


def dollars(micros):
    return "%.2f" % (round_away(micros / 10_000) / 100)


def rate(part, whole):
    return "" if whole == 0 else "%.4f" % (part / whole)


CHANGE_MS = [None]


def commission(purchase_ms):
    """The commission of a purchase's day: COMMISSION before the change, COMMISSION_AFTER from it."""
    return COMMISSION_AFTER if purchase_ms >= CHANGE_MS[0] else COMMISSION


def paid(t):
    return not t["trial"] and not t["family"]


def refunded(t):
    return t["refunded"] is not None


def kept_share(t):
    """What a refund left: all of it without one, none for a full one, the rest of a prorated one."""
    if t["refunded"] is None:
        return 1.0
    share = t.get("share")
    return 0.0 if share is None or not 0 <= share < 100_000 else (100_000 - share) / 100_000


def store_of(t):
    return "test_store" if t["environment"] == "TestStore" else "app_store"


def admits(t, filters):
    return all((store_of(t) if k == "store" else t[k]) == v for k, v in filters.items())


def spans(transactions):
    """Each auto-renewable transaction's [start, end): to its expiry (grace included), cut by a
    refund, ending where its subscription's next transaction begins."""
    chains = {}
    for t in transactions:
        if t["kind"] == "autoRenewable" and t["expires"] is not None:
            chains.setdefault(t["chain"], []).append(t)
    out = {}
    for chain in chains.values():
        chain.sort(key=lambda t: (t["purchase"], t["id"]))
        for index, t in enumerate(chain):
            end = t["expires"]
            if t["refunded"] is not None:
                end = min(end, t["refunded"])
            if index + 1 < len(chain):
                end = min(end, chain[index + 1]["purchase"])
            if end > t["purchase"]:
                out[t["id"]] = (t["purchase"], end)
    return out


def factor(product):
    period = PRODUCTS[product][2]
    count, unit = int(period[1:-1]), period[-1]
    return {"D": 30 / count, "W": 4 / count, "M": 1 / count, "Y": 1 / (12 * count)}[unit]


def runs(transactions, span):
    """Each subscription's paid access joined where a renewal follows without a gap: [start, end,
    the transaction that began it, the one that ended it]."""
    out = {}
    for t in sorted((t for t in transactions if paid(t) and t["id"] in span), key=lambda t: span[t["id"]]):
        s, e = span[t["id"]]
        chain = out.setdefault(t["chain"], [])
        if chain and s <= chain[-1][1]:
            if e > chain[-1][1]:
                chain[-1][1], chain[-1][3] = e, t
        else:
            chain.append([s, e, t, t])
    return [run for chain in out.values() for run in chain], {c: chain for c, chain in out.items()}


def expected(chart, transactions, customers, resolution, from_ms, to_ms, now, filters):
    """The chart's points, as text, by brute force over every record (definitions 2): access is
    worked out over all of a subscription's transactions, then a filter keeps the transactions (or
    the expiry's and comeback's transaction, or the customer's first trial) it admits; nothing
    after now counts."""
    points = []
    span = spans(transactions)
    chosen = [t for t in transactions if admits(t, filters)]
    all_runs, by_chain = runs(transactions, span)
    for label, start, end in periods(from_ms, to_ms, resolution):
        if start > now:
            points.append((label, [""] * len(COLUMNS[chart])))
            continue
        instant = min(end - 1, now)
        if chart in ("revenue", "refunds"):
            bought = [t for t in chosen if paid(t) and start <= t["purchase"] < end and t["purchase"] <= now]
            if chart == "refunds":
                gone = sum(1 for t in bought if refunded(t))
                points.append((label, [str(len(bought)), str(gone), rate(gone, len(bought))]))
                continue
            kept = [t for t in bought if kept_share(t) > 0]
            sums, priced = {}, 0
            for t in kept:
                milli = price_milli(t)
                if milli is not None and usd_rate(t["currency"], day_start(t["purchase"])) is not None:
                    key = (day_start(t["purchase"]), t["currency"])
                    sums[key] = sums.get(key, 0) + round_away(float(milli) * kept_share(t))
                    priced += 1
            revenue = proceeds = 0
            for (day, currency), milli in sums.items():
                micros = usd_micros(milli, currency, day)
                revenue += micros
                proceeds += round_away(float(micros) * (1 - commission(day)))
            points.append((label, [dollars(revenue), dollars(proceeds), str(len(kept)), str(len(kept) - priced)]))
        elif chart in ("mrr", "active_subscriptions", "active_trials"):
            wanted = (lambda t: t["trial"] and not t["family"]) if chart == "active_trials" else paid
            active = [t for t in chosen if wanted(t) and t["id"] in span and span[t["id"]][0] <= instant < span[t["id"]][1]]
            if chart != "mrr":
                points.append((label, [str(len(active))]))
                continue
            sums, priced = {}, 0
            for t in active:
                milli = price_milli(t)
                if milli is not None and usd_rate(t["currency"], day_start(instant)) is not None:
                    sums[(t["currency"], t["product"])] = sums.get((t["currency"], t["product"]), 0) + milli
                    priced += 1
            total = sum(usd_micros(milli, currency, day_start(instant), factor(product)) for (currency, product), milli in sums.items())
            points.append((label, [dollars(total), str(len(active)), str(len(active) - priced)]))
        elif chart == "new_customers":
            points.append((label, [str(sum(1 for seen in customers.values() if start <= seen < end and seen <= now))]))
        elif chart == "churn":
            actives = sum(1 for t in chosen if paid(t) and t["id"] in span and span[t["id"]][0] < start <= span[t["id"]][1])
            churned = sum(1 for _, e, _, last in all_runs if start <= e < end and e <= now and admits(last, filters))
            back = sum(1 for chain in by_chain.values() for s, _, first, _ in chain[1:] if start <= s < end and s <= now and admits(first, filters))
            points.append((label, [str(actives), str(churned), str(back), rate(churned - back, actives)]))
        elif chart == "trial_conversion":
            first = {}
            for t in transactions:
                if t["trial"] and not t["family"] and t["owner"] is not None and t["first_seen"] is not None:
                    held = first.get(t["owner"])
                    if held is None or (t["purchase"], t["id"]) < (held["purchase"], held["id"]):
                        first[t["owner"]] = t
            new = sum(1 for seen in customers.values() if start <= seen < end and seen <= now)
            cohort = [t for t in first.values() if start <= t["first_seen"] < end and t["first_seen"] <= now and admits(t, filters)]
            converted = pending = 0
            for trial in cohort:
                if any(paid(t) and not refunded(t) and t["chain"] == trial["chain"] and t["purchase"] >= trial["purchase"] for t in transactions):
                    converted += 1
                elif trial["id"] in span and span[trial["id"]][0] <= now < span[trial["id"]][1]:
                    pending += 1
            points.append((label, [str(new), str(len(cohort)), str(converted), str(pending), str(len(cohort) - converted - pending),
                                   rate(len(cohort), new), rate(converted, len(cohort))]))
    return points


def server_points(answer, chart):
    """The server's JSON points written as the CSV writes them."""
    out = []
    for point in answer["points"]:
        cells = []
        for name, unit in COLUMNS[chart]:
            value = point[name]
            if value is None:
                cells.append("")
            elif unit == "count":
                cells.append(str(int(value)))
            elif unit == "usd":
                cells.append("%.2f" % value)
            else:
                cells.append("%.4f" % value)
        out.append((point["period"], cells))
    return out


# --- The run -----------------------------------------------------------------------------------

def configure(data_dir, change_ms=None, rate_change_ms=None):
    """The app's products, commission and rates (two dated tables when `rate_change_ms` is given,
    the older one alone otherwise)."""
    path = os.path.join(data_dir, "countersign.json")
    configuration = json.load(open(path))
    app = configuration["apps"][0]
    app["environments"] = ["Sandbox", "TestStore"]
    app["commissionPercentage"] = COMMISSION
    if change_ms is not None:
        app["commissionChanges"] = [{"from": day_text(change_ms), "percentage": COMMISSION_AFTER}]
    if rate_change_ms is None:
        app["usdExchangeRates"] = {"asOf": "2026-11-01", "usdPerUnit": RATES_BEFORE}
    else:
        app["usdExchangeRateHistory"] = [{"asOf": day_text(rate_change_ms - 30 * DAY), "usdPerUnit": RATES_BEFORE}]
        app["usdExchangeRates"] = {"asOf": day_text(rate_change_ms), "usdPerUnit": RATES}
    known = {product["id"]: product for product in app["products"]}
    for ident, (kind, _, period, price) in PRODUCTS.items():
        product = known.get(ident) or {"id": ident, "type": kind, "entitlements": ["pro"] if kind != "consumable" else []}
        product.update({"type": kind, "price": price, "currency": "USD", "displayName": ident, "description": ident})
        if period:
            product["subscriptionPeriod"] = period
        known[ident] = product
    app["products"] = list(known.values())
    with open(path, "w") as handle:
        json.dump(configuration, handle, indent=1)


def jws_payload(jws):
    segment = jws.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))


def sell_today(port, public, secret, history, count):
    """Test-store purchases posted now, and first launches: recorded as the server records them."""
    connection = connect(port)
    for index in range(count):
        user = "live-%d" % index
        product = ["pro_monthly", "pro_yearly", "coins_100"][index % 3]
        status, body = call(connection, "POST", "/v1/test_store/purchases", public, {"app_user_id": user, "product_id": product})
        assert status == 200, body
        jws = json.loads(body)["signed_transaction"]
        before = int(time.time() * 1000)
        status, body = call(connection, "POST", "/v1/receipts", public, {"app_user_id": user, "fetch_token": jws})
        assert status == 200, body
        payload = jws_payload(jws)
        trial = payload.get("offerType") == 1 and payload.get("offerDiscountType") == "FREE_TRIAL"
        history.customers[user] = before
        history.transactions[payload["transactionId"]] = {
            "id": payload["transactionId"], "chain": payload["originalTransactionId"], "product": product,
            "kind": PRODUCTS[product][0], "environment": "TestStore", "purchase": payload["purchaseDate"],
            "expires": payload.get("expiresDate"), "refunded": None, "trial": trial, "family": False,
            "price": None if payload.get("price") is None else "%d.%03d" % divmod(payload["price"], 1000),
            "currency": payload.get("currency"), "owner": user, "first_seen": before,
            "country": {"USA": "US"}.get(payload.get("storefront")),
        }
    # Apple refunds 40 % of one (a prorated refund): it keeps 60 % of its price.
    bought = [t for t in history.transactions.values() if t["environment"] == "TestStore" and t["product"] == "pro_yearly"]
    status, body = call(connection, "POST", "/v1/admin/test_store/refund", secret,
                        {"transaction_id": bought[0]["id"], "revocation_percentage": 40_000})
    assert status == 200, body
    bought[0]["refunded"] = json.loads(body)["transactions"][0]["revocation_date_ms"]
    bought[0]["share"] = 40_000
    for index in range(count):
        user = "$RCAnonymousID:%032x" % (index + 1)
        history.customers[user] = int(time.time() * 1000)
        status, _ = call(connection, "GET", "/v1/subscribers/" + urllib.parse.quote(user, safe=""), public)
        assert status == 200
    connection.close()


def dashboard_session(port, secret):
    """A signed-in dashboard session's cookie header."""
    connection = connect(port)
    connection.request("GET", "/dashboard/login")
    response = connection.getresponse()
    page = response.read().decode()
    cookies = [line.split(";")[0] for name, line in response.getheaders() if name.lower() == "set-cookie"]
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    body = urllib.parse.urlencode({"csrf_token": token, "secret_key": secret})
    connection.request("POST", "/dashboard/login", body=body,
                       headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": "; ".join(cookies)})
    response = connection.getresponse()
    response.read()
    cookies += [line.split(";")[0] for name, line in response.getheaders() if name.lower() == "set-cookie"]
    assert response.status == 303, response.status
    return "; ".join(cookies)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", help="a PostgreSQL URL of a database for this check alone: it is emptied first (default: SQLite "
                        "in a temporary data directory)")
    parser.add_argument("--seed", type=int, default=51)
    parser.add_argument("--customers", type=int, default=600)
    arguments = parser.parse_args()

    today = day_start(int(time.time() * 1000))
    window_end = today - DAY
    window_start = window_end - 150 * DAY
    history = generate(arguments.seed, window_start, window_end, arguments.customers)
    data = tempfile.mkdtemp(prefix="countersign-charts-")
    failures = []
    compared = [0]
    server = None
    try:
        if arguments.database:
            subprocess.run(["psql", "-q", arguments.database, "-c", "DROP SCHEMA public CASCADE; CREATE SCHEMA public"], check=True,
                           capture_output=True)
        server, _ = start_server(arguments.binary, data, arguments.database)
        server.terminate()
        server.wait(timeout=30)
        CHANGE_MS[0] = window_start + COMMISSION_CHANGE_DAY * DAY
        RATE_CHANGE_MS[0] = window_start + RATE_CHANGE_DAY * DAY
        configure(data, CHANGE_MS[0], RATE_CHANGE_MS[0])
        for name, rows in (("first", history.rows_first), ("late", list(reversed(history.rows_late)))):
            path = os.path.join(data, "%s.csv" % name)
            export(rows, path)
            command = [arguments.binary, "import", "revenuecat", "--transactions", path, "--data-dir", data]
            if arguments.database:
                command += ["--database", arguments.database]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                sys.exit("the %s import failed (%d): %s %s" % (name, done.returncode, done.stdout[-2000:], done.stderr[-2000:]))
        # Imported customers without a purchase do not exist in RevenueCat's export: drop them.
        owners = {t["owner"] for t in history.transactions.values()}
        history.customers = {user: seen for user, seen in history.customers.items() if user in owners}

        server, port = start_server(arguments.binary, data, arguments.database)
        public, secret = app_keys(data)
        sell_today(port, public, secret, history, 6)
        cookie = dashboard_session(port, secret)
        connection = connect(port)
        transactions = list(history.transactions.values())

        def compare(chart, resolution, from_ms, to_ms, filters, dashboard=False):
            query = {"resolution": resolution, "from": day_text(from_ms), "to": day_text(to_ms)}
            query.update(filters)
            now = int(time.time() * 1000)
            want = expected(chart, transactions, history.customers, resolution, from_ms, to_ms, now, filters)
            path = "/v1/admin/charts/%s?%s" % (chart, urllib.parse.urlencode(query))
            if dashboard:
                connection.request("GET", "/dashboard/charts/%s?%s" % (chart, urllib.parse.urlencode(dict(query, format="csv"))),
                                   headers={"Cookie": cookie})
                response = connection.getresponse()
                text = response.read().decode()
                lines = text.strip("\n").split("\n")
                got = [(line.split(",")[0], line.split(",")[1:]) for line in lines[1:]]
                where = "dashboard CSV " + path
            else:
                status, body = call(connection, "GET", path, secret)
                if status != 200:
                    failures.append("%s: %d %s" % (path, status, body[:200]))
                    return
                got = server_points(json.loads(body), chart)
                where = "admin JSON " + path
            compared[0] += len(want)
            if got != want:
                for (label, cells), (their_label, theirs) in zip(want, got):
                    if (label, cells) != (their_label, theirs):
                        failures.append("%s: %s expected %s, got %s %s" % (where, label, cells, their_label, theirs))
                if len(got) != len(want):
                    failures.append("%s: %d points, expected %d" % (where, len(got), len(want)))

        variants = [{}, {"product": "pro_monthly"}, {"environment": "Sandbox"}, {"store": "app_store"}, {"country": "DE"}]
        for chart in CHARTS:
            for resolution in ("day", "week", "month"):
                for filters in variants:
                    compare(chart, resolution, window_start, window_end - DAY, filters)
            compare(chart, "week", window_start, window_end - DAY, {}, dashboard=True)
            # Today: the test store's sales, the first launches, the snapshots at now.
            compare(chart, "day", today, today, {})
            compare(chart, "day", today, today, {"store": "test_store"})
        connection.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
    for failure in failures[:60]:
        print("MISMATCH", failure)
    trials = sum(1 for t in history.transactions.values() if t["trial"])
    refunds = sum(1 for t in history.transactions.values() if t["refunded"])
    print("chart check: %d transactions (%d trials, %d refunded, %d arriving late), %d customers; %d points compared, %d disagreed"
          % (len(history.transactions), trials, refunds, len(history.rows_late), len(history.customers), compared[0], len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
