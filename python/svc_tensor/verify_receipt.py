"""svc-verify-receipt in Python: verifies one provenance receipt offline, standard library
only (no network, no appliance, no third-party package)."""

from __future__ import annotations

import sys

from .cli import (
    EXIT_VALID, UsageError, check_fingerprint_arg, digest_file, exit_code_of, parse_args, print_result,
    read_public_key_file, read_receipt_file, run_cli,
)
from .receipt import verify_receipt

HELP = """Usage: svc-verify-receipt-py --receipt PATH [--public-key PATH] [--expected-fingerprint HEX]
                             [--artifact PATH] [--integrity-only] [--json]
       python3 -m svc_tensor.verify_receipt ...

Verifies a svc.provenance.receipt.v1 receipt offline with the six checks (schema,
canonical_body, signed_fields, signature, signer, artifact_commitment). Python 3.11 or
later and its standard library only.

  --receipt PATH               the receipt JSON (required)
  --public-key PATH            the appliance's public-key response saved as JSON (active and
                               retired keys are pinned), or a raw key in base64
  --expected-fingerprint HEX   the signer's key must have exactly this SHA-256 fingerprint
  --artifact PATH              the artifact's SHA-256 and size must match the receipt
  --integrity-only             check the signature with the given key without treating it as
                               a pin; the issuer is not authenticated
  --json                       print the verify structure as JSON
  --help                       this text

The receipt file is at most 4 MiB of I-JSON: a member name twice, or a number that changes
value in RFC 8785 form, fails the canonical_body check.
A receipt names its key only by fingerprint, so --public-key is always needed to check
its signature. Take the key and fingerprint from a channel you trust, not from the
package being checked.

Exit codes: 0 valid, 1 verification failed, 2 usage error or unreadable input,
3 unsupported schema.
"""


def _main(argv: list[str]) -> int:
    values = parse_args(argv, ("receipt", "public-key", "expected-fingerprint", "artifact"), ("integrity-only", "json", "help"))
    if values.get("help"):
        sys.stdout.write(HELP)
        return EXIT_VALID
    receipt_path = values.get("receipt")
    if not receipt_path:
        raise UsageError("--receipt is required; see --help")
    key_path = values.get("public-key")
    expected = check_fingerprint_arg(values.get("expected-fingerprint"))
    integrity_only = values.get("integrity-only") is True
    if not key_path and not expected and not integrity_only:
        raise UsageError("Refusing to verify without --public-key or --expected-fingerprint; pin the issuer, or pass --integrity-only")
    value, problem = read_receipt_file(receipt_path, "receipt")
    # A receipt names its key only by fingerprint: without --public-key the signature check
    # cannot be carried out, which makes it a failure (exit 1).
    keys = read_public_key_file(key_path) if key_path else []
    if expected:
        keys = [k for k in keys if k.fingerprint == expected]
    artifact = digest_file(values["artifact"]) if values.get("artifact") else None
    pinned = not integrity_only or expected is not None
    result = verify_receipt(value, keys, [k.fingerprint for k in keys] if pinned else None, artifact, problem)
    result["issuer_authenticated"] = pinned
    print_result(result, values.get("json") is True)
    return exit_code_of(result)


def main(argv: list[str] | None = None) -> int:
    return run_cli(lambda: _main(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
