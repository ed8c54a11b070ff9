#!/usr/bin/env python3
"""Holds the module boundaries issue 50 drew, read from `swift package dump-package`:

- the SDK (`Countersign`) links our `CountersignCore` and swift-crypto's `Crypto`, nothing else:
  configuration, entitlement rules, key files and token issuance live in `CountersignServerCore`,
  which the SDK does not link;
- `CountersignCore` (the wire format, signing, verification) links `Crypto` alone;
- the revenue charts (`CountersignCharts`) link nothing but Foundation;
- the ledger (`CountersignLedger`) reaches no storage, SwiftNIO, Hummingbird, PostgresNIO or SQLite,
  directly or through another of our targets.

Prints each target's closure and every breach; exits 1 on a breach.

    python3 scripts/check-modules.py
"""
import json
import subprocess
import sys

# target -> (our targets it may reach, products it may reach)
RULES = {
    "Countersign": ({"CountersignCore"}, {"Crypto"}),
    "CountersignCore": (set(), {"Crypto"}),
    # The revenue charts: records in, points out, on Foundation alone.
    "CountersignCharts": (set(), set()),
}
# target -> names that must not appear in its closure (targets or products, by prefix)
FORBIDDEN = {
    "CountersignLedger": ["CountersignStorage", "CSQLite", "NIO", "Hummingbird", "PostgresNIO"],
}


def closure(targets, name):
    """Our targets and the outside products `name` reaches, itself excluded."""
    seen, products, stack = set(), set(), [name]
    while stack:
        for dependency in targets[stack.pop()]["dependencies"]:
            if "product" in dependency:
                products.add(dependency["product"][0])
                continue
            other = (dependency.get("byName") or dependency.get("target"))[0]
            if other in targets and other not in seen:
                seen.add(other)
                stack.append(other)
            elif other not in targets:
                products.add(other)
    return seen, products


def main():
    package = json.loads(subprocess.check_output(["swift", "package", "dump-package"], text=True))
    targets = {target["name"]: target for target in package["targets"]}
    breaches = []
    for name, (allowed_targets, allowed_products) in RULES.items():
        reached, products = closure(targets, name)
        print(f"{name}: targets {sorted(reached)}, products {sorted(products)}")
        for extra in sorted(reached - allowed_targets) + sorted(products - allowed_products):
            breaches.append(f"{name} reaches {extra}")
    for name, prefixes in FORBIDDEN.items():
        reached, products = closure(targets, name)
        print(f"{name}: targets {sorted(reached)}, products {sorted(products)}")
        for extra in sorted(reached | products):
            if any(extra.startswith(prefix) for prefix in prefixes):
                breaches.append(f"{name} reaches {extra}")
    for breach in breaches:
        print("BREACH:", breach, file=sys.stderr)
    sys.exit(1 if breaches else 0)


if __name__ == "__main__":
    main()
