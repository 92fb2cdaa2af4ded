// The engine's HTTP app: every data-plane verb of docs/api.md (data plane) over a Store,
// trusting only the service key and scoping each request to X-SVC-Tenant. A factory:
// tests drive it without listen. The hooks run in this order:
//   1. request id  2. access log (on finish)  3. /health (no auth)  4. service key
//   5. tenant header  6. query string, no body on GET/DELETE  7. bodies (limits, memory budget,
//   strict JSON; the bytes of a JSON body are kept for the request hash of idempotent writes)
//   8. routes (writes with an Idempotency-Key header answer a repeat from the stored response)
//   9. not found  10. errors (the one error vocabulary of server/http/errors.ts)
// GET /v1/get and POST /v1/serve run the same steps in one function without Express
// (server/engine/fast.ts) when their headers pass every check; the rest comes here.
import { createHash, timingSafeEqual } from "node:crypto";
import express, { type NextFunction, type Request, type Response } from "express";
import { NotFoundError, PayloadTooLargeError, UnauthorizedError, UnsupportedMediaTypeError, ValidationError, type SvcError } from "../../lib/errors.js";
import { parseOrThrow, tenantIdSchema } from "../../lib/fields.js";
import {
  getQuerySchema,
  idempotencyKeySchema,
  listQuerySchema,
  putQuerySchema,
  searchBodySchema,
  similarityBodySchema,
  topkBodySchema,
} from "../../lib/schemas.js";
import { handOver, type CoreInput, type Store } from "../../lib/store/index.js";
import { gpuServingFor, gpuStatus } from "../../lib/gpu.js";
import type { GpuServing } from "../../lib/store/gpu-cache.js";
import { errorMiddleware, pathInSentence, statusOf } from "../http/errors.js";
import { readBody, refuseBodyOfBodilessMethod } from "../http/body.js";
import { requestHash, type PreparedPut, type PreparedPutCores, type PreparedPutCoresBatch, type PreparedVector } from "../http/body-prepare.js";
import { checkJsonCharset } from "../http/json-body.js";
import { asBuffer, hashBody, prepareEngineBody } from "../http/offload.js";
import { stdoutLines } from "../http/log-batch.js";
import { isoTime } from "../../lib/iso-time.js";
import { answerServe, engineFastPath, headerMetadata, JSON_BODY_FACTOR, OCTET_BODY_FACTOR } from "./fast.js";
import { sendJsonList } from "../http/json-stream.js";
import { bodyLimit } from "../http/limits.js";
import { MemoryBudget, reservationOf } from "../http/memory-budget.js";
import { parseQueryString } from "../http/query.js";
import { requestId, requestIdOf } from "../http/request-id.js";
import { countRequests, metricsHandler } from "../http/metrics.js";
import type { EngineConfig, LogLevel } from "./config.js";
import { createEngineMetrics, type EngineMetrics } from "./metrics.js";

export interface Logger {
  debug(fields: Record<string, unknown>): void;
  info(fields: Record<string, unknown>): void;
  warn(fields: Record<string, unknown>): void;
  error(fields: Record<string, unknown>): void;
}

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 99 };

let isoMs = -1;
let isoText = "";
/** The time now in ISO 8601, formatted once per millisecond. */
function isoNow(): string {
  const ms = Date.now();
  if (ms !== isoMs) {
    isoMs = ms;
    isoText = isoTime(ms);
  }
  return isoText;
}

/**
 * One JSON object per line on `write` (by default stdout, the lines of one event-loop turn in
 * one write: server/http/log-batch.ts), at or above `level`.
 */
export function jsonLogger(level: LogLevel, write: (line: string) => void = stdoutLines()): Logger {
  const at = (lv: Exclude<LogLevel, "silent">) => {
    const head = `","level":"${lv}"`;
    return (fields: Record<string, unknown>) => {
      if (LEVELS[lv] < LEVELS[level]) return;
      // the caller's object as it is (no copy): its members follow ts and level
      const rest = JSON.stringify(fields);
      write(`{"ts":"${isoNow()}${head}${rest.length > 2 ? "," + rest.slice(1) : "}"}\n`);
    };
  };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

export interface EngineDeps {
  store: Store;
  config: EngineConfig;
  logger?: Logger;
  /** GPU serving; default from SVC_ENGINE_DEVICE and SVC_ENGINE_GPU_CACHE_BYTES. Installed on the store. */
  gpu?: GpuServing;
  /** Prometheus metrics; default: a registry of this app's own, without process metrics. */
  metrics?: EngineMetrics;
}

type Handler = (req: Request, res: Response) => Promise<void>;
const wrap = (h: Handler) => (req: Request, res: Response, next: NextFunction) => h(req, res).catch(next);

/**
 * What the request hash of an idempotent write covers besides the body: method, path and
 * query, content type and X-SVC-Metadata, each followed by a newline; undefined without an
 * Idempotency-Key header.
 */
function hashPrefixOf(req: Request): string | undefined {
  if (req.get("idempotency-key") === undefined) return undefined;
  return [req.method, req.originalUrl, req.get("content-type") ?? "", req.get("x-svc-metadata") ?? ""].map((p) => `${p}\n`).join("");
}

/** The (namespace, key) of a path like /v1/get/ns/a/b/c, percent-decoded. */
function nsKey(req: Request): { ns: string; key: string } {
  const p = req.params as Record<string, string>;
  try {
    return { ns: decodeURIComponent(p[0]!), key: decodeURIComponent(p[1]!) };
  } catch {
    throw new ValidationError("The path is not valid percent-encoded text.", "path");
  }
}

/** What the steps and routes share: the store, the configuration, the memory budget. */
interface EngineContext {
  store: Store;
  config: EngineConfig;
  logger: Logger;
  serving: GpuServing;
  budget: MemoryBudget;
  startedAt: number;
}

/** Step 2: one access-log line per request; never a key, a payload or a stack. */
function accessLog(logger: Logger) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const t0 = process.hrtime.bigint();
    res.on("finish", () => {
      logger.info({
        msg: "request",
        method: req.method,
        path: req.path,
        status: res.statusCode,
        latency_ms: Number(process.hrtime.bigint() - t0) / 1e6,
        request_id: requestIdOf(res),
        tenant: (res.locals.tenant as string | undefined) ?? null,
      });
    });
    next();
  };
}

/**
 * Step 3: GET /health without authentication. available: serving works (a device and
 * SVC_ENGINE_DEVICE allow it); device: the CUDA device found, also when serving is disabled;
 * cache_bytes: bytes resident on the device; store_connected: one round trip to PostgreSQL within
 * a second (LMDB, memory: local, true); the gateway takes an engine whose store is down out of rotation.
 */
function health({ store, serving, startedAt }: EngineContext): Handler {
  return async (_req, res) => {
    const available = !("unavailable" in serving);
    const store_connected = await Promise.race([store.connected(), new Promise<boolean>((r) => setTimeout(r, 1000, false).unref())]);
    res.json({
      status: "ok",
      uptime_s: Math.floor((Date.now() - startedAt) / 1000),
      gpu: { available, device: gpuStatus().device, cache_bytes: available ? serving.cache.stats().bytes_on_device : 0 },
      storage: store.storage,
      store_connected,
    });
  };
}

/** Step 4: the service key, by constant-time comparison of SHA-256 digests against every configured key. */
function serviceKey(config: EngineConfig) {
  return (req: Request, _res: Response, next: NextFunction): void => {
    if (!config.require_auth) return next();
    const h = req.get("authorization");
    const m = h ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
    if (!m) return next(new UnauthorizedError("Missing service key."));
    const given = createHash("sha256").update(m[1]!, "utf8").digest();
    let ok = false;
    for (const d of config.api_key_digests) ok = timingSafeEqual(given, d) || ok;
    next(ok ? undefined : new UnauthorizedError("Invalid service key."));
  };
}

/** Step 5: the tenant, injected by the gateway; every entry is scoped by it. */
function tenantScope(store: Store) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const t = req.get("x-svc-tenant");
    if (t === undefined) return next(new ValidationError("The X-SVC-Tenant header is required.", "X-SVC-Tenant"));
    try {
      res.locals.tenant = parseOrThrow(tenantIdSchema, t, "X-SVC-Tenant");
      res.locals.store = store.forTenant(t);
      next();
    } catch (e) {
      next(e);
    }
  };
}

/**
 * Step 6: the query string, read as the gateway reads it (server/http/query.ts); a body sent
 * with a GET or DELETE is refused as the gateway refuses it (server/http/body.ts).
 */
function queryAndBodiless(req: Request, res: Response, next: NextFunction): void {
  try {
    void req.query;
  } catch (e) {
    return next(e);
  }
  refuseBodyOfBodilessMethod(req, res).then(() => next(), next);
}

/**
 * Step 7: bodies: JSON everywhere, raw bytes for the octet-stream put; the limit is checked from
 * Content-Length before reading and again while reading, and the body is held within the memory
 * budget (503 with Retry-After past it). A JSON body is parsed and checked, and its payloads
 * decoded (server/http/body-prepare.ts); with an Idempotency-Key the request hash is taken from
 * the body's bytes. Large bodies are worked on in a worker thread (server/http/offload.ts).
 */
function readBodies({ config, budget }: EngineContext) {
  const rate = { minBytesPerS: config.body_min_bytes_per_s, graceMs: config.body_grace_s * 1000 };
  return (req: Request, res: Response, next: NextFunction): void => {
    if (req.method !== "POST") return next();
    const octet = req.path === "/v1/put" && typeof req.is("application/octet-stream") === "string";
    if (!octet && !req.is("application/json")) return next(); // the route answers 415
    const opts = {
      limit: bodyLimit(config.max_upload_bytes, octet, req.path),
      reservation: reservationOf(res, budget, (res.locals.tenant as string | undefined) ?? null),
      factor: octet ? OCTET_BODY_FACTOR : JSON_BODY_FACTOR,
      res,
      rate,
      path: octet ? undefined : req.path,
    };
    const read = async (): Promise<unknown> => {
      const prefix = hashPrefixOf(req);
      if (octet) {
        const raw = await readBody(req, opts);
        if (prefix === undefined) return raw;
        const { hash, bytes } = await hashBody(prefix, raw);
        res.locals.requestHash = hash;
        return bytes;
      }
      checkJsonCharset(req);
      const { value, hash } = await prepareEngineBody(req.path, await readBody(req, opts), prefix);
      res.locals.requestHash = hash;
      return value;
    };
    read().then((body) => {
      req.body = body;
      next();
    }, next);
  };
}

const st = (res: Response): Store => res.locals.store as Store;

/**
 * The store for a write: with an Idempotency-Key header, a view that stores the answer under
 * that key with the request's hash (method, path and query, content type, X-SVC-Metadata and
 * body bytes) and answers a repeat of the same request from it.
 */
function writer(req: Request, res: Response): Store {
  const key = req.get("idempotency-key");
  if (key === undefined) return st(res);
  parseOrThrow(idempotencyKeySchema, key, "Idempotency-Key");
  // a request with a body was hashed as it was read (step 7); a DELETE has only the prefix
  const hash = (res.locals.requestHash as string | undefined) ?? requestHash(hashPrefixOf(req)!, undefined);
  return st(res).idempotent(key, hash);
}

/** Sends a write's answer; a replayed one says so (Idempotent-Replayed: true). */
function answer(res: Response, store: Store, status: number, body: unknown): void {
  if (store.replayed) res.setHeader("Idempotent-Replayed", "true");
  res.status(status).json(body);
}

function jsonBody(req: Request): unknown {
  if (!req.is("application/json")) throw new UnsupportedMediaTypeError("The request body must be application/json.");
  return req.body;
}

const coresOf = (list: PreparedPutCores["cores"]): CoreInput[] => list.map((c) => ({ shape: c.shape, data: asBuffer(c.data), dtype: c.dtype }));

/** The fields of a put with encoding pred (lib/schemas.ts checked that they belong together). */
interface PredFields {
  namespace: string;
  key: string;
  dtype?: string;
  shape?: number[];
  declared_relative_error?: number;
  declared_max_abs_error?: number;
  if_version?: number;
  metadata?: Record<string, unknown>;
}

/**
 * A put whose payload is a pred stream (encoding pred): the header is read first (lengths checked
 * against the stream), its dtype and shape must be the request's, and the values it decodes to are
 * reserved in the memory budget before the full decode (in the store, off the event loop); the
 * stream is stored as it is, with the writer's declared errors.
 */
async function putPredStream({ budget }: EngineContext, req: Request, res: Response, f: PredFields, stream: Buffer): Promise<void> {
  const pred = await import("../../lib/pred.js");
  const h = pred.info(stream);
  if (f.dtype !== h.dtype) throw new ValidationError(`dtype ${f.dtype} does not match the stream's ${h.dtype}.`, "dtype");
  const shape = f.shape ?? [];
  if (shape.length !== h.shape.length || shape.some((n, i) => n !== h.shape[i]))
    throw new ValidationError(`shape [${shape.join(", ")}] does not match the stream's [${h.shape.join(", ")}].`, "shape");
  const decoded = h.shape.reduce((a, b) => a * b, 1) * (h.dtype === "float64" ? 8 : 4);
  if (decoded > budget.limitBytes)
    throw new ValidationError(
      `The stream decodes to ${decoded} bytes, more than the engine's memory budget of ${budget.limitBytes} bytes for requests in flight (SVC_ENGINE_MEMORY_BUDGET_BYTES), which its check needs; raise it, or store the tensor as several entries.`,
      "shape",
    );
  reservationOf(res, budget, (res.locals.tenant as string | undefined) ?? null).grow(decoded, "The decoded stream");
  const w = writer(req, res);
  const opts = {
    dtype: h.dtype,
    shape,
    relative_error: f.declared_relative_error!,
    max_abs_error: f.declared_max_abs_error!,
    ...(f.metadata !== undefined ? { metadata: f.metadata } : {}),
    ...(f.if_version !== undefined ? { if_version: f.if_version } : {}),
  };
  answer(res, w, 201, await w.putPred(f.namespace, f.key, handOver(stream), opts));
}

/** POST /v1/put: raw bytes (octet-stream, options in the query, metadata in X-SVC-Metadata) or JSON; either may carry a pred stream (encoding pred). */
function putRoute(ctx: EngineContext): Handler {
  const { config } = ctx;
  const checkSize = (n: number) => {
    if (n > config.max_upload_bytes)
      throw new PayloadTooLargeError(
        `The payload of ${n} bytes is larger than the upload limit of ${config.max_upload_bytes} bytes (SVC_ENGINE_MAX_UPLOAD_BYTES).`,
      );
  };
  return async (req, res) => {
    if (req.is("application/octet-stream")) {
      const q = parseOrThrow(putQuerySchema, req.query, "query");
      const metadata = headerMetadata(req.get("x-svc-metadata"));
      const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      checkSize(body.byteLength);
      if (q.encoding === "pred") return putPredStream(ctx, req, res, { ...q, metadata }, body);
      // without encoding pred the declared errors are absent (lib/schemas.ts refuses them)
      const { namespace, key, encoding: _encoding, declared_relative_error: _rel, declared_max_abs_error: _abs, ...opts } = q;
      const w = writer(req, res);
      answer(res, w, 201, await w.put(namespace, key, handOver(body), { dtype: "bytes", ...opts, metadata }));
      return;
    }
    if (!req.is("application/json")) throw new UnsupportedMediaTypeError("put takes application/json or application/octet-stream.");
    // checked against the schema and decoded as it was read (step 7)
    const { namespace, key, data: decoded, encoding, declared_relative_error, declared_max_abs_error, ...opts } = req.body as PreparedPut;
    const data = asBuffer(decoded);
    checkSize(data.byteLength);
    if (encoding === "pred") return putPredStream(ctx, req, res, { namespace, key, ...opts, declared_relative_error, declared_max_abs_error }, data);
    const w = writer(req, res);
    answer(res, w, 201, await w.put(namespace, key, handOver(data), { dtype: "bytes", ...opts }));
  };
}

/** Step 8: the data-plane routes of docs/api.md. */
function mountRoutes(app: express.Express, ctx: EngineContext): void {
  app.post("/v1/put", wrap(putRoute(ctx)));

  app.post(
    "/v1/put_cores",
    wrap(async (req, res) => {
      const { namespace, key, cores: list, ...opts } = jsonBody(req) as PreparedPutCores;
      const w = writer(req, res);
      answer(res, w, 201, await w.putCores(namespace, key, coresOf(list), opts));
    }),
  );

  app.post(
    "/v1/put_cores_batch",
    wrap(async (req, res) => {
      // every item was validated before anything is stored (step 7); the store commits them in one transaction
      const b = jsonBody(req) as PreparedPutCoresBatch;
      const items = b.items.map(({ key, cores: list, ...opts }) => ({ key, cores: coresOf(list), ...opts }));
      const w = writer(req, res);
      answer(res, w, 201, await w.putCoresBatch(b.namespace, items));
    }),
  );

  app.get(
    /^\/v1\/get\/([^/]+)\/(.+)$/,
    wrap(async (req, res) => {
      const { ns, key } = nsKey(req);
      const q = parseOrThrow(getQuerySchema, req.query, "query");
      res.json(await st(res).get(ns, key, q));
    }),
  );

  app.delete(
    /^\/v1\/delete\/([^/]+)\/(.+)$/,
    wrap(async (req, res) => {
      const { ns, key } = nsKey(req);
      const w = writer(req, res);
      answer(res, w, 200, await w.delete(ns, key));
    }),
  );

  app.get(
    /^\/v1\/list\/([^/]+)\/?$/,
    wrap(async (req, res) => {
      let ns: string;
      try {
        ns = decodeURIComponent((req.params as Record<string, string>)[0]!);
      } catch {
        throw new ValidationError("The path is not valid percent-encoded text.", "path");
      }
      const q = parseOrThrow(listQuerySchema, req.query, "query");
      res.json(await st(res).list(ns, q));
    }),
  );

  app.post(
    "/v1/search",
    wrap(async (req, res) => {
      const { namespace, filter, ...opts } = parseOrThrow(searchBodySchema, jsonBody(req), "body");
      // up to 1,000 results of up to 64 KiB of metadata: written in pieces
      await sendJsonList(res, await st(res).search(namespace, filter, opts), "results");
    }),
  );

  app.post(
    "/v1/serve",
    wrap(async (req, res) => {
      const octet = req.accepts(["application/json", "application/octet-stream"]) === "application/octet-stream";
      await answerServe({ config: ctx.config, budget: ctx.budget }, st(res), res.locals.tenant as string, jsonBody(req), octet, res, requestIdOf(res));
    }),
  );

  app.post(
    "/v1/query/similarity",
    wrap(async (req, res) => {
      const { namespace, a, b, ...opts } = parseOrThrow(similarityBodySchema, jsonBody(req), "body");
      res.json(await st(res).query.similarity(namespace, a, b, opts));
    }),
  );

  app.post(
    "/v1/query/topk",
    wrap(async (req, res) => {
      const { namespace, ...opts } = parseOrThrow(topkBodySchema, jsonBody(req), "body");
      res.json(await st(res).query.topk(namespace, opts));
    }),
  );

  app.post(
    "/v1/query/vector",
    wrap(async (req, res) => {
      // checked and made a typed array as it was read (step 7)
      const { namespace, ...opts } = jsonBody(req) as PreparedVector;
      res.json(await st(res).query.vector(namespace, opts));
    }),
  );
}

/** Step 10: errors, the body of docs/api.md (errors); unexpected errors are logged without stack (stack at debug). */
function errors(logger: Logger) {
  return errorMiddleware(requestIdOf, (e: SvcError, raw: unknown) => {
    if (statusOf(e) >= 500) {
      logger.error({ msg: "request failed", code: e.code, error: raw instanceof Error ? raw.message : String(raw) });
      if (raw instanceof Error) logger.debug({ msg: "stack", stack: raw.stack });
    }
  });
}

/**
 * Builds the engine's express app (no listen). A put's default tolerance and max_rank are the
 * store's (startEngine opens it with SVC_ENGINE_COMPRESSION_TOL and SVC_ENGINE_MAX_RANK), so
 * that a max_rank the caller did not send is not taken for a cap the caller chose.
 * @example const app = createApp({ store: await createStore({ path: ":memory:" }), config: loadEngineConfig(env) });
 */
export function createApp({ store, config, logger = jsonLogger(config.log_level), gpu, metrics = createEngineMetrics(store) }: EngineDeps): express.Express {
  // GPU serving decided once: a residency cache on the CUDA device, or the reason there is none
  const serving = gpu ?? gpuServingFor(config.device, config.gpu_cache_bytes);
  store.useGpu(serving);
  if ("unavailable" in serving && config.device.startsWith("cuda")) logger.warn({ msg: "gpu unavailable", reason: serving.unavailable });
  // memory held by requests in flight: bodies being read and dense serves being answered
  const budget = new MemoryBudget(config.memory_budget_bytes, config.memory_tenant_share_pct);
  const ctx: EngineContext = { store, config, logger, serving, budget, startedAt: Date.now() };
  const app = express();
  app.disable("x-powered-by");
  // no ETag: it would hash every answer (a dense serve of 100 MiB) on the event loop, and the gateway sends none
  app.set("etag", false);
  app.set("query parser", parseQueryString);

  app.use(requestId, countRequests(metrics.http, metrics.route)); // 1. request id, counted once answered
  app.use(accessLog(logger)); // 2.
  app.get("/health", wrap(health(ctx))); // 3.
  // GET /metrics (docs/operations.md): a service key or SVC_ENGINE_METRICS_TOKEN; open when auth is off
  const metricsReaders = config.require_auth ? [...config.api_key_digests, ...(config.metrics_token_digest ? [config.metrics_token_digest] : [])] : null;
  app.get("/metrics", metricsHandler(metrics.registry, metricsReaders));
  app.use(serviceKey(config)); // 4.
  app.use("/v1", tenantScope(store)); // 5.
  app.use(queryAndBodiless); // 6.
  app.use(readBodies(ctx)); // 7.
  mountRoutes(app, ctx); // 8.
  app.use((req, _res, next) => next(new NotFoundError(`No route for ${req.method} ${pathInSentence(req.path)}.`))); // 9.
  app.use(errors(logger)); // 10.

  // the fast path first: Express handles what it does not take
  const fast = engineFastPath({ store, config, logger, metrics, budget });
  // express's app(req, res) calls app.handle, which its public type does not declare
  const handled = app as unknown as { handle: (req: Request, res: Response, next?: NextFunction) => void };
  const viaExpress = handled.handle.bind(app);
  handled.handle = (req, res, next) => {
    if (!fast(req, res)) viaExpress(req, res, next);
  };
  return app;
}
