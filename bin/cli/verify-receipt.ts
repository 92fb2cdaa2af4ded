// Offline verifier of one provenance receipt: no network, no appliance.
// The command's work as a function of its arguments (bin/svc-verify-receipt.ts runs it with
// runCli, which turns its result or error into the exit code).
import {
  EXIT,
  UsageError,
  digestFile,
  exitCodeOf,
  parse,
  pinOf,
  printResult,
  readPublicKeyFile,
  readReceiptFile,
  VERIFY_OPTIONS,
} from "../../server/provenance/cli.js";
import { verifyReceipt } from "../../server/provenance/receipt.js";
import { createBackend } from "../../server/provenance/signer.js";

const HELP = `Usage: svc-verify-receipt --receipt PATH [--public-key PATH] [--expected-fingerprint HEX]
                          [--artifact PATH] [--integrity-only] [--json]

Verifies a svc.provenance.receipt.v1 receipt offline with the six checks (schema,
canonical_body, signed_fields, signature, signer, artifact_commitment).

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
`;

/** Verifies as the command line `argv` asks; resolves to the exit code. */
export async function verifyReceiptCli(argv: string[]): Promise<number> {
  const { values } = parse(argv, { receipt: { type: "string" }, ...VERIFY_OPTIONS });
  if (values.help) {
    process.stdout.write(HELP);
    return EXIT.valid;
  }
  const receiptPath = values.receipt as string | undefined;
  if (!receiptPath) throw new UsageError("--receipt is required; see --help");
  const { keyPath, expected, integrityOnly } = pinOf(values);
  // read as I-JSON: a member name twice or a number that changed value fails canonical_body
  const receipt = await readReceiptFile(receiptPath, "receipt");
  // A receipt names its key only by fingerprint: without --public-key the signature check
  // cannot be carried out, which makes it a failure (exit 1), as docs/provenance.md says.
  let keys = keyPath ? await readPublicKeyFile(keyPath) : [];
  if (expected) keys = keys.filter((k) => k.fingerprint === expected);
  const artifact = values.artifact ? await digestFile(values.artifact as string) : undefined;
  const pinned = !integrityOnly || expected !== undefined;
  const backend = await createBackend("liboqs");
  const result = verifyReceipt(receipt.value, {
    backend,
    keys,
    trustedFingerprints: pinned ? keys.map((k) => k.fingerprint) : null,
    artifact,
    textProblem: receipt.problem,
  });
  printResult({ ...result, issuer_authenticated: pinned }, values.json === true);
  return exitCodeOf(result);
}
