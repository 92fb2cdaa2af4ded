// Receipts of schema svc.provenance.receipt.v1: the RFC 8785 canonical body, DSSE PAE
// framing, ML-DSA-65 signing, and verification with the six named checks of
// docs/provenance.md. Shared by the appliance and the offline verifiers.
import { createHash, randomUUID } from "node:crypto";
import { LOWERCASE_UUID } from "../http/request-id.js";
import { sha256Hex } from "../../lib/sha256.js";
import canonicalize from "canonicalize";
import { z } from "zod";
import { ALGORITHM, SIGNATURE_BYTES, fingerprintOf, type MlDsaBackend, type Signer } from "./signer.js";
import { problemSentence, type JsonProblem } from "../http/json.js";

export const RECEIPT_SCHEMA = "svc.provenance.receipt.v1";
export const RECEIPT_PAYLOAD_TYPE = "application/vnd.svc.provenance.receipt.v1+json";
export const CANONICALIZATION = "RFC8785";
export const CLAIMS_MAX_BYTES = 64 * 1024;
/**
 * The most a receipt's JSON text may take: a receipt file, receipt.json in a bundle, the body
 * of /verify. The largest receipt the appliance issues (claims of 64 KiB nested 32 deep)
 * takes about 2 MiB written with 2-space indentation, as a bundle writes it.
 */
export const MAX_RECEIPT_TEXT_BYTES = 4 * 1024 * 1024;

const HEX64 = /^[0-9a-f]{64}$/;
/** Canonical padded base64 (what Buffer writes); native decode + encode beats a regex on 4 KiB. */
export function isBase64(s: string): boolean {
  return s.length % 4 === 0 && Buffer.from(s, "base64").toString("base64") === s;
}
// ISO 8601 UTC with milliseconds, as Date.prototype.toISOString writes it
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/**
 * Zod's strict objects neither notice nor keep a member named "__proto__" (the name is found
 * on every object's prototype), so a schema of fixed fields is wrapped in this refusal.
 */
export const noProtoMember = <T extends z.ZodType>(schema: T) =>
  z.custom<unknown>((v) => v === null || typeof v !== "object" || !Object.hasOwn(v, "__proto__"), { message: "unknown field '__proto__'" }).pipe(schema);

/** The artifact block's fields, without the "__proto__" guard (for .partial()); use artifactSchema. */
export const artifactFields = z.strictObject({
  name: z.string().min(1, "artifact.name must not be empty").max(1024, "artifact.name must be at most 1024 characters"),
  sha256: z.string().regex(HEX64, "artifact.sha256 must be 64 lower-case hex characters"),
  size_bytes: z.number().int("artifact.size_bytes must be an integer").min(0).max(Number.MAX_SAFE_INTEGER),
  media_type: z
    .string()
    .max(255, "artifact.media_type must be at most 255 characters")
    .regex(
      /^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(?:\s*;.*)?$/,
      "artifact.media_type must be a media type such as application/octet-stream",
    ),
});
export const artifactSchema = noProtoMember(artifactFields);
export type Artifact = z.infer<typeof artifactFields>;

/** True when `v` nests deeper than `max` (stops descending there: safe on hostile input). */
function deeperThan(v: unknown, max: number): boolean {
  if (v === null || typeof v !== "object") return false;
  if (max === 0) return true;
  for (const x of Object.values(v as object)) if (deeperThan(x, max - 1)) return true;
  return false;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v) && (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);

// The claims object passes through as it is (z.record would copy it and lose a member named
// "__proto__", which is data like any other). Depth first, so that the size and I-JSON
// checks never recurse into hostile nesting.
export const claimsSchema = z.custom<Record<string, unknown>>(isPlainObject, { message: "claims must be a JSON object" }).superRefine((c, ctx) => {
  if (deeperThan(c, 32)) {
    ctx.addIssue({ code: "custom", message: "claims must be nested at most 32 levels deep" });
    return;
  }
  if (Buffer.byteLength(JSON.stringify(c)) > CLAIMS_MAX_BYTES) {
    ctx.addIssue({ code: "custom", message: "claims must be at most 64 KiB serialised" });
    return;
  }
  const problem = iJsonProblem(c);
  if (problem !== null) ctx.addIssue({ code: "custom", message: `claims must hold only I-JSON values: ${problem}` });
});

const signerSchema = noProtoMember(
  z.strictObject({
    algorithm: z.literal(ALGORITHM),
    public_key_sha256: z.string().regex(HEX64, "signer.public_key_sha256 must be 64 lower-case hex characters"),
  }),
);

const signatureSchema = noProtoMember(
  z.strictObject({
    algorithm: z.literal(ALGORITHM),
    canonicalization: z.literal(CANONICALIZATION),
    payload_type: z.literal(RECEIPT_PAYLOAD_TYPE),
    value: z.string().refine(isBase64, "signature.value must be base64"),
  }),
);

/** The signed part of a receipt: every member but `signature`. */
export const receiptBodySchema = z.strictObject({
  schema: z.literal(RECEIPT_SCHEMA),
  receipt_id: z.uuid("receipt_id must be a UUID"),
  serial: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER),
  issued_at: z.string().regex(ISO_UTC, "issued_at must be an ISO 8601 UTC instant"),
  artifact: artifactSchema,
  claims: claimsSchema,
  previous_receipt_sha256: z.string().regex(HEX64).nullable(),
  signer: signerSchema,
});
export type ReceiptBody = z.infer<typeof receiptBodySchema>;
export const receiptSchema = noProtoMember(receiptBodySchema.extend({ signature: signatureSchema }));
export type Receipt = z.infer<typeof receiptSchema>;

/** DSSE v1 pre-authentication encoding. */
export function pae(payloadType: string, body: Uint8Array): Buffer {
  const type = Buffer.from(payloadType, "utf8");
  return Buffer.concat([Buffer.from(`DSSEv1 ${type.length} `, "utf8"), type, Buffer.from(` ${body.length} `, "utf8"), body]);
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const wellFormed = (s: string): boolean => !LONE_SURROGATE.test(s);

/**
 * Why the value `v` is not I-JSON (RFC 7493, which RFC 8785 requires), or null: numbers must
 * be finite, strings well-formed Unicode, objects plain. Text is checked further when it is
 * read (server/http/json.ts: member names once per object, numbers that keep their value).
 */
export function iJsonProblem(v: unknown, depth = 0): string | null {
  if (depth > 64) return "nested too deeply";
  if (v === null || typeof v === "boolean") return null;
  if (typeof v === "number") return Number.isFinite(v) ? null : "a number is not finite";
  if (typeof v === "string") return wellFormed(v) ? null : "a string holds a lone surrogate";
  if (Array.isArray(v)) {
    for (const x of v) {
      const p = iJsonProblem(x, depth + 1);
      if (p) return p;
    }
    return null;
  }
  if (typeof v === "object") {
    const proto = Object.getPrototypeOf(v);
    if (proto !== Object.prototype && proto !== null) return "a value is not a plain JSON object";
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      if (!wellFormed(k)) return "a member name holds a lone surrogate";
      const p = iJsonProblem(x, depth + 1);
      if (p) return p;
    }
    return null;
  }
  return "a value is not JSON";
}

/** RFC 8785 canonical JSON text; throws when `v` is not I-JSON. */
export function canonicalString(v: unknown): string {
  const problem = iJsonProblem(v);
  if (problem) throw new Error(problem);
  const s = canonicalize(v);
  if (typeof s !== "string") throw new Error("the value has no JSON form");
  return s;
}

/** RFC 8785 canonical JSON (UTF-8 bytes); throws when `v` is not I-JSON. */
export function canonicalBytes(v: unknown): Buffer {
  return Buffer.from(canonicalString(v), "utf8");
}

/** The receipt without its `signature` member. */
export function bodyOf(receipt: Record<string, unknown>): Record<string, unknown> {
  const { signature: _sig, ...body } = receipt;
  return body;
}

/** The message a receipt's signature covers. */
export function signedMessage(receipt: Record<string, unknown>): Buffer {
  return pae(RECEIPT_PAYLOAD_TYPE, canonicalBytes(bodyOf(receipt)));
}

/** SHA-256 of the canonical form of the whole receipt: the next receipt's `previous_receipt_sha256`. */
export function receiptHash(receipt: Receipt | Record<string, unknown>): string {
  return sha256Hex(canonicalBytes(receipt));
}

export interface IssueInput {
  artifact: Artifact;
  claims: Record<string, unknown>;
}

/** The unsigned body of the receipt at `serial`, chained to `previous`. */
export function receiptBody(
  input: IssueInput,
  chain: { serial: number; previous: string | null },
  fingerprint: string,
  now: Date,
  receiptId: string = randomUUID(),
): ReceiptBody {
  return {
    schema: RECEIPT_SCHEMA,
    receipt_id: receiptId,
    serial: chain.serial,
    issued_at: now.toISOString(),
    artifact: { ...input.artifact },
    claims: input.claims,
    previous_receipt_sha256: chain.previous,
    signer: { algorithm: ALGORITHM, public_key_sha256: fingerprint },
  };
}

/** The body with its signature block. */
export function withSignature(body: ReceiptBody, signature: Uint8Array): Receipt {
  return {
    ...body,
    signature: {
      algorithm: ALGORITHM,
      canonicalization: CANONICALIZATION,
      payload_type: RECEIPT_PAYLOAD_TYPE,
      value: Buffer.from(signature).toString("base64"),
    },
  };
}

/** Builds and signs one receipt at `serial`, chained to `previous`. */
export function buildReceipt(input: IssueInput, chain: { serial: number; previous: string | null }, signer: Signer, now: Date): Receipt {
  const body = receiptBody(input, chain, signer.fingerprint, now);
  return withSignature(body, signer.sign(pae(RECEIPT_PAYLOAD_TYPE, canonicalBytes(body))));
}

// ---- issuance from prepared parts ------------------------------------------------
// The chain's critical section (serial + previous hash, canonical body, sign, hash) runs
// once per receipt, one after the other. Everything that does not depend on the chain
// position is prepared before it, on the request's side: the canonical forms of the
// artifact and the claims, the receipt id and the instant. The critical section then
// writes the canonical body by concatenation (JCS sorts members by UTF-16 code units:
// artifact, claims, issued_at, previous_receipt_sha256, receipt_id, schema, serial,
// [signature,] signer) instead of walking and sorting the whole receipt twice.

/** The chain-independent parts of a receipt, canonicalised. */
export interface PreparedReceipt {
  receipt_id: string;
  issued_at: string;
  /** RFC 8785 form of the artifact block. */
  artifact_jcs: string;
  /** RFC 8785 form of the claims object. */
  claims_jcs: string;
}

/** A receipt as the critical section leaves it: its JSON text and its chain hash. */
export interface AssembledReceipt {
  /** The receipt as JSON, members in the order of the schema (docs/provenance.md). */
  json: string;
  /** SHA-256 of its canonical form: the next receipt's `previous_receipt_sha256`. */
  hash: string;
}

/** Canonicalises what a receipt takes from the request; throws when it is not I-JSON. */
export function prepareReceipt(input: IssueInput, now: Date, receiptId: string = randomUUID()): PreparedReceipt {
  return {
    receipt_id: receiptId,
    issued_at: now.toISOString(),
    // the same member order as receiptBody's copy: only the canonical form counts
    artifact_jcs: canonicalString({ ...input.artifact }),
    claims_jcs: canonicalString(input.claims),
  };
}

/**
 * Builds and signs the receipt at `pos` from prepared parts: byte for byte the receipt
 * that buildReceipt would make from the same inputs. The fixed-format members are checked
 * here, since they are spliced into JSON text as they are.
 */
export function assembleReceipt(
  p: PreparedReceipt,
  pos: { serial: number; previous: string | null },
  fingerprint: string,
  sign: (message: Uint8Array) => Uint8Array,
): AssembledReceipt {
  if (!Number.isSafeInteger(pos.serial) || pos.serial < 1) throw new Error("the serial is not a positive safe integer");
  if (pos.previous !== null && !HEX64.test(pos.previous)) throw new Error("the previous hash is not 64 hex characters");
  if (!HEX64.test(fingerprint)) throw new Error("the fingerprint is not 64 hex characters");
  if (!LOWERCASE_UUID.test(p.receipt_id)) throw new Error("the receipt id is not a lower-case UUID");
  if (!ISO_UTC.test(p.issued_at)) throw new Error("the issue instant is not an ISO 8601 UTC instant");
  if (typeof p.artifact_jcs !== "string" || typeof p.claims_jcs !== "string") throw new Error("the prepared parts are not JSON text");
  const previous = pos.previous === null ? "null" : `"${pos.previous}"`;
  const signer = `{"algorithm":"${ALGORITHM}","public_key_sha256":"${fingerprint}"}`;
  // the canonical body is `head` + `tail`; the canonical receipt puts the signature between
  const head =
    `{"artifact":${p.artifact_jcs},"claims":${p.claims_jcs},"issued_at":"${p.issued_at}",` +
    `"previous_receipt_sha256":${previous},"receipt_id":"${p.receipt_id}","schema":"${RECEIPT_SCHEMA}","serial":${pos.serial}`;
  const tail = `,"signer":${signer}}`;
  const signature = sign(pae(RECEIPT_PAYLOAD_TYPE, Buffer.from(head + tail, "utf8")));
  const sigBlock =
    `{"algorithm":"${ALGORITHM}","canonicalization":"${CANONICALIZATION}","payload_type":"${RECEIPT_PAYLOAD_TYPE}",` +
    `"value":"${Buffer.from(signature.buffer, signature.byteOffset, signature.byteLength).toString("base64")}"}`;
  const hash = createHash("sha256").update(head).update(`,"signature":${sigBlock}`).update(tail).digest("hex");
  const json =
    `{"schema":"${RECEIPT_SCHEMA}","receipt_id":"${p.receipt_id}","serial":${pos.serial},"issued_at":"${p.issued_at}",` +
    `"artifact":${p.artifact_jcs},"claims":${p.claims_jcs},"previous_receipt_sha256":${previous},"signer":${signer},"signature":${sigBlock}}`;
  return { json, hash };
}

// ---- verification -------------------------------------------------------------

export const CHECK_NAMES = ["schema", "canonical_body", "signed_fields", "signature", "signer", "artifact_commitment"] as const;
export type CheckName = (typeof CHECK_NAMES)[number];
export type Verdict = "valid" | "failed" | "unsupported_schema";

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

export interface VerifyResult {
  verdict: Verdict;
  valid: boolean;
  checks: Check[];
  receipt_id: string | null;
  signer_fingerprint: string | null;
}

/** A public key the verifier may use, with how far it is trusted. */
export interface KnownKey {
  publicKey: Uint8Array;
  fingerprint: string;
}

export interface VerifyOptions {
  backend: MlDsaBackend;
  /** Keys a signature may be checked against (the appliance's own, a pinned key, a bundled key). */
  keys: KnownKey[];
  /**
   * Fingerprints the signer must have to pass the `signer` check; null in integrity-only
   * mode, where the check only asks that the key used is the one the receipt names.
   */
  trustedFingerprints: string[] | null;
  /** The artifact's bytes, or its digest and size, when the caller has it. */
  artifact?: { sha256: string; size_bytes: number } | undefined;
  /**
   * The first I-JSON problem of the receipt's text (readJson in server/http/json.ts), path from
   * the receipt's top. A receipt read from text must pass it: the value alone cannot show a
   * repeated member name or a number that lost its value in parsing.
   */
  textProblem?: JsonProblem | null | undefined;
}

interface Ctx {
  receipt: Record<string, unknown> | null;
  body: Buffer | null;
  key: KnownKey | null;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

function firstIssue(err: z.ZodError): string {
  const i = err.issues[0]!;
  const path = i.path.map(String).join(".");
  const msg = i.message.startsWith(path) || !path ? i.message : `${path}: ${i.message}`;
  return msg.endsWith(".") ? msg : `${msg}.`;
}

/**
 * Runs the six checks in order. A check that throws fails with a generic detail (never
 * a pass, never an exception to the caller); the verdict depends only on the inputs.
 */
export function verifyReceipt(input: unknown, opts: VerifyOptions): VerifyResult {
  const ctx: Ctx = { receipt: isObject(input) ? input : null, body: null, key: null };
  const checks: Check[] = [];
  let unsupported = false;

  const run = (name: CheckName, fn: () => Check | Omit<Check, "name">): void => {
    try {
      const r = fn();
      checks.push({ name, ok: r.ok === true, detail: r.detail });
    } catch {
      checks.push({ name, ok: false, detail: "The check could not be carried out." });
    }
  };

  run("schema", () => {
    const r = ctx.receipt;
    if (!r) return { ok: false, detail: "The receipt is not a JSON object." };
    if (typeof r.schema !== "string") return { ok: false, detail: "The receipt has no schema." };
    if (r.schema !== RECEIPT_SCHEMA) {
      unsupported = true;
      return { ok: false, detail: `Schema ${JSON.stringify(r.schema.slice(0, 80))} is not supported; this verifier reads ${RECEIPT_SCHEMA}.` };
    }
    return { ok: true, detail: `Schema ${RECEIPT_SCHEMA} is supported.` };
  });

  const skipped = (): Omit<Check, "name"> => ({ ok: false, detail: "Not evaluated: the receipt's schema is not supported." });

  run("canonical_body", () => {
    if (unsupported) return skipped();
    if (!ctx.receipt) return { ok: false, detail: "There is no receipt body to canonicalise." };
    if (opts.textProblem) return { ok: false, detail: problemSentence("The receipt", opts.textProblem) };
    const problem = iJsonProblem(bodyOf(ctx.receipt));
    if (problem) return { ok: false, detail: `The body cannot be canonicalised under RFC 8785: ${problem}.` };
    ctx.body = canonicalBytes(bodyOf(ctx.receipt));
    return { ok: true, detail: `The body has an RFC 8785 canonical form of ${ctx.body.length} bytes.` };
  });

  run("signed_fields", () => {
    if (unsupported) return skipped();
    const r = receiptSchema.safeParse(ctx.receipt);
    if (!r.success) return { ok: false, detail: `A signed or signature field is missing, extra or malformed: ${firstIssue(r.error)}` };
    return { ok: true, detail: "Every signed field is present, well-formed and nothing else is." };
  });

  run("signature", () => {
    if (unsupported) return skipped();
    const r = ctx.receipt;
    if (!r || !ctx.body) return { ok: false, detail: "Without a canonical body there is no signed message to check." };
    const signer = r.signer as Record<string, unknown> | undefined;
    const sigBlock = r.signature as Record<string, unknown> | undefined;
    const fp = isObject(signer) ? signer.public_key_sha256 : undefined;
    if (typeof fp !== "string") return { ok: false, detail: "The receipt does not name its signing key." };
    if (!isObject(sigBlock) || typeof sigBlock.value !== "string" || !isBase64(sigBlock.value)) {
      return { ok: false, detail: "The receipt carries no base64 signature value." };
    }
    if (sigBlock.algorithm !== ALGORITHM) return { ok: false, detail: `The signature algorithm is not ${ALGORITHM}.` };
    if (sigBlock.payload_type !== RECEIPT_PAYLOAD_TYPE) return { ok: false, detail: "The signature's payload type is not the receipt payload type." };
    const key = opts.keys.find((k) => k.fingerprint === fp && fingerprintOf(k.publicKey) === fp);
    if (!key) return { ok: false, detail: "The public key the receipt names is not available to this verifier." };
    ctx.key = key;
    const sig = Buffer.from(sigBlock.value, "base64");
    if (sig.length !== SIGNATURE_BYTES) return { ok: false, detail: `The signature has ${sig.length} bytes, not ${SIGNATURE_BYTES}.` };
    const ok = opts.backend.verify(pae(RECEIPT_PAYLOAD_TYPE, ctx.body), sig, key.publicKey);
    return ok
      ? { ok: true, detail: `The ${ALGORITHM} signature over the DSSE PAE of the canonical body is valid.` }
      : { ok: false, detail: `The ${ALGORITHM} signature does not match the receipt body.` };
  });

  run("signer", () => {
    if (unsupported) return skipped();
    if (!ctx.key) return { ok: false, detail: "No signing key was established, so the signer cannot be checked." };
    if (opts.trustedFingerprints === null) {
      return {
        ok: true,
        detail: `Integrity only: the receipt was checked with the key it names (${ctx.key.fingerprint}); the issuer was not authenticated.`,
      };
    }
    return opts.trustedFingerprints.includes(ctx.key.fingerprint)
      ? { ok: true, detail: `The signer ${ctx.key.fingerprint} is a trusted key.` }
      : { ok: false, detail: `The signer ${ctx.key.fingerprint} is not a trusted key.` };
  });

  run("artifact_commitment", () => {
    if (unsupported) return skipped();
    const parsed = artifactSchema.safeParse(ctx.receipt?.artifact);
    if (!parsed.success) return { ok: false, detail: `The artifact commitment is malformed: ${firstIssue(parsed.error)}` };
    const a = parsed.data;
    if (!opts.artifact) return { ok: true, detail: "The artifact commitment is well-formed; no artifact was supplied to compare." };
    if (opts.artifact.sha256 !== a.sha256) return { ok: false, detail: "The supplied artifact's SHA-256 differs from the receipt's." };
    if (opts.artifact.size_bytes !== a.size_bytes) return { ok: false, detail: "The supplied artifact's size differs from the receipt's." };
    return { ok: true, detail: "The supplied artifact matches the receipt's SHA-256 and size." };
  });

  const valid = !unsupported && checks.length === CHECK_NAMES.length && checks.every((c) => c.ok);
  const r = ctx.receipt;
  const rid = r && typeof r.receipt_id === "string" && r.receipt_id.length <= 64 ? r.receipt_id : null;
  const signerFp =
    r && isObject(r.signer) && typeof r.signer.public_key_sha256 === "string" && HEX64.test(r.signer.public_key_sha256) ? r.signer.public_key_sha256 : null;
  return {
    verdict: unsupported ? "unsupported_schema" : valid ? "valid" : "failed",
    valid,
    checks,
    receipt_id: rid,
    signer_fingerprint: signerFp,
  };
}

/** Digest and size of artifact bytes, for `VerifyOptions.artifact`. */
export function artifactDigest(bytes: Uint8Array): { sha256: string; size_bytes: number } {
  return { sha256: sha256Hex(bytes), size_bytes: bytes.length };
}
