"""What the two offline verifiers share: argument parsing, one-sentence errors, exit codes,
reading key files and artifacts, printing a verify result. Standard library only."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys

from . import mldsa
from .ijson import JS_WHITESPACE, JsonSyntaxError, JsonTooManyValuesError, problem_sentence, read_json
from .receipt import MAX_RECEIPT_TEXT_BYTES, KnownKey, fingerprint_of, node_b64decode

EXIT_VALID, EXIT_FAILED, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 1, 2, 3
MIB = 1024 * 1024


class UsageError(Exception):
    """A usage problem or unreadable input: exit 2 with one sentence."""


def _sentence(s: str) -> str:
    t = re.sub(r"\s+", " ", s.strip())
    c = t[:1].upper() + t[1:]
    return c if re.search(r"[.!?]$", c) else c + "."


def _write(stream, text: str) -> None:
    # a lone surrogate has no UTF-8 form: written as U+FFFD, as Node writes it
    data = re.sub("[\ud800-\udfff]", "\ufffd", text).encode("utf-8")
    stream.buffer.write(data)
    stream.flush()


def run_cli(main) -> int:
    """Runs main(), mapping errors to one sentence on stderr and an exit code."""
    try:
        return main()
    except UsageError as e:
        _write(sys.stderr, _sentence(str(e)) + "\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 - no stack trace, no input echoed: fail closed
        _write(sys.stderr, "The command failed.\n")
        return EXIT_FAILED


def parse_args(argv: list[str], strings: tuple[str, ...], booleans: tuple[str, ...]) -> dict:
    """Long options only, as node:util parseArgs reads them in strict mode: --name VALUE or
    --name=VALUE, booleans without a value, -h for --help, no positionals, no prefixes."""
    values: dict = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "-h":
            a = "--help"
        if not a.startswith("--") or a == "--":
            raise UsageError(f"Unexpected argument '{a}'. This command does not take positional arguments; see --help")
        name, eq, inline = a[2:].partition("=")
        if name in strings:
            if eq:
                values[name] = inline
            else:
                if i >= len(argv) or argv[i].startswith("-"):
                    raise UsageError(f"Option '--{name} <value>' argument missing; see --help")
                values[name] = argv[i]
                i += 1
        elif name in booleans:
            if eq:
                raise UsageError(f"Option '--{name}' does not take an argument; see --help")
            values[name] = True
        else:
            raise UsageError(f"Unknown option '--{name}'; see --help")
    return values


def _read_regular(path: str, limit: int) -> bytes | None:
    """A regular file's bytes, or None when it is over `limit` (read at most limit + 1)."""
    # opened without blocking, so that a FIFO with no writer is refused rather than waited on
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise IsADirectoryError(path)
        data = f.read(limit + 1)
    return None if len(data) > limit else data


def _utf8_text(data: bytes, what: str) -> str:
    """The text of a file's bytes, which must be valid UTF-8 (RFC 8259 section 8.1): decoded
    with replacement characters, several byte strings would read as one text, so that bytes
    nobody signed could verify as a signed text. A BOM is kept, for the caller to decide."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} is not valid UTF-8") from None


def read_receipt_file(path: str, what: str = "receipt"):
    """The receipt's value and its first I-JSON problem; UsageError when unreadable, too
    large (4 MiB), not UTF-8 or not JSON."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"The {what} {path} is not a regular file")
        if st.st_size > MAX_RECEIPT_TEXT_BYTES:
            raise UsageError(f"The {what} {path} is larger than the {MAX_RECEIPT_TEXT_BYTES // MIB} MiB limit for a receipt")
        data = _read_regular(path, MAX_RECEIPT_TEXT_BYTES)
        if data is None:
            raise UsageError(f"The {what} {path} is larger than the {MAX_RECEIPT_TEXT_BYTES // MIB} MiB limit for a receipt")
    except UsageError:
        raise
    except (OSError, ValueError):
        raise UsageError(f"The {what} {path} cannot be read") from None
    text = _utf8_text(data, f"The {what} {path}")
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return read_json(text)
    except JsonSyntaxError:
        raise UsageError(f"The {what} {path} is not valid JSON") from None
    except JsonTooManyValuesError as e:
        raise UsageError(f"The {what} {path} holds {e}, more than any receipt") from None


_B64_TEXT = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _decode_key(b64: str, fp: object, path: str) -> KnownKey:
    if not _B64_TEXT.fullmatch(b64):
        raise UsageError(f"The public key file {path} does not hold base64")
    key = node_b64decode(b64)
    if len(key) != mldsa.PUBLIC_KEY_BYTES:
        raise UsageError(f"The public key in {path} does not have {mldsa.PUBLIC_KEY_BYTES} bytes")
    fingerprint = fingerprint_of(key)
    if fp is not None and fp != fingerprint:
        raise UsageError(f"The fingerprint in {path} is not the SHA-256 of its public key")
    return KnownKey(key, fingerprint)


def _key_doc(v: object) -> tuple[str, object, list] | None:
    """The public-key response's fields (extra members allowed), or None when malformed."""
    if not isinstance(v, dict) or not isinstance(v.get("public_key"), str):
        return None
    fp = v.get("fingerprint", None) if "fingerprint" in v else None
    if "fingerprint" in v and not isinstance(v["fingerprint"], str):
        return None
    retired = []
    if "retired" in v:
        if not isinstance(v["retired"], list):
            return None
        for r in v["retired"]:
            if not isinstance(r, dict) or not isinstance(r.get("public_key"), str):
                return None
            if "fingerprint" in r and not isinstance(r["fingerprint"], str):
                return None
            retired.append((r["public_key"], r["fingerprint"] if "fingerprint" in r else None))
    return v["public_key"], fp, retired


def read_public_key_file(path: str) -> list[KnownKey]:
    """The appliance's public-key response saved as JSON (active and retired keys are all
    pinned), or the raw key in base64."""
    try:
        data = _read_regular(path, MIB)
        if data is None:
            raise ValueError("too large")
    except (OSError, ValueError):
        raise UsageError(f"The public key file {path} cannot be read") from None
    text = _utf8_text(data, f"The public key file {path}").strip(JS_WHITESPACE)
    if text.startswith("{"):
        neither = f"The public key file {path} is neither a public-key response nor base64"
        try:
            value, problem = read_json(text)
        except (JsonSyntaxError, JsonTooManyValuesError):
            raise UsageError(neither) from None
        # a key named twice could be read as another key by another program
        if problem:
            raise UsageError(problem_sentence(f"The public key file {path}", problem))
        doc = _key_doc(value)
        if doc is None:
            raise UsageError(neither)
        b64, fp, retired = doc
        return [_decode_key(b64, fp, path)] + [_decode_key(k, f, path) for k, f in retired]
    return [_decode_key(re.sub("[" + re.escape(JS_WHITESPACE) + "]+", "", text), None, path)]


def digest_file(path: str) -> tuple[str, int]:
    """SHA-256 and size of a regular file, read in pieces (a FIFO or a device would be read
    without end)."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        raise UsageError(f"The artifact {path} cannot be read") from None
    if not regular:
        raise UsageError(f"The artifact {path} is not a regular file")
    try:
        h = hashlib.sha256()
        size = 0
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
                size += len(chunk)
        return h.hexdigest(), size
    except OSError:
        raise UsageError(f"The artifact {path} cannot be read") from None


def check_fingerprint_arg(fp: str | None) -> str | None:
    if fp is None:
        return None
    lower = fp.lower()
    if not re.fullmatch(r"[0-9a-f]{64}", lower):
        raise UsageError("--expected-fingerprint must be 64 hex characters")
    return lower


def exit_code_of(r: dict) -> int:
    return EXIT_VALID if r["verdict"] == "valid" else EXIT_UNSUPPORTED if r["verdict"] == "unsupported_schema" else EXIT_FAILED


_CONTROL = re.compile("[\u0000-\u001f\u007f-\u009f]")


def print_result(r: dict, as_json: bool) -> None:
    """Human output (verdict line, one line per check, the integrity-only note) or the verify
    structure as JSON."""
    if as_json:
        text = json.dumps(r, indent=2, ensure_ascii=False)
        # JSON.stringify writes a lone surrogate as an escape
        _write(sys.stdout, re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group(0)):04x}", text) + "\n")
        return
    safe = lambda x: _CONTROL.sub("?", x)  # noqa: E731 - details can quote names from the input
    lines = [f"verdict: {r['verdict']}"]
    if r.get("receipt_id"):
        lines.append(f"receipt_id: {safe(r['receipt_id'])}")
    if r.get("signer_fingerprint"):
        lines.append(f"signer_fingerprint: {r['signer_fingerprint']}")
    for c in r["checks"]:
        lines.append(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {safe(c['detail'])}")
    if not r["issuer_authenticated"]:
        lines.append("NOTE: integrity only: the issuer was not authenticated (no pinned key or fingerprint).")
    _write(sys.stdout, "\n".join(lines) + "\n")
