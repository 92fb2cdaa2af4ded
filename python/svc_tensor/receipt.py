"""Receipts of schema svc.provenance.receipt.v1: the six checks of the appliance's verifier
(schema, canonical_body, signed_fields, signature, signer, artifact_commitment), with the
same verdicts, standard library only."""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re

from . import mldsa
from .ijson import (
    JS_WS_CLASS, JsonProblem, canonical_bytes, ijson_problem, js_string, problem_sentence,
    code_point_len, stringify_len, utf16_len, utf16_slice,
)

ALGORITHM = "ML-DSA-65"
RECEIPT_SCHEMA = "svc.provenance.receipt.v1"
RECEIPT_PAYLOAD_TYPE = "application/vnd.svc.provenance.receipt.v1+json"
CANONICALIZATION = "RFC8785"
CLAIMS_MAX_BYTES = 64 * 1024
MAX_RECEIPT_TEXT_BYTES = 4 * 1024 * 1024
MAX_SAFE_INTEGER = 2**53 - 1
CHECK_NAMES = ("schema", "canonical_body", "signed_fields", "signature", "signer", "artifact_commitment")

HEX64 = re.compile(r"[0-9a-f]{64}")
ISO_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", re.ASCII)
UUID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"
    r"|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff"
)
# ECMAScript's "." matches anything but a line terminator; "\s" is JS_WS_CLASS
MEDIA_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(?:" + JS_WS_CLASS + r"*;[^\n\r\u2028\u2029]*)?"
)
_B64_CHARS = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def sha256_hex(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def fingerprint_of(public_key: bytes) -> str:
    return sha256_hex(public_key)


def node_b64decode(s: str) -> bytes:
    """Buffer.from(s, "base64") for text of base64 characters: padding optional, a lone
    trailing character ignored."""
    t = s.rstrip("=")
    if "=" in t:
        t = t[: t.index("=")]
    if len(t) % 4 == 1:
        t = t[:-1]
    return base64.b64decode(t + "=" * (-len(t) % 4))


def is_base64(s: str) -> bool:
    """Canonical padded base64, as the appliance's isBase64 (decode and encode give it back)."""
    if len(s) % 4 != 0 or not _B64_CHARS.fullmatch(s):
        return False
    try:
        return base64.b64encode(base64.b64decode(s)).decode("ascii") == s
    except (binascii.Error, ValueError):
        return False


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 " + str(len(t)).encode() + b" " + t + b" " + str(len(body)).encode() + b" " + body


def is_number(v: object) -> bool:
    return isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool))


def js_eq(a: object, b: object) -> bool:
    """ECMAScript ===, for JSON values (numbers are doubles; objects compare by identity)."""
    if is_number(a) and is_number(b):
        return float(a) == float(b)  # type: ignore[arg-type]
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return a is b
    return type(a) is type(b) and a == b


class KnownKey:
    """A public key the verifier may use, with its SHA-256 fingerprint."""

    __slots__ = ("public_key", "fingerprint")

    def __init__(self, public_key: bytes, fingerprint: str) -> None:
        self.public_key, self.fingerprint = public_key, fingerprint


class _Issue(Exception):
    """One schema issue: the first one found is the check's detail."""


def _strict_keys(obj: object, keys: tuple, where: str) -> dict:
    if not isinstance(obj, dict):
        raise _Issue(f"{where}: expected object" if where else "expected object")
    if "__proto__" in obj:
        raise _Issue("unknown field '__proto__'")
    for k in keys:
        if k not in obj:
            raise _Issue(f"{where + '.' if where else ''}{k}: required")
    extra = [k for k in obj if k not in keys]
    if extra:
        raise _Issue(f"{where + ': ' if where else ''}unrecognized key: {js_string(extra[0])}")
    return obj


def _literal(v: object, want: str, where: str) -> None:
    if not js_eq(v, want):
        raise _Issue(f"{where}: expected {js_string(want)}")


def _string(v: object, where: str) -> str:
    if not isinstance(v, str):
        raise _Issue(f"{where}: expected string")
    return v


def _int(v: object, lo: int, where: str, message: str | None = None) -> None:
    if not is_number(v) or not math.isfinite(float(v)):  # type: ignore[arg-type]
        raise _Issue(f"{where}: expected number")
    if not float(v).is_integer():  # type: ignore[arg-type]
        raise _Issue(message or f"{where}: expected int")
    if not lo <= float(v) <= MAX_SAFE_INTEGER:  # type: ignore[arg-type]
        raise _Issue(f"{where}: too small or too big")


def _regex(v: object, rx: re.Pattern, where: str, message: str) -> None:
    if not rx.fullmatch(_string(v, where)):
        raise _Issue(message)


ARTIFACT_KEYS = ("name", "sha256", "size_bytes", "media_type")


def check_artifact(a: object, where: str = "artifact") -> dict:
    """The artifact block's schema; raises _Issue with the first problem."""
    a = _strict_keys(a, ARTIFACT_KEYS, where)
    name = _string(a["name"], f"{where}.name")
    # zod counts a string's length in code points
    if code_point_len(name) < 1:
        raise _Issue("artifact.name must not be empty")
    if code_point_len(name) > 1024:
        raise _Issue("artifact.name must be at most 1024 characters")
    _regex(a["sha256"], HEX64, f"{where}.sha256", "artifact.sha256 must be 64 lower-case hex characters")
    _int(a["size_bytes"], 0, f"{where}.size_bytes", "artifact.size_bytes must be an integer")
    mt = _string(a["media_type"], f"{where}.media_type")
    if code_point_len(mt) > 255:
        raise _Issue("artifact.media_type must be at most 255 characters")
    if not MEDIA_TYPE.fullmatch(mt):
        raise _Issue("artifact.media_type must be a media type such as application/octet-stream")
    return a


def _deeper_than(v: object, depth_left: int) -> bool:
    if not isinstance(v, (dict, list)):
        return False
    if depth_left == 0:
        return True
    children = v.values() if isinstance(v, dict) else v
    return any(_deeper_than(x, depth_left - 1) for x in children)


def check_claims(c: object) -> None:
    if not isinstance(c, dict):
        raise _Issue("claims must be a JSON object")
    if _deeper_than(c, 32):
        raise _Issue("claims must be nested at most 32 levels deep")
    if stringify_len(c) > CLAIMS_MAX_BYTES:
        raise _Issue("claims must be at most 64 KiB serialised")
    problem = ijson_problem(c)
    if problem is not None:
        raise _Issue(f"claims must hold only I-JSON values: {problem}")


BODY_KEYS = ("schema", "receipt_id", "serial", "issued_at", "artifact", "claims", "previous_receipt_sha256", "signer")


def check_receipt_schema(r: object) -> None:
    """receiptSchema of the appliance: the body's fields and the signature block, nothing else."""
    r = _strict_keys(r, BODY_KEYS + ("signature",), "")
    _literal(r["schema"], RECEIPT_SCHEMA, "schema")
    _regex(r["receipt_id"], UUID, "receipt_id", "receipt_id must be a UUID")
    _int(r["serial"], 1, "serial")
    _regex(r["issued_at"], ISO_UTC, "issued_at", "issued_at must be an ISO 8601 UTC instant")
    check_artifact(r["artifact"])
    check_claims(r["claims"])
    prev = r["previous_receipt_sha256"]
    if prev is not None:
        _regex(prev, HEX64, "previous_receipt_sha256", "previous_receipt_sha256: invalid string")
    s = _strict_keys(r["signer"], ("algorithm", "public_key_sha256"), "signer")
    _literal(s["algorithm"], ALGORITHM, "signer.algorithm")
    _regex(s["public_key_sha256"], HEX64, "signer.public_key_sha256", "signer.public_key_sha256 must be 64 lower-case hex characters")
    g = _strict_keys(r["signature"], ("algorithm", "canonicalization", "payload_type", "value"), "signature")
    _literal(g["algorithm"], ALGORITHM, "signature.algorithm")
    _literal(g["canonicalization"], CANONICALIZATION, "signature.canonicalization")
    _literal(g["payload_type"], RECEIPT_PAYLOAD_TYPE, "signature.payload_type")
    if not is_base64(_string(g["value"], "signature.value")):
        raise _Issue("signature.value must be base64")


def _first_issue(e: _Issue) -> str:
    msg = str(e)
    return msg if msg.endswith(".") else msg + "."


def body_of(receipt: dict) -> dict:
    return {k: v for k, v in receipt.items() if k != "signature"}


def verify_receipt(value: object, keys: list[KnownKey], trusted: list[str] | None,
                   artifact: tuple[str, int] | None = None, text_problem: JsonProblem | None = None) -> dict:
    """Runs the six checks in order. A check that raises fails with a generic detail; the
    result depends only on the inputs. `trusted` None is integrity-only mode."""
    receipt = value if isinstance(value, dict) else None
    checks: list[dict] = []
    state = {"unsupported": False, "body": None, "key": None}

    def run(name: str, fn) -> None:
        try:
            ok, detail = fn()
        except Exception:  # noqa: BLE001 - fail closed with a generic sentence
            ok, detail = False, "The check could not be carried out."
        checks.append({"name": name, "ok": ok is True, "detail": detail})

    skipped = (False, "Not evaluated: the receipt's schema is not supported.")

    def schema():
        if receipt is None:
            return False, "The receipt is not a JSON object."
        s = receipt.get("schema")
        if not isinstance(s, str):
            return False, "The receipt has no schema."
        if s != RECEIPT_SCHEMA:
            state["unsupported"] = True
            return False, f"Schema {js_string(utf16_slice(s, 80))} is not supported; this verifier reads {RECEIPT_SCHEMA}."
        return True, f"Schema {RECEIPT_SCHEMA} is supported."

    def canonical_body():
        if state["unsupported"]:
            return skipped
        if receipt is None:
            return False, "There is no receipt body to canonicalise."
        if text_problem is not None:
            return False, problem_sentence("The receipt", text_problem)
        problem = ijson_problem(body_of(receipt))
        if problem:
            return False, f"The body cannot be canonicalised under RFC 8785: {problem}."
        state["body"] = canonical_bytes(body_of(receipt))
        return True, f"The body has an RFC 8785 canonical form of {len(state['body'])} bytes."

    def signed_fields():
        if state["unsupported"]:
            return skipped
        try:
            check_receipt_schema(receipt)
        except _Issue as e:
            return False, f"A signed or signature field is missing, extra or malformed: {_first_issue(e)}"
        return True, "Every signed field is present, well-formed and nothing else is."

    def signature():
        if state["unsupported"]:
            return skipped
        if receipt is None or state["body"] is None:
            return False, "Without a canonical body there is no signed message to check."
        signer = receipt.get("signer")
        block = receipt.get("signature")
        fp = signer.get("public_key_sha256") if isinstance(signer, dict) else None
        if not isinstance(fp, str):
            return False, "The receipt does not name its signing key."
        if not isinstance(block, dict) or not isinstance(block.get("value"), str) or not is_base64(block["value"]):
            return False, "The receipt carries no base64 signature value."
        if not js_eq(block.get("algorithm"), ALGORITHM):
            return False, f"The signature algorithm is not {ALGORITHM}."
        if not js_eq(block.get("payload_type"), RECEIPT_PAYLOAD_TYPE):
            return False, "The signature's payload type is not the receipt payload type."
        key = next((k for k in keys if k.fingerprint == fp and fingerprint_of(k.public_key) == fp), None)
        if key is None:
            return False, "The public key the receipt names is not available to this verifier."
        state["key"] = key
        sig = base64.b64decode(block["value"])
        if len(sig) != mldsa.SIGNATURE_BYTES:
            return False, f"The signature has {len(sig)} bytes, not {mldsa.SIGNATURE_BYTES}."
        if len(key.public_key) == mldsa.PUBLIC_KEY_BYTES and mldsa.verify(key.public_key, pae(RECEIPT_PAYLOAD_TYPE, state["body"]), sig):
            return True, f"The {ALGORITHM} signature over the DSSE PAE of the canonical body is valid."
        return False, f"The {ALGORITHM} signature does not match the receipt body."

    def signer_check():
        if state["unsupported"]:
            return skipped
        key = state["key"]
        if key is None:
            return False, "No signing key was established, so the signer cannot be checked."
        if trusted is None:
            return True, f"Integrity only: the receipt was checked with the key it names ({key.fingerprint}); the issuer was not authenticated."
        if key.fingerprint in trusted:
            return True, f"The signer {key.fingerprint} is a trusted key."
        return False, f"The signer {key.fingerprint} is not a trusted key."

    def artifact_commitment():
        if state["unsupported"]:
            return skipped
        try:
            a = check_artifact(receipt.get("artifact") if receipt is not None else None, "")
        except _Issue as e:
            return False, f"The artifact commitment is malformed: {_first_issue(e)}"
        if artifact is None:
            return True, "The artifact commitment is well-formed; no artifact was supplied to compare."
        if artifact[0] != a["sha256"]:
            return False, "The supplied artifact's SHA-256 differs from the receipt's."
        if float(artifact[1]) != float(a["size_bytes"]):
            return False, "The supplied artifact's size differs from the receipt's."
        return True, "The supplied artifact matches the receipt's SHA-256 and size."

    run("schema", schema)
    run("canonical_body", canonical_body)
    run("signed_fields", signed_fields)
    run("signature", signature)
    run("signer", signer_check)
    run("artifact_commitment", artifact_commitment)

    unsupported = state["unsupported"]
    valid = not unsupported and len(checks) == len(CHECK_NAMES) and all(c["ok"] for c in checks)
    rid = receipt.get("receipt_id") if receipt is not None else None
    rid = rid if isinstance(rid, str) and utf16_len(rid) <= 64 else None
    signer = receipt.get("signer") if receipt is not None else None
    sfp = signer.get("public_key_sha256") if isinstance(signer, dict) else None
    sfp = sfp if isinstance(sfp, str) and HEX64.fullmatch(sfp) else None
    return {
        "verdict": "unsupported_schema" if unsupported else "valid" if valid else "failed",
        "valid": valid,
        "checks": checks,
        "receipt_id": rid,
        "signer_fingerprint": sfp,
    }
