#!/usr/bin/env python3
"""Writes a RevenueCat transactions export (Scheduled Data Exports, the columns RevenueCat
documents) and what importing it must give.

The export holds auto-renewing subscriptions with renewals (monthly and yearly, some starting
with a free trial or an introductory price, some refunded, some carried twice with a later
`updated_at` that adds the refund), lifetime purchases (some family-shared), consumables,
promotional grants, and rows the server must refuse: other stores, unknown products, malformed
dates and booleans, missing ids, a wrong number of fields. Some fields are quoted and hold line
breaks, so a row's physical line differs from its index. The column order is shuffled.

The expected file (JSON) holds `now_ms` (the instant the entitlements are judged at), the
active entitlements of every customer the import must create (keyed by the id the app uses:
the last-seen alias), and the physical line of every row the import must refuse; `windows`
gives each customer's entitlements with the end of their last unrefunded grant (null: never),
to judge them at another instant.

The app the rows are for: products pro_monthly and pro_yearly (auto-renewable, entitlement
pro), lifetime (non-consumable, entitlements pro and premium) and coins_100 (consumable, none);
environments Production and Sandbox. Tests/CountersignServerTests/ImportTests.swift configures it.
"""
import argparse
import datetime
import gzip
import json
import random

DAY = 86_400_000
COLUMNS = [
    "rc_original_app_user_id", "rc_last_seen_app_user_id_alias", "country", "product_identifier", "start_time", "end_time",
    "grace_period_end_time", "effective_end_time", "store", "is_auto_renewable", "is_trial_period", "is_in_intro_offer_period",
    "is_sandbox", "price_in_usd", "purchase_price_in_usd", "store_transaction_id", "original_store_transaction_id", "refunded_at",
    "unsubscribe_detected_at", "billing_issues_detected_at", "purchased_currency", "price_in_purchased_currency",
    "purchase_price_in_purchased_currency", "entitlement_identifiers", "renewal_number", "is_trial_conversion", "presented_offering",
    "ownership_type", "custom_subscriber_attributes", "platform", "updated_at", "first_seen_time",
]
PRODUCTS = {
    "pro_monthly": (30, ["pro"], 4.99),
    "pro_yearly": (365, ["pro"], 39.99),
}


def stamp(ms, fractional=False):
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    return text + ".%03d" % (ms % 1000) if fractional else text


class Export:
    def __init__(self, rng, now_ms, booleans):
        self.rng = rng
        self.now = now_ms
        self.booleans = booleans
        self.rows = []  # (dict of column values, kind) where kind is "ok", "refused"
        self.expected = {}
        self.windows = {}
        self.next_id = 1_000_000_000

    def transaction_id(self):
        self.next_id += self.rng.randint(1, 50)
        return str(self.next_id)

    def flag(self, value):
        return self.booleans[0] if value else self.booleans[1]

    def row(self, original, alias, product, start, end, store="app_store", auto=True, trial=False, intro=False, sandbox=False,
            tid=None, otid=None, refunded=None, currency="USD", price=None, entitlements=None, ownership="PURCHASED", updated=None,
            first_seen=None):
        tid = tid or self.transaction_id()
        values = {
            "rc_original_app_user_id": original, "rc_last_seen_app_user_id_alias": alias, "country": "US", "product_identifier": product,
            "start_time": stamp(start, fractional=self.rng.random() < 0.2), "end_time": stamp(end) if end else "",
            "grace_period_end_time": "", "effective_end_time": "", "store": store, "is_auto_renewable": self.flag(auto),
            "is_trial_period": self.flag(trial), "is_in_intro_offer_period": self.flag(intro), "is_sandbox": self.flag(sandbox),
            "price_in_usd": "" if price is None else "%.2f" % price, "purchase_price_in_usd": "" if price is None else "%.2f" % price,
            "store_transaction_id": tid, "original_store_transaction_id": otid or tid, "refunded_at": stamp(refunded) if refunded else "",
            "unsubscribe_detected_at": "", "billing_issues_detected_at": "", "purchased_currency": currency,
            "price_in_purchased_currency": "" if price is None else ("0" if refunded else "%.2f" % price),
            "purchase_price_in_purchased_currency": "" if price is None else "%.2f" % price,
            "entitlement_identifiers": json.dumps(entitlements) if entitlements is not None else "",
            "renewal_number": "1", "is_trial_conversion": self.flag(False), "presented_offering": "Default Offering",
            "ownership_type": ownership, "custom_subscriber_attributes": "", "platform": "iOS",
            "updated_at": stamp(updated or max(x for x in [start, end or 0, refunded or 0] if x <= self.now)),
            "first_seen_time": stamp(first_seen) if first_seen else "",
        }
        if self.rng.random() < 0.05:
            values["custom_subscriber_attributes"] = json.dumps({"note": {"value": "two\nlines", "updated_at_ms": start}})
        return values

    def customer(self, index):
        rng = self.rng
        original = "$RCAnonymousID:%032x" % rng.getrandbits(128)
        alias = original if rng.random() < 0.6 else "user_%d" % index
        first_seen = self.now - rng.randint(30, 500) * DAY
        active = set()
        window = {}
        rows = []

        def grant(entitlements, end):
            for entitlement in entitlements:
                if entitlement in window and (window[entitlement] is None or (end is not None and end <= window[entitlement])):
                    continue
                window[entitlement] = end
        for _ in range(rng.choice([1, 1, 2, 3])):
            choice = rng.random()
            start = first_seen + rng.randint(0, 20) * DAY + rng.randint(0, DAY - 1)
            if choice < 0.62:
                product = rng.choice(list(PRODUCTS))
                length, entitlements, price = PRODUCTS[product]
                otid = self.transaction_id()
                periods = rng.randint(1, 6) if product == "pro_monthly" else rng.randint(1, 2)
                trial = rng.random() < 0.3
                sandbox = rng.random() < 0.1
                refund_last = rng.random() < 0.08
                moment = start
                for period in range(periods):
                    if moment > self.now:
                        break
                    is_trial = trial and period == 0
                    span = 7 * DAY if is_trial else length * DAY
                    end = moment + span
                    last = period == periods - 1 or end + 1 > self.now
                    refunded = None
                    if last and refund_last:
                        refunded = min(self.now - 1000, moment + DAY)
                    tid = otid if period == 0 else None
                    row = self.row(original, alias, product, moment, end, trial=is_trial, intro=False, sandbox=sandbox, tid=tid,
                                   otid=otid, refunded=refunded, price=0 if is_trial else price, entitlements=entitlements,
                                   first_seen=first_seen)
                    if refunded and rng.random() < 0.5:
                        # The export first carried the period unrefunded, then again with the refund.
                        early = dict(row, refunded_at="", updated_at=stamp(moment), price_in_purchased_currency=row["purchase_price_in_purchased_currency"])
                        rows.append(early)
                    rows.append(row)
                    if refunded is None:
                        grant(entitlements, end)
                    if last:
                        if refunded is None and end > self.now:
                            active.update(entitlements)
                        break
                    moment = end
            elif choice < 0.74:
                refunded = self.now - DAY if rng.random() < 0.1 else None
                shared = rng.random() < 0.15
                rows.append(self.row(original, alias, "lifetime", start, None, auto=False, refunded=refunded, price=49.99,
                                     currency=rng.choice(["USD", "EUR", "JPY"]), entitlements=["pro", "premium"],
                                     ownership="FAMILY_SHARED" if shared else "PURCHASED", first_seen=first_seen))
                if refunded is None:
                    active.update(["pro", "premium"])
                    grant(["pro", "premium"], None)
            elif choice < 0.86:
                rows.append(self.row(original, alias, "coins_100", start, None, auto=False, price=0.99, entitlements=[],
                                     first_seen=first_seen))
            elif choice < 0.93:
                end = start + rng.choice([7, 30, 365]) * DAY
                lifetime = rng.random() < 0.2
                rows.append(self.row(original, alias, "rc_promo_pro_%s" % ("lifetime" if lifetime else "monthly"), start,
                                     None if lifetime else end, store="promotional", auto=False, price=None, currency="",
                                     entitlements=["pro"], first_seen=first_seen))
                grant(["pro"], None if lifetime else end)
                if lifetime or end > self.now:
                    active.add("pro")
            else:
                rows.append(self.row(original, alias, "pro_monthly", start, start + 30 * DAY,
                                     store=rng.choice(["play_store", "stripe", "amazon"]), price=4.99, entitlements=["pro"],
                                     first_seen=first_seen))
                rows[-1]["_refused"] = True
        # Only customers with a row the import takes exist afterwards.
        if any(not row.get("_refused") for row in rows):
            self.expected[alias] = sorted(active)
            self.windows[alias] = window
        return rows

    def broken(self, index):
        rng = self.rng
        row = self.row("$RCAnonymousID:%032x" % rng.getrandbits(128), "broken_%d" % index, "pro_monthly", self.now - 40 * DAY,
                       self.now - 10 * DAY, entitlements=["pro"], price=4.99)
        kind = index % 5
        if kind == 0:
            row["product_identifier"] = "not_a_product"
        elif kind == 1:
            row["start_time"] = "2024-02-30 10:00:00"
        elif kind == 2:
            row["store_transaction_id"] = ""
        elif kind == 3:
            row["is_sandbox"] = "maybe"
        else:
            row["_short"] = True
        row["_refused"] = True
        return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=100_000, help="about this many rows")
    parser.add_argument("--customers", type=int, default=30_000)
    parser.add_argument("--broken", type=int, default=500, help="malformed rows mixed in")
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--now-ms", type=int, default=1_795_000_000_000)
    parser.add_argument("--delimiter", default=",", choices=[",", ";"])
    parser.add_argument("--booleans", default="true/false", choices=["true/false", "t/f"])
    parser.add_argument("--out", required=True, help="the export (.csv, or .csv.gz to gzip it)")
    parser.add_argument("--expected", required=True)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    export = Export(rng, args.now_ms, args.booleans.split("/"))
    rows = []
    index = 0
    while index < args.customers or len(rows) < args.transactions - args.broken:
        rows += export.customer(index)
        index += 1
        if index >= args.customers and len(rows) >= args.transactions - args.broken:
            break
    for broken in range(args.broken):
        rows.insert(rng.randrange(len(rows) + 1), export.broken(broken))
    columns = COLUMNS[:]
    rng.shuffle(columns)

    def field(value):
        if any(ch in value for ch in [args.delimiter, '"', "\n", "\r"]):
            return '"' + value.replace('"', '""') + '"'
        return value

    lines = [args.delimiter.join(columns)]
    refused = []
    line = 2
    for row in rows:
        cells = [field(row[column]) for column in columns]
        if row.get("_short"):
            cells = cells[:-1]
        text = args.delimiter.join(cells)
        if row.get("_refused"):
            refused.append(line)
        lines.append(text)
        line += 1 + text.count("\n")
    data = ("\n".join(lines) + "\n").encode()
    if args.out.endswith(".gz"):
        data = gzip.compress(data)
    with open(args.out, "wb") as out:
        out.write(data)
    with open(args.expected, "w") as out:
        json.dump({"now_ms": args.now_ms, "rows": len(rows), "customers": export.expected, "refused_lines": refused,
                   "windows": export.windows}, out)
    print("%d rows, %d customers, %d refused rows" % (len(rows), len(export.expected), len(refused)))


if __name__ == "__main__":
    main()
