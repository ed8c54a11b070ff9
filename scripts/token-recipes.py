#!/usr/bin/env python3
"""Holds the three entitlement-token verifiers to the same cases: the Python and Node.js recipes of
docs/entitlement-tokens.md (extracted from the page, so what a reader copies is what was tested)
and `countersign verify-token`.

A live server (SQLite, or --database URL) issues a genuine token for a customer with a purchase;
the script then forges the cases a backend must refuse, with the server's own keys where the case
must fail on something other than the signature: another audience, expired, signed by an expired
or a foreign intermediate, alg none / HS256 keyed with the public key / ES256, a changed claim,
a key repeated in the header or in the claims. The genuine token must verify in all three, every
forgery must be refused by all three; any disagreement fails the run.

    scripts/token-recipes.py [--binary PATH] [--database URL]
"""
import argparse
import base64
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from countersign_process import app_keys, call, connect, start_server  # noqa: E402

PACKAGES = ["pyjwt[crypto]==2.10.1"]
VENV = os.path.join(ROOT, ".build", "token-recipes-venv")
AUDIENCE = "api.example.com"
ISSUER = "https://purchases.example.com"

PYTHON_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from recipe import verify_entitlement_token
cases = json.load(sys.stdin)
results = {}
for case in cases:
    try:
        verify_entitlement_token(case["token"], case["root"], case["audience"], case.get("issuer"))
        results[case["name"]] = "verified"
    except Exception as error:
        results[case["name"]] = "refused: %s: %s" % (type(error).__name__, error)
print(json.dumps(results))
"""

NODE_DRIVER = """
const { verifyEntitlementToken } = require(process.argv[1]);
const cases = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
const results = {};
for (const c of cases) {
  try {
    verifyEntitlementToken(c.token, c.root, c.audience, c.issuer === null ? undefined : c.issuer);
    results[c.name] = "verified";
  } catch (error) {
    results[c.name] = "refused: " + error.message;
  }
}
console.log(JSON.stringify(results));
"""


def venv_python():
    python = os.path.join(VENV, "bin", "python")
    marker = os.path.join(VENV, "installed-" + "-".join(PACKAGES).replace("/", "_"))
    if not os.path.exists(marker):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + PACKAGES, check=True)
        open(marker, "w").close()
    return python


def recipe(language):
    """The first fenced block after `<!-- recipe: LANGUAGE -->` in docs/entitlement-tokens.md."""
    text = open(os.path.join(ROOT, "docs", "entitlement-tokens.md")).read()
    match = re.search(r"<!-- recipe: %s -->\s*```\w+\n(.*?)```" % language, text, re.S)
    if not match:
        sys.exit("error: docs/entitlement-tokens.md has no %s recipe" % language)
    return match.group(1)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def canonical(members):
    """The server's spelling: members in order, no spaces, JSON.stringify's escapes."""
    return json.dumps(members, separators=(",", ":"), ensure_ascii=False)


class Keys:
    """The server's root and current intermediate (private halves, from its data directory)."""

    def __init__(self, data):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        self.Ed25519PrivateKey = Ed25519PrivateKey
        keys = os.path.join(data, "keys")
        root = json.load(open(os.path.join(keys, "root.key")))
        self.root = Ed25519PrivateKey.from_private_bytes(base64.b64decode(root["privateKey"]))
        self.root_public = root["publicKey"]
        directory = os.path.join(keys, "intermediates")
        newest = max((json.load(open(os.path.join(directory, name))) for name in os.listdir(directory) if name.endswith(".key")),
                     key=lambda key: key["expirationDays"])
        self.intermediate = Ed25519PrivateKey.from_private_bytes(base64.b64decode(newest["privateKey"]))
        self.header = {"alg": "EdDSA", "typ": "JWT", "intermediate": b64url(base64.b64decode(newest["publicKey"])),
                       "intermediate_expires": newest["expirationDays"],
                       "root_signature": b64url(base64.b64decode(newest["rootSignature"]))}

    def issue(self, root, days):
        """A new intermediate of `root` expiring at the start of day `days`: (private key, header)."""
        key = self.Ed25519PrivateKey.generate()
        raw = key.public_key().public_bytes_raw()
        signature = root.sign(struct.pack("<I", days) + raw)
        return key, {"alg": "EdDSA", "typ": "JWT", "intermediate": b64url(raw), "intermediate_expires": days,
                     "root_signature": b64url(signature)}


def sign(header_text, claims_text, key):
    signing_input = b64url(header_text.encode()) + "." + b64url(claims_text.encode())
    return signing_input + "." + b64url(key.sign(signing_input.encode()))


def cases(token, keys):
    """(name, token, audience, expected) for the genuine token and every forgery."""
    from cryptography.hazmat.primitives import hashes, hmac
    from cryptography.hazmat.primitives.asymmetric import ec, utils
    header_text, claims_text = (unb64url(part).decode() for part in token.split(".")[:2])
    header, claims = json.loads(header_text), json.loads(claims_text)
    now = int(time.time())
    today = now // 86400

    def with_claims(**changes):
        return canonical({**claims, **changes})

    def with_alg(alg):
        return b64url(canonical({**header, "alg": alg}).encode()) + "." + b64url(claims_text.encode())

    hs256 = with_alg("HS256")
    mac = hmac.HMAC(unb64url(header["intermediate"]), hashes.SHA256())
    mac.update(hs256.encode())
    hs256_root = with_alg("HS256")
    mac_root = hmac.HMAC(keys.root_public.encode(), hashes.SHA256())
    mac_root.update(hs256_root.encode())
    es256 = with_alg("ES256")
    p256 = ec.generate_private_key(ec.SECP256R1())
    r, s = utils.decode_dss_signature(p256.sign(es256.encode(), ec.ECDSA(hashes.SHA256())))
    expired_key, expired_header = keys.issue(keys.root, today - 2)
    foreign_key, foreign_header = keys.issue(keys.Ed25519PrivateKey.generate(), today + 30)
    sub = claims["sub"]
    return [
        ("genuine", token, AUDIENCE, "verified"),
        ("another audience", token, "other.example.com", "refused"),
        ("expired", sign(header_text, with_claims(iat=now - 900, exp=now - 300), keys.intermediate), AUDIENCE, "refused"),
        ("issued in the future", sign(header_text, with_claims(iat=now + 3600, exp=now + 4200), keys.intermediate), AUDIENCE, "refused"),
        ("expired intermediate", sign(canonical(expired_header), with_claims(iat=now, exp=now + 300), expired_key), AUDIENCE, "refused"),
        ("foreign intermediate", sign(canonical(foreign_header), claims_text, foreign_key), AUDIENCE, "refused"),
        ("alg none", with_alg("none") + ".", AUDIENCE, "refused"),
        ("alg HS256 keyed with the intermediate key", hs256 + "." + b64url(mac.finalize()), AUDIENCE, "refused"),
        ("alg HS256 keyed with the root public key", hs256_root + "." + b64url(mac_root.finalize()), AUDIENCE, "refused"),
        ("alg ES256", es256 + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big")), AUDIENCE, "refused"),
        ("changed claim (sub)", token.split(".")[0] + "." + b64url(with_claims(sub="someone-else").encode()) + "." + token.split(".")[2],
         AUDIENCE, "refused"),
        ("changed claim (exp)", token.split(".")[0] + "." + b64url(with_claims(exp=claims["exp"] + 86400).encode()) + "."
         + token.split(".")[2], AUDIENCE, "refused"),
        # Re-signed by the real intermediate: only the repeated key is wrong, and a parser that
        # keeps the last value reads EdDSA, or another user.
        ("duplicated key in the header", sign('{"alg":"none",' + header_text[1:], claims_text, keys.intermediate), AUDIENCE,
         "refused"),
        ("duplicated key in the claims", sign(header_text, claims_text[:-1] + ',"sub":"victim-of-%s"}' % sub, keys.intermediate),
         AUDIENCE, "refused"),
        ("duplicated aud in the claims", sign(header_text, '{"aud":"elsewhere",' + claims_text[1:], keys.intermediate), AUDIENCE,
         "refused"),
    ]


def run_recipes(python, binary, root, checks, work):
    """{verifier: {case: result}} for the Python recipe, the Node.js recipe and the CLI."""
    payload = json.dumps([{"name": name, "token": token, "root": root, "audience": audience, "issuer": ISSUER}
                          for name, token, audience, _ in checks])
    with open(os.path.join(work, "recipe.py"), "w") as file:
        file.write(recipe("python"))
    with open(os.path.join(work, "recipe.js"), "w") as file:
        file.write(recipe("node"))
    results = {}
    python_run = subprocess.run([python, "-c", PYTHON_DRIVER, work], input=payload, capture_output=True, text=True)
    if python_run.returncode != 0:
        sys.exit("error: the Python recipe did not run:\n" + python_run.stderr)
    results["python (PyJWT)"] = json.loads(python_run.stdout)
    node_run = subprocess.run(["node", "-e", NODE_DRIVER, os.path.join(work, "recipe.js")], input=payload, capture_output=True,
                              text=True)
    if node_run.returncode != 0:
        sys.exit("error: the Node.js recipe did not run:\n" + node_run.stderr)
    results["node (crypto)"] = json.loads(node_run.stdout)
    cli = {}
    for name, token, audience, _ in checks:
        run = subprocess.run([binary, "verify-token", "--root-key", root, "--audience", audience, "--issuer", ISSUER, token],
                             capture_output=True, text=True)
        if run.returncode not in (0, 1):
            sys.exit("error: countersign verify-token exited %d on %s: %s" % (run.returncode, name, run.stderr))
        cli[name] = "verified" if run.returncode == 0 else "refused: " + run.stdout.strip()
    results["countersign verify-token"] = cli
    return results


def issue_token(port, public):
    """A genuine token for a customer who bought `lifetime` through the test store."""
    connection = connect(port)
    user = "recipe-" + uuid.uuid4().hex[:8]
    status, body = call(connection, "POST", "/v1/test_store/purchases", public, {"app_user_id": user, "product_id": "lifetime"})
    if status != 200:
        sys.exit("error: the test store answered %d: %s" % (status, body))
    status, body = call(connection, "POST", "/v1/receipts", public,
                        {"app_user_id": user, "fetch_token": json.loads(body)["signed_transaction"]})
    if status != 200:
        sys.exit("error: the receipt was answered %d: %s" % (status, body))
    status, body = call(connection, "POST", "/v1/subscribers/%s/entitlement_token" % user, public, {"audience": AUDIENCE})
    if status != 200:
        sys.exit("error: the token was answered %d: %s" % (status, body))
    return json.loads(body)["token"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=None, help="countersign binary (default: swift build's)")
    parser.add_argument("--database", default=None, help="PostgreSQL URL (default: SQLite in a temporary directory)")
    args = parser.parse_args()
    binary = args.binary or os.path.join(
        subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip(),
        "countersign")
    python = venv_python()
    # The forgeries are made here with `cryptography` from the same venv (same Python version).
    sys.path.insert(0, subprocess.run([python, "-c", "import cryptography, os; print(os.path.dirname(os.path.dirname(cryptography.__file__)))"],
                                      capture_output=True, text=True, check=True).stdout.strip())
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data")
        # The first start writes the demo configuration and the keys; the second serves tokens.
        server, _ = start_server(binary, data, database=args.database)
        server.terminate()
        server.wait()
        path = os.path.join(data, "countersign.json")
        configuration = json.load(open(path))
        configuration["issuer"] = ISSUER
        configuration["apps"][0]["entitlementTokens"] = {"audiences": [AUDIENCE]}
        json.dump(configuration, open(path, "w"), indent=2)
        server, port = start_server(binary, data, database=args.database)
        try:
            public, _ = app_keys(data)
            token = issue_token(port, public)
        finally:
            server.terminate()
            server.wait()
        keys = Keys(data)
        checks = cases(token, keys)
        results = run_recipes(python, binary, keys.root_public, checks, work)
    failures = 0
    for name, _, _, expected in checks:
        line = []
        for verifier, outcome in results.items():
            ok = outcome[name].startswith(expected)
            failures += 0 if ok else 1
            line.append("%s %s" % ("ok  " if ok else "FAIL", verifier + ": " + outcome[name][:90]))
        print("%-45s expected %s\n    %s" % (name, expected, "\n    ".join(line)))
    if failures:
        sys.exit("error: %d verdict(s) differ from the expected one" % failures)
    print("token recipes: %d cases, Python, Node.js and the CLI agree on every one" % len(checks))


if __name__ == "__main__":
    main()
