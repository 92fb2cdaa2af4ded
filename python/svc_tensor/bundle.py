"""Evidence bundles (evidence version 1): reading a ZIP or a json-dir safely and verifying
the seven files, with the same refusals and verdicts as the appliance's svc-verify-bundle.
Standard library only.

The ZIP reader is written here on struct and zlib rather than zipfile, so that it reads
exactly what the Node verifier's reader (yauzl) reads, in the same order: the end of
central directory record (zip64 too), each central directory entry, its local header, and
its data inflated no further than the entry's declared size.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import zlib

from . import mldsa
from .ijson import (
    JS_WHITESPACE, JsonSyntaxError, JsonTooManyValuesError, js_string, js_stringify, problem_sentence, read_json, utf16_len, utf16_slice,
)
from .receipt import (
    ALGORITHM, CANONICALIZATION, HEX64, MAX_RECEIPT_TEXT_BYTES, RECEIPT_PAYLOAD_TYPE, RECEIPT_SCHEMA, KnownKey, _Issue,
    check_artifact, fingerprint_of, js_eq, node_b64decode, pae, sha256_hex, verify_receipt,
)

EVIDENCE_VERSION = 1
MANIFEST_PAYLOAD_TYPE = "application/vnd.svc.provenance.manifest.v1"
BUNDLE_FILES = (
    "receipt.json",
    "artifact-manifest.json",
    "verification.json",
    "signer-public-key.json",
    "signature-metadata.json",
    "MANIFEST.sha256",
    "MANIFEST.sha256.sig",
)
HASHED_FILES = sorted(f for f in BUNDLE_FILES if f not in ("MANIFEST.sha256", "MANIFEST.sha256.sig"))
MAX_MEMBER_BYTES = MAX_RECEIPT_TEXT_BYTES
MAX_TOTAL_BYTES = 8 * 1024 * 1024
MAX_ENTRIES = 16
MIB = 1024 * 1024


class BundleError(Exception):
    """kind "unreadable" (exit 2) or "refused" (a failed verification)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def unsafe_name(name: str) -> str | None:
    if len(name) == 0 or utf16_len(name) > 255:
        return "has an empty or overlong name"
    if "\\" in name:
        return "has a backslash in its name"
    if "\0" in name:
        return "has a NUL in its name"
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        return "has an absolute path"
    segs = name.split("/")
    if ".." in segs:
        return "has a '..' path segment"
    if name.endswith("/"):
        return "is a directory"
    if any(s in ("", ".") for s in segs):
        return "has an empty or '.' path segment"
    return None


S_IFMT, S_IFLNK, S_IFDIR, S_IFREG = 0o170000, 0o120000, 0o040000, 0o100000


def _shown(name: str) -> str:
    return js_string(utf16_slice(name, 80))


class _Zip:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def read(self, pos: int, length: int) -> bytes:
        if length == 0:
            return b""
        if pos < 0 or pos + length > len(self.buf):
            raise ValueError("unexpected EOF")
        return self.buf[pos: pos + length]


def _u64(b: bytes, off: int) -> int:
    return struct.unpack_from("<Q", b, off)[0]


def read_zip(buf: bytes, max_total: int = MAX_TOTAL_BYTES, max_member: int = MAX_MEMBER_BYTES) -> dict[str, bytes]:
    """Every entry of a ZIP, refusing unsafe archives: at most MAX_ENTRIES entries, each at
    most `max_member` bytes by its declared size and by what it inflates to (inflating
    stops there), `max_total` bytes together."""
    unreadable = BundleError("unreadable", "The bundle is not a readable ZIP archive.")
    z = _Zip(buf)
    total_size = len(buf)
    # end of central directory: the last signature within the final 22 + 65535 + 20 bytes
    tail_len = min(20 + 22 + 0xFFFF, total_size)
    tail = buf[total_size - tail_len:]
    found = None
    for i in range(tail_len - 22, -1, -1):
        if tail[i: i + 4] != b"PK\x05\x06":
            continue
        disk, = struct.unpack_from("<H", tail, i + 4)
        entry_count, = struct.unpack_from("<H", tail, i + 10)
        cd_offset, = struct.unpack_from("<I", tail, i + 16)
        comment_len, = struct.unpack_from("<H", tail, i + 20)
        if comment_len != tail_len - i - 22:
            raise unreadable
        if i - 20 >= 0 and tail[i - 20: i - 16] == b"PK\x06\x07":
            try:
                eocd64 = z.read(_u64(tail, i - 20 + 8), 56)
            except ValueError:
                raise unreadable from None
            if eocd64[:4] != b"PK\x06\x06":
                raise unreadable
            if struct.unpack_from("<I", eocd64, 16)[0] != 0:
                raise unreadable
            entry_count = _u64(eocd64, 32)
            cd_offset = _u64(eocd64, 48)
        elif disk != 0:
            raise unreadable
        found = (entry_count, cd_offset)
        break
    if found is None:
        raise unreadable
    entry_count, cursor = found

    out: dict[str, bytes] = {}
    total = 0
    count = 0
    for _ in range(entry_count):
        try:
            hdr = z.read(cursor, 46)
            if hdr[:4] != b"PK\x01\x02":
                raise ValueError("bad signature")
            (made_by, _need, flags, method, _t, _d, _crc, csize, usize, nlen, xlen, clen, _disk, _iattr, xattr,
             local_off) = struct.unpack_from("<HHHHHHIIIHHHHHII", hdr, 4)
            if flags & 0x40:
                raise ValueError("strong encryption")
            cursor += 46
            var = z.read(cursor, nlen + xlen + clen)
            raw_name = var[:nlen]
            extra = var[nlen: nlen + xlen]
            fields = []
            j = 0
            while j < len(extra) - 3:
                fid, fsize = struct.unpack_from("<HH", extra, j)
                if j + 4 + fsize > len(extra):
                    raise ValueError("extra field length exceeds extra field buffer size")
                fields.append((fid, extra[j + 4: j + 4 + fsize]))
                j += 4 + fsize
            cursor += len(var)
            for fid, data in fields:
                if fid != 0x0001:
                    continue
                k = 0
                if usize == 0xFFFFFFFF:
                    if k + 8 > len(data):
                        raise ValueError("zip64 field without the uncompressed size")
                    usize = _u64(data, k)
                    k += 8
                if csize == 0xFFFFFFFF:
                    if k + 8 > len(data):
                        raise ValueError("zip64 field without the compressed size")
                    csize = _u64(data, k)
                    k += 8
                if local_off == 0xFFFFFFFF:
                    if k + 8 > len(data):
                        raise ValueError("zip64 field without the header offset")
                    local_off = _u64(data, k)
                    k += 8
                break
            if method == 0 and csize != usize + (12 if flags & 1 else 0):
                raise ValueError("stored size mismatch")
        except (ValueError, struct.error):
            raise unreadable from None

        name = raw_name.decode("utf-8", errors="replace")
        shown = _shown(name)
        count += 1
        if count > MAX_ENTRIES:
            raise BundleError("refused", f"The bundle has more than {MAX_ENTRIES} entries.")
        why = unsafe_name(name)
        if why:
            raise BundleError("refused", f"The bundle entry {shown} {why}.")
        ftype = (xattr >> 16) & S_IFMT
        made_by_unix = (made_by >> 8) == 3
        if made_by_unix and ftype == S_IFLNK:
            raise BundleError("refused", f"The bundle entry {shown} is a symbolic link.")
        if made_by_unix and ftype != 0 and ftype != S_IFREG:
            raise BundleError("refused", f"The bundle entry {shown} is not a regular file.")
        if name in out:
            raise BundleError("refused", f"The bundle has the entry {shown} twice.")
        if usize > max_member:
            raise BundleError("refused", f"The bundle entry {shown} is larger than the {max_member // MIB} MiB limit for one file of a bundle.")
        total += usize
        if total > max_total:
            raise BundleError("refused", f"The bundle's entries add up to more than the {max_total // MIB} MiB limit for a bundle.")

        cannot = BundleError("unreadable", f"The bundle entry {shown} cannot be read.")
        if flags & 1 or method not in (0, 8):
            raise cannot
        try:
            local = z.read(local_off, 30)
        except ValueError:
            raise cannot from None
        if local[:4] != b"PK\x03\x04":
            raise cannot
        lname, lextra = struct.unpack_from("<HH", local, 26)
        start = local_off + 30 + lname + lextra
        if start + csize > total_size:
            raise cannot
        data = buf[start: start + csize]
        if method == 0:
            out[name] = data
            continue
        too_far = BundleError("refused", f"The bundle entry {shown} inflates to more than its declared size; inflating stopped there.")
        corrupt = BundleError("unreadable", f"The bundle entry {shown} is corrupt.")
        try:
            d = zlib.decompressobj(-15)
            inflated = d.decompress(data, usize + 1)
        except zlib.error:
            raise corrupt from None
        if len(inflated) > usize:
            raise too_far
        if not d.eof:
            raise corrupt
        if len(inflated) < usize:
            raise corrupt
        out[name] = inflated
    return out


def _read_bounded(path: bytes, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        chunks = []
        n = 0
        while n <= limit:
            c = os.read(fd, limit + 1 - n)
            if not c:
                break
            chunks.append(c)
            n += len(c)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json_dir(path: str, max_total: int = MAX_TOTAL_BYTES) -> dict[str, bytes]:
    """A json-dir bundle: plain files only, no links, no subdirectories. A name that is not
    UTF-8 is shown and matched as its UTF-8 decoding (invalid bytes replaced, as in a ZIP
    entry's name) and read by its own bytes."""
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(path)
        entries = [(raw.decode("utf-8", errors="replace"), raw) for raw in os.listdir(os.fsencode(path))]
    except OSError:
        raise BundleError("unreadable", "The bundle directory cannot be read.") from None
    entries.sort(key=lambda e: e[0].encode("utf-16-be", "surrogatepass"))
    if len(entries) > MAX_ENTRIES:
        raise BundleError("refused", f"The bundle has more than {MAX_ENTRIES} entries.")
    out: dict[str, bytes] = {}
    total = 0
    for name, raw in entries:
        shown = _shown(name)
        why = unsafe_name(name)
        if why:
            raise BundleError("refused", f"The bundle entry {shown} {why}.")
        if name in out:
            raise BundleError("refused", f"The bundle has the entry {shown} twice.")
        full = os.path.join(os.fsencode(path), raw)
        try:
            st = os.lstat(full)
        except OSError:
            raise BundleError("unreadable", f"The bundle file {shown} cannot be read.") from None
        if stat.S_ISLNK(st.st_mode):
            raise BundleError("refused", f"The bundle entry {shown} is a symbolic link.")
        if not stat.S_ISREG(st.st_mode):
            raise BundleError("refused", f"The bundle entry {shown} is not a regular file.")
        too_large = BundleError("refused", f"The bundle file {shown} is larger than the {MAX_MEMBER_BYTES // MIB} MiB limit for one file of a bundle.")
        if st.st_size > MAX_MEMBER_BYTES:
            raise too_large
        total += st.st_size
        if total > max_total:
            raise BundleError("refused", f"The bundle's files add up to more than the {max_total // MIB} MiB limit for a bundle.")
        try:
            data = _read_bounded(full, MAX_MEMBER_BYTES)
        except OSError:
            raise BundleError("unreadable", f"The bundle file {shown} cannot be read.") from None
        # a file that grew after lstat is held to the same limit
        if len(data) > MAX_MEMBER_BYTES:
            raise too_large
        out[name] = data
    return out


# ---- verification -------------------------------------------------------------

class _CheckFailure(Exception):
    """A check's failure with a detail of its own."""


def _read_json_file(files: dict[str, bytes], name: str):
    buf = files.get(name)
    if buf is None:
        raise _CheckFailure(f"{name} is missing.")
    try:
        text = buf.decode("utf-8")
    except UnicodeDecodeError:
        # decoded with replacement characters, other bytes than the ones signed would read the same
        raise _CheckFailure(f"{name} is not valid UTF-8.") from None
    try:
        return read_json(text)
    except JsonSyntaxError:
        raise _CheckFailure(f"{name} is not valid JSON.") from None
    except JsonTooManyValuesError as e:
        raise _CheckFailure(f"{name} holds {e}.") from None


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _parse_json(files: dict[str, bytes], name: str) -> object:
    value, problem = _read_json_file(files, name)
    if problem:
        raise _CheckFailure(problem_sentence(name, problem))
    return value


_PUBKEY_B64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_SIG_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _strict_doc(v: object, spec: dict) -> bool:
    """A strict object of exactly these members (zod's strictObject, which refuses any other
    member, one named "__proto__" included)."""
    if not isinstance(v, dict):
        return False
    if set(v) - set(spec):
        return False
    return all(k in v and check(v[k]) for k, check in spec.items())


def verify_bundle(files: dict[str, bytes], pinned_keys: list[KnownKey] | None, expected_fingerprint: str | None,
                  integrity_only: bool, artifact: tuple[str, int] | None) -> dict:
    """Verifies the files of a bundle; never raises."""
    checks: list[dict] = []
    state: dict = {"unsupported": False, "key": None}

    def run(name: str, fn) -> bool:
        try:
            ok, detail = fn()
        except _CheckFailure as e:
            ok, detail = False, str(e)
        except Exception:  # noqa: BLE001 - fail closed with a generic sentence
            ok, detail = False, "The check could not be carried out."
        checks.append({"name": name, "ok": ok is True, "detail": detail})
        return ok is True

    def bundle_files():
        missing = [n for n in BUNDLE_FILES if n not in files]
        extra = [n for n in files if n not in BUNDLE_FILES]
        if missing:
            return False, f"The bundle lacks {', '.join(missing)}."
        if extra:
            return False, f"The bundle has unexpected files: {', '.join(_shown(n) for n in extra[:5])}."
        # every file is text (JSON, the manifest, base64): RFC 8259 JSON is UTF-8
        not_text = next((n for n in BUNDLE_FILES if not _is_utf8(files[n])), None)
        if not_text:
            return False, f"{not_text} is not valid UTF-8."
        return True, "The bundle holds exactly the seven files of evidence version 1."

    def evidence_version():
        meta = _parse_json(files, "signature-metadata.json")
        if not isinstance(meta, (dict, list)):
            return False, "signature-metadata.json is not a JSON object."
        ev = meta.get("evidence_version") if isinstance(meta, dict) else None
        if not (isinstance(meta, dict) and "evidence_version" in meta and js_eq(ev, float(EVIDENCE_VERSION))):
            state["unsupported"] = True
            shown = "undefined" if not (isinstance(meta, dict) and "evidence_version" in meta) else utf16_slice(js_stringify(ev), 40)
            return False, f"Evidence version {shown} is not supported; this verifier reads version {EVIDENCE_VERSION}."
        if not js_eq(meta.get("schema"), RECEIPT_SCHEMA):
            state["unsupported"] = True
            return False, "signature-metadata.json names a receipt schema this verifier does not read."
        ok = _strict_doc(meta, {
            "algorithm": lambda x: js_eq(x, ALGORITHM),
            "canonicalization": lambda x: js_eq(x, CANONICALIZATION),
            "payload_type": lambda x: js_eq(x, RECEIPT_PAYLOAD_TYPE),
            "schema": lambda x: isinstance(x, str),
            "evidence_version": lambda x: True,
        })
        if not ok:
            return False, "signature-metadata.json is malformed."
        return True, f"Evidence version {EVIDENCE_VERSION}, {ALGORITHM}, {CANONICALIZATION}."

    def _utf16_from(s: str, start: int) -> str:
        if all(ord(ch) <= 0xFFFF for ch in s):
            return s[start:]
        return s.encode("utf-16-le", "surrogatepass")[2 * start:].decode("utf-16-le", "surrogatepass")

    def manifest():
        m = files.get("MANIFEST.sha256")
        if m is None:
            return False, "MANIFEST.sha256 is missing."
        expected = "".join(f"{sha256_hex(files.get(n, b''))}  {n}\n" for n in HASHED_FILES)
        lines = m.decode("utf-8", errors="replace")
        listed = [_utf16_from(ln, 66) for ln in lines.split("\n") if ln]
        if ",".join(listed) != ",".join(HASHED_FILES):
            return False, "MANIFEST.sha256 does not list exactly the bundle's files in order."
        for n in HASHED_FILES:
            if n not in files:
                return False, f"{n} is missing."
        if lines != expected:
            split = lines.split("\n")
            bad = next((n for i, n in enumerate(HASHED_FILES)
                        if (split[i] if i < len(split) else None) != f"{sha256_hex(files[n])}  {n}"), None)
            return False, f"The SHA-256 of {bad} does not match MANIFEST.sha256." if bad else "MANIFEST.sha256 is malformed."
        return True, "Every file matches its SHA-256 in MANIFEST.sha256."

    def signer_key():
        doc = _parse_json(files, "signer-public-key.json")
        ok = _strict_doc(doc, {
            "algorithm": lambda x: js_eq(x, ALGORITHM),
            "public_key": lambda x: isinstance(x, str) and _PUBKEY_B64.fullmatch(x) is not None,
            "fingerprint": lambda x: isinstance(x, str) and HEX64.fullmatch(x) is not None,
        })
        if not ok:
            return False, "signer-public-key.json is malformed."
        bundled = node_b64decode(doc["public_key"])  # type: ignore[index]
        if len(bundled) != mldsa.PUBLIC_KEY_BYTES:
            return False, f"The bundled public key does not have {mldsa.PUBLIC_KEY_BYTES} bytes."
        bfp = fingerprint_of(bundled)
        if bfp != doc["fingerprint"]:  # type: ignore[index]
            return False, "The bundled fingerprint is not the SHA-256 of the bundled public key."
        if pinned_keys:
            pinned = next((k for k in pinned_keys if k.fingerprint == bfp and fingerprint_of(k.public_key) == bfp), None)
            if pinned is None:
                return False, f"The bundle's signer {bfp} is not a pinned key."
            if expected_fingerprint and bfp != expected_fingerprint:
                return False, f"The bundle's signer {bfp} does not have the expected fingerprint."
            state["key"] = pinned
            return True, f"The bundle's signer is the pinned key {bfp}."
        if expected_fingerprint:
            if bfp != expected_fingerprint:
                return False, f"The bundle's signer {bfp} does not have the expected fingerprint."
            state["key"] = KnownKey(bundled, bfp)
            return True, f"The bundled key has the expected fingerprint {bfp}."
        state["key"] = KnownKey(bundled, bfp)
        return True, f"Integrity only: the bundled key {bfp} is used; the issuer was not authenticated."

    def manifest_signature():
        key = state["key"]
        if key is None:
            return False, "No signing key was established, so the manifest signature cannot be checked."
        m = files.get("MANIFEST.sha256")
        s = files.get("MANIFEST.sha256.sig")
        if m is None or s is None:
            return False, "The manifest or its signature is missing."
        text = s.decode("utf-8", errors="replace").strip(JS_WHITESPACE)
        if not _SIG_B64.fullmatch(text):
            return False, "MANIFEST.sha256.sig is not base64."
        sig = node_b64decode(text)
        if len(sig) != mldsa.SIGNATURE_BYTES:
            return False, f"The manifest signature does not have {mldsa.SIGNATURE_BYTES} bytes."
        if mldsa.verify(key.public_key, pae(MANIFEST_PAYLOAD_TYPE, m), sig):
            return True, f"The {ALGORITHM} signature over MANIFEST.sha256 is valid."
        return False, f"The {ALGORITHM} signature over MANIFEST.sha256 does not verify."

    run("bundle_files", bundle_files)
    run("evidence_version", evidence_version)
    run("manifest", manifest)
    run("signer_key", signer_key)
    run("manifest_signature", manifest_signature)

    # receipt.json is read for the receipt's own checks, which report an I-JSON problem of it
    receipt: object = None
    receipt_problem = None
    try:
        receipt, receipt_problem = _read_json_file(files, "receipt.json")
    except _CheckFailure:
        pass

    def artifact_manifest():
        try:
            m = check_artifact(_parse_json(files, "artifact-manifest.json"), "")
        except _Issue:
            return False, "artifact-manifest.json is malformed."
        ra = receipt.get("artifact") if isinstance(receipt, dict) else None
        same = isinstance(ra, dict) and all(k in ra and js_eq(ra[k], m[k]) for k in ("name", "sha256", "size_bytes", "media_type"))
        if same:
            return True, "artifact-manifest.json matches the receipt's artifact."
        return False, "artifact-manifest.json differs from the receipt's artifact."

    run("artifact_manifest", artifact_manifest)

    key = state["key"]
    keys = [key] if key else []
    pinned = bool(pinned_keys) or bool(expected_fingerprint)
    trusted = [k.fingerprint for k in keys] if pinned else None
    rv = verify_receipt(receipt, keys, trusted if (integrity_only or trusted is not None) else [], artifact, receipt_problem)
    all_checks = rv["checks"] + checks
    unsupported = state["unsupported"] or rv["verdict"] == "unsupported_schema"
    valid = not unsupported and all(c["ok"] for c in all_checks)
    return {
        "verdict": "unsupported_schema" if unsupported else "valid" if valid else "failed",
        "valid": valid,
        "checks": all_checks,
        "receipt_id": rv["receipt_id"],
        "signer_fingerprint": rv["signer_fingerprint"],
        "issuer_authenticated": trusted is not None,
    }
