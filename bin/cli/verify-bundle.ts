// Offline verifier of an evidence bundle (ZIP or json-dir): no network, no appliance.
// The command's work as a function of its arguments (bin/svc-verify-bundle.ts runs it with
// runCli, which turns its result or error into the exit code).
import { readFile, stat } from "node:fs/promises";
import { BundleError, MAX_TOTAL_BYTES, readJsonDir, readZip, verifyBundle, type BundleVerifyResult } from "../../server/provenance/bundle.js";
import { EXIT, UsageError, digestFile, exitCodeOf, parse, pinOf, printResult, readPublicKeyFile, VERIFY_OPTIONS } from "../../server/provenance/cli.js";
import { createBackend } from "../../server/provenance/signer.js";

const HELP = `Usage: svc-verify-bundle --bundle PATH [--format zip|json-dir] [--public-key PATH]
                         [--expected-fingerprint HEX] [--artifact PATH] [--integrity-only] [--json]

Verifies an evidence bundle (evidence version 1) offline: exactly the seven files, every
SHA-256 in MANIFEST.sha256, the manifest's ML-DSA-65 signature, the bundled key, and the
receipt's six checks.

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
`;

/** Verifies as the command line `argv` asks; resolves to the exit code. */
export async function verifyBundleCli(argv: string[]): Promise<number> {
  const { values } = parse(argv, { bundle: { type: "string" }, format: { type: "string" }, ...VERIFY_OPTIONS });
  if (values.help) {
    process.stdout.write(HELP);
    return EXIT.valid;
  }
  const bundlePath = values.bundle as string | undefined;
  if (!bundlePath) throw new UsageError("--bundle is required; see --help");
  const fmtArg = values.format as string | undefined;
  if (fmtArg !== undefined && fmtArg !== "zip" && fmtArg !== "json-dir") throw new UsageError("--format must be zip or json-dir");
  const { keyPath, expected, integrityOnly } = pinOf(values);
  let st;
  try {
    st = await stat(bundlePath);
  } catch {
    throw new UsageError(`The bundle ${bundlePath} cannot be read`);
  }
  const format = fmtArg ?? (st.isDirectory() ? "json-dir" : "zip");
  const pinnedKeys = keyPath ? await readPublicKeyFile(keyPath) : undefined;
  const artifact = values.artifact ? await digestFile(values.artifact as string) : undefined;

  let files: Map<string, Buffer>;
  try {
    if (format === "zip") {
      if (!st.isFile()) throw new BundleError("unreadable", `The bundle ${bundlePath} is not a file`);
      if (st.size > MAX_TOTAL_BYTES)
        throw new BundleError("refused", `The bundle is larger than the ${MAX_TOTAL_BYTES / (1024 * 1024)} MiB limit for a bundle.`);
      let buf: Buffer;
      try {
        buf = await readFile(bundlePath);
      } catch {
        throw new BundleError("unreadable", `The bundle ${bundlePath} cannot be read`);
      }
      files = await readZip(buf);
    } else {
      files = await readJsonDir(bundlePath);
    }
  } catch (e) {
    if (e instanceof BundleError && e.kind === "refused") {
      const refused: BundleVerifyResult = {
        verdict: "failed",
        valid: false,
        checks: [{ name: "bundle_files", ok: false, detail: e.message }],
        receipt_id: null,
        signer_fingerprint: null,
        issuer_authenticated: false,
      };
      printResult(refused, values.json === true);
      return EXIT.failed;
    }
    if (e instanceof BundleError) throw new UsageError(e.message);
    throw e;
  }
  const backend = await createBackend("liboqs");
  const result = verifyBundle(files, { backend, pinnedKeys, expectedFingerprint: expected, integrityOnly, artifact });
  printResult(result, values.json === true);
  return exitCodeOf(result);
}
