// The appliance's HTTP surface as a factory: tests drive it without listen, and only
// bin/ listens. Dependencies (keys, signer, chain, clock, metrics, log) come in `deps`.
// The result is a node:http request listener: POST /v1/provenance/exact and
// /v1/provenance/verify in their plain form (exact path, JSON body with a Content-Length)
// are served without express, which cost more main-thread time per request than everything
// else on it; every other request, and those two in another form, go through the express app
// with the same rules.
import type { IncomingMessage, RequestListener, ServerResponse } from "node:http";
import type { Transform } from "node:stream";
import zlib from "node:zlib";
import express, { type NextFunction, type Request, type Response } from "express";
import { z } from "zod";
import {
  ConflictError,
  PayloadTooLargeError,
  RateLimitedError,
  UnauthorizedError,
  UnsupportedMediaTypeError,
  NotFoundError,
  SvcError,
  ValidationError,
} from "../../lib/errors.js";
import { parseOrThrow } from "../../lib/fields.js";
import { joinPaced } from "../../lib/store/pace.js";
import { bodyStopped, hasBody, lingerOnClose } from "../http/body.js";
import { DEFAULT_BODY_RATE, guardBody, readGuarded, type BodyRate } from "../http/body-guard.js";
import { errorMiddleware, toSvcError, writeErrorBody } from "../http/errors.js";
import { requestId, requestIdFrom, requestIdOf } from "../http/request-id.js";
import { buildBundleFiles, writeZip } from "./bundle.js";
import type { ReceiptChain } from "./chain.js";
import { DEFAULT_LIMITS } from "./config.js";
import { publicKeyDocument, secretMatches, type Keyring } from "./keys.js";
import type { ProvenanceMetrics } from "./metrics.js";
import {
  RECEIPT_SCHEMA,
  artifactDigest,
  assembleReceipt,
  isBase64,
  artifactFields,
  artifactSchema,
  claimsSchema,
  noProtoMember,
  prepareReceipt,
  receiptSchema,
  verifyReceipt,
  type Artifact,
  type PreparedReceipt,
  type VerifyResult,
} from "./receipt.js";
import { JsonSyntaxError, JsonTooManyValuesError, problemSentence, readJson, type JsonProblem } from "../http/json.js";
import { ALGORITHM, type MlDsaBackend, type Signer } from "./signer.js";
import { utf8Of } from "./text-file.js";

export type LogFn = (entry: Record<string, unknown>) => void;

export interface AppDeps {
  /** The keys of this instance: the active one signs, the retired ones still verify. */
  keyring: Keyring;
  /** Signs with the active key (bundles; receipts too unless the chain is batched). */
  signer: Signer;
  backend: MlDsaBackend;
  /** The backend's status, read at each /health (a constant, or a live check). */
  backendStatus: "ok" | "failing" | (() => "ok" | "failing");
  chain: ReceiptChain;
  adminKeySha256: string;
  /** SHA-256 of SVC_PROVENANCE_METRICS_TOKEN, or null. */
  metricsTokenSha256: string | null;
  metrics: ProvenanceMetrics;
  clock: () => Date;
  version: string;
  log: LogFn;
  /** Largest issuance body (default 32 MiB, enough for a 24 MiB artifact_b64). */
  maxBodyBytes?: number;
  /** Largest body of /verify and /evidence-bundle (default 4 MiB: a receipt and a small artifact_b64). */
  maxReceiptBodyBytes?: number;
  /** Request bodies held in memory at once, all requests together (default 64 MiB). */
  bodyBudgetBytes?: number;
  /** The rate a request body must keep (default DEFAULT_BODY_RATE: 16 KiB/s after 10 s of grace). */
  bodyRate?: BodyRate;
}

export const DEFAULT_MAX_BODY_BYTES = DEFAULT_LIMITS.maxBodyBytes;
export const DEFAULT_MAX_RECEIPT_BODY_BYTES = DEFAULT_LIMITS.maxReceiptBodyBytes;
export const DEFAULT_BODY_BUDGET_BYTES = DEFAULT_LIMITS.bodyBudgetBytes;

const mib = (n: number): string => (n % (1024 * 1024) === 0 ? `${n / (1024 * 1024)} MiB` : n % 1024 === 0 ? `${n / 1024} KiB` : `${n} bytes`);

/** A request body as read: its value, and the first I-JSON problem of its text. */
interface ParsedBody {
  value: unknown;
  problem: JsonProblem | null;
}

/**
 * Reads a request body's text: a BOM is dropped (as body-parser does), an object or an array
 * at the top (strict, as express.json), then the strict JSON reader (server/http/json.ts). Not JSON: 400.
 */
function parseBody(raw: Buffer): ParsedBody {
  let text: string;
  try {
    text = utf8Of(raw);
  } catch {
    // replaced, the bytes would be signed as characters the sender did not send
    throw new UnsupportedMediaTypeError("The request body is not valid UTF-8.");
  }
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const first = /^[\x20\x09\x0a\x0d]*(.)/.exec(text)?.[1];
  if (first !== "{" && first !== "[") throw new ValidationError("The request body is not valid JSON.");
  try {
    return readJson(text);
  } catch (e) {
    if (e instanceof JsonSyntaxError) throw new ValidationError("The request body is not valid JSON.");
    if (e instanceof JsonTooManyValuesError) throw new ValidationError(`The request body holds ${e.message}; a receipt holds far fewer.`);
    throw e;
  }
}

const b64Field = (name: string) => z.string().refine(isBase64, `${name} must be base64`);

const exactBody = noProtoMember(
  z
    .strictObject({
      // passed through as sent (z.record would copy it and lose a "__proto__" member unseen)
      artifact: z
        .custom<Record<string, unknown>>((v) => v !== null && typeof v === "object" && !Array.isArray(v), { message: "artifact must be a JSON object" })
        .optional(),
      artifact_b64: b64Field("artifact_b64").optional(),
      claims: claimsSchema.optional(),
    })
    .refine((b) => b.artifact !== undefined || b.artifact_b64 !== undefined, { message: "artifact or artifact_b64 is required", path: ["artifact"] }),
);

// With artifact_b64 the appliance hashes the bytes; artifact may then carry only
// name and media_type, and any sha256/size_bytes given must agree with the bytes.
const partialArtifact = noProtoMember(artifactFields.partial());

const verifyBody = noProtoMember(
  z.strictObject({
    receipt: z.unknown().refine((v) => v !== undefined, "receipt is required"),
    artifact_b64: b64Field("artifact_b64").optional(),
  }),
);

function bearer(header: string | undefined): string | null {
  if (!header) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return m ? m[1]! : null;
}

const EXACT_PATH = "/v1/provenance/exact";
const VERIFY_PATH = "/v1/provenance/verify";
// the forms of Content-Type the plain issuance path takes; anything else goes to express
const PLAIN_JSON = /^application\/json(?:\s*;\s*charset="?utf-8"?)?$/i;
const JSON_TYPE = "application/json; charset=utf-8";

/** What every step of a request uses: the dependencies and the values derived from them once. */
interface AppContext {
  deps: AppDeps;
  m: ProvenanceMetrics;
  trusted: { publicKey: Uint8Array; fingerprint: string }[];
  publicKeyDoc: ReturnType<typeof publicKeyDocument>;
  maxBodyBytes: number;
  maxReceiptBodyBytes: number;
  bodyRate: BodyRate;
  /** Takes `bytes` of the body budget until the response closes; `admin`: the caller proved the admin key. */
  reserveBody: (res: ServerResponse, bytes: number, admin: boolean) => void;
  observe: (method: string, route: string, status: number, start: bigint, id: string) => void;
  isAdmin: (header: string | undefined) => boolean;
  logInternal: (e: SvcError, raw: unknown) => void;
}

/**
 * The budget of request bodies in flight: a request takes its Content-Length (or its route's
 * limit when the length is not known in advance) before reading a byte, and gives it back when
 * its response ends or its connection closes; past the budget, 429 with Retry-After. Callers
 * without the admin key (POST /verify) hold at most half of it together (or one /verify body
 * where that is more), so that they cannot keep issuance from reading its bodies. A body that
 * stalls loses its share about 10 s after its reading began (readRequestBody).
 */
function bodyBudgetOf(bodyBudget: number, receiptBodyLimit: number): (res: ServerResponse, bytes: number, admin: boolean) => void {
  let bodiesInFlight = 0;
  let openInFlight = 0;
  // half the budget, or one /verify body's limit where that is more (a small budget)
  const openShare = Math.max(Math.floor(bodyBudget / 2), receiptBodyLimit);
  return (res, bytes, admin) => {
    if (bodiesInFlight + bytes > bodyBudget) {
      throw new RateLimitedError(`The appliance is already reading its limit of ${mib(bodyBudget)} of request bodies; retry after 1 second.`, 1);
    }
    if (!admin && openInFlight + bytes > openShare) {
      throw new RateLimitedError(
        `The appliance is already reading ${mib(openShare)} of request bodies from callers without the admin key; retry after 1 second.`,
        1,
      );
    }
    bodiesInFlight += bytes;
    if (!admin) openInFlight += bytes;
    res.once("close", () => {
      bodiesInFlight -= bytes;
      if (!admin) openInFlight -= bytes;
    });
  };
}

function contextOf(deps: AppDeps): AppContext {
  const m = deps.metrics;
  return {
    deps,
    m,
    trusted: [deps.keyring.active, ...deps.keyring.retired].map((k) => ({ publicKey: k.publicKey, fingerprint: k.fingerprint })),
    publicKeyDoc: publicKeyDocument(deps.keyring),
    maxBodyBytes: deps.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
    maxReceiptBodyBytes: deps.maxReceiptBodyBytes ?? DEFAULT_MAX_RECEIPT_BODY_BYTES,
    bodyRate: deps.bodyRate ?? DEFAULT_BODY_RATE,
    reserveBody: bodyBudgetOf(deps.bodyBudgetBytes ?? DEFAULT_BODY_BUDGET_BYTES, deps.maxReceiptBodyBytes ?? DEFAULT_MAX_RECEIPT_BODY_BYTES),
    observe: (method, route, status, start, id) => {
      const s = Number(process.hrtime.bigint() - start) / 1e9;
      m.http.observe(method, route, status, s);
      deps.log({ msg: "request", method, route, status, duration_ms: Math.round(s * 1e6) / 1e3, request_id: id });
    },
    isAdmin: (header) => {
      const token = bearer(header);
      return token !== null && secretMatches(token, deps.adminKeySha256);
    },
    // unexpected errors are logged by code only
    logInternal: (e, raw) => {
      if (e.code === "internal") deps.log({ msg: "internal error", error: raw instanceof Error ? raw.name : typeof raw });
    },
  };
}

const tooLarge = (limit: number): PayloadTooLargeError => new PayloadTooLargeError(`The request body is larger than this endpoint's limit of ${mib(limit)}.`);

/** The Content-Encodings besides identity a body may have (those express.raw inflated on Node 20); any other is a 415. */
const DECODERS: Readonly<Record<string, () => Transform>> = {
  gzip: () => zlib.createGunzip(),
  deflate: () => zlib.createInflate(),
  br: () => zlib.createBrotliDecompress(),
};

/**
 * Reads the body of a request that holds its share of the body budget, through the body guard
 * of the servers (guardBody): 413 past `limit` bytes; cut off when the body falls behind
 * `rate` (by default 16 KiB for every second past the first 10 s, no pause longer than 10 s)
 * or its client leaves. `encoding`: a Content-Encoding of DECODERS, inflated with the inflated
 * bytes within `limit`; `size`: the Content-Length of an identity body, taken from the
 * request's buffer without the guard when it has arrived whole (a small body comes in the
 * packet of its headers: one microtask on, all of it is buffered, as readBody takes it). A body
 * that fell behind or whose client left loses its connection at once, unanswered (a client that
 * stopped sending may not read either); one refused before its end for another reason closes
 * its connection once the rest is read and dropped (lingerOnClose), so that the client reads
 * the answer.
 */
async function readRequestBody(req: IncomingMessage, res: ServerResponse, limit: number, rate: BodyRate, size?: number, encoding?: string): Promise<Buffer> {
  if (size !== undefined && size > 0 && size <= limit) {
    await Promise.resolve();
    if (req.readableLength === size) {
      const whole = req.read(size) as Buffer | null;
      if (whole !== null && whole.byteLength === size) return whole;
    }
  }
  const guard = guardBody(req, limit, rate);
  try {
    return await (encoding === undefined ? readGuarded(guard, size) : inflated(guard, DECODERS[encoding]!(), limit, encoding));
  } catch (err) {
    const e = err instanceof PayloadTooLargeError ? tooLarge(limit) : err;
    if (bodyStopped(e)) res.destroy();
    else if (!req.complete && !res.headersSent) {
      res.setHeader("Connection", "close");
      lingerOnClose(res);
      req.pause();
    }
    throw e;
  }
}

/** The inflated bytes of a guarded body: 413 past `limit` (inflating stops there), 400 when they do not inflate. */
function inflated(body: Transform, decoder: Transform, limit: number, encoding: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    let settled = false;
    const fail = (e: unknown): void => {
      if (settled) return;
      settled = true;
      body.unpipe(decoder);
      decoder.destroy();
      // the guard stops its timer and lets go of the request
      if (!body.destroyed) body.destroy(e as Error);
      reject(e);
    };
    body.once("error", fail);
    decoder.on("data", (c: Buffer) => {
      n += c.length;
      if (n > limit) return fail(tooLarge(limit));
      chunks.push(c);
    });
    decoder.once("error", () => fail(new ValidationError(`The request body could not be decompressed (Content-Encoding: ${encoding}).`)));
    decoder.once("end", () => {
      if (settled) return;
      settled = true;
      // bytes after the compressed data still pass the guard (its limit and pace), unread
      body.unpipe(decoder);
      body.resume();
      if (chunks.length <= 1) return resolve(chunks[0] ?? Buffer.alloc(0));
      joinPaced(chunks, n).then(resolve, reject);
    });
    body.pipe(decoder);
  });
}

/** Guards of the express routes: the admin key, the admin key or the metrics token, a JSON body. */
function guardsOf(ctx: AppContext) {
  const { deps } = ctx;
  return {
    requireAdmin: (req: Request, _res: Response, next: NextFunction): void => {
      next(ctx.isAdmin(req.get("authorization")) ? undefined : new UnauthorizedError("Missing or invalid admin API key."));
    },
    requireMetricsReader: (req: Request, _res: Response, next: NextFunction): void => {
      const token = bearer(req.get("authorization"));
      const ok =
        token !== null && (secretMatches(token, deps.adminKeySha256) || (deps.metricsTokenSha256 !== null && secretMatches(token, deps.metricsTokenSha256)));
      next(ok ? undefined : new UnauthorizedError("Missing or invalid admin API key or metrics token."));
    },
    requireJson: (req: Request, _res: Response, next: NextFunction): void => {
      if (!hasBody(req)) return next(new ValidationError("The request body must be a JSON object."));
      next(req.is("application/json") ? undefined : new UnsupportedMediaTypeError("Requests must have Content-Type application/json."));
    },
  };
}

/**
 * Verifies the receipt of a /verify or /evidence-bundle body. An I-JSON problem inside the
 * receipt fails its canonical_body check (the receipt is not valid); one elsewhere in the
 * body (two "receipt" members, say) makes the request a bad one.
 */
function verifyBodyOf(ctx: AppContext, parsed: ParsedBody): { body: z.infer<typeof verifyBody>; result: VerifyResult } {
  let receiptProblem: JsonProblem | null = null;
  if (parsed.problem) {
    if (parsed.problem.path[0] !== "receipt") throw new ValidationError(problemSentence("The request body", parsed.problem));
    receiptProblem = { ...parsed.problem, path: parsed.problem.path.slice(1) };
  }
  const body = parseOrThrow(verifyBody, parsed.value ?? {}, "body");
  const result = verifyReceipt(body.receipt, {
    backend: ctx.deps.backend,
    keys: ctx.trusted,
    trustedFingerprints: ctx.trusted.map((k) => k.fingerprint),
    artifact: body.artifact_b64 !== undefined ? artifactDigest(Buffer.from(body.artifact_b64, "base64")) : undefined,
    textProblem: receiptProblem,
  });
  ctx.m.verifications.inc({ verdict: result.verdict });
  return { body, result };
}

/**
 * The answer to a receipt that is not valid: the verify structure with the error body's
 * fields (detail, code, request_id) after it; code bad_request: the receipt given is not a valid one.
 */
function refusal(result: VerifyResult, requestId: string, exporting: boolean): string {
  const failed = result.checks.find((c) => !c.ok);
  const why = result.verdict === "unsupported_schema" ? "its schema is not supported" : `the ${failed?.name ?? "schema"} check failed`;
  const detail = exporting ? `The receipt did not verify, so no evidence bundle was exported: ${why}.` : `The receipt did not verify: ${why}.`;
  return JSON.stringify({ ...result, detail, code: "bad_request", request_id: requestId });
}

/** The artifact of an issuance body: as given, or hashed from artifact_b64 (any digest given must agree). */
function artifactOf(body: z.infer<typeof exactBody>): Artifact {
  if (body.artifact_b64 === undefined) return parseOrThrow(artifactSchema, body.artifact, "artifact");
  const given = parseOrThrow(partialArtifact, body.artifact ?? {}, "artifact");
  const d = artifactDigest(Buffer.from(body.artifact_b64, "base64"));
  if (given.sha256 !== undefined && given.sha256 !== d.sha256)
    throw new ValidationError("artifact.sha256 does not match the SHA-256 of artifact_b64.", "artifact.sha256");
  if (given.size_bytes !== undefined && given.size_bytes !== d.size_bytes)
    throw new ValidationError("artifact.size_bytes does not match the length of artifact_b64.", "artifact.size_bytes");
  return parseOrThrow(
    artifactSchema,
    {
      name: given.name ?? "artifact",
      media_type: given.media_type ?? "application/octet-stream",
      ...d,
    },
    "artifact",
  );
}

/** Validates an issuance request, queues it on the chain; resolves to the receipt's JSON. */
async function issue(ctx: AppContext, parsed: ParsedBody): Promise<string> {
  const { deps } = ctx;
  if (parsed.problem) throw new ValidationError(problemSentence("The request body", parsed.problem));
  const body = parseOrThrow(exactBody, parsed.value ?? {}, "body");
  const artifact = artifactOf(body);
  // canonicalised here, before the chain's critical section, which only splices them in
  let prepared: PreparedReceipt;
  try {
    prepared = prepareReceipt({ artifact, claims: body.claims ?? {} }, deps.clock());
  } catch {
    throw new ValidationError("artifact must hold only well-formed strings (no lone surrogates).", "artifact");
  }
  // a batched chain signs in its worker thread; else here, one at a time
  const receipt = deps.chain.batched
    ? await deps.chain.appendInput<string>(prepared)
    : await deps.chain.append((pos) => {
        const r = assembleReceipt(prepared, pos, deps.signer.fingerprint, (msg) => deps.signer.sign(msg));
        return { value: r.json, hash: r.hash };
      });
  ctx.m.receiptsIssued.inc();
  return receipt;
}

/**
 * JSON bodies, size-limited before they are read (413 from Content-Length) and within the
 * budget of bodies in flight (429 past it); mounted per route after authentication, so an
 * unauthenticated caller never gets a body read. Read by readRequestBody (gzip, deflate and br
 * inflated), then parsed by the strict JSON reader (member names once, numbers that keep their
 * value), never by JSON.parse alone.
 */
function bodyReader(ctx: AppContext, limit: number) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.get("content-type") ?? "")?.[1];
    if (charset !== undefined && charset.toLowerCase() !== "utf-8") {
      return next(new UnsupportedMediaTypeError("Requests must be JSON in UTF-8."));
    }
    const cl = req.headers["content-length"];
    const encoding = (req.headers["content-encoding"] ?? "identity").trim().toLowerCase();
    if (encoding !== "identity" && !Object.hasOwn(DECODERS, encoding))
      return next(new UnsupportedMediaTypeError("The request body's encoding is not supported."));
    // the declared length when it is what will be held; else (chunked, compressed) the limit
    const known = cl !== undefined && /^\d{1,15}$/.test(cl) && req.headers["transfer-encoding"] === undefined && encoding === "identity";
    const bytes = known ? Number(cl) : limit;
    if (bytes > limit) return next(tooLarge(limit));
    try {
      ctx.reserveBody(res, bytes, ctx.isAdmin(req.headers.authorization));
    } catch (e) {
      return next(e);
    }
    readRequestBody(req, res, limit, ctx.bodyRate, known ? bytes : undefined, encoding === "identity" ? undefined : encoding).then((raw) => {
      try {
        req.body = parseBody(raw);
        next();
      } catch (e) {
        next(e);
      }
    }, next);
  };
}

/** The express app: every route, in the order a request meets them. */
function expressApp(ctx: AppContext): express.Express {
  const { deps, m } = ctx;
  const { requireAdmin, requireMetricsReader, requireJson } = guardsOf(ctx);
  const issuanceBody = bodyReader(ctx, ctx.maxBodyBytes);
  const receiptBody = bodyReader(ctx, ctx.maxReceiptBodyBytes);
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  // 1. request id: echoed on every response, the key of every log line
  app.use(requestId);
  // 2. timing and the one log line per request (method, route, status; never bodies or headers)
  app.use((req, res, next) => {
    const start = process.hrtime.bigint();
    res.on("finish", () => {
      ctx.observe(req.method, (req.route?.path as string | undefined) ?? "unmatched", res.statusCode, start, requestIdOf(res));
    });
    next();
  });
  // 3. the routes: guards (admin key, JSON body) before a body is read, then the work
  app.get("/health", (_req, res) => {
    const status = typeof deps.backendStatus === "function" ? deps.backendStatus() : deps.backendStatus;
    const ok = status === "ok";
    res.status(ok ? 200 : 503).json({
      status: ok ? "ok" : "degraded",
      receipt_schema: RECEIPT_SCHEMA,
      signing_algorithm: ALGORITHM,
      backend: { name: deps.backend.name, version: deps.backend.version, status },
    });
  });
  app.get("/v1/provenance/public-key", (_req, res) => {
    res.json(ctx.publicKeyDoc);
  });
  app.post(EXACT_PATH, requireAdmin, requireJson, issuanceBody, async (req, res, next) => {
    try {
      const receipt = await issue(ctx, req.body as ParsedBody);
      res.status(201).type(JSON_TYPE).send(receipt);
    } catch (e) {
      next(e);
    }
  });
  app.post("/v1/provenance/verify", requireJson, receiptBody, (req, res, next) => {
    try {
      const { result } = verifyBodyOf(ctx, req.body as ParsedBody);
      res
        .status(result.valid ? 200 : 422)
        .type(JSON_TYPE)
        .send(result.valid ? JSON.stringify(result) : refusal(result, requestIdOf(res), false));
    } catch (e) {
      next(e);
    }
  });
  app.post("/v1/provenance/evidence-bundle", requireAdmin, requireJson, receiptBody, (req, res, next) => {
    exportBundle(ctx, req.body as ParsedBody, res).catch(next);
  });
  app.get("/metrics", requireMetricsReader, async (_req, res, next) => {
    try {
      res.type(m.registry.contentType).send(await m.registry.metrics());
    } catch (e) {
      next(e);
    }
  });
  // 4. nothing matched: 404; last, one error body for everything
  app.use((_req, _res, next) => next(new NotFoundError("No such endpoint.")));
  app.use(errorMiddleware(requestIdOf, ctx.logInternal));
  return app;
}

/** POST /v1/provenance/evidence-bundle after its guards: verify, then the signed ZIP of the receipt's evidence. */
async function exportBundle(ctx: AppContext, parsed: ParsedBody, res: Response): Promise<void> {
  const { deps } = ctx;
  const { body, result } = verifyBodyOf(ctx, parsed);
  if (!result.valid) {
    res
      .status(422)
      .type(JSON_TYPE)
      .send(refusal(result, requestIdOf(res), true));
    return;
  }
  const receipt = receiptSchema.parse(body.receipt);
  if (receipt.signer.public_key_sha256 !== deps.signer.fingerprint) {
    throw new ConflictError(
      "The receipt was signed by a retired key; bundles are signed by the receipt's own key, so only receipts of the active key can be exported.",
    );
  }
  const zip = await writeZip(
    buildBundleFiles({
      receipt,
      verification: result,
      signer: deps.signer,
      exportedAt: deps.clock(),
      applianceVersion: deps.version,
    }),
  );
  ctx.m.bundlesExported.inc();
  res.status(200).type("application/zip").setHeader("Content-Disposition", `attachment; filename="evidence-${receipt.receipt_id}.zip"`).send(zip);
}

type PlainWork = (body: ParsedBody, id: string) => Promise<[number, string]> | [number, string];

/**
 * The plain paths of issuance and verification, in the order of their express routes: request
 * id, timing and log line, admin key (issuance), a non-empty body within the limit (413 from
 * Content-Length before any byte is read), strict JSON, then the route's work. Express with
 * express.json costs 0.2-0.3 ms of CPU per request here, as much as a verification.
 */
function plainJson(
  ctx: AppContext,
  req: IncomingMessage,
  res: ServerResponse,
  route: string,
  admin: boolean,
  length: number,
  limit: number,
  work: PlainWork,
): void {
  const start = process.hrtime.bigint();
  const id = requestIdFrom(req.headers["x-request-id"]);
  res.setHeader("X-Request-Id", id);
  res.on("finish", () => ctx.observe("POST", route, res.statusCode, start, id));
  const send = (status: number, text: string): void => {
    res.statusCode = status;
    res.setHeader("Content-Type", JSON_TYPE);
    res.setHeader("Content-Length", Buffer.byteLength(text));
    res.end(text);
  };
  const fail = (err: unknown): void => {
    const e = toSvcError(err);
    writeErrorBody(res, e, id);
    ctx.logInternal(e, err);
  };
  if (admin && !ctx.isAdmin(req.headers.authorization)) return fail(new UnauthorizedError("Missing or invalid admin API key."));
  if (length === 0) return fail(new ValidationError("The request body must be a JSON object."));
  if (length > limit) return fail(tooLarge(limit));
  try {
    ctx.reserveBody(res, length, admin || ctx.isAdmin(req.headers.authorization));
  } catch (e) {
    return fail(e);
  }
  readRequestBody(req, res, length, ctx.bodyRate, length).then((raw) => {
    let parsed: ParsedBody;
    try {
      parsed = parseBody(raw);
    } catch (e) {
      return fail(e);
    }
    try {
      Promise.resolve(work(parsed, id)).then(([status, text]) => send(status, text), fail);
    } catch (e) {
      fail(e);
    }
  }, fail);
}

/** A plain request: POST, a JSON Content-Type, a Content-Length, no transfer or content coding. */
function plainLength(req: IncomingMessage): number | null {
  const h = req.headers;
  const ct = h["content-type"];
  const cl = h["content-length"];
  const ce = h["content-encoding"];
  const plain =
    ct !== undefined &&
    PLAIN_JSON.test(ct) &&
    (ce === undefined || ce.toLowerCase() === "identity") &&
    h["transfer-encoding"] === undefined &&
    cl !== undefined &&
    /^\d{1,15}$/.test(cl);
  return plain ? Number(cl) : null;
}

/**
 * The appliance as a request listener (serve it with node:http createServer). A request's
 * path: the plain issuance and verification forms go to plainJson; everything else to the
 * express app (request id, timing and log line, guards, body reader, route, 404, error body).
 * @example createServer(createApp(deps)).listen(8001, "127.0.0.1")
 */
export function createApp(deps: AppDeps): RequestListener {
  const ctx = contextOf(deps);
  const app = expressApp(ctx);
  const plainRoutes: Record<string, (req: IncomingMessage, res: ServerResponse, length: number) => void> = {
    [EXACT_PATH]: (req, res, length) => plainJson(ctx, req, res, EXACT_PATH, true, length, ctx.maxBodyBytes, async (body) => [201, await issue(ctx, body)]),
    [VERIFY_PATH]: (req, res, length) =>
      plainJson(ctx, req, res, VERIFY_PATH, false, length, ctx.maxReceiptBodyBytes, (body, id) => {
        const { result } = verifyBodyOf(ctx, body);
        return result.valid ? [200, JSON.stringify(result)] : [422, refusal(result, id, false)];
      }),
  };
  return (req, res) => {
    const plain = req.method === "POST" ? plainRoutes[req.url ?? ""] : undefined;
    const length = plain !== undefined ? plainLength(req) : null;
    if (plain !== undefined && length !== null) return plain(req, res, length);
    app(req, res);
  };
}
