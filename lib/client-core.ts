// The client behind createClient (lib/client.ts, which checks its options first): the store's
// methods over HTTP through the gateway (docs/api.md (data plane)), so that code moves from
// embedded to hosted by changing one line. It loads no zod itself: names and the options of
// get, list, search and topk in their common forms are checked by lib/client-names.ts, the
// rest by the store's schemas in lib/client-validate.ts, imported on the first such call. Large payloads travel
// as application/octet-stream both ways; errors come back as the library's error classes
// carrying the server's code, detail and request_id; 429, 502 and a 503 with Retry-After (a
// dependency down, the server overloaded; never the monthly quota) are retried with
// exponential backoff that honours Retry-After; every write carries an Idempotency-Key, the
// same on its retries, so a retried write is applied at most once.
import { exchange, headerMap, HttpPool, HttpTransportError } from "./client-http.js";
import {
  SvcError,
  ValidationError,
  RateLimitedError,
  QuotaExhaustedError,
  OverloadedError,
  EngineUnreachableError,
  errorFromCode,
  StoreUnavailableError,
  StorageFullError,
  StateUnavailableError,
} from "./errors.js";
import { copyPutData, itemsize, type Dtype } from "./dtypes.js";
import { chooseLocally, DEFAULT_LOCAL_COMPRESS_BYTES, LOCAL_MIN_COMPRESS_BYTES, locallyCompressible, predHeader, type LocalChoice } from "./client-compress.js";
import type { GetOptions, PutPredOptions, ServeOptions } from "./schemas.js";
import { keyProblem, namespaceProblem, quickOptions, type QuickKind } from "./client-names.js";
import type { OptionKind, OptionsOf } from "./client-validate.js";
import type {
  PutData,
  CoreInput,
  PutResult,
  EntryInfo,
  ListResult,
  SearchResult,
  DeleteResult,
  ServeResult,
  ServeArray,
  SimilarityResult,
  TopkResult,
} from "./store/index.js";
import { compileFilter } from "./filter.js";
import type { TensorStore, TensorStoreGpuHandle } from "./tensor-store.js";

/** What `client.lastResponse` exposes about the latest HTTP exchange. */
export interface LastResponse {
  status: number;
  request_id: string | null;
  /** `X-SVC-CUs`: compute units charged (null when the header was absent). */
  cus: number | null;
  rate_limit: { limit: number | null; remaining: number | null; reset: number | null };
  /** `Retry-After` in seconds, when the response carried one. */
  retry_after_s: number | null;
  /** Every response header, lower-cased names. */
  headers: Record<string, string>;
  /** How many attempts this call took (1 without retries). */
  attempts: number;
}

export interface ClientOptions {
  /** The gateway's base address, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** A tenant API key (`svc_live_…`), sent as `X-Api-Key`. */
  apiKey: string;
  /** Retries of a 429, a 502 or a 503 overloaded before the error is thrown (default 3, 0 disables). */
  maxRetries?: number;
  /** First backoff delay in ms, doubled on each retry (default 250). */
  backoffMs?: number;
  /** Longest wait before one retry, in ms; a Retry-After beyond it is not waited for (default 30000). */
  maxBackoffMs?: number;
  /** Per-request timeout in ms (default 120000). */
  timeoutMs?: number;
  /** Waits between retries; tests pass a recorder. */
  sleep?: (ms: number) => Promise<void>;
  /**
   * A put of float32 or float64 data of at least this many bytes is compressed here with the
   * engine's codecs and sent as TT cores (put_cores) or a prediction stream (a put with encoding
   * pred), so that a tensor past the upload limit can be stored (default 64 MiB; false sends
   * every put as it is).
   */
  localCompressBytes?: number | false;
  /** Called as a large put or serve moves: compressing, then bytes sent or received of the total. */
  onProgress?: (p: TransferProgress) => void;
  /**
   * For an https baseUrl: the PEM certificates of the CAs this client trusts (a private CA in
   * front of the gateway), in place of Node's bundled roots, as node:tls's `ca` option.
   */
  ca?: string | Uint8Array | Array<string | Uint8Array>;
}

/** What `onProgress` reports: a phase, and for upload and download the bytes moved of the total. */
export interface TransferProgress {
  phase: "compress" | "upload" | "download";
  done: number;
  total: number;
}

export type Data = PutData;

/** A GPU-resident entry on the server: what `serveGpu` returns over HTTP (the handle's fields). */
export type GpuServeInfo = Pick<TensorStoreGpuHandle, "namespace" | "key" | "version" | "device" | "resident" | "bytes_on_device" | "tt">;
export interface RemoteGpuHandle extends GpuServeInfo, TensorStoreGpuHandle {
  /** Dense reconstruction (a CPU serve of the same version). */
  reconstruct(opts?: Omit<ServeOptions, "version">): Promise<ServeResult>;
  /** Inner product with another entry of the same namespace (query_similarity, metric dot). */
  dot(other: { key: string; version?: number }): Promise<number>;
  /** Ends the use of this handle: later calls on it fail. The server's LRU cache evicts on its own. */
  release(): Promise<void>;
}

export type TypedArray = ServeArray;

/**
 * The hosted counterpart of a store from `createStore`: the same methods, options, results
 * and errors, declared once in `TensorStore` (lib/tensor-store.ts), which both implement. Not
 * available over HTTP: `compact` (an operator task on the engine) and `forTenant` (the
 * gateway decides the tenant from the API key).
 */
export interface SvcClient extends TensorStore {
  /**
   * put of a stream of the prediction codec (lib/pred.ts) encoded here, sent as it is (a put
   * with encoding pred); `relative_error` and `max_abs_error` are those measured against the
   * original data (pred.compress returns them) and become the entry's errors. dtype and shape
   * default to the stream's header.
   */
  putPred(ns: string, key: string, stream: Uint8Array, opts: PutPredOptions): Promise<PutResult>;
  /** serve on the engine's GPU: the engine's residency record, with `reconstruct` and `dot` as HTTP calls. */
  serveGpu(ns: string, key: string, opts?: GetOptions): Promise<RemoteGpuHandle>;
  /** Metadata of the latest HTTP response (null before the first call). */
  readonly lastResponse: LastResponse | null;
  /** Closes the connection pool; later calls fail. */
  close(): Promise<void>;
}

const bytesOf = (d: Data): Buffer => (d instanceof ArrayBuffer ? Buffer.from(d) : Buffer.from(d.buffer, d.byteOffset, d.byteLength));

/** Which explicit dtypes may reinterpret a typed array of another element type (as the store). */
function compatible(natural: Dtype | "raw", dtype: Dtype): boolean {
  if (natural === "raw" || natural === dtype) return true;
  if (natural === "uint8") return true;
  if (natural === "uint16") return dtype === "float16" || dtype === "bfloat16";
  return false;
}

/** A typed array of `dtype` over `buf` (float16/bfloat16 as raw Uint16Array bits, bytes as Uint8Array). */
export function typedArrayOf(dtype: Dtype, buf: Buffer): TypedArray {
  const size = itemsize(dtype);
  if (buf.length % size !== 0) throw new ValidationError(`The ${buf.length} bytes are not a whole number of ${dtype} elements.`, "data");
  let b = buf;
  if (b.byteOffset % size !== 0) {
    b = Buffer.alloc(buf.length);
    buf.copy(b);
  }
  const n = b.length / size;
  switch (dtype) {
    case "float32":
      return new Float32Array(b.buffer, b.byteOffset, n);
    case "float64":
      return new Float64Array(b.buffer, b.byteOffset, n);
    case "float16":
    case "bfloat16":
    case "uint16":
      return new Uint16Array(b.buffer, b.byteOffset, n);
    case "int8":
      return new Int8Array(b.buffer, b.byteOffset, n);
    case "int16":
      return new Int16Array(b.buffer, b.byteOffset, n);
    case "int32":
      return new Int32Array(b.buffer, b.byteOffset, n);
    case "uint32":
      return new Uint32Array(b.buffer, b.byteOffset, n);
    case "int64":
      return new BigInt64Array(b.buffer, b.byteOffset, n);
    case "uint64":
      return new BigUint64Array(b.buffer, b.byteOffset, n);
    default:
      return new Uint8Array(b.buffer, b.byteOffset, n);
  }
}

const numOrNull = (v: string | undefined): number | null => {
  if (v === undefined || v === "") return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
};

/** Seconds of a Retry-After header (delta seconds or an HTTP date), or null. */
export function parseRetryAfter(v: string | undefined, now = Date.now()): number | null {
  if (!v) return null;
  if (/^\d+(\.\d+)?$/.test(v.trim())) return Number(v);
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : Math.max(0, (t - now) / 1000);
}

interface Req {
  method: "GET" | "POST" | "DELETE";
  path: string;
  query?: Record<string, string | number | undefined>;
  json?: unknown;
  raw?: Buffer;
  headers?: Record<string, string>;
  accept?: "json" | "octet";
  /** A write (put, put_cores, put_cores_batch, delete): sent with one Idempotency-Key for all its attempts. */
  write?: true;
}

interface Res {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** Longest metadata sent in the X-SVC-Metadata header; longer goes as a JSON put. */
const METADATA_HEADER_MAX = 8 * 1024;

/** Bodies and answers of this size or more report their progress to onProgress (1 MiB). */
const PROGRESS_MIN_BYTES = 1024 * 1024;
/** Bodies of this size or more are worth the headers-only question after a reset (1 MiB). */
const PROBE_MIN_BYTES = 1024 * 1024;
/** How long the headers-only question waits: a refusal by size needs no body, so it is prompt. */
const PROBE_WAIT_MS = 10_000;
const RESET_CODES = new Set(["EPIPE", "ECONNRESET"]);
/** A refusal is a short JSON error; a longer answer to the question is not one. */
const PROBE_ANSWER_BYTES = 64 * 1024;

/** 128 random bits, base64url (22 characters). */
const newIdempotencyKey = async (): Promise<string> => (await import("node:crypto")).randomBytes(16).toString("base64url");

/** The longest JSON list a vector query sends as JSON (as lib/schemas.ts MAX_JSON_VECTOR). */
const MAX_JSON_VECTOR = 1 << 20;

/** The zod side of the checks, loaded on first need. */
let validateModule: Promise<typeof import("./client-validate.js")> | undefined;
const validate = () => (validateModule ??= import("./client-validate.js"));

const encPath = (key: string): string => key.split("/").map(encodeURIComponent).join("/");

/** One request and its retries, as the client's methods see the service. */
interface Transport {
  /** Sends a request, retrying what is safe to retry; the answer (status < 400) or its error. */
  call(r: Req): Promise<Res>;
  /** call, then the answer's JSON. */
  json<T>(r: Req): Promise<T>;
  last(): LastResponse | null;
  close(): void;
}

/**
 * The server's answer to a request's headers alone (Content-Length of the real body, which is
 * never sent): its refusal when it refuses by size or rights, or null when it waits for the
 * body (then the original transport error stands). The connection is dropped either way.
 */
async function refusalOf(url: URL, method: Req["method"], headers: Record<string, string>, size: number): Promise<Res | null> {
  // the headers alone (flushHeaders), on a socket of its own
  const http = url.protocol === "https:" ? await import("node:https") : await import("node:http");
  return new Promise<Res | null>((resolve) => {
    const req = http.request(url, { method, headers: { ...headers, "content-length": String(size) }, timeout: PROBE_WAIT_MS });
    const done = (r: Res | null) => {
      resolve(r);
      req.destroy();
    };
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      let n = 0;
      res.on("data", (c: Buffer) => {
        n += c.length;
        if (n <= PROBE_ANSWER_BYTES) chunks.push(c);
        else done(null);
      });
      res.on("end", () => {
        const status = res.statusCode ?? 0;
        done(status >= 400 ? { status, headers: headerMap(res.headers), body: Buffer.concat(chunks) } : null);
      });
      res.on("error", () => done(null));
    });
    req.on("timeout", () => done(null));
    req.on("error", () => done(null));
    req.flushHeaders();
  });
}

/** What lastResponse says of an answer. */
function lastResponseOf(res: Res, attempts: number): LastResponse {
  const h = res.headers;
  return {
    status: res.status,
    request_id: h["x-request-id"] ?? null,
    cus: numOrNull(h["x-svc-cus"]),
    rate_limit: {
      limit: numOrNull(h["x-ratelimit-limit"]),
      remaining: numOrNull(h["x-ratelimit-remaining"]),
      reset: numOrNull(h["x-ratelimit-reset"]),
    },
    retry_after_s: parseRetryAfter(h["retry-after"]),
    headers: h,
    attempts,
  };
}

/** The error of an answer with status 400 or more: its body's detail and code, as the error class of that code. */
function errorOf(res: Res): SvcError {
  let detail = `The service answered HTTP ${res.status}.`;
  let code = "internal";
  let requestId = res.headers["x-request-id"] ?? null;
  try {
    const b = JSON.parse(res.body.toString("utf8")) as { detail?: unknown; code?: unknown; request_id?: unknown };
    if (typeof b.detail === "string") detail = b.detail;
    if (typeof b.code === "string") code = b.code;
    if (typeof b.request_id === "string") requestId = b.request_id;
  } catch {
    /* not JSON: keep the generic sentence */
  }
  if (code === "internal" && res.status !== 500) code = codeOfStatus(res.status);
  const retry = parseRetryAfter(res.headers["retry-after"]) ?? 0;
  const err =
    code === "rate_limited"
      ? new RateLimitedError(detail, retry)
      : code === "quota_exhausted"
        ? new QuotaExhaustedError(detail, retry)
        : code === "overloaded"
          ? new OverloadedError(detail, retry)
          : code === "store_unavailable"
            ? new StoreUnavailableError(detail, retry)
            : code === "state_unavailable"
              ? new StateUnavailableError(detail, retry)
              : code === "storage_full"
                ? new StorageFullError(detail, retry)
                : errorFromCode(code, detail);
  err.extra.status = res.status;
  err.extra.request_id = requestId;
  return Object.assign(err, { status: res.status, requestId });
}

/** 429, 502, and a 503 that says a retry may succeed (never the monthly quota). */
function retriable(res: Res): boolean {
  // 503 with Retry-After (overloaded, a store or the gateway's state down): not carried out,
  // or a write whose Idempotency-Key makes a repeat safe; the monthly quota is not retried
  if (res.status === 429 || res.status === 502) return true;
  if (res.status !== 503) return false;
  const code = errorOf(res).code;
  return code === "overloaded" || (res.headers["retry-after"] !== undefined && code !== "quota_exhausted");
}

function createTransport(options: ClientOptions): Transport {
  const base = options.baseUrl.replace(/\/+$/, "");
  const maxRetries = options.maxRetries ?? 3;
  const backoffMs = options.backoffMs ?? 250;
  const maxBackoffMs = options.maxBackoffMs ?? 30_000;
  const timeoutMs = options.timeoutMs ?? 120_000;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const pool = new HttpPool(options.ca === undefined ? {} : { ca: options.ca });
  let last: LastResponse | null = null;
  let closed = false;

  async function once(r: Req): Promise<Res> {
    const url = new URL(base + r.path);
    for (const [k, v] of Object.entries(r.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const headers: Record<string, string> = {
      "x-api-key": options.apiKey,
      accept: r.accept === "octet" ? "application/octet-stream, application/json" : "application/json",
      ...r.headers,
    };
    let body: Buffer | string | undefined;
    if (r.raw) {
      headers["content-type"] = "application/octet-stream";
      body = r.raw;
    } else if (r.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(r.json);
    }
    const size = body === undefined ? 0 : typeof body === "string" ? Buffer.byteLength(body) : body.length;
    const report = options.onProgress;
    try {
      const res = await exchange(pool, url, {
        method: r.method,
        headers,
        body,
        timeoutMs,
        ...(report && size >= PROGRESS_MIN_BYTES
          ? { uploadChunk: PROGRESS_MIN_BYTES, onUpload: (done: number, total: number) => report({ phase: "upload", done, total }) }
          : {}),
        ...(report ? { downloadFrom: PROGRESS_MIN_BYTES, onDownload: (done: number, total: number) => report({ phase: "download", done, total }) } : {}),
      });
      return res;
    } catch (e) {
      if (!(e instanceof HttpTransportError)) throw e;
      // close() cut it off: not known to have been carried out, as on a closed store
      if (closed) throw new StoreUnavailableError("The client is closed.");
      const code = e.code;
      // A server that refuses a large body from its headers (413) and closes the connection can
      // reset it before its answer is read: ask again with the headers alone to read that answer.
      if (size >= PROBE_MIN_BYTES && RESET_CODES.has(code)) {
        const refusal = await refusalOf(url, r.method, headers, size);
        if (refusal) return refusal;
      }
      if (code === "ETIMEDOUT") throw new EngineUnreachableError(`The service at ${base} did not answer within ${timeoutMs} ms.`);
      if (code === "EPROTO") throw new SvcError("internal", e.message);
      throw new EngineUnreachableError(`The service at ${base} could not be reached${code ? ` (${code})` : ""}.`);
    }
  }

  async function call(r: Req): Promise<Res> {
    // One key for every attempt of a write: a retry after a 502 whose first attempt was in
    // fact applied gets the stored answer back instead of adding a version.
    if (r.write) r = { ...r, headers: { ...r.headers, "idempotency-key": await newIdempotencyKey() } };
    for (let attempt = 1; ; attempt++) {
      // what a closed store answers (TensorStore): checked again before each retry
      if (closed) throw new StoreUnavailableError("The client is closed.");
      const res = await once(r);
      last = lastResponseOf(res, attempt);
      if (res.status < 400) return res;
      if (retriable(res) && attempt <= maxRetries) {
        const ra = parseRetryAfter(res.headers["retry-after"]);
        const expo = Math.min(maxBackoffMs, backoffMs * 2 ** (attempt - 1));
        // our own backoff waits a random time in [expo/2, expo] (equal jitter); a server's Retry-After is honoured as given
        const wait = ra !== null ? ra * 1000 : expo / 2 + Math.random() * (expo / 2);
        if (wait <= maxBackoffMs) {
          await sleep(wait);
          continue;
        }
      }
      throw errorOf(res);
    }
  }

  return {
    call,
    async json<T>(r: Req): Promise<T> {
      const res = await call(r);
      try {
        return JSON.parse(res.body.toString("utf8")) as T;
      } catch {
        throw new SvcError("internal", "The service answered with a body that is not JSON.");
      }
    },
    last: () => last,
    close() {
      if (closed) return;
      closed = true;
      pool.close();
    },
  };
}

// names and options are checked here as the store checks them, so that a bad one fails the
// same way embedded and hosted, without a request (null is refused as by the store)
const ns = async (v: string): Promise<void> => {
  if (namespaceProblem(v) !== null) (await validate()).checkNamespace(v);
};
const key = async (v: string): Promise<void> => {
  if (keyProblem(v) !== null) (await validate()).checkKey(v);
};
const opt = async <K extends OptionKind>(kind: K, v: unknown): Promise<OptionsOf<K>> =>
  (kind === "get" || kind === "list" || kind === "search" || kind === "topk" ? (quickOptions(kind as QuickKind, v) as OptionsOf<K> | null) : null) ??
  (await validate()).options(kind, v, "options");
const defined = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));

/** The sentence of a 413 for a compressed form: its size, the server's sentence, and the ways out. */
function stillTooLarge(e: SvcError, what: string, stored: number, dense: number, shrink: string): SvcError {
  const err = errorFromCode(
    "payload_too_large",
    `Even compressed to ${stored} bytes of ${what} (ratio ${(dense / stored).toFixed(1)}), the tensor is past the upload limit: ${e.message.replace(/\.$/, "")}; raise SVC_ENGINE_MAX_UPLOAD_BYTES on the engine and the gateway, or ${shrink}.`,
  );
  Object.assign(err.extra, e.extra);
  return err;
}

/**
 * A large float32/float64 put compressed here (client-compress.ts: the engine's codecs and its
 * choice between them) and stored with put_cores (TT cores) or as a put with encoding pred (a
 * prediction stream). The answer carries the verdict, relative_error and max_abs_error measured
 * here; for TT they replace put_cores' (which records a given TT as compressed, error 0), for pred
 * the engine recorded them as declared. Null when nothing compresses (the data then go as they are).
 */
async function putLocallyCompressed(
  client: SvcClient,
  options: ClientOptions,
  n: string,
  k: string,
  data: Data,
  dtype: "float32" | "float64",
  o: OptionsOf<"put">,
): Promise<PutResult | null> {
  if (!o.shape) throw new ValidationError(`shape is required for dtype ${dtype}.`, "shape");
  const need = o.shape.reduce((a, b) => a * b, 1) * (dtype === "float32" ? 4 : 8);
  if (need !== data.byteLength) {
    throw new ValidationError(`data has ${data.byteLength} bytes but shape [${o.shape.join(", ")}] of ${dtype} needs ${need}.`, "data");
  }
  const values = typedArrayOf(dtype, bytesOf(data)) as Float32Array | Float64Array;
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i]!)) throw new ValidationError("data contains NaN or infinite values; floating data must be finite.", "data");
  }
  options.onProgress?.({ phase: "compress", done: 0, total: data.byteLength });
  const choice: LocalChoice = await chooseLocally(values, o.shape, o);
  if (choice === null) return null;
  const common = defined({ shape: o.shape, metadata: o.metadata, if_version: o.if_version });
  if (choice.kind === "pred") {
    const p = choice.pred;
    try {
      return await client.putPred(n, k, p.stream, { ...common, dtype, relative_error: p.relative_error, max_abs_error: p.max_abs_error });
    } catch (e) {
      if (!(e instanceof SvcError) || e.code !== "payload_too_large") throw e;
      throw stillTooLarge(e, "pred stream", p.stream.byteLength, data.byteLength, "allow a larger tolerance or max_abs_error");
    }
  }
  const tt = choice.tt;
  const cores = tt.cores.map((c, i): CoreInput => ({ shape: [tt.ranks[i]!, tt.modes[i]!, tt.ranks[i + 1]!], data: c, dtype }));
  let r: PutResult;
  try {
    r = await client.putCores(n, k, cores, common);
  } catch (e) {
    if (!(e instanceof SvcError) || e.code !== "payload_too_large") throw e;
    const stored = tt.cores.reduce((s, c) => s + c.byteLength, 0);
    throw stillTooLarge(e, "TT cores", stored, data.byteLength, "allow a larger tolerance or a smaller max_rank");
  }
  return { ...r, verdict: tt.verdict, compressed: true, relative_error: tt.relative_error, max_abs_error: tt.max_abs_error };
}

/** Metadata as the X-SVC-Metadata header carries it (non-ASCII \u-escaped: header values are Latin-1), or undefined. */
const metadataHeader = (m: Record<string, unknown> | undefined): string | undefined =>
  m === undefined ? undefined : JSON.stringify(m).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

type Methods<K extends keyof SvcClient> = Pick<SvcClient, K>;

/**
 * POST /v1/put of `body` with `fields`: the octet-stream form (fields in the query, metadata in
 * X-SVC-Metadata), or the JSON form (data_b64) when the metadata is too large for a header.
 */
function sendPut(
  t: Transport,
  fields: Record<string, unknown>,
  shape: number[] | undefined,
  metadata: Record<string, unknown> | undefined,
  body: Buffer,
): Promise<PutResult> {
  // header values must be Latin-1: everything else is escaped, so that any metadata travels
  const meta = metadataHeader(metadata);
  if (meta !== undefined && meta.length > METADATA_HEADER_MAX) {
    // servers cap request headers (Node: 16 KiB in all), metadata may reach 64 KiB: use the JSON form
    return t.json<PutResult>({
      method: "POST",
      path: "/v1/put",
      write: true,
      json: defined({ ...fields, shape, metadata, data_b64: body.toString("base64") }),
    });
  }
  return t.json<PutResult>({
    method: "POST",
    path: "/v1/put",
    raw: body,
    headers: meta === undefined ? {} : { "x-svc-metadata": meta },
    write: true,
    query: { ...fields, shape: shape?.join(",") },
  });
}

/** put, putCores, putCoresBatch and delete: writes, each sent with one Idempotency-Key for all its attempts. */
function writeMethods(t: Transport, options: ClientOptions, self: () => SvcClient): Methods<"put" | "putPred" | "putCores" | "putCoresBatch" | "delete"> {
  return {
    async put(n, k, data, opts = {}) {
      // the data as they are now: the caller may change its buffer while the put runs
      if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) data = copyPutData(data);
      await ns(n);
      await key(k);
      if (!(data instanceof ArrayBuffer) && !ArrayBuffer.isView(data)) {
        throw new ValidationError("data must be a typed array, a Buffer or an ArrayBuffer.", "data");
      }
      const o = await opt("put", opts);
      const natural = (await validate()).naturalDtype(data);
      const dtype: Dtype = o.dtype ?? (natural === "raw" ? "bytes" : natural);
      if (!compatible(natural, dtype)) throw new ValidationError(`dtype ${dtype} does not match the data's element type ${natural}.`, "dtype");
      const localFrom = options.localCompressBytes ?? DEFAULT_LOCAL_COMPRESS_BYTES;
      if (localFrom !== false && data.byteLength >= Math.max(localFrom, LOCAL_MIN_COMPRESS_BYTES) && locallyCompressible(dtype, o as Record<string, unknown>)) {
        const local = await putLocallyCompressed(self(), options, n, k, data, dtype as "float32" | "float64", o);
        if (local) return local;
      }
      const fields = {
        namespace: n,
        key: k,
        dtype,
        shape: o.shape,
        tolerance: o.tolerance,
        max_abs_error: o.max_abs_error,
        codec: o.codec,
        max_rank: o.max_rank,
        if_version: o.if_version,
      };
      return sendPut(t, fields, o.shape, o.metadata, bytesOf(data));
    },

    async putPred(n, k, stream, opts) {
      await ns(n);
      await key(k);
      if (!(stream instanceof Uint8Array)) throw new ValidationError("stream must be a Uint8Array.", "stream");
      const v = await validate();
      const o = v.parseOrThrow(v.putPredOptionsSchema, opts, "options");
      const h = predHeader(stream);
      const dtype = o.dtype ?? h?.dtype;
      const shape = o.shape ?? h?.shape;
      // the engine checks the stream whole; a header unreadable here is refused without a request
      if (!dtype || !shape) throw new ValidationError("stream is not a valid pred stream (bad header).", "stream");
      const fields = {
        namespace: n,
        key: k,
        dtype,
        encoding: "pred",
        declared_relative_error: o.relative_error,
        declared_max_abs_error: o.max_abs_error,
        if_version: o.if_version,
      };
      return sendPut(t, fields, shape, o.metadata, Buffer.from(stream.buffer, stream.byteOffset, stream.byteLength));
    },

    async putCores(n, k, cores, opts = {}) {
      await ns(n);
      await key(k);
      const o = await opt("putCores", opts);
      return t.json<PutResult>({
        method: "POST",
        path: "/v1/put_cores",
        write: true,
        json: defined({ namespace: n, key: k, cores: await coresWire(cores), ...o }),
      });
    },

    async putCoresBatch(n, items) {
      await ns(n);
      const v = await validate();
      if (!Array.isArray(items) || items.length < 1 || items.length > 1000) {
        throw new ValidationError("items must be a list of 1 to 1000 put_cores requests.", "items");
      }
      // as the store: every item's key and options first, then every item's cores
      const checked = items.map((it, i) => {
        try {
          if (it === null || typeof it !== "object") throw new ValidationError("must be an object.");
          const { key: k, cores, ...rest } = it;
          v.checkKey(k);
          return { key: k, cores, o: v.options("putCores", rest, undefined) };
        } catch (e) {
          throw itemError(e, i);
        }
      });
      const wire = checked.map(({ key: k, cores, o }, i) => {
        try {
          return defined({ key: k, cores: coresWireWith(v.checkCores, cores), ...o });
        } catch (e) {
          throw itemError(e, i);
        }
      });
      return t.json<{ results: PutResult[] }>({ method: "POST", path: "/v1/put_cores_batch", write: true, json: { namespace: n, items: wire } });
    },

    async delete(n, k) {
      await ns(n);
      await key(k);
      return t.json<DeleteResult>({ method: "DELETE", path: `/v1/delete/${n}/${encPath(k)}`, write: true });
    },
  };
}

/** get, list, search, serve and serveGpu. */
function readMethods(t: Transport, self: () => SvcClient): Methods<"get" | "list" | "search" | "serve" | "serveGpu"> {
  return {
    async get(n, k, opts = {}) {
      await ns(n);
      await key(k);
      const o = await opt("get", opts);
      return t.json<EntryInfo>({ method: "GET", path: `/v1/get/${n}/${encPath(k)}`, query: { version: o.version } });
    },

    async list(n, opts = {}) {
      await ns(n);
      const o = await opt("list", opts);
      return t.json<ListResult>({ method: "GET", path: `/v1/list/${n}`, query: { prefix: o.prefix || undefined, limit: o.limit, offset: o.offset } });
    },

    async search(n, filter = {}, opts = {}) {
      await ns(n);
      compileFilter(filter); // as the store: the filter first, with its messages
      const o = await opt("search", opts);
      return t.json<SearchResult>({ method: "POST", path: "/v1/search", json: defined({ namespace: n, filter, ...o, prefix: o.prefix || undefined }) });
    },

    async serve(n, k, opts = {}) {
      await ns(n);
      await key(k);
      const o = await opt("serve", opts);
      const res = await t.call({ method: "POST", path: "/v1/serve", accept: "octet", json: defined({ namespace: n, key: k, device: "cpu", ...o }) });
      const ct = res.headers["content-type"] ?? "";
      if (ct.startsWith("application/octet-stream")) {
        const dtype = res.headers["x-svc-dtype"] as Dtype;
        const shape = (res.headers["x-svc-shape"] ?? "").split(",").filter(Boolean).map(Number);
        if (!(await validate()).dtypeSchema.safeParse(dtype).success || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
          throw new SvcError("internal", "The service answered a serve without valid X-SVC-Dtype and X-SVC-Shape headers.");
        }
        return { namespace: n, key: k, version: Number(res.headers["x-svc-version"]), data: typedArrayOf(dtype, res.body), dtype, shape };
      }
      const b = JSON.parse(res.body.toString("utf8")) as { dtype: Dtype; shape: number[]; version: number; data_b64: string };
      return { namespace: n, key: k, version: b.version, data: typedArrayOf(b.dtype, Buffer.from(b.data_b64, "base64")), dtype: b.dtype, shape: b.shape };
    },

    async serveGpu(n, k, opts = {}) {
      await ns(n);
      await key(k);
      const o = await opt("get", opts);
      const info = await t.json<GpuServeInfo>({
        method: "POST",
        path: "/v1/serve",
        json: defined({ namespace: n, key: k, device: "gpu", version: o.version }),
      });
      let released = false;
      const live = () => {
        if (released) throw new ValidationError("This GPU handle was released.", "handle");
      };
      return {
        ...info,
        async reconstruct(ro = {}) {
          live();
          return self().serve(n, k, { ...ro, version: info.version });
        },
        async dot(other) {
          live();
          const r = await self().query.similarity(n, k, other.key, { version_a: info.version, version_b: other.version, metric: "dot" });
          return r.score;
        },
        async release() {
          released = true;
        },
      };
    },
  };
}

/** query.similarity, query.topk and query.vector. */
function queryMethods(t: Transport): SvcClient["query"] {
  return {
    async similarity(n, a, b, opts = {}) {
      await ns(n);
      await key(a);
      await key(b); // both named "key", as by the store
      const o = await opt("similarity", opts);
      return t.json<SimilarityResult>({ method: "POST", path: "/v1/query/similarity", json: defined({ namespace: n, a, b, ...o }) });
    },
    async topk(n, opts) {
      await ns(n);
      const o = await opt("topk", opts);
      if (o.filter) compileFilter(o.filter);
      return t.json<TopkResult>({ method: "POST", path: "/v1/query/topk", json: defined({ namespace: n, ...o }) });
    },
    async vector(n, opts) {
      await ns(n);
      const o = await opt("vector", opts);
      if (o.filter) compileFilter(o.filter);
      const { vector, ...rest } = o;
      const body: Record<string, unknown> = defined({ namespace: n, ...rest });
      if (Array.isArray(vector) && vector.length <= MAX_JSON_VECTOR) body.vector = vector;
      else {
        // a list longer than the wire's JSON list goes as the typed array the store would
        // build from it (float32 with dtype float32, float64 otherwise)
        const v = Array.isArray(vector) ? (o.dtype === "float32" ? Float32Array.from(vector) : Float64Array.from(vector)) : vector;
        // as the store: a typed array's element type is its dtype, an explicit other one is refused
        const natural = v instanceof Float32Array ? "float32" : "float64";
        if (o.dtype && o.dtype !== natural) throw new ValidationError(`dtype ${o.dtype} does not match the vector's ${natural} data.`, "dtype");
        body.vector_b64 = bytesOf(v).toString("base64");
        body.dtype = natural;
        body.shape = o.shape ?? [v.length];
      }
      return t.json<TopkResult>({ method: "POST", path: "/v1/query/vector", json: body });
    },
  };
}

/**
 * The client of `options`, which the caller has checked (createClient checks them with its
 * schema; the CLI builds them from checked values).
 */
export function clientCore(options: ClientOptions): SvcClient {
  const t = createTransport(options);
  const self = () => client;
  const client: SvcClient = {
    get lastResponse() {
      return t.last();
    },
    ...writeMethods(t, options, self),
    ...readMethods(t, self),
    query: queryMethods(t),
    async close() {
      t.close();
    },
  };
  return client;
}

// The store's checks of a list of cores (lib/store/cores.ts), made before sending: the
// engine's wire schema would otherwise answer some of them first in its own words.
async function coresWire(cores: CoreInput[]): Promise<WireCore[]> {
  return coresWireWith((await validate()).checkCores, cores);
}

type WireCore = { shape: number[]; dtype: "float32" | "float64"; data_b64: string };
function coresWireWith(checkCores: typeof import("./store/cores.js").checkCores, cores: CoreInput[], where = "cores"): WireCore[] {
  return checkCores(cores, where).map((c) => ({
    shape: c.shape,
    dtype: c.dtype,
    data_b64: Buffer.from(c.values.buffer, c.values.byteOffset, c.values.byteLength).toString("base64"),
  }));
}

/** A batch item's ValidationError, prefixed with its index as the store does. */
function itemError(e: unknown, i: number): unknown {
  if (!(e instanceof ValidationError)) return e;
  return new ValidationError(`items.${i}: ${e.message}`, e.field ? `items.${i}.${e.field}` : `items.${i}`);
}

function codeOfStatus(status: number): string {
  switch (status) {
    case 400:
      return "bad_request";
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 409:
      return "version_conflict";
    case 413:
      return "payload_too_large";
    case 415:
      return "unsupported_media_type";
    case 429:
      return "rate_limited";
    case 501:
      return "gpu_unavailable";
    case 502:
      return "engine_unreachable";
    case 503:
      return "quota_exhausted";
    default:
      return "internal";
  }
}
