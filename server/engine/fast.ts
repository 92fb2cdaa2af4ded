// The engine's hottest requests, GET /v1/get/{ns}/{key}, POST /v1/serve and the octet-stream
// POST /v1/put, answered without Express: the same steps as the middleware chain of app.ts
// (request id, metrics, access log, service key, tenant, query string, body limits and memory
// budget, strict JSON, the route) done in one function over node:http. Only a request whose
// headers pass every check is taken here; anything else (a bad key, tenant, query or
// X-SVC-Metadata, a body on GET, HEAD, an unusual path, content type or Accept, an
// Idempotency-Key, a pred stream) goes to the Express app, which answers it as before, so those
// refusals keep one implementation. Nothing is read, written or kept before a request is taken.
// The serve route's answer (answerServe) is shared with the Express route.
import { createHash, timingSafeEqual } from "node:crypto";
import { noteRequestId, requestIdFrom } from "../http/request-id.js";
import type { IncomingMessage, ServerResponse } from "node:http";
import { ValidationError } from "../../lib/errors.js";
import { isFloatDtype, isTenantId, itemsize, metadataSchema, parseOrThrow, type Dtype } from "../../lib/fields.js";
import { getQuerySchema, plainServeBody, putQuerySchema, serveBodySchema } from "../../lib/schemas.js";
import { handOver, type Store } from "../../lib/store/index.js";
import { readBody } from "../http/body.js";
import type { BodyRate } from "../http/body-guard.js";
import { statusOf, toSvcError, writeErrorBody } from "../http/errors.js";
import { parseStrictJson } from "../http/json.js";
import { checkJsonCharset } from "../http/json-body.js";
import { bodyLimit } from "../http/limits.js";
import { reservationOf, type MemoryBudget } from "../http/memory-budget.js";
import { answerLater, gone } from "../http/answer-later.js";
import { base64Bytes, prepareEngineBody } from "../http/offload.js";
import { parseQueryString } from "../http/query.js";
import type { EngineConfig } from "./config.js";
import type { EngineMetrics } from "./metrics.js";
import type { Logger } from "./app.js";

const BEARER = /^Bearer\s+(\S+)\s*$/i;
const GET_PREFIX = "/v1/get/";
const JSON_TYPE = "application/json; charset=utf-8";
const JSON_CONTENT = /^application\/json\s*(;|$)/i;
// Bytes of memory a request holds per body byte while it is handled, estimates of the peak for
// the memory budget: a JSON body is held as bytes, as text and parsed (its base64 string), then
// decoded, and compression works on a copy; a raw body is held and worked on.
export const JSON_BODY_FACTOR = 4;
export const OCTET_BODY_FACTOR = 3;
const PUT_PREFIX = "/v1/put?";
// tenant views of the store, one per tenant seen, so that a request does not build one; bounded
const MAX_VIEWS = 10_000;

type PutQuery = ReturnType<typeof putQuerySchema.parse>;

/** A request taken: a GET of an entry, or a serve or octet-stream put whose body is yet to be read. */
type Taken =
  | { route: "get"; tenant: string; ns: string; key: string; version: number | undefined }
  | { route: "serve"; tenant: string; octet: boolean }
  | { route: "put"; tenant: string; query: PutQuery; metadata: Record<string, unknown> };

/**
 * The dense answer of a serve and estimates of the memory it holds at its peak: the answer, a
 * working copy (in float64 for floating data: reconstruction, dtype conversion), and for JSON
 * the base64 text, the JSON text and the response bytes.
 */
function serveSize(shape: number[], dtype: Dtype, opts: { slice?: [number, number][]; dtype?: Dtype }): { bytes: number; octetPeak: number; jsonPeak: number } {
  const slice = opts.slice && opts.slice.length === shape.length ? opts.slice : undefined;
  const elems = (slice ? slice.map(([a, b]) => Math.max(0, b - a)) : shape).reduce((a, b) => a * b, 1);
  const bytes = elems * itemsize(opts.dtype ?? dtype);
  // floating data may pass through float64 (reconstruction, conversion); other data through one decoded copy
  const octetPeak = bytes + (isFloatDtype(dtype) ? elems * 8 : elems * itemsize(dtype));
  return { bytes, octetPeak, jsonPeak: octetPeak + 3 * 4 * Math.ceil(bytes / 3) };
}

export interface ServeDeps {
  config: EngineConfig;
  budget: MemoryBudget;
}

/**
 * POST /v1/serve's answer for a body checked and parsed (step 7), on the tenant's store view:
 * a GPU residency answer, or the dense data as octet-stream (X-SVC-Dtype, X-SVC-Shape,
 * X-SVC-Version) or JSON with data_b64. The answer's size is known from the entry before
 * anything is decoded: a JSON answer past its limit is refused, and the memory the answer will
 * hold is reserved first. Its headers, X-Request-Id first, go to one writeHead.
 */
export async function answerServe(
  deps: ServeDeps,
  st: Store,
  tenant: string,
  body: unknown,
  octet: boolean,
  res: ServerResponse,
  requestId: string,
): Promise<void> {
  const { namespace, key, device, ...opts } = plainServeBody(body) ?? parseOrThrow(serveBodySchema, body, "body");
  if (device === "gpu") {
    if (opts.slice || opts.dtype) throw new ValidationError("slice and dtype apply to device cpu only.", opts.slice ? "slice" : "dtype");
    const h = await st.serveGpu(namespace, key, { version: opts.version });
    // the entry stays resident in the LRU cache; this request's pin ends with the answer
    h.release();
    const text = JSON.stringify({
      namespace: h.namespace,
      key: h.key,
      version: h.version,
      device: h.device,
      resident: h.resident,
      bytes_on_device: h.bytes_on_device,
      tt: h.tt,
    });
    res.writeHead(200, { "X-Request-Id": requestId, "Content-Type": JSON_TYPE, "Content-Length": Buffer.byteLength(text) }).end(text);
    return;
  }
  // one read of the entry: its size is checked and its memory reserved before it is decoded; the
  // answer is only written to the socket, so it may be the payload cache's own bytes
  const r = await st.serveReadOnly(namespace, key, opts, (entry) => {
    const size = serveSize(entry.shape, entry.dtype, opts);
    if (!octet && size.bytes > deps.config.max_json_serve_bytes)
      throw new ValidationError(
        `The answer of ${size.bytes} bytes is larger than the ${deps.config.max_json_serve_bytes}-byte limit of JSON serves; ask for it with Accept: application/octet-stream, or serve a slice.`,
        "Accept",
      );
    reservationOf(res, deps.budget, tenant).grow(octet ? size.octetPeak : size.jsonPeak, "The answer");
  });
  const bytes = Buffer.from(r.data.buffer, r.data.byteOffset, r.data.byteLength);
  if (octet) {
    answerLater(res, () => {
      res.writeHead(200, {
        "X-Request-Id": requestId,
        "X-SVC-Dtype": r.dtype,
        "X-SVC-Shape": r.shape.join(","),
        "X-SVC-Version": String(r.version),
        "Content-Type": "application/octet-stream",
        "Content-Length": bytes.byteLength,
      });
      res.end(bytes);
    });
    return;
  }
  // the base64 text is made off the event loop when large and written as it is (it needs no
  // JSON escaping) between the other members, the same text JSON.stringify would give
  const head = JSON.stringify({ namespace: r.namespace, key: r.key, version: r.version, dtype: r.dtype, shape: r.shape, data_b64: "" }).slice(0, -2);
  const text = await base64Bytes(bytes);
  answerLater(res, () => {
    res.writeHead(200, { "X-Request-Id": requestId, "Content-Type": JSON_TYPE, "Content-Length": Buffer.byteLength(head) + text.byteLength + 2 });
    res.write(head);
    res.write(text);
    res.end('"}');
  });
}

/** The namespace, key and version of a GET /v1/get/{namespace}/{key}[?version=N] the fast path takes, else null. */
function parseGet(url: string): { ns: string; key: string; version: number | undefined } | null {
  const q = url.indexOf("?");
  const path = q < 0 ? url : url.slice(0, q);
  const slash = path.indexOf("/", GET_PREFIX.length);
  // the route's pattern: a non-empty namespace segment, then a non-empty rest
  if (slash <= GET_PREFIX.length || slash === path.length - 1) return null;
  let ns: string, key: string;
  try {
    ns = decodeURIComponent(path.slice(GET_PREFIX.length, slash));
    key = decodeURIComponent(path.slice(slash + 1));
  } catch {
    return null;
  }
  let version: number | undefined;
  if (q >= 0) {
    let parsed: unknown;
    try {
      parsed = parseQueryString(url.slice(q + 1));
    } catch {
      return null;
    }
    const r = getQuerySchema.safeParse(parsed);
    if (!r.success) return null;
    version = r.data.version;
  }
  return { ns, key, version };
}

/** An octet-stream put's metadata from its X-SVC-Metadata header ({} without one); a ValidationError naming the header when it is not valid. */
export function headerMetadata(header: string | undefined): Record<string, unknown> {
  if (header === undefined) return {};
  // Node reads a header's bytes as latin1: bytes past ASCII (a client that sent UTF-8 unescaped)
  // are taken as the UTF-8 they are, not stored as one character per byte
  const text = NON_ASCII.test(header) ? Buffer.from(header, "latin1") : header;
  return parseOrThrow(metadataSchema, parseStrictJson(text, { what: "X-SVC-Metadata", field: "X-SVC-Metadata" }), "X-SVC-Metadata");
}

const NON_ASCII = /[^\x00-\x7f]/;

/** The options and metadata of an octet-stream put the fast path takes (plain bytes, no pred stream), else null. */
function parsePut(url: string, metadataHeader: string | undefined): { query: PutQuery; metadata: Record<string, unknown> } | null {
  try {
    const q = putQuerySchema.safeParse(parseQueryString(url.slice(PUT_PREFIX.length)));
    if (!q.success || q.data.encoding !== undefined) return null;
    return { query: q.data, metadata: headerMetadata(metadataHeader) };
  } catch {
    return null;
  }
}

/**
 * The fast path's tenant of a request: its key (Authorization: Bearer) and X-SVC-Tenant pass,
 * else null. Authorization headers that passed are compared in constant time instead of hashed
 * again (the gateway sends the same header on every request); as many as the engine has keys.
 */
function tenantCheck(config: EngineConfig): (req: IncomingMessage) => string | null {
  const digests = config.api_key_digests;
  const passed: Buffer[] = [];
  const authorised = (h: string | undefined): boolean => {
    if (!config.require_auth) return true;
    if (h === undefined) return false;
    const header = Buffer.from(h, "latin1");
    for (const p of passed) if (p.byteLength === header.byteLength && timingSafeEqual(p, header)) return true;
    const m = BEARER.exec(h);
    if (!m) return false;
    const given = createHash("sha256").update(m[1]!, "utf8").digest();
    let ok = false;
    for (const d of digests) ok = timingSafeEqual(given, d) || ok;
    if (ok && passed.length < digests.length) passed.push(header);
    return ok;
  };
  return (req) => {
    const h = req.headers;
    if (!authorised(h.authorization)) return null;
    const t = h["x-svc-tenant"];
    return isTenantId(t) ? t : null;
  };
}

/** The fast path's route of a request it takes (with what it needs of the request), or null. */
function takeRequest(req: IncomingMessage, tenantOf: (req: IncomingMessage) => string | null): Taken | null {
  const url = req.url!;
  const h = req.headers;
  if (req.method === "POST" && url === "/v1/serve") {
    // a JSON body of a stated length, no Idempotency-Key (its hash would be taken), and an
    // Accept header read the same by Express's negotiation without q-values
    const len = h["content-length"];
    if (len === undefined || len === "0" || h["transfer-encoding"] !== undefined || h["idempotency-key"] !== undefined) return null;
    if (!JSON_CONTENT.test(h["content-type"] ?? "")) return null;
    try {
      checkJsonCharset(req);
    } catch {
      return null;
    }
    const accept = h.accept;
    const octet = accept === "application/octet-stream";
    if (!octet && accept !== undefined && accept !== "application/json" && accept !== "*/*") return null;
    const tenant = tenantOf(req);
    return tenant === null ? null : { route: "serve", tenant, octet };
  }
  if (req.method === "POST" && url.startsWith(PUT_PREFIX)) {
    // raw bytes of a stated length, sent as they are, without an Idempotency-Key
    const len = h["content-length"];
    if (len === undefined || len === "0" || h["transfer-encoding"] !== undefined || h["content-encoding"] !== undefined) return null;
    if (h["content-type"] !== "application/octet-stream" || h["idempotency-key"] !== undefined || url.includes("#")) return null;
    const tenant = tenantOf(req);
    if (tenant === null) return null;
    const mh = h["x-svc-metadata"];
    if (Array.isArray(mh)) return null;
    const p = parsePut(url, mh);
    return p === null ? null : { route: "put", tenant, ...p };
  }
  if (req.method !== "GET") return null;
  if (!url.startsWith(GET_PREFIX) || url.includes("#")) return null;
  if (h["content-length"] !== undefined || h["transfer-encoding"] !== undefined) return null;
  const t = tenantOf(req);
  if (t === null) return null;
  const g = parseGet(url);
  return g === null ? null : { route: "get", tenant: t, ...g };
}

/**
 * The fast path of the engine: returns a handler that answers a request it takes and returns
 * true, or returns false having done nothing.
 */
export function engineFastPath(deps: {
  store: Store;
  config: EngineConfig;
  logger: Logger;
  metrics: EngineMetrics;
  budget: MemoryBudget;
}): (req: IncomingMessage, res: ServerResponse) => boolean {
  const { store, config, logger, metrics, budget } = deps;
  const bodyRate: BodyRate = { minBytesPerS: config.body_min_bytes_per_s, graceMs: config.body_grace_s * 1000 };
  const views = new Map<string, Store>();
  const viewOf = (tenant: string): Store => {
    let v = views.get(tenant);
    if (!v) {
      if (views.size >= MAX_VIEWS) views.clear();
      views.set(tenant, (v = store.forTenant(tenant)));
    }
    return v;
  };
  const tenantOf = tenantCheck(config);

  /** The error body of server/http/errors.ts sendError, and the log line of a 5xx. */
  const fail = (res: ServerResponse, id: string, err: unknown): void => {
    const e = toSvcError(err);
    writeErrorBody(res, e, id);
    if (statusOf(e) >= 500) {
      logger.error({ msg: "request failed", code: e.code, error: err instanceof Error ? err.message : String(err) });
      if (err instanceof Error) logger.debug({ msg: "stack", stack: err.stack });
    }
  };

  /** A request's body within `limit`, held in the tenant's share of the memory budget (`factor` bytes per byte). */
  const bodyOf = (req: IncomingMessage, res: ServerResponse, tenant: string, limit: number, factor: number, path?: string): Promise<Buffer> =>
    readBody(req, { limit, reservation: reservationOf(res, budget, tenant), factor, res, rate: bodyRate, path });

  const serve = async (req: IncomingMessage, res: ServerResponse, id: string, tenant: string, octet: boolean): Promise<void> => {
    const raw = await bodyOf(req, res, tenant, bodyLimit(config.max_upload_bytes, false, "/v1/serve"), JSON_BODY_FACTOR, "/v1/serve");
    const { value } = await prepareEngineBody("/v1/serve", raw);
    await answerServe({ config, budget }, viewOf(tenant), tenant, value, octet, res, id);
  };

  /** An octet-stream put: the body within the upload limit and the memory budget, stored, answered 201. */
  const put = async (req: IncomingMessage, res: ServerResponse, id: string, taken: Extract<Taken, { route: "put" }>): Promise<void> => {
    const body = await bodyOf(req, res, taken.tenant, bodyLimit(config.max_upload_bytes, true), OCTET_BODY_FACTOR);
    const { namespace, key, ...opts } = taken.query;
    const info = await viewOf(taken.tenant).put(namespace, key, handOver(body), { dtype: "bytes", ...opts, metadata: taken.metadata });
    const text = JSON.stringify(info);
    answerLater(res, () => {
      if (gone(req, res)) return;
      res.writeHead(201, { "X-Request-Id": id, "Content-Type": JSON_TYPE, "Content-Length": Buffer.byteLength(text) });
      res.end(text);
    });
  };

  return (req, res) => {
    const taken = takeRequest(req, tenantOf);
    if (!taken) return false;
    const t0 = performance.now();
    const id = requestIdFrom(req.headers["x-request-id"]);
    const url = req.url!;
    const q = url.indexOf("?");
    const path = q < 0 ? url : url.slice(0, q);
    const method = req.method!;
    let done = false;
    // counted once answered or abandoned; logged once answered (as the Express chain does)
    const count = (answered: boolean): void => {
      if (done) return;
      done = true;
      const ms = performance.now() - t0;
      metrics.http.observe(method, metrics.route(path), res.statusCode, ms / 1000);
      if (answered) logger.info({ msg: "request", method, path, status: res.statusCode, latency_ms: ms, request_id: id, tenant: taken.tenant });
    };
    if (taken.route !== "get") {
      res.once("finish", () => count(true));
      res.once("close", () => count(false));
      noteRequestId(res, id);
      const work = taken.route === "serve" ? serve(req, res, id, taken.tenant, taken.octet) : put(req, res, id, taken);
      work.catch((err: unknown) => fail(res, id, err));
      return true;
    }
    // a GET is answered in the check phase after its entry is read (answer-later.ts), with no
    // listeners on the response: a client gone by then is counted as abandoned and sent nothing
    viewOf(taken.tenant)
      .get(taken.ns, taken.key, taken.version === undefined ? {} : { version: taken.version })
      .then(
        (info) =>
          answerLater(res, () => {
            if (gone(req, res)) return count(false);
            const body = JSON.stringify(info);
            res.writeHead(200, { "X-Request-Id": id, "Content-Type": JSON_TYPE, "Content-Length": Buffer.byteLength(body) });
            res.end(body);
            count(true);
          }),
        (err: unknown) =>
          answerLater(res, () => {
            if (gone(req, res)) return count(false);
            fail(res, id, err);
            count(true);
          }),
      );
    return true;
  };
}
