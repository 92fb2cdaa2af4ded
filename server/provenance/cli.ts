// What the three provenance programs share: argument parsing, one-sentence errors,
// exit codes, reading key files and artifacts, printing a verify result.
import { isUtf8 } from "node:buffer";
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { z } from "zod";
import { isNoSpace, isReadOnlyFs } from "../../lib/errors.js";
import { MAX_RECEIPT_TEXT_BYTES, type KnownKey, type VerifyResult } from "./receipt.js";
import { PUBLIC_KEY_BYTES, fingerprintOf } from "./signer.js";
import { JsonSyntaxError, JsonTooManyValuesError, problemSentence, readJson, type JsonProblem } from "../http/json.js";

export const EXIT = { valid: 0, failed: 1, usage: 2, unsupported: 3 } as const;

/** A usage problem or unreadable input: exit 2 with one sentence. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT.usage,
  ) {
    super(message);
    this.name = "UsageError";
  }
}

const sentence = (s: string): string => {
  const t = s.trim().replace(/\s+/g, " ");
  const c = t.charAt(0).toUpperCase() + t.slice(1);
  return /[.!?]$/.test(c) ? c : `${c}.`;
};

/** Runs `main`, mapping errors to one sentence on stderr and an exit code. */
export async function runCli(main: () => Promise<number>): Promise<void> {
  try {
    process.exitCode = await main();
  } catch (e) {
    const debug = (process.env.SVC_ENGINE_LOG_LEVEL ?? "").toLowerCase() === "debug";
    if (e instanceof UsageError) {
      process.stderr.write(sentence(e.message) + "\n");
      process.exitCode = e.exitCode;
    } else if (e instanceof Error && e.name === "ConfigError") {
      process.stderr.write(sentence(e.message) + "\n");
      process.exitCode = EXIT.usage;
    } else if (isReadOnlyFs(e) || isNoSpace(e)) {
      // a file the command must write, on a file system that takes no write
      const path = (e as NodeJS.ErrnoException).path;
      const where = typeof path === "string" ? `${path} is on a file system that` : "A file system the command writes to";
      process.stderr.write(
        `${where} ${isReadOnlyFs(e) ? "is read-only; remount it read-write" : "has no space left; free space"} and run the command again.\n`,
      );
      process.exitCode = EXIT.failed;
    } else {
      process.stderr.write(sentence(e instanceof Error && /^[\w ,.'()/:-]{1,200}$/.test(e.message) ? e.message : "The command failed") + "\n");
      process.exitCode = EXIT.failed;
    }
    if (debug && e instanceof Error && e.stack) process.stderr.write(e.stack + "\n");
  }
}

export interface ParsedArgs {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

export function parse(args: string[], options: NonNullable<ParseArgsConfig["options"]>, allowPositionals = false): ParsedArgs {
  try {
    const r = parseArgs({ args, options, strict: true, allowPositionals });
    return { values: r.values as ParsedArgs["values"], positionals: r.positionals };
  } catch (e) {
    // node's messages name the option; keep only the first sentence, no codes
    const msg = e instanceof Error ? e.message.split("\n")[0]!.replace(/^TypeError \[[A-Z_]+\]: /, "") : "bad arguments";
    throw new UsageError(`${msg.replace(/\. To specify.*$/, "")}; see --help`);
  }
}

const MIB = 1024 * 1024;

/**
 * The text of a file's bytes, which must be valid UTF-8 (RFC 8259 section 8.1): decoded with
 * replacement characters, several byte strings would read as one text, so that bytes nobody
 * signed could verify as a signed text. A BOM is kept, for the caller to decide.
 */
function utf8Text(buf: Buffer, what: string): string {
  if (!isUtf8(buf)) throw new UsageError(`${what} is not valid UTF-8`);
  return buf.toString("utf8");
}

/**
 * Reads a receipt file (at most MAX_RECEIPT_TEXT_BYTES, 4 MiB): its value and the first
 * I-JSON problem of its text, which fails the receipt's canonical_body check. Unreadable,
 * too large, not UTF-8 or not JSON at all: UsageError (exit 2).
 */
export async function readReceiptFile(path: string, what = "receipt"): Promise<{ value: unknown; problem: JsonProblem | null }> {
  let buf: Buffer;
  try {
    const st = await stat(path);
    if (!st.isFile()) throw new UsageError(`The ${what} ${path} is not a regular file`);
    if (st.size > MAX_RECEIPT_TEXT_BYTES)
      throw new UsageError(`The ${what} ${path} is larger than the ${MAX_RECEIPT_TEXT_BYTES / MIB} MiB limit for a receipt`);
    buf = await readFile(path);
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`The ${what} ${path} cannot be read`);
  }
  let text = utf8Text(buf, `The ${what} ${path}`);
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  try {
    return readJson(text);
  } catch (e) {
    if (e instanceof JsonSyntaxError) throw new UsageError(`The ${what} ${path} is not valid JSON`);
    if (e instanceof JsonTooManyValuesError) throw new UsageError(`The ${what} ${path} holds ${e.message}, more than any receipt`);
    throw e;
  }
}

const keyDoc = z.object({
  public_key: z.string(),
  fingerprint: z.string().optional(),
  retired: z.array(z.object({ public_key: z.string(), fingerprint: z.string().optional() })).optional(),
});

function decodeKey(b64: string, fp: string | undefined, path: string): KnownKey {
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) throw new UsageError(`The public key file ${path} does not hold base64`);
  const publicKey = new Uint8Array(Buffer.from(b64, "base64"));
  if (publicKey.length !== PUBLIC_KEY_BYTES) throw new UsageError(`The public key in ${path} does not have ${PUBLIC_KEY_BYTES} bytes`);
  const fingerprint = fingerprintOf(publicKey);
  if (fp !== undefined && fp !== fingerprint) throw new UsageError(`The fingerprint in ${path} is not the SHA-256 of its public key`);
  return { publicKey, fingerprint };
}

/**
 * A public key file: the appliance's public-key response saved as JSON (its active and
 * retired keys are all pinned), or the raw key in base64.
 */
export async function readPublicKeyFile(path: string): Promise<KnownKey[]> {
  let buf: Buffer;
  try {
    const st = await stat(path);
    if (!st.isFile() || st.size > 1024 * 1024) throw new Error("bad");
    buf = await readFile(path);
  } catch {
    throw new UsageError(`The public key file ${path} cannot be read`);
  }
  const text = utf8Text(buf, `The public key file ${path}`).trim();
  if (text.startsWith("{")) {
    let doc: z.infer<typeof keyDoc>;
    let parsed: { value: unknown; problem: JsonProblem | null };
    try {
      parsed = readJson(text);
    } catch {
      throw new UsageError(`The public key file ${path} is neither a public-key response nor base64`);
    }
    // a key named twice could be read as another key by another program
    if (parsed.problem) throw new UsageError(problemSentence(`The public key file ${path}`, parsed.problem));
    try {
      doc = keyDoc.parse(parsed.value);
    } catch {
      throw new UsageError(`The public key file ${path} is neither a public-key response nor base64`);
    }
    return [decodeKey(doc.public_key, doc.fingerprint, path), ...(doc.retired ?? []).map((r) => decodeKey(r.public_key, r.fingerprint, path))];
  }
  return [decodeKey(text.replace(/\s+/g, ""), undefined, path)];
}

/** SHA-256 and size of a regular file, streamed (a FIFO or a device would be read without end). */
export async function digestFile(path: string): Promise<{ sha256: string; size_bytes: number }> {
  let regular: boolean;
  try {
    regular = (await stat(path)).isFile();
  } catch {
    throw new UsageError(`The artifact ${path} cannot be read`);
  }
  if (!regular) throw new UsageError(`The artifact ${path} is not a regular file`);
  try {
    const h = createHash("sha256");
    let size = 0;
    for await (const chunk of createReadStream(path)) {
      h.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    }
    return { sha256: h.digest("hex"), size_bytes: size };
  } catch {
    throw new UsageError(`The artifact ${path} cannot be read`);
  }
}

export function checkFingerprintArg(fp: string | undefined): string | undefined {
  if (fp === undefined) return undefined;
  const lower = fp.toLowerCase();
  if (!/^[0-9a-f]{64}$/.test(lower)) throw new UsageError("--expected-fingerprint must be 64 hex characters");
  return lower;
}

/** The options both offline verifiers take besides the file they verify (--receipt, --bundle). */
export const VERIFY_OPTIONS = {
  "public-key": { type: "string" },
  "expected-fingerprint": { type: "string" },
  artifact: { type: "string" },
  "integrity-only": { type: "boolean" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

export interface Pin {
  keyPath: string | undefined;
  expected: string | undefined;
  integrityOnly: boolean;
}

/** How a verifier's issuer is pinned; a usage error when it is not and --integrity-only is not given. */
export function pinOf(values: ParsedArgs["values"]): Pin {
  const keyPath = values["public-key"] as string | undefined;
  const expected = checkFingerprintArg(values["expected-fingerprint"] as string | undefined);
  const integrityOnly = values["integrity-only"] === true;
  if (!keyPath && !expected && !integrityOnly) {
    throw new UsageError("Refusing to verify without --public-key or --expected-fingerprint; pin the issuer, or pass --integrity-only");
  }
  return { keyPath, expected, integrityOnly };
}

export function exitCodeOf(r: VerifyResult): number {
  return r.verdict === "valid" ? EXIT.valid : r.verdict === "unsupported_schema" ? EXIT.unsupported : EXIT.failed;
}

/** Human output: verdict line, one line per check, the integrity-only note. */
export function printResult(r: VerifyResult & { issuer_authenticated: boolean }, json: boolean): void {
  if (json) {
    process.stdout.write(JSON.stringify(r, null, 2) + "\n");
    return;
  }
  // details can quote names from the input: no control characters reach the terminal
  const safe = (x: string): string => x.replace(/[\u0000-\u001f\u007f-\u009f]/g, "?");
  const lines = [`verdict: ${r.verdict}`];
  if (r.receipt_id) lines.push(`receipt_id: ${safe(r.receipt_id)}`);
  if (r.signer_fingerprint) lines.push(`signer_fingerprint: ${r.signer_fingerprint}`);
  for (const c of r.checks) lines.push(`  ${c.ok ? "ok  " : "FAIL"} ${c.name}: ${safe(c.detail)}`);
  if (!r.issuer_authenticated) lines.push("NOTE: integrity only: the issuer was not authenticated (no pinned key or fingerprint).");
  process.stdout.write(lines.join("\n") + "\n");
}
