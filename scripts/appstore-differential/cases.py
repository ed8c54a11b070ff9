"""A look-alike Apple PKI and the signed cases the differential suite runs.

Every case is App Store signed data of one kind (transaction, renewal info, notification,
app transaction), valid or hostile in one way. A case that Apple's library may accept while
Countersign deliberately refuses names the deliberate difference (see DIFFERENCES in run.py).
"""
import base64
import datetime
import json

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from cryptography.x509.oid import NameOID

BUNDLE_ID = "com.example.differential"
APP_APPLE_ID = 1234567890
LEAF_OID = x509.ObjectIdentifier("1.2.840.113635.100.6.11.1")
INTERMEDIATE_OID = x509.ObjectIdentifier("1.2.840.113635.100.6.2.1")
DER_NULL = b"\x05\x00"

NOW = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
DAY = datetime.timedelta(days=1)


def ms(moment):
    return int(moment.timestamp() * 1000) if isinstance(moment, datetime.datetime) else int(moment)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def name(common):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Look-alike Apple Inc.")])


class Authority:
    """A certificate and its key."""

    def __init__(self, certificate, key):
        self.certificate = certificate
        self.key = key

    @property
    def der(self):
        return self.certificate.public_bytes(serialization.Encoding.DER)

    @property
    def b64(self):
        return base64.b64encode(self.der).decode()


def make_certificate(subject, key, issuer=None, *, ca, not_before=None, not_after=None, marker=None,
                     marker_critical=False, bc_critical=True, key_usage=True, key_cert_sign=True, skid=True,
                     akid=True, path_length=None, hash_algorithm=None):
    """One certificate; `issuer` None makes it self-signed. Each flag leaves one part out or odd."""
    public = key.public_key()
    builder = (x509.CertificateBuilder()
               .subject_name(name(subject))
               .issuer_name(issuer.certificate.subject if issuer else name(subject))
               .public_key(public)
               .serial_number(x509.random_serial_number())
               .not_valid_before(not_before or NOW - 365 * DAY)
               .not_valid_after(not_after or NOW + 365 * DAY))
    builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=path_length if ca else None), critical=bc_critical)
    if key_usage:
        if ca:
            usage = x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                  data_encipherment=False, key_agreement=False, key_cert_sign=key_cert_sign,
                                  crl_sign=True, encipher_only=False, decipher_only=False)
        else:
            usage = x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                  data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                  crl_sign=False, encipher_only=False, decipher_only=False)
        builder = builder.add_extension(usage, critical=True)
    if skid:
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
    if akid and issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False)
    if marker is not None:
        builder = builder.add_extension(x509.UnrecognizedExtension(marker, DER_NULL), critical=marker_critical)
    signer = issuer.key if issuer else key
    algorithm = hash_algorithm or (hashes.SHA384() if isinstance(signer.curve, ec.SECP384R1) else hashes.SHA256())
    return Authority(builder.sign(signer, algorithm), key)


class PKI:
    """Root (P-384), WWDR-like intermediate (P-384, Apple's intermediate OID), leaf (P-256, the
    App Store signing OID): the shape of Apple's real chain."""

    def __init__(self, label="Look-alike"):
        self.root = make_certificate(f"{label} Apple Root CA - G3", ec.generate_private_key(ec.SECP384R1()), ca=True)
        self.intermediate = make_certificate(f"{label} Apple Worldwide Developer Relations CA - G6",
                                             ec.generate_private_key(ec.SECP384R1()), self.root, ca=True,
                                             path_length=0, marker=INTERMEDIATE_OID)
        self.leaf = self.make_leaf()

    def make_leaf(self, issuer=None, **options):
        options.setdefault("marker", LEAF_OID)
        return make_certificate("Look-alike Prod ECC Mac App Store Receipt Signing",
                                ec.generate_private_key(ec.SECP256R1()), issuer or self.intermediate, ca=False, **options)

    def make_intermediate(self, **options):
        options.setdefault("marker", INTERMEDIATE_OID)
        options.setdefault("path_length", 0)
        return make_certificate("Look-alike WWDR variant", ec.generate_private_key(ec.SECP384R1()), self.root,
                                ca=options.pop("ca", True), **options)


def es256(key, message):
    """A raw R‖S ES256 signature (JWS form)."""
    r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256())))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def sign(payload, leaf, chain, *, header=None, header_bytes=None, payload_bytes=None, signature=None,
         key=None, alg="ES256"):
    """A compact JWS. `chain` is the x5c list (base64 strings); the overrides make hostile forms."""
    if header_bytes is None:
        fields = {"alg": alg, "x5c": chain} if header is None else header
        header_bytes = json.dumps(fields, separators=(",", ":")).encode()
    if payload_bytes is None:
        payload_bytes = json.dumps(payload, separators=(",", ":")).encode()
    signing_input = (b64url(header_bytes) + "." + b64url(payload_bytes)).encode()
    if signature is None:
        signature = es256(key or leaf.key, signing_input)
    return signing_input.decode() + "." + b64url(signature)


# --- payloads -----------------------------------------------------------------------------

def transaction(environment="Sandbox", **changes):
    payload = {
        "transactionId": "2000000100000001", "originalTransactionId": "2000000100000001",
        "webOrderLineItemId": "2000000010000001", "bundleId": BUNDLE_ID, "productId": "pro_monthly",
        "subscriptionGroupIdentifier": "21000001", "purchaseDate": ms(NOW - DAY), "originalPurchaseDate": ms(NOW - DAY),
        "expiresDate": ms(NOW + 29 * DAY), "quantity": 1, "type": "Auto-Renewable Subscription",
        "inAppOwnershipType": "PURCHASED", "signedDate": ms(NOW - datetime.timedelta(minutes=1)),
        "environment": environment, "transactionReason": "PURCHASE", "storefront": "USA", "storefrontId": "143441",
        "price": 4990, "currency": "USD", "appTransactionId": "704000000000000001",
    }
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not DROP}


def renewal_info(environment="Sandbox", **changes):
    payload = {
        "originalTransactionId": "2000000100000001", "autoRenewProductId": "pro_monthly", "productId": "pro_monthly",
        "autoRenewStatus": 1, "signedDate": ms(NOW - datetime.timedelta(minutes=1)), "environment": environment,
        "recentSubscriptionStartDate": ms(NOW - DAY), "renewalDate": ms(NOW + 29 * DAY),
        "appTransactionId": "704000000000000001",
    }
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not DROP}


def app_transaction(environment="Sandbox", **changes):
    payload = {
        "receiptType": environment, "appAppleId": APP_APPLE_ID, "bundleId": BUNDLE_ID, "applicationVersion": "1",
        "versionExternalIdentifier": 0, "receiptCreationDate": ms(NOW - DAY), "requestDate": ms(NOW),
        "originalPurchaseDate": ms(NOW - 30 * DAY), "originalApplicationVersion": "1",
        "deviceVerification": "dGVzdA==", "deviceVerificationNonce": "5e4a6bb6-4d9a-4c4f-9c2d-1f2e3d4c5b6a",
        "appTransactionId": "704000000000000001", "originalPlatform": "iOS",
        "signedDate": ms(NOW - datetime.timedelta(minutes=1)),
    }
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not DROP}


def notification(section="data", environment="Sandbox", body=None, **changes):
    content = {"bundleId": BUNDLE_ID, "appAppleId": APP_APPLE_ID, "environment": environment}
    if section == "data":
        content.update({"bundleVersion": "1", "status": 1})
    elif section == "summary":
        content.update({"requestIdentifier": "8b8c7d8e-aaaa-bbbb-cccc-1234567890ab", "productId": "pro_monthly",
                        "storefrontCountryCodes": ["USA"], "failedCount": 0, "succeededCount": 5})
    elif section == "externalPurchaseToken":
        del content["environment"]
        content.update({"externalPurchaseId": ("SANDBOX_" if environment == "Sandbox" else "") + "b2158121-7af9-49d4-9561-1f588205523e",
                        "tokenCreationDate": ms(NOW - DAY)})
    elif section == "appData":
        content.update({"signedAppData": "e30"})
    if body is not None:
        content = body
    payload = {
        "notificationType": {"data": "DID_RENEW", "summary": "RENEWAL_EXTENSION", "externalPurchaseToken": "EXTERNAL_PURCHASE_TOKEN",
                             "appData": "RESCIND_CONSENT"}[section],
        "notificationUUID": "002e14d5-51f5-4503-b5a8-c3a1af68eb20",
        section: content, "version": "2.0", "signedDate": ms(NOW - datetime.timedelta(minutes=1)),
    }
    if section == "summary":
        payload["subtype"] = "SUMMARY"
    elif section == "externalPurchaseToken":
        payload["subtype"] = "UNREPORTED"
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not DROP}


DROP = object()


class Case:
    def __init__(self, name, kind, jws, deliberate=None, server=True):
        self.name = name
        self.kind = kind
        self.jws = jws
        # The documented difference this case exercises, when Countersign refuses on purpose.
        self.deliberate = deliberate
        # Whether the server path runs it (transactions and data notifications only).
        self.server = server

    def as_json(self):
        return {"name": self.name, "kind": self.kind, "jws": self.jws, "deliberate": self.deliberate}


def make_cases():
    pki = PKI()
    chain = [pki.leaf.b64, pki.intermediate.b64, pki.root.b64]
    cases = []

    def add(name, kind, payload=None, *, deliberate=None, leaf=None, x5c=None, **jws_options):
        leaf = leaf or pki.leaf
        cases.append(Case(name, kind, sign(payload, leaf, x5c if x5c is not None else [leaf.b64, pki.intermediate.b64, pki.root.b64],
                                            **jws_options), deliberate))

    def nested_transaction(environment):
        return sign(transaction(environment), pki.leaf, chain)

    def nested_renewal(environment):
        return sign(renewal_info(environment), pki.leaf, chain)

    # Valid data of every kind, in both environments.
    for environment in ("Sandbox", "Production"):
        e = environment.lower()
        add(f"valid/transaction/{e}", "transaction", transaction(environment))
        add(f"valid/transaction-consumable/{e}", "transaction",
            transaction(environment, type="Consumable", productId="coins_100", expiresDate=DROP,
                        subscriptionGroupIdentifier=DROP, webOrderLineItemId=DROP, transactionId="2000000100000777",
                        originalTransactionId="2000000100000777"))
        add(f"valid/renewal-info/{e}", "renewalInfo", renewal_info(environment))
        add(f"valid/app-transaction/{e}", "appTransaction", app_transaction(environment))
        body = {"bundleId": BUNDLE_ID, "appAppleId": APP_APPLE_ID, "environment": environment, "bundleVersion": "1",
                "status": 1, "signedTransactionInfo": nested_transaction(environment),
                "signedRenewalInfo": nested_renewal(environment)}
        add(f"valid/notification-data/{e}", "notification", notification("data", environment, body=body))
        add(f"valid/notification-summary/{e}", "notification", notification("summary", environment))
        add(f"valid/notification-external-purchase-token/{e}", "notification", notification("externalPurchaseToken", environment))
        add(f"valid/notification-app-data/{e}", "notification", notification("appData", environment))
    add("valid/transaction/fractional-signed-date", "transaction", transaction(signedDate=ms(NOW) - 60000.5))
    add("valid/transaction/no-signed-date", "transaction", transaction(signedDate=DROP))
    add("valid/transaction/unknown-fields", "transaction", transaction(futureField={"nested": [1, 2]}, offerDiscountType="PAY_AS_YOU_GO"))
    add("valid/transaction/exp-claim-in-future", "transaction", transaction(exp=int((NOW + DAY).timestamp())))
    add("valid/header/extra-fields", "transaction", transaction(), header={"alg": "ES256", "x5c": chain, "typ": "JWT", "kid": "k1"})
    add("valid/header/crit-b64-true", "transaction", transaction(),
        header={"alg": "ES256", "x5c": chain, "b64": True, "crit": ["b64"]})
    add("valid/chain/x5c-root-not-a-certificate", "transaction", transaction(),
        x5c=[pki.leaf.b64, pki.intermediate.b64, base64.b64encode(b"not a certificate").decode()])
    add("valid/chain/x5c-root-foreign", "transaction", transaction(), x5c=[pki.leaf.b64, pki.intermediate.b64, PKI("Other").root.b64])
    add("valid/signature/high-s", "transaction", transaction(), signature=high_s(pki.leaf, transaction(), chain))
    expired_leaf = pki.make_leaf(not_before=NOW - 400 * DAY, not_after=NOW - 10 * DAY)
    add("valid/chain/leaf-expired-now-valid-at-signed-date", "transaction",
        transaction(signedDate=ms(NOW - 20 * DAY)), leaf=expired_leaf)
    young_leaf = pki.make_leaf(not_before=NOW - 2 * DAY)
    add("valid/app-transaction/old-receipt-date-current-signed-date", "appTransaction",
        app_transaction(receiptCreationDate=ms(NOW - 300 * DAY)), leaf=young_leaf)
    add("valid/app-transaction/receipt-date-when-no-signed-date", "appTransaction",
        app_transaction(signedDate=DROP, receiptCreationDate=ms(NOW - 20 * DAY)), leaf=expired_leaf)
    add("valid/notification/sandbox-other-app-apple-id", "notification",
        notification("data", "Sandbox", body={"bundleId": BUNDLE_ID, "appAppleId": 42, "environment": "Sandbox"}))
    add("valid/app-transaction/sandbox-no-app-apple-id", "appTransaction", app_transaction(appAppleId=DROP))

    # Chains.
    add("chain/length-2", "transaction", transaction(), x5c=[pki.leaf.b64, pki.intermediate.b64])
    add("chain/length-4", "transaction", transaction(), x5c=chain + [pki.root.b64])
    add("chain/length-1", "transaction", transaction(), x5c=[pki.leaf.b64])
    add("chain/empty", "transaction", transaction(), x5c=[])
    add("chain/missing", "transaction", transaction(), header={"alg": "ES256"})
    add("chain/not-a-list", "transaction", transaction(), header={"alg": "ES256", "x5c": pki.leaf.b64})
    add("chain/order-swapped", "transaction", transaction(), x5c=[pki.intermediate.b64, pki.leaf.b64, pki.root.b64])
    other = PKI("Foreign")
    add("chain/foreign-root", "transaction", transaction(), leaf=other.leaf,
        x5c=[other.leaf.b64, other.intermediate.b64, other.root.b64])
    add("chain/foreign-chain-trusted-root-in-x5c", "transaction", transaction(), leaf=other.leaf,
        x5c=[other.leaf.b64, other.intermediate.b64, pki.root.b64])
    direct_leaf = pki.make_leaf(issuer=pki.root)
    add("chain/leaf-signed-by-root", "transaction", transaction(), leaf=direct_leaf,
        x5c=[direct_leaf.b64, pki.root.b64, pki.root.b64])
    add("chain/leaf-without-oid", "transaction", transaction(), leaf=pki.make_leaf(marker=None))
    add("chain/leaf-with-intermediate-oid", "transaction", transaction(), leaf=pki.make_leaf(marker=INTERMEDIATE_OID))
    add("chain/leaf-oid-critical", "transaction", transaction(), leaf=pki.make_leaf(marker_critical=True))
    for label, options in [("without-oid", {"marker": None}), ("with-leaf-oid", {"marker": LEAF_OID}),
                           ("not-a-ca", {"ca": False}), ("basic-constraints-not-critical", {"bc_critical": False}),
                           ("without-key-usage", {"key_usage": False}), ("without-key-cert-sign", {"key_cert_sign": False}),
                           ("without-subject-key-id", {"skid": False}), ("without-authority-key-id", {"akid": False}),
                           ("expired-at-signed-date", {"not_before": NOW - 400 * DAY, "not_after": NOW - DAY}),
                           ("not-yet-valid-at-signed-date", {"not_before": NOW + DAY}),
                           ("sha256-signed", {"hash_algorithm": hashes.SHA256()})]:
        intermediate = pki.make_intermediate(**options)
        leaf = pki.make_leaf(issuer=intermediate)
        add(f"chain/intermediate-{label}", "transaction", transaction(), leaf=leaf,
            x5c=[leaf.b64, intermediate.b64, pki.root.b64])
    for label, options in [("expired-at-signed-date", {"not_before": NOW - 400 * DAY, "not_after": NOW - DAY}),
                           ("not-yet-valid-at-signed-date", {"not_before": NOW + DAY}),
                           ("without-authority-key-id", {"akid": False}), ("without-subject-key-id", {"skid": False}),
                           ("without-key-usage", {"key_usage": False}), ("basic-constraints-not-critical", {"bc_critical": False})]:
        add(f"chain/leaf-{label}", "transaction", transaction(), leaf=pki.make_leaf(**options))
    p384_leaf = make_certificate("P-384 leaf", ec.generate_private_key(ec.SECP384R1()), pki.intermediate, ca=False, marker=LEAF_OID)
    add("chain/leaf-p384-key", "transaction", transaction(), leaf=p384_leaf,
        signature=b"\x01" * 64)
    app_tx_leaf = pki.make_leaf(not_before=NOW - 400 * DAY, not_after=NOW - 10 * DAY)
    add("chain/app-transaction-signed-after-leaf-expired", "appTransaction",
        app_transaction(receiptCreationDate=ms(NOW - 20 * DAY)), leaf=app_tx_leaf)

    # Certificate encodings in x5c.
    add("x5c/base64url-alphabet", "transaction", transaction(),
        x5c=[pki.leaf.b64.replace("+", "-").replace("/", "_"), pki.intermediate.b64, pki.root.b64]
        if ("+" in pki.leaf.b64 or "/" in pki.leaf.b64) else [pki.leaf.b64 + "!", pki.intermediate.b64, pki.root.b64])
    add("x5c/unpadded", "transaction", transaction(), x5c=[unpadded(pki.leaf), pki.intermediate.b64, pki.root.b64])
    add("x5c/not-der", "transaction", transaction(), x5c=[base64.b64encode(b"\x30\x03\x02\x01\x01").decode(), pki.intermediate.b64, pki.root.b64])
    add("x5c/pem-text", "transaction", transaction(),
        x5c=[base64.b64encode(pki.leaf.certificate.public_bytes(serialization.Encoding.PEM)).decode(), pki.intermediate.b64, pki.root.b64])
    add("x5c/intermediate-garbage", "transaction", transaction(), x5c=[pki.leaf.b64, "AAAA", pki.root.b64])
    add("x5c/number", "transaction", transaction(), header={"alg": "ES256", "x5c": [1, 2, 3]})

    # Algorithms and header fields.
    for alg in ("ES384", "RS256", "none", "es256", "HS256"):
        add(f"header/alg-{alg}", "transaction", transaction(), alg=alg)
    add("header/alg-missing", "transaction", transaction(), header={"x5c": chain})
    add("header/crit-unknown", "transaction", transaction(), header={"alg": "ES256", "x5c": chain, "crit": ["exp"], "exp": 1})
    add("header/crit-b64-absent", "transaction", transaction(), header={"alg": "ES256", "x5c": chain, "crit": ["b64"]})
    add("header/crit-empty", "transaction", transaction(), header={"alg": "ES256", "x5c": chain, "crit": []})
    add("header/crit-not-a-list", "transaction", transaction(), header={"alg": "ES256", "x5c": chain, "crit": "b64", "b64": True})
    add("header/b64-false", "transaction", transaction(), header={"alg": "ES256", "x5c": chain, "b64": False, "crit": ["b64"]})
    add("header/b64-false-not-critical", "transaction", transaction(), header={"alg": "ES256", "x5c": chain, "b64": False})
    add("header/kid-number", "transaction", transaction(), header={"alg": "ES256", "x5c": chain, "kid": 7})
    add("header/not-an-object", "transaction", transaction(), header_bytes=b'["ES256"]')
    add("header/duplicate-alg-last-es256", "transaction", transaction(), deliberate="duplicate-key",
        header_bytes=('{"alg":"RS256","alg":"ES256","x5c":' + json.dumps(chain) + "}").encode())
    add("header/duplicate-alg-last-rs256", "transaction", transaction(),
        header_bytes=('{"alg":"ES256","alg":"RS256","x5c":' + json.dumps(chain) + "}").encode())

    # Signatures and the compact form.
    good = sign(transaction(), pki.leaf, chain)
    head, body, tail = good.split(".")
    signature = base64.urlsafe_b64decode(tail + "==")
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
    cases.append(Case("signature/der-encoded", "transaction", head + "." + body + "." + b64url(encode_dss_signature(r, s))))
    cases.append(Case("signature/truncated", "transaction", head + "." + body + "." + b64url(signature[:63])))
    cases.append(Case("signature/zero", "transaction", head + "." + body + "." + b64url(bytes(64))))
    cases.append(Case("signature/other-payload", "transaction",
                      head + "." + b64url(json.dumps(transaction(productId="lifetime")).encode()) + "." + tail))
    cases.append(Case("signature/other-key", "transaction", sign(transaction(), pki.leaf, chain, key=other.leaf.key)))
    # PyJWT takes padded segments (the signature covers them as sent); we do not.
    cases.append(Case("compact/padded-signature", "transaction", good + "==", deliberate="padded-base64url"))
    padded_head = head + "=" * (-len(head) % 4)
    padded_body = body + "=" * (-len(body) % 4)
    padded_input = (padded_head + "." + padded_body).encode()
    cases.append(Case("compact/padded-header-and-payload", "transaction",
                      padded_input.decode() + "." + b64url(es256(pki.leaf.key, padded_input)),
                      deliberate="padded-base64url" if padded_input != (head + "." + body).encode() else None))
    cases.append(Case("compact/non-canonical-signature-bits", "transaction", head + "." + body + "." + flip_trailing_bits(tail)))
    cases.append(Case("compact/two-segments", "transaction", head + "." + body))
    cases.append(Case("compact/four-segments", "transaction", good + "." + tail))
    cases.append(Case("compact/empty-signature", "transaction", head + "." + body + "."))
    cases.append(Case("compact/standard-base64-payload", "transaction",
                      head + "." + base64.b64encode(json.dumps(transaction()).encode()).decode() + "." + tail))
    cases.append(Case("compact/json-serialization", "transaction",
                      json.dumps({"protected": head, "payload": body, "signature": tail})))

    # Payload encodings.
    raw = json.dumps(transaction(), separators=(",", ":"))
    add("payload/not-json", "transaction", payload_bytes=b"transaction")
    add("payload/array", "transaction", payload_bytes=b"[1,2]")
    add("payload/duplicate-bundle-id-last-right", "transaction", deliberate="duplicate-key",
        payload_bytes=('{"bundleId":"com.attacker.app",' + raw[1:]).encode())
    add("payload/duplicate-bundle-id-last-wrong", "transaction", deliberate="duplicate-key",
        payload_bytes=(raw[:-1] + ',"bundleId":"com.attacker.app"}').encode())
    add("payload/duplicate-environment", "transaction", deliberate="duplicate-key",
        payload_bytes=('{"environment":"Production",' + raw[1:]).encode())
    add("payload/utf8-bom", "transaction", deliberate="text-encoding", payload_bytes=b"\xef\xbb\xbf" + raw.encode())
    add("payload/lone-surrogate", "transaction", deliberate="text-encoding",
        payload_bytes=(raw[:-1] + ',"note":"\\ud800"}').encode())
    add("payload/utf16", "transaction", deliberate="text-encoding", payload_bytes=raw.encode("utf-16-le"))
    add("payload/nested-200", "transaction", payload_bytes=(raw[:-1] + ',"deep":' + "[" * 200 + "]" * 200 + "}").encode())
    add("payload/nested-depth", "transaction", payload_bytes=(raw[:-1] + ',"deep":' + "[" * 5000 + "]" * 5000 + "}").encode())

    # Dates.
    add("date/signed-date-10-minutes-ahead", "transaction", transaction(signedDate=ms(NOW + datetime.timedelta(minutes=10))),
        deliberate="future-signed-date")
    add("date/signed-date-2-minutes-ahead", "transaction", transaction(signedDate=ms(NOW + datetime.timedelta(minutes=2))))
    add("date/signed-date-after-leaf-expiry", "transaction", transaction(signedDate=ms(NOW + 400 * DAY)))
    add("date/signed-date-before-leaf", "transaction", transaction(signedDate=ms(NOW - 400 * DAY)))
    add("date/signed-date-zero", "transaction", transaction(signedDate=0))
    add("date/signed-date-negative", "transaction", transaction(signedDate=-1000))
    add("date/signed-date-string", "transaction", transaction(signedDate=str(ms(NOW) - 60000)), deliberate="field-type")
    add("date/signed-date-word", "transaction", transaction(signedDate="yesterday"))
    add("date/signed-date-null", "transaction", transaction(signedDate=None))
    add("date/signed-date-huge", "transaction", transaction(signedDate=10 ** 30))
    add("claims/exp-past", "transaction", transaction(exp=int((NOW - DAY).timestamp())))
    add("claims/nbf-future", "transaction", transaction(nbf=int((NOW + DAY).timestamp())))
    add("claims/iat-future", "transaction", transaction(iat=int((NOW + DAY).timestamp())))
    add("claims/iat-past", "transaction", transaction(iat=int((NOW - DAY).timestamp())))
    add("claims/iat-word", "transaction", transaction(iat="now"))
    add("claims/aud", "transaction", transaction(aud="someone"))
    add("claims/sub-number", "transaction", transaction(sub=5))
    add("claims/jti-number", "transaction", transaction(jti=5))

    # Environments.
    for environment in ("sandbox", "Xcode", "LocalTesting", "TestStore", "", None):
        add(f"environment/transaction-{environment if environment is not None else 'null'}", "transaction", transaction(environment))
    add("environment/transaction-missing", "transaction", transaction(environment=DROP))
    add("environment/renewal-info-missing", "renewalInfo", renewal_info(environment=DROP))
    add("environment/app-transaction-missing", "appTransaction", app_transaction(receiptType=DROP))
    add("environment/notification-data-missing-summary-present", "notification",
        notification("data", body={"bundleId": BUNDLE_ID, "appAppleId": APP_APPLE_ID},
                     summary={"bundleId": BUNDLE_ID, "appAppleId": APP_APPLE_ID, "environment": "Sandbox"}))
    add("environment/notification-data-bundle-missing-summary-present", "notification",
        notification("data", body={"environment": "Sandbox", "appAppleId": APP_APPLE_ID},
                     summary={"bundleId": BUNDLE_ID, "appAppleId": APP_APPLE_ID, "environment": "Sandbox"}))
    add("environment/notification-empty-data", "notification", notification("data", body={}))
    add("environment/notification-no-content", "notification", notification("data", data=DROP))
    add("environment/external-purchase-token-sandbox-prefix-lowercase", "notification",
        notification("externalPurchaseToken", body={"bundleId": BUNDLE_ID, "appAppleId": APP_APPLE_ID,
                                                    "externalPurchaseId": "sandbox_1"}))

    # Bundle ids and app ids.
    for label, value in [("other", "com.attacker.app"), ("case", BUNDLE_ID.upper()), ("trailing-space", BUNDLE_ID + " "),
                         ("missing", DROP), ("null", None)]:
        add(f"bundle/transaction-{label}", "transaction", transaction(bundleId=value))
        add(f"bundle/app-transaction-{label}", "appTransaction", app_transaction(bundleId=value))
        add(f"bundle/notification-{label}", "notification",
            notification("data", body={k: v for k, v in {"bundleId": value, "appAppleId": APP_APPLE_ID, "environment": "Sandbox"}.items() if v is not DROP}))
    add("bundle/renewal-info-other", "renewalInfo", renewal_info(bundleId="com.attacker.app"))
    add("bundle/notification-app-data-other", "notification",
        notification("appData", body={"bundleId": "com.attacker.app", "appAppleId": APP_APPLE_ID, "environment": "Sandbox"}))
    for environment in ("Sandbox", "Production"):
        e = environment.lower()
        add(f"app-id/notification-other/{e}", "notification",
            notification("data", environment, body={"bundleId": BUNDLE_ID, "appAppleId": 42, "environment": environment}))
        add(f"app-id/notification-missing/{e}", "notification",
            notification("data", environment, body={"bundleId": BUNDLE_ID, "environment": environment}))
        add(f"app-id/notification-string/{e}", "notification",
            notification("data", environment, body={"bundleId": BUNDLE_ID, "appAppleId": str(APP_APPLE_ID), "environment": environment}),
            deliberate="field-type")
        add(f"app-id/app-transaction-other/{e}", "appTransaction", app_transaction(environment, appAppleId=42))
        add(f"app-id/app-transaction-missing/{e}", "appTransaction", app_transaction(environment, appAppleId=DROP))
        add(f"app-id/summary-other/{e}", "notification",
            notification("summary", environment, body={"bundleId": BUNDLE_ID, "appAppleId": 42, "environment": environment}))
        add(f"app-id/transaction-carries-other/{e}", "transaction", transaction(environment, appAppleId=42))
    add("types/transaction-quantity-string", "transaction", transaction(quantity="1"), deliberate="field-type")
    add("types/transaction-bundle-number", "transaction", transaction(bundleId=7), deliberate="field-type")

    for case in cases:
        case.server = case.kind == "transaction" or (case.kind == "notification" and '"data"' in payload_text(case.jws))
    return pki, cases


def payload_text(jws):
    try:
        segment = jws.split(".")[1]
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)).decode("utf-8", "replace")
    except Exception:
        return ""


def high_s(leaf, payload, chain):
    """The same signature with S replaced by n - S: valid ECDSA, not the canonical low-S form."""
    order = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
    jws = sign(payload, leaf, chain)
    signing_input, tail = jws.rsplit(".", 1)
    raw = base64.urlsafe_b64decode(tail + "==")
    r, s = int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
    return r.to_bytes(32, "big") + (order - s).to_bytes(32, "big")


def unpadded(authority):
    text = authority.b64.rstrip("=")
    return text if text != authority.b64 else text[:-4]  # no padding to drop: cut the tail instead


def flip_trailing_bits(segment):
    """The same bytes with unused low bits set in the last character: a second spelling."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    unused = {2: 4, 3: 2}.get(len(segment) % 4, 0)
    if not unused:
        return segment + "A"  # no spare bits: a length no decoder accepts
    last = alphabet.index(segment[-1])
    return segment[:-1] + alphabet[last | 1]
