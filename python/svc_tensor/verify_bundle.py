"""svc-verify-bundle in Python: verifies an evidence bundle (ZIP or json-dir) offline,
standard library only (no network, no appliance, no third-party package)."""

from __future__ import annotations

import os
import stat
import sys

from .bundle import MAX_TOTAL_BYTES, BundleError, read_json_dir, read_zip, verify_bundle
from .cli import (
    EXIT_FAILED, EXIT_VALID, UsageError, check_fingerprint_arg, digest_file, exit_code_of, parse_args, print_result,
    read_public_key_file, run_cli,
)

HELP = """Usage: svc-verify-bundle-py --bundle PATH [--format zip|json-dir] [--public-key PATH]
                            [--expected-fingerprint HEX] [--artifact PATH] [--integrity-only] [--json]
       python3 -m svc_tensor.verify_bundle ...

Verifies an evidence bundle (evidence version 1) offline: exactly the seven files, every
SHA-256 in MANIFEST.sha256, the manifest's ML-DSA-65 signature, the bundled key, and the
receipt's six checks. Python 3.11 or later and its standard library only.

  --bundle PATH                the ZIP file, or the directory for --format json-dir (required)
  --format zip|json-dir        default: zip (json-dir when PATH is a directory)
  --public-key PATH            the appliance's public-key response saved as JSON, or a raw
                               key in base64: the bundle's signer must be one of its keys
  --expected-fingerprint HEX   the signer's key must have exactly this SHA-256 fingerprint
  --artifact PATH              the artifact's SHA-256 and size must match the receipt
  --integrity-only             without a pin: check against the bundled key; the issuer is
                               not authenticated
  --json                       print the verify structure as JSON
  --help                       this text

Limits: at most 16 entries, 4 MiB a file (declared and inflated), 8 MiB in all. JSON files
must be I-JSON: no member name twice, numbers that keep their value in RFC 8785 form.
Take the key and fingerprint from a channel you trust, not from the bundle.
Exit codes: 0 valid, 1 verification failed (tampered, signer or artifact mismatch, refused
entries), 2 usage error or unreadable input, 3 unsupported schema or evidence version.
"""


def _main(argv: list[str]) -> int:
    values = parse_args(argv, ("bundle", "format", "public-key", "expected-fingerprint", "artifact"), ("integrity-only", "json", "help"))
    if values.get("help"):
        sys.stdout.write(HELP)
        return EXIT_VALID
    bundle_path = values.get("bundle")
    if not bundle_path:
        raise UsageError("--bundle is required; see --help")
    fmt = values.get("format")
    if fmt is not None and fmt not in ("zip", "json-dir"):
        raise UsageError("--format must be zip or json-dir")
    key_path = values.get("public-key")
    expected = check_fingerprint_arg(values.get("expected-fingerprint"))
    integrity_only = values.get("integrity-only") is True
    if not key_path and not expected and not integrity_only:
        raise UsageError("Refusing to verify without --public-key or --expected-fingerprint; pin the issuer, or pass --integrity-only")
    try:
        st = os.stat(bundle_path)
    except (OSError, ValueError):
        raise UsageError(f"The bundle {bundle_path} cannot be read") from None
    fmt = fmt or ("json-dir" if stat.S_ISDIR(st.st_mode) else "zip")
    pinned_keys = read_public_key_file(key_path) if key_path else None
    artifact = digest_file(values["artifact"]) if values.get("artifact") else None
    as_json = values.get("json") is True
    try:
        if fmt == "zip":
            if not stat.S_ISREG(st.st_mode):
                raise BundleError("unreadable", f"The bundle {bundle_path} is not a file")
            if st.st_size > MAX_TOTAL_BYTES:
                raise BundleError("refused", f"The bundle is larger than the {MAX_TOTAL_BYTES // (1024 * 1024)} MiB limit for a bundle.")
            try:
                with open(bundle_path, "rb") as f:
                    buf = f.read(MAX_TOTAL_BYTES + 1)
            except OSError:
                raise BundleError("unreadable", f"The bundle {bundle_path} cannot be read") from None
            if len(buf) > MAX_TOTAL_BYTES:
                raise BundleError("refused", f"The bundle is larger than the {MAX_TOTAL_BYTES // (1024 * 1024)} MiB limit for a bundle.")
            files = read_zip(buf)
        else:
            files = read_json_dir(bundle_path)
    except BundleError as e:
        if e.kind == "refused":
            print_result({
                "verdict": "failed", "valid": False,
                "checks": [{"name": "bundle_files", "ok": False, "detail": str(e)}],
                "receipt_id": None, "signer_fingerprint": None, "issuer_authenticated": False,
            }, as_json)
            return EXIT_FAILED
        raise UsageError(str(e)) from None
    result = verify_bundle(files, pinned_keys, expected, integrity_only, artifact)
    print_result(result, as_json)
    return exit_code_of(result)


def main(argv: list[str] | None = None) -> int:
    return run_cli(lambda: _main(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
