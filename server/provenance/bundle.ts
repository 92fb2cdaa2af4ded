// Evidence bundles (evidence version 1): building the seven files, writing them as a
// reproducible ZIP (yazl), reading a ZIP (yauzl) or a json-dir safely, and verifying a
// bundle. Shared by the appliance and svc-verify-bundle.
import { isUtf8 } from "node:buffer";
import { lstat, open, readdir } from "node:fs/promises";
import { join } from "node:path";
import yazl from "yazl";
import yauzl from "yauzl";
import { z } from "zod";
import {
  CANONICALIZATION,
  MAX_RECEIPT_TEXT_BYTES,
  RECEIPT_PAYLOAD_TYPE,
  RECEIPT_SCHEMA,
  artifactSchema,
  pae,
  verifyReceipt,
  type Check,
  type KnownKey,
  type Receipt,
  type VerifyResult,
} from "./receipt.js";
import { sha256Hex } from "../../lib/sha256.js";
import { JsonSyntaxError, JsonTooManyValuesError, problemSentence, readJson, type JsonProblem } from "../http/json.js";
import { ALGORITHM, PUBLIC_KEY_BYTES, SIGNATURE_BYTES, fingerprintOf, type MlDsaBackend, type Signer } from "./signer.js";

export const EVIDENCE_VERSION = 1;
export const MANIFEST_PAYLOAD_TYPE = "application/vnd.svc.provenance.manifest.v1";
/** The files of a bundle, in the order they are written. */
export const BUNDLE_FILES = [
  "receipt.json",
  "artifact-manifest.json",
  "verification.json",
  "signer-public-key.json",
  "signature-metadata.json",
  "MANIFEST.sha256",
  "MANIFEST.sha256.sig",
] as const;
const HASHED_FILES = BUNDLE_FILES.filter((f) => f !== "MANIFEST.sha256" && f !== "MANIFEST.sha256.sig").sort();
// A bundle is seven small files: receipt.json is the largest, at most MAX_RECEIPT_TEXT_BYTES
// (4 MiB), the others a few KiB. Readers stop well before a crafted archive can cost memory.
/** The most one file of a bundle may hold, by its declared size and by what it inflates to. */
export const MAX_MEMBER_BYTES = MAX_RECEIPT_TEXT_BYTES;
/** The most all files of a bundle may hold together, and the largest ZIP file read. */
export const MAX_TOTAL_BYTES = 8 * 1024 * 1024;
/** The most entries a bundle may have (a valid one has seven). */
export const MAX_ENTRIES = 16;
const MIB = 1024 * 1024;

/** A bundle that cannot be read (exit 2) or that a reader refuses (a failed verification). */
export class BundleError extends Error {
  constructor(
    readonly kind: "unreadable" | "refused",
    message: string,
  ) {
    super(message);
    this.name = "BundleError";
  }
}

const json = (v: unknown): Buffer => Buffer.from(JSON.stringify(v, null, 2) + "\n", "utf8");

export interface ExportInput {
  receipt: Receipt;
  verification: VerifyResult;
  /** The key that signed the receipt; it also signs the manifest. */
  signer: Signer;
  exportedAt: Date;
  applianceVersion: string;
}

/** The seven files of a bundle, in order. */
export function buildBundleFiles(input: ExportInput): Array<[string, Buffer]> {
  const { receipt, signer } = input;
  const files = new Map<string, Buffer>();
  files.set("receipt.json", json(receipt));
  files.set(
    "artifact-manifest.json",
    json({
      name: receipt.artifact.name,
      sha256: receipt.artifact.sha256,
      size_bytes: receipt.artifact.size_bytes,
      media_type: receipt.artifact.media_type,
    }),
  );
  files.set(
    "verification.json",
    json({
      ...input.verification,
      exported_at: input.exportedAt.toISOString(),
      appliance_version: input.applianceVersion,
    }),
  );
  files.set(
    "signer-public-key.json",
    json({
      algorithm: ALGORITHM,
      public_key: Buffer.from(signer.publicKey).toString("base64"),
      fingerprint: signer.fingerprint,
    }),
  );
  files.set(
    "signature-metadata.json",
    json({
      algorithm: ALGORITHM,
      canonicalization: CANONICALIZATION,
      payload_type: RECEIPT_PAYLOAD_TYPE,
      schema: RECEIPT_SCHEMA,
      evidence_version: EVIDENCE_VERSION,
    }),
  );
  const manifest = Buffer.from(HASHED_FILES.map((n) => `${sha256Hex(files.get(n)!)}  ${n}\n`).join(""), "utf8");
  files.set("MANIFEST.sha256", manifest);
  // deterministic, so that the same inputs give the same bundle bytes
  const sig = signer.signDeterministic(pae(MANIFEST_PAYLOAD_TYPE, manifest));
  files.set("MANIFEST.sha256.sig", Buffer.from(Buffer.from(sig).toString("base64") + "\n", "utf8"));
  return BUNDLE_FILES.map((n) => [n, files.get(n)!]);
}

// yazl writes DOS times from local-time getters: a date built from local components
// gives the same fields (1980-01-01 00:00:00) in every time zone.
const FIXED_MTIME = () => new Date(1980, 0, 1, 0, 0, 0);

/** Writes entries in the given order with fixed timestamps and modes. */
export function writeZip(entries: Array<[string, Buffer]>): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const zip = new yazl.ZipFile();
    const chunks: Buffer[] = [];
    zip.outputStream.on("data", (c: Buffer) => chunks.push(c));
    zip.outputStream.on("end", () => resolve(Buffer.concat(chunks)));
    zip.outputStream.on("error", reject);
    for (const [name, data] of entries) {
      zip.addBuffer(data, name, { mtime: FIXED_MTIME(), mode: 0o100644, compress: true, forceDosTimestamp: true });
    }
    zip.end();
  });
}

/** Why an entry name is unsafe, or null. */
export function unsafeName(name: string): string | null {
  if (name.length === 0 || name.length > 255) return "has an empty or overlong name";
  if (name.includes("\\")) return "has a backslash in its name";
  if (name.includes("\0")) return "has a NUL in its name";
  if (name.startsWith("/") || /^[A-Za-z]:/.test(name)) return "has an absolute path";
  const segs = name.split("/");
  if (segs.includes("..")) return "has a '..' path segment";
  if (name.endsWith("/")) return "is a directory";
  if (segs.some((s) => s === "" || s === ".")) return "has an empty or '.' path segment";
  return null;
}

const S_IFMT = 0o170000;
const S_IFLNK = 0o120000;
const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;

/**
 * Reads every entry of a ZIP into memory, refusing unsafe archives: at most MAX_ENTRIES
 * entries, each at most `maxMember` bytes by its declared size and by what it actually
 * inflates to (inflating stops there), `maxTotal` bytes together.
 */
export function readZip(buf: Buffer, maxTotal = MAX_TOTAL_BYTES, maxMember = MAX_MEMBER_BYTES): Promise<Map<string, Buffer>> {
  return new Promise((resolve, reject) => {
    yauzl.fromBuffer(buf, { lazyEntries: true, decodeStrings: false, validateEntrySizes: true }, (err, zip) => {
      if (err || !zip) return reject(new BundleError("unreadable", "The bundle is not a readable ZIP archive."));
      const out = new Map<string, Buffer>();
      let total = 0;
      let count = 0;
      let settled = false;
      const fail = (e: BundleError): void => {
        if (settled) return;
        settled = true;
        zip.close();
        reject(e);
      };
      zip.on("error", () => fail(new BundleError("unreadable", "The bundle is not a readable ZIP archive.")));
      zip.on("end", () => {
        if (settled) return;
        settled = true;
        resolve(out);
      });
      zip.on("entry", (entry: yauzl.Entry) => {
        const name = (entry.fileName as unknown as Buffer).toString("utf8");
        const shown = JSON.stringify(name.slice(0, 80));
        if (++count > MAX_ENTRIES) return fail(new BundleError("refused", `The bundle has more than ${MAX_ENTRIES} entries.`));
        const why = unsafeName(name);
        if (why) return fail(new BundleError("refused", `The bundle entry ${shown} ${why}.`));
        const type = ((entry.externalFileAttributes >>> 16) & S_IFMT) >>> 0;
        const madeByUnix = entry.versionMadeBy >>> 8 === 3;
        if (madeByUnix && type === S_IFLNK) return fail(new BundleError("refused", `The bundle entry ${shown} is a symbolic link.`));
        if (madeByUnix && type !== 0 && type !== S_IFREG) return fail(new BundleError("refused", `The bundle entry ${shown} is not a regular file.`));
        if (madeByUnix && type === S_IFDIR) return fail(new BundleError("refused", `The bundle entry ${shown} is a directory.`));
        if (out.has(name)) return fail(new BundleError("refused", `The bundle has the entry ${shown} twice.`));
        if (entry.uncompressedSize > maxMember) {
          return fail(new BundleError("refused", `The bundle entry ${shown} is larger than the ${maxMember / MIB} MiB limit for one file of a bundle.`));
        }
        total += entry.uncompressedSize;
        if (total > maxTotal) return fail(new BundleError("refused", `The bundle's entries add up to more than the ${maxTotal / MIB} MiB limit for a bundle.`));
        zip.openReadStream(entry, (e2, stream) => {
          if (e2 || !stream) return fail(new BundleError("unreadable", `The bundle entry ${shown} cannot be read.`));
          const chunks: Buffer[] = [];
          let got = 0;
          const inflatesTooFar = (): BundleError =>
            new BundleError("refused", `The bundle entry ${shown} inflates to more than its declared size; inflating stopped there.`);
          stream.on("data", (c: Buffer) => {
            got += c.length;
            // yauzl checks this too (validateEntrySizes); counting here keeps the bound local
            if (got > entry.uncompressedSize) {
              stream.destroy();
              return fail(inflatesTooFar());
            }
            chunks.push(c);
          });
          stream.on("error", (err: Error) =>
            fail(/too many bytes/.test(err.message) ? inflatesTooFar() : new BundleError("unreadable", `The bundle entry ${shown} is corrupt.`)),
          );
          stream.on("end", () => {
            out.set(name, Buffer.concat(chunks));
            zip.readEntry();
          });
        });
      });
      zip.readEntry();
    });
  });
}

/** Reads a json-dir bundle: plain files only, no links, no subdirectories. */
export async function readJsonDir(dir: string, maxTotal = MAX_TOTAL_BYTES): Promise<Map<string, Buffer>> {
  // names as the bytes on disk: one that is not UTF-8 is shown and matched as its UTF-8
  // decoding (invalid bytes replaced, as in a ZIP entry's name), and read by its own bytes
  let entries: { name: string; raw: Buffer }[];
  try {
    const st = await lstat(dir);
    if (!st.isDirectory()) throw new Error("not a directory");
    entries = (await readdir(dir, { encoding: "buffer" })).map((raw) => ({ name: raw.toString("utf8"), raw }));
  } catch {
    throw new BundleError("unreadable", "The bundle directory cannot be read.");
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  if (entries.length > MAX_ENTRIES) throw new BundleError("refused", `The bundle has more than ${MAX_ENTRIES} entries.`);
  const base = Buffer.from(join(dir, "/"));
  const out = new Map<string, Buffer>();
  let total = 0;
  for (const { name, raw } of entries) {
    const shown = JSON.stringify(name.slice(0, 80));
    const why = unsafeName(name);
    if (why) throw new BundleError("refused", `The bundle entry ${shown} ${why}.`);
    if (out.has(name)) throw new BundleError("refused", `The bundle has the entry ${shown} twice.`);
    const path = Buffer.concat([base, raw]);
    let st;
    try {
      st = await lstat(path);
    } catch {
      throw new BundleError("unreadable", `The bundle file ${shown} cannot be read.`);
    }
    if (st.isSymbolicLink()) throw new BundleError("refused", `The bundle entry ${shown} is a symbolic link.`);
    if (!st.isFile()) throw new BundleError("refused", `The bundle entry ${shown} is not a regular file.`);
    if (st.size > MAX_MEMBER_BYTES)
      throw new BundleError("refused", `The bundle file ${shown} is larger than the ${MAX_MEMBER_BYTES / MIB} MiB limit for one file of a bundle.`);
    total += st.size;
    if (total > maxTotal) throw new BundleError("refused", `The bundle's files add up to more than the ${maxTotal / MIB} MiB limit for a bundle.`);
    let data: Buffer;
    try {
      data = await readBounded(path, MAX_MEMBER_BYTES);
    } catch {
      throw new BundleError("unreadable", `The bundle file ${shown} cannot be read.`);
    }
    // a file that grew after lstat is held to the same limit
    if (data.length > MAX_MEMBER_BYTES)
      throw new BundleError("refused", `The bundle file ${shown} is larger than the ${MAX_MEMBER_BYTES / MIB} MiB limit for one file of a bundle.`);
    out.set(name, data);
  }
  return out;
}

/** At most `max` + 1 bytes of a file: enough to tell that it is over `max`. */
async function readBounded(path: Buffer, max: number): Promise<Buffer> {
  const fh = await open(path, "r");
  try {
    const buf = Buffer.alloc(max + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, n, buf.length - n, null);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n === buf.length) break;
    }
    return buf.subarray(0, n);
  } finally {
    await fh.close();
  }
}

// ---- verification -------------------------------------------------------------

export interface BundleVerifyOptions {
  backend: MlDsaBackend;
  /** Pinned public keys (from an independent channel: an instance's active and retired keys). */
  pinnedKeys?: KnownKey[] | undefined;
  /** Pinned fingerprint (from an independent channel). */
  expectedFingerprint?: string | undefined;
  /** Neither pin: check integrity against the bundled key, not the issuer. */
  integrityOnly: boolean;
  artifact?: { sha256: string; size_bytes: number } | undefined;
}

export interface BundleVerifyResult extends VerifyResult {
  /** True when the key was pinned by key or fingerprint; false in integrity-only mode. */
  issuer_authenticated: boolean;
}

const pubKeyDoc = z.strictObject({
  algorithm: z.literal(ALGORITHM),
  public_key: z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/),
  fingerprint: z.string().regex(/^[0-9a-f]{64}$/),
});
const sigMetaDoc = z.strictObject({
  algorithm: z.literal(ALGORITHM),
  canonicalization: z.literal(CANONICALIZATION),
  payload_type: z.literal(RECEIPT_PAYLOAD_TYPE),
  schema: z.string(),
  evidence_version: z.unknown(),
});

/** A check's failure with a detail of its own (a thrown Error gives the generic one). */
class CheckFailure extends Error {}

/** A bundle file as I-JSON (member names once, numbers that keep their value). */
function parseJson(files: Map<string, Buffer>, name: string): unknown {
  const r = readJsonFile(files, name);
  if (r.problem) throw new CheckFailure(problemSentence(name, r.problem));
  return r.value;
}

function readJsonFile(files: Map<string, Buffer>, name: string): { value: unknown; problem: JsonProblem | null } {
  const buf = files.get(name);
  if (!buf) throw new CheckFailure(`${name} is missing.`);
  // decoded with replacement characters, other bytes than the ones signed would read the same
  if (!isUtf8(buf)) throw new CheckFailure(`${name} is not valid UTF-8.`);
  try {
    return readJson(buf.toString("utf8"));
  } catch (e) {
    if (e instanceof JsonSyntaxError) throw new CheckFailure(`${name} is not valid JSON.`);
    if (e instanceof JsonTooManyValuesError) throw new CheckFailure(`${name} holds ${e.message}.`);
    throw e;
  }
}

/** Check bundle_files: exactly the seven files of evidence version 1, every one UTF-8 text. */
function checkBundleFiles(files: Map<string, Buffer>): Omit<Check, "name"> {
  const names = [...files.keys()];
  const missing = BUNDLE_FILES.filter((n) => !files.has(n));
  const extra = names.filter((n) => !(BUNDLE_FILES as readonly string[]).includes(n));
  if (missing.length) return { ok: false, detail: `The bundle lacks ${missing.join(", ")}.` };
  if (extra.length)
    return {
      ok: false,
      detail: `The bundle has unexpected files: ${extra
        .slice(0, 5)
        .map((n) => JSON.stringify(n.slice(0, 80)))
        .join(", ")}.`,
    };
  // every file is text (JSON, the manifest, base64): RFC 8259 JSON is UTF-8
  const notText = BUNDLE_FILES.find((n) => !isUtf8(files.get(n)!));
  if (notText) return { ok: false, detail: `${notText} is not valid UTF-8.` };
  return { ok: true, detail: "The bundle holds exactly the seven files of evidence version 1." };
}

/** Check manifest: MANIFEST.sha256 lists the hashed files in order, each with its SHA-256. */
function checkManifest(files: Map<string, Buffer>): Omit<Check, "name"> {
  const m = files.get("MANIFEST.sha256");
  if (!m) return { ok: false, detail: "MANIFEST.sha256 is missing." };
  const expected = HASHED_FILES.map((n) => `${sha256Hex(files.get(n) ?? Buffer.alloc(0))}  ${n}\n`).join("");
  const lines = m.toString("utf8");
  const listed = lines
    .split("\n")
    .filter(Boolean)
    .map((l) => l.slice(66));
  if (listed.join(",") !== HASHED_FILES.join(",")) return { ok: false, detail: "MANIFEST.sha256 does not list exactly the bundle's files in order." };
  for (const n of HASHED_FILES) if (!files.has(n)) return { ok: false, detail: `${n} is missing.` };
  if (lines !== expected) {
    const bad = HASHED_FILES.find((n, i) => lines.split("\n")[i] !== `${sha256Hex(files.get(n)!)}  ${n}`);
    return { ok: false, detail: bad ? `The SHA-256 of ${bad} does not match MANIFEST.sha256.` : "MANIFEST.sha256 is malformed." };
  }
  return { ok: true, detail: "Every file matches its SHA-256 in MANIFEST.sha256." };
}

/** Verifies the files of a bundle; never throws. */
export function verifyBundle(files: Map<string, Buffer>, opts: BundleVerifyOptions): BundleVerifyResult {
  const checks: Check[] = [];
  let unsupported = false;
  let key = null as KnownKey | null;
  const run = (name: string, fn: () => Omit<Check, "name">): boolean => {
    let r: Omit<Check, "name">;
    try {
      r = fn();
    } catch (e) {
      r = { ok: false, detail: e instanceof CheckFailure ? e.message : "The check could not be carried out." };
    }
    checks.push({ name, ok: r.ok === true, detail: r.detail });
    return r.ok === true;
  };

  run("bundle_files", () => checkBundleFiles(files));

  run("evidence_version", () => {
    const meta = parseJson(files, "signature-metadata.json") as Record<string, unknown>;
    if (meta === null || typeof meta !== "object") return { ok: false, detail: "signature-metadata.json is not a JSON object." };
    if (meta.evidence_version !== EVIDENCE_VERSION) {
      unsupported = true;
      return {
        ok: false,
        detail: `Evidence version ${JSON.stringify(meta.evidence_version)?.slice(0, 40)} is not supported; this verifier reads version ${EVIDENCE_VERSION}.`,
      };
    }
    if (meta.schema !== RECEIPT_SCHEMA) {
      unsupported = true;
      return { ok: false, detail: "signature-metadata.json names a receipt schema this verifier does not read." };
    }
    const r = sigMetaDoc.safeParse(meta);
    if (!r.success) return { ok: false, detail: "signature-metadata.json is malformed." };
    return { ok: true, detail: `Evidence version ${EVIDENCE_VERSION}, ${ALGORITHM}, ${CANONICALIZATION}.` };
  });

  run("manifest", () => checkManifest(files));

  run("signer_key", () => {
    const doc = pubKeyDoc.safeParse(parseJson(files, "signer-public-key.json"));
    if (!doc.success) return { ok: false, detail: "signer-public-key.json is malformed." };
    const bundled = new Uint8Array(Buffer.from(doc.data.public_key, "base64"));
    if (bundled.length !== PUBLIC_KEY_BYTES) return { ok: false, detail: `The bundled public key does not have ${PUBLIC_KEY_BYTES} bytes.` };
    const bfp = fingerprintOf(bundled);
    if (bfp !== doc.data.fingerprint) return { ok: false, detail: "The bundled fingerprint is not the SHA-256 of the bundled public key." };
    if (opts.pinnedKeys && opts.pinnedKeys.length > 0) {
      const pinned = opts.pinnedKeys.find((k) => k.fingerprint === bfp && fingerprintOf(k.publicKey) === bfp);
      if (!pinned) return { ok: false, detail: `The bundle's signer ${bfp} is not a pinned key.` };
      if (opts.expectedFingerprint && bfp !== opts.expectedFingerprint) {
        return { ok: false, detail: `The bundle's signer ${bfp} does not have the expected fingerprint.` };
      }
      key = pinned;
      return { ok: true, detail: `The bundle's signer is the pinned key ${bfp}.` };
    }
    if (opts.expectedFingerprint) {
      if (bfp !== opts.expectedFingerprint) return { ok: false, detail: `The bundle's signer ${bfp} does not have the expected fingerprint.` };
      key = { publicKey: bundled, fingerprint: bfp };
      return { ok: true, detail: `The bundled key has the expected fingerprint ${bfp}.` };
    }
    key = { publicKey: bundled, fingerprint: bfp };
    return { ok: true, detail: `Integrity only: the bundled key ${bfp} is used; the issuer was not authenticated.` };
  });

  run("manifest_signature", () => {
    if (!key) return { ok: false, detail: "No signing key was established, so the manifest signature cannot be checked." };
    const m = files.get("MANIFEST.sha256");
    const s = files.get("MANIFEST.sha256.sig");
    if (!m || !s) return { ok: false, detail: "The manifest or its signature is missing." };
    const text = s.toString("utf8").trim();
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text)) return { ok: false, detail: "MANIFEST.sha256.sig is not base64." };
    const sig = Buffer.from(text, "base64");
    if (sig.length !== SIGNATURE_BYTES) return { ok: false, detail: `The manifest signature does not have ${SIGNATURE_BYTES} bytes.` };
    return opts.backend.verify(pae(MANIFEST_PAYLOAD_TYPE, m), sig, key.publicKey)
      ? { ok: true, detail: `The ${ALGORITHM} signature over MANIFEST.sha256 is valid.` }
      : { ok: false, detail: `The ${ALGORITHM} signature over MANIFEST.sha256 does not verify.` };
  });

  // receipt.json is read for the receipt's own checks, which report an I-JSON problem of it
  let receipt: unknown = null;
  let receiptProblem: JsonProblem | null = null;
  try {
    const r = readJsonFile(files, "receipt.json");
    receipt = r.value;
    receiptProblem = r.problem;
  } catch {
    /* missing or not JSON: the receipt checks fail on null */
  }
  run("artifact_manifest", () => {
    const manifest = artifactSchema.safeParse(parseJson(files, "artifact-manifest.json"));
    if (!manifest.success) return { ok: false, detail: "artifact-manifest.json is malformed." };
    const ra = (receipt as { artifact?: Record<string, unknown> } | null)?.artifact;
    const same = ra && (["name", "sha256", "size_bytes", "media_type"] as const).every((k) => ra[k] === manifest.data[k]);
    return same
      ? { ok: true, detail: "artifact-manifest.json matches the receipt's artifact." }
      : { ok: false, detail: "artifact-manifest.json differs from the receipt's artifact." };
  });

  const keys = key ? [key] : [];
  const pinned = (opts.pinnedKeys?.length ?? 0) > 0 || !!opts.expectedFingerprint;
  const trusted = pinned ? keys.map((k) => k.fingerprint) : null;
  const rv = verifyReceipt(receipt, {
    backend: opts.backend,
    keys,
    trustedFingerprints: opts.integrityOnly || trusted ? trusted : [],
    artifact: opts.artifact,
    textProblem: receiptProblem,
  });
  const all = [...rv.checks, ...checks];
  const isUnsupported = unsupported || rv.verdict === "unsupported_schema";
  const valid = !isUnsupported && all.every((c) => c.ok);
  return {
    verdict: isUnsupported ? "unsupported_schema" : valid ? "valid" : "failed",
    valid,
    checks: all,
    receipt_id: rv.receipt_id,
    signer_fingerprint: rv.signer_fingerprint,
    issuer_authenticated: trusted !== null,
  };
}
