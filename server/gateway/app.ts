// The gateway as an express app built from its dependencies; only server.ts listens.
// The data plane runs the checks of docs/api.md (order of checks) in order, written out once below.
import express, { type ErrorRequestHandler, type Express, type NextFunction, type Request, type Response, type Router } from "express";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import type { Readable } from "node:stream";
import {
  NotFoundError, PayloadTooLargeError, QuotaExhaustedError, RateLimitedError, STATUS_OF,
  OverloadedError, UnsupportedMediaTypeError, ValidationError,
} from "../../lib/errors.js";
import { hasBody, refuseBodyOfBodilessMethod } from "../http/body.js";
import { answerClientErrors } from "../http/client-error.js";
import { prepareGatewayBody } from "../http/offload.js";
import { queryOf } from "../http/query.js";
import { retryAfterOf, sendError, toSvcError } from "../http/errors.js";
import { bodyLimit, jsonBodyLimit, MAX_HEADER_BYTES } from "../http/limits.js";
import { SvcError } from "../../lib/errors.js";
import { requestId, requestIdFrom, requestIdOf } from "../http/request-id.js";
import { tenantIdSchema } from "../../lib/names.js";
import { aclAllows, checkAcl } from "./acl.js";
import { adminRouter } from "./admin.js";
import { MemoryAuditSink, type AuditSink } from "./audit.js";
import { accountRouter } from "./account.js";
import { memoryAuditTail, type AuditTailReader } from "./audit-tail.js";
import { consoleRouter } from "./console.js";
import { directAdmission, type Admission, type Lookup, type Reservation } from "./admission.js";
import { MemoryAuthThrottle, type AuthThrottle } from "./auth-throttle.js";
import { BodyBudget, BodyLease } from "./body-budget.js";
import { DEFAULT_LIMITS, type GatewayLimits } from "./config.js";
import { guardBody, readGuarded, SlowBodyError, type BodyRate } from "../http/body-guard.js";
import { credentialOf, headerOf, KEY_PREFIX, secretsEqual, sha256Hex, tenantKeyHashOf } from "./auth.js";
import { clientAddress, trustedProxies } from "./client-address.js";
import type { Clock } from "./clock.js";
import { checkGrant, confirmKey, PRIMARY_KEY_ID, type KeyGrant } from "./keys.js";
import { KeyUsageTracker, MemoryKeyUsageStore } from "./key-usage.js";
import type { RateLimitSpec } from "./config.js";
import { corsMiddleware } from "./cors.js";
import { IDEMPOTENCY_KEY_RE, replayableOp } from "./engines.js";
import { healthHandler } from "./health.js";
import { openApiHandler } from "./openapi.js";
import { countRequests, metricsDigests, metricsHandler } from "../http/metrics.js";
import { createGatewayMetrics, type GatewayMetrics } from "./metrics.js";
import { milliCusOf, periodEndMs, periodOf, toCus, type UsageStore } from "./meter.js";
import { effectiveRateLimit, enforcedQuota } from "./plans.js";
import { FORWARDED_REQUEST_HEADERS, responseHeadersToCopy, type EngineClient } from "./proxy.js";
import type { RateLimiter, RateLimitState, WindowSpec } from "./ratelimit.js";
import { matchRoute, validatePutQuery, type RouteMatch } from "../http/routes.js";
import type { TenantRecord, TenantRegistry } from "./tenants.js";

export interface GatewayDeps {
  registry: TenantRegistry;
  limiter: RateLimiter;
  usage: UsageStore;
  audit: AuditSink;
  engine: EngineClient;
  clock: Clock;
  serviceKey: string;
  billingEnabled: boolean;
  defaultRateLimit: RateLimitSpec;
  /**
   * SVC_ENGINE_MAX_UPLOAD_BYTES, the engine's limit on a decoded payload: octet-stream bodies are
   * held to it, JSON bodies to jsonBodyLimit() of it (server/http/limits.ts), as in the engine.
   */
  maxUploadBytes: number;
  corsOrigins?: readonly string[];
  /**
   * Steps 2 and 5-6 as one seam (admission.ts); default: `registry`, `limiter` and `usage` called
   * one by one. startGateway passes the one-round-trip Redis admission when Redis is configured.
   */
  admission?: Admission;
  /**
   * Billing seam: a router with POST /gate/checkout and POST /webhooks/payment.
   * It is mounted before the data plane and sees raw bodies (no JSON parser runs before it).
   */
  billing?: Router;
  /** Abuse limits (config.ts GatewayLimits); each missing one takes its documented default. */
  limits?: Partial<GatewayLimits>;
  /**
   * Failed-authentication throttle per client address; default: in this process's memory.
   * startGateway passes the Redis one when Redis is configured.
   */
  authThrottle?: AuthThrottle;
  /**
   * Where unexpected (500) failures are reported: one object per failure with the request id
   * and the error's class name only; never a key, a payload, a message or a stack trace.
   */
  log?: (entry: Record<string, unknown>) => void;
  /** Reads the audit log back for GET /gate/admin/audit (startGateway: the log file). */
  auditTail?: AuditTailReader;
  /** Where the built console's files are (default dist/console under the package root). */
  consoleDir?: string;
  /** Prometheus metrics; default: a registry of this app's own, without process metrics. */
  metrics?: GatewayMetrics;
  /** SVC_GATE_METRICS_TOKEN: a bearer token that reads GET /metrics only (the service key also does). */
  metricsToken?: string;
  /** Last use of scoped keys, noted per request and written in batches; default: in this process's memory. */
  keyUsage?: KeyUsageTracker;
  /** The budget of request bodies in flight; default: one of limits.bodyBytesInFlight (tests read its counters). */
  bodyBudget?: BodyBudget;
}

/** The default log: one JSON line on standard error. */
export const stderrLog = (entry: Record<string, unknown>): void => {
  process.stderr.write(JSON.stringify({ ts: new Date().toISOString(), ...entry }) + "\n");
};

const isJson = (ct: string | undefined) => !!ct && /^application\/json\s*(;|$)/i.test(ct);
const isOctet = (ct: string | undefined) => !!ct && /^application\/octet-stream\s*(;|$)/i.test(ct);

// Operations that change stored data: refused while the audit log cannot be written.
const WRITES = new Set(["put", "put_cores", "put_cores_batch", "delete"]);

// A GET or DELETE body is read up to this size before its refusal; the rate limit is looked
// at before a JSON body larger than this is read.
const DRAIN_BYTES = 64 * 1024;

/** Drops a body that will not be read (its error, an abort, is expected and not reported). */
function drop(body: Readable): void {
  body.once("error", () => undefined);
  body.destroy();
}

/**
 * Whether the client of `res` has gone. A pipelined request's response has no socket of its
 * own until the ones before it are sent, so the request's connection is looked at.
 */
function clientLeft(req: IncomingMessage, res: ServerResponse): boolean {
  const sock = res.socket ?? req.socket;
  return res.destroyed || !sock || sock.destroyed;
}

/**
 * Streams the engine's body to the client. Plain pipe() rather than stream.pipeline: the
 * latter allocates an AbortController and a DOMException (with a stack) per call, which is
 * measurable per request. A failure on either side tears both down; a client that has gone,
 * before or during the answer, drops the engine's body (and with it the engine connection).
 */
function relay(body: Readable, req: IncomingMessage, res: ServerResponse): Promise<void> {
  // Gone already: its close events have fired, and waiting for them would hold the body for good.
  if (res.writableEnded || clientLeft(req, res)) {
    drop(body);
    return Promise.resolve();
  }
  const sock = req.socket;
  return new Promise((resolve) => {
    let settled = false;
    const settle = () => {
      if (settled) return;
      settled = true;
      sock.off("close", closed);
      resolve();
    };
    const closed = () => {
      if (!res.writableFinished) drop(body);
      settle();
    };
    const fail = () => {
      drop(body);
      res.destroy();
      settle();
    };
    body.once("error", fail);
    res.once("error", fail);
    res.once("close", closed);
    // A pipelined response waiting its turn gets no close event of its own when the connection ends.
    sock.once("close", closed);
    body.pipe(res);
  });
}

function setRateHeaders(res: ServerResponse, s: RateLimitState): void {
  res.setHeader("X-RateLimit-Limit", String(s.limit));
  res.setHeader("X-RateLimit-Remaining", String(s.remaining));
  res.setHeader("X-RateLimit-Reset", String(s.resetS));
}

const DATA_PLANE = /^\/v1(\/|\?|$)/;

/** Step 1 on a plain Node request (same rule as server/http/request-id.ts). */
function takeRequestId(req: IncomingMessage, res: ServerResponse): string {
  const given = headerOf(req, "x-request-id");
  const id = requestIdFrom(given);
  res.setHeader("X-Request-Id", id);
  return id;
}

/** The error body of docs/api.md (errors) on a plain Node response (as server/http/errors.ts writes it). */
/**
 * A 429 without a captured stack: refusals come by the thousand from one tenant over its
 * window, and the stack (never shown, never logged for a 4xx) was the costliest part of one.
 */
function rateLimited(message: string, retryAfterS: number): RateLimitedError {
  const depth = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return new RateLimitedError(message, retryAfterS);
  } finally {
    Error.stackTraceLimit = depth;
  }
}

function writeError(res: ServerResponse, e: SvcError, requestId: string): void {
  const retry = retryAfterOf(e);
  if (retry !== null) res.setHeader("Retry-After", String(retry));
  if (res.headersSent) return void res.destroy();
  const body = JSON.stringify({ detail: e.message, code: e.code, request_id: requestId });
  res.statusCode = STATUS_OF[e.code];
  res.setHeader("Content-Type", "application/json; charset=utf-8");
  res.setHeader("Content-Length", Buffer.byteLength(body));
  res.end(body);
}

/**
 * The gateway app. The data plane runs on plain Node request/response objects: `app.listen`
 * (what startGateway and the tests use) serves `/v1/*` straight from the HTTP server without
 * entering express, whose per-request set-up (prototype swaps, router state) measurably
 * costs on the gateway's hot path; every other path, and `/v1/*` when the app is mounted as
 * a plain handler, goes through the express router below and reaches the same code.
 */
export function createApp(deps: GatewayDeps): Express {
  const { registry, limiter, usage, audit, engine, clock } = deps;
  const admission = deps.admission ?? directAdmission(registry, limiter, usage, () => clock.now());
  const limits: GatewayLimits = { ...DEFAULT_LIMITS, ...deps.limits };
  const bodyRate: BodyRate = { minBytesPerS: limits.bodyMinBytesPerS, graceMs: limits.bodyGraceS * 1000 };
  const budget = deps.bodyBudget ?? new BodyBudget(limits.bodyBytesInFlight, limits.bodyTenantSharePct);
  const throttle = deps.authThrottle ?? new MemoryAuthThrottle({ limit: limits.authFailLimit, windowMs: limits.authFailWindowS * 1000 }, clock);
  const policy = { billingEnabled: deps.billingEnabled, defaultRateLimit: deps.defaultRateLimit };
  const startedAt = clock.now();
  const metrics = deps.metrics ?? createGatewayMetrics();
  const keyUsage = deps.keyUsage ?? new KeyUsageTracker(new MemoryKeyUsageStore());
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  app.set("query parser", "simple");

  // Step 1 (every route): request id, taken from X-Request-Id when it is a UUID, echoed.
  // X-SVC-CUs is on every response; only a data-plane request the engine answered 2xx changes it.
  // CORS preflights are answered here, before authentication. When the app is used as a plain
  // handler, /v1/* is dispatched to the data plane from this first layer.
  const cors = corsMiddleware(deps.corsOrigins ?? []);

  // Then, on every route: from a client address over its failed-authentication limit, a request
  // whose credential does not verify (none, unknown, wrong) is answered 429 without an audit
  // record; one whose key verifies (a tenant key, the service key, the metrics token) goes on,
  // so a flood of bad keys behind a shared address locks nobody out. Every 401 this gateway
  // answers counts one failure against the client address (clientAddress: the peer, or what a
  // trusted proxy names in X-Forwarded-For).
  const trusted = trustedProxies(limits.trustedProxies);
  const checked = new WeakSet<IncomingMessage>();
  function screened(req: IncomingMessage, res: ServerResponse, rid: string, go: () => void): void {
    if (checked.has(req)) return go();
    checked.add(req);
    const addr = clientAddress(req, trusted);
    res.once("finish", () => {
      if (res.statusCode === 401) throttle.fail(addr).catch(() => undefined);
    });
    const wait = throttle.blockedFor(addr);
    if (wait === 0) return go();
    const refuse = () => {
      if (hasBody(req)) res.setHeader("Connection", "close");
      writeError(res, rateLimited(`Too many failed authentications from this address; retry after ${wait} seconds.`, wait), rid);
    };
    verifies(req).then((ok) => (ok ? go() : refuse()), refuse);
  }

  /** Whether the request's credential verifies (looked at only for a throttled address). */
  async function verifies(req: IncomingMessage): Promise<boolean> {
    let key: string | undefined;
    try {
      key = credentialOf(req);
    } catch {
      return false;
    }
    if (key === undefined) return false;
    if (secretsEqual(key, deps.serviceKey) || (deps.metricsToken !== undefined && secretsEqual(key, deps.metricsToken))) return true;
    if (!key.startsWith(KEY_PREFIX)) return false;
    const h = sha256Hex(key);
    const l = await admission.lookup(h);
    try {
      confirmKey(l?.tenant ?? null, h, clock.now());
      return true;
    } catch {
      return false;
    }
  }

  app.use((req, res, next) => {
    requestId(req, res, () => {
      screened(req, res, requestIdOf(res), () => {
        res.setHeader("X-SVC-CUs", "0");
        cors(req, res, () => {
          if (DATA_PLANE.test(req.url)) return void dataPlane(req, res, requestIdOf(res));
          next();
        });
      });
    });
  });

  // The fast path: the same steps for /v1/* without the express router.
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    if (!DATA_PLANE.test(req.url ?? "")) return void app(req, res);
    const rid = takeRequestId(req, res);
    screened(req, res, rid, () => {
      res.setHeader("X-SVC-CUs", "0");
      cors(req, res, () => void dataPlane(req, res, rid));
    });
  };
  // The engine's header limit (X-SVC-Metadata may carry 64 KiB), and requests Node cannot parse
  // answered with the JSON error body (400, Connection: close) rather than a bare status line.
  app.listen = ((...args: unknown[]): Server => {
    const server = answerClientErrors(createServer({ maxHeaderSize: MAX_HEADER_BYTES }, handler), MAX_HEADER_BYTES);
    return server.listen(...(args as Parameters<Server["listen"]>));
  }) as unknown as Express["listen"];

  // Every request outside the data plane counted once answered; GET /metrics (docs/operations.md).
  app.use(countRequests(metrics.http, metrics.route));
  app.get("/metrics", metricsHandler(metrics.registry, metricsDigests([deps.serviceKey, deps.metricsToken])));
  app.get(["/health", "/gate/health"], healthHandler(engine, registry, startedAt, () => clock.now()));
  app.get("/openapi.json", openApiHandler({ billing: deps.billing ? {} : undefined }));

  // The web console (static files, its own Content-Security-Policy) and the tenant's own account view.
  app.use(consoleRouter(deps.consoleDir));
  app.use(accountRouter({ registry, limiter, usage, audit, clock, policy }));

  const auditTail = deps.auditTail ?? (audit instanceof MemoryAuditSink ? memoryAuditTail(audit.records) : undefined);
  const admin = adminRouter({ registry, usage, clock, policy, serviceKey: deps.serviceKey, auditTail, keyUsage });
  app.use((req, res, next) => {
    if (/^\/gate\/(onboard|admin)(\/|$)/.test(req.path)) {
      auditBeforeEnd(req, res);
      return admin(req, res, next);
    }
    next();
  });

  // Admin calls leave the audit record too (the tenant acted on, no namespace, 0 CUs), written
  // before the response is sent: the response's end waits for the record, whichever handler
  // (or error handler) ends it. An audit log that cannot be written must not hang the call.
  function auditBeforeEnd(req: Request, res: Response): void {
    const t0 = performance.now();
    const end = res.end.bind(res) as (...args: unknown[]) => Response;
    let ended = false;
    res.end = ((...args: unknown[]) => {
      if (ended) return res;
      ended = true;
      const named = (res.locals.tenant_id as string | undefined) ?? /^\/gate\/admin\/(?:usage|keys)\/([^/]+)$/.exec(req.path)?.[1] ?? (req.body as { tenant_id?: unknown } | undefined)?.tenant_id;
      void audit.write({
        ts: new Date(clock.now()).toISOString(),
        tenant_id: typeof named === "string" && tenantIdSchema.safeParse(named).success ? named : "",
        method: req.method,
        path: req.originalUrl.split("?")[0]!,
        namespace: "",
        status: res.statusCode,
        cus: 0,
        latency_ms: Math.round((performance.now() - t0) * 1000) / 1000,
        request_id: requestIdOf(res),
      }).catch(() => undefined).then(() => end(...args));
      return res;
    }) as Response["end"];
  }

  // Billing plugs in here: checkout (tenant key) and the payment webhook (raw body).
  if (deps.billing) app.use(deps.billing);

  app.use((req: Request, _res: Response, next: NextFunction) => {
    next(new NotFoundError(`No endpoint ${req.method} ${req.path}.`));
  });
  const log = deps.log ?? stderrLog;
  const reportInternal = (where: string, requestId: string, raw: unknown) =>
    log({ level: "error", msg: `internal error in the ${where}`, request_id: requestId, error: (raw as Error | null)?.constructor?.name ?? typeof raw });
  app.use(((err, _req, res, _next) => {
    const rid = requestIdOf(res);
    const e = sendError(res, err, rid);
    if (e.code === "internal") reportInternal("admin routes", rid, err);
  }) as ErrorRequestHandler);

  // Tenants whose window was found full. While it still is (looked at, not counted), their
  // requests are answered 429 right after authentication, before anything is read, and only the
  // first of those is audited: with refusals counted in the window, the audit records one
  // tenant causes are bounded by its rate limit (plus one per time its window fills).
  const overLimit = new Map<string, { audited: boolean }>();
  const noteWindow = (tenantId: string, state: RateLimitState): void => {
    if (state.allowed || overLimit.has(tenantId)) return;
    if (overLimit.size >= 100_000) overLimit.delete(overLimit.keys().next().value!);
    overLimit.set(tenantId, { audited: false });
  };

  const windowOf = (t: TenantRecord): WindowSpec => {
    const rl = effectiveRateLimit(t, policy);
    return { requests: rl.requests, windowMs: rl.window_s * 1000 };
  };

  async function dataPlane(req: IncomingMessage, res: ServerResponse, rid: string): Promise<void> {
    const t0 = performance.now();
    const url = req.url ?? "/";
    const method = req.method ?? "GET";
    const path = url.split("?")[0]!;
    let tenant: TenantRecord | null = null;
    // What the request's key allows (scopes, namespaces): checked at step 4.
    let grant: KeyGrant | null = null;
    let keyHash: string | null = null;
    let found: Lookup | null = null;
    let namespace = "";
    let rateHeadersSet = false;
    const lease = new BodyLease(budget);
    // CUs held at admission (quota enforced) until step 8 settles them.
    let reservation: Reservation | null = null;
    let op: RouteMatch["op"] | null = null;
    let guard: Readable | null = null;
    let unrelayed: Readable | null = null;
    // A repeated refusal of a tenant over its window: answered, counted in /metrics, not audited.
    let quiet = false;

    // Steps 2 (again) on the record as stored now, when the one used so far came from a cache.
    const reauthenticate = async (): Promise<TenantRecord> => {
      tenant = null;
      found = keyHash === null ? null : await admission.refresh(keyHash);
      const ok = confirmKey(found?.tenant ?? null, keyHash, clock.now());
      grant = ok.grant;
      tenant = ok.tenant;
      return tenant;
    };

    const record = (status: number, milli: number) =>
      audit.write({
        ts: new Date(clock.now()).toISOString(),
        tenant_id: tenant?.tenant_id ?? "",
        method,
        path,
        namespace,
        status,
        cus: toCus(milli),
        latency_ms: Math.round((performance.now() - t0) * 1000) / 1000,
        request_id: rid,
        key_id: grant?.key_id ?? "",
      });

    try {
      // Step 2: authentication (X-Api-Key or Bearer); unknown, rotated or deactivated key: 401;
      // two different credentials: 400. With Redis the record may come from the process's cache;
      // step 5 confirms it is current before anything is recorded or forwarded, and every
      // earlier refusal re-reads it first.
      keyHash = tenantKeyHashOf(req);
      found = keyHash === null ? null : await admission.lookup(keyHash);
      const authed = confirmKey(found?.tenant ?? null, keyHash, clock.now());
      tenant = authed.tenant;
      grant = authed.grant;
      // A scoped key's last use, noted in memory and written in batches (key-usage.ts).
      if (grant.key_id !== PRIMARY_KEY_ID) keyUsage.touch(tenant.tenant_id, grant.key_id, clock.now());
      const over = overLimit.get(tenant.tenant_id);
      if (over !== undefined) {
        // A cached record is confirmed first: a key deactivated meanwhile is a 401, not a 429.
        if (found?.cached) await reauthenticate();
        const state = await limiter.peek(tenant.tenant_id, windowOf(tenant));
        if (!state.allowed) {
          quiet = over.audited;
          over.audited = true;
          setRateHeaders(res, state);
          rateHeadersSet = true;
          throw rateLimited(`Rate limit exceeded for tenant ${tenant.tenant_id}; retry after ${state.retryAfterS} seconds.`, state.retryAfterS);
        }
        overLimit.delete(tenant.tenant_id);
      }

      // Step 3: validation. Route and path names, media type, Content-Length against the upload
      // limit before reading, then the JSON body (read once; its bytes are what we forward).
      const query = queryOf(url);
      const route: RouteMatch | null = matchRoute(method, path, query);
      if (!route) throw new NotFoundError(`No endpoint ${method} ${path}.`);
      op = route.op;
      // A body the route does not take is read (up to a small size) and refused, as the engine
      // refuses it, so that the client gets the answer and nothing is forwarded or charged.
      if (route.body === "none") await refuseBodyOfBodilessMethod(req, res);
      // Data-changing requests wait for an audit log that can be written again.
      if (audit.writable === false && WRITES.has(route.op)) {
        throw new OverloadedError("The audit log cannot be written (the disk may be full), so requests that change data are refused; reads are served; retry after 10 seconds.", 10);
      }
      let namespaces = route.pathNamespaces;
      let device: string | undefined;
      let body: Buffer | Readable | null = null;
      let octetLimit = 0;
      const ct = headerOf(req, "content-type");
      if (route.body !== "none") {
        // The engine's limits: the payload itself for octet-stream, its base64 and fields for JSON.
        const limit = bodyLimit(deps.maxUploadBytes, isOctet(ct), path);
        const len = headerOf(req, "content-length");
        if (len !== undefined && Number(len) > limit) {
          throw new PayloadTooLargeError(`The request body of ${len} bytes is larger than the upload limit of ${limit} bytes (SVC_ENGINE_MAX_UPLOAD_BYTES).`);
        }
        if (route.body === "json-or-octet" && isOctet(ct)) {
          // Streamed to the engine (never held whole here); its namespace is in the query, so
          // step 4 below refuses a foreign one before a byte of the body is read.
          namespaces = [validatePutQuery(query)];
          octetLimit = limit;
        } else if (isJson(ct)) {
          // Checked before a large body is read: a tenant over its rate limit (the window is
          // only looked at; step 5 counts the request) and the bodies in flight.
          const size = len === undefined ? undefined : Number(len);
          if (size === undefined || size > DRAIN_BYTES) {
            const state = await limiter.peek(tenant.tenant_id, windowOf(tenant));
            if (!state.allowed) {
              noteWindow(tenant.tenant_id, state);
              setRateHeaders(res, state);
              rateHeadersSet = true;
              throw rateLimited(`Rate limit exceeded for tenant ${tenant.tenant_id}; retry after ${state.retryAfterS} seconds.`, state.retryAfterS);
            }
          }
          const who = tenant.tenant_id;
          if (size !== undefined) lease.take(size, who);
          const raw = await readGuarded(guardBody(req, limit, bodyRate, size === undefined ? (n) => lease.take(n, who) : undefined), size);
          // parsed and checked against the engine's schema; a large body in a worker thread
          // (server/http/offload.ts), its bytes moved there and back
          const read = await prepareGatewayBody(route.op, raw);
          ({ namespaces, device } = read);
          body = read.bytes;
        } else {
          throw new UnsupportedMediaTypeError(
            route.body === "json" ? "The request body must be application/json." : "The request body must be application/json or application/octet-stream.",
          );
        }
      }
      namespace = namespaces[0] ?? "";
      const idempotencyKey = headerOf(req, "idempotency-key");
      if (idempotencyKey !== undefined && !IDEMPOTENCY_KEY_RE.test(idempotencyKey)) {
        throw new ValidationError("The Idempotency-Key header must be 1 to 255 visible ASCII characters.", "Idempotency-Key");
      }

      // Step 4: namespace isolation: every namespace named (path, body, namespace_b), then the
      // key's own scopes and namespaces (keys.ts).
      if (found!.cached && !aclAllows(tenant, namespaces)) await reauthenticate();
      checkAcl(tenant, namespaces);
      checkGrant(grant!, route.op, namespaces);

      // Steps 5 and 6 in one atomic step (admission.ts): the rate limit's hit (sliding window
      // per tenant) and, when a quota is enforced, the month's usage plus the CUs reserved by
      // requests in flight; this request's CUs are reserved only when that is below the quota.
      // A refused request never reaches the engine. With Redis the same script confirms a
      // cached record.
      const now = clock.now();
      const cost = milliCusOf(route.op, device);
      const quotaAsk = (q: number | null) => (q === null ? null : { period: periodOf(now), quotaMilli: Math.round(q * 1000), costMilli: cost });
      let quota = enforcedQuota(tenant, policy);
      let admitted = await admission.admit(found!, windowOf(tenant), quotaAsk(quota));
      for (let attempt = 1; admitted === null; attempt++) {
        // The cached record is no longer the stored one: nothing was recorded; steps 2 and 4
        // are decided again on the current record.
        if (attempt > 5) throw new Error("The tenant record kept changing during admission.");
        await reauthenticate();
        checkAcl(tenant, namespaces);
        checkGrant(grant!, route.op, namespaces);
        quota = enforcedQuota(tenant, policy);
        admitted = await admission.admit(found!, windowOf(tenant), quotaAsk(quota));
      }
      const { rate, usedMilli: used } = admitted;
      reservation = admitted.reservation;
      setRateHeaders(res, rate);
      rateHeadersSet = true;
      if (!rate.allowed) {
        noteWindow(tenant.tenant_id, rate);
        throw rateLimited(`Rate limit exceeded for tenant ${tenant.tenant_id}; retry after ${rate.retryAfterS} seconds.`, rate.retryAfterS);
      }

      // Step 6: quota (billing enabled only): the month's CUs (with those reserved) reached the plan's quota: 503.
      if (quota !== null && reservation === null) {
        const end = periodEndMs(now);
        throw new QuotaExhaustedError(
          `Monthly CU quota exhausted for tenant ${tenant.tenant_id}: ${toCus(used)} of ${quota} CUs used; it resets at ${new Date(end).toISOString()}.`,
          Math.ceil((end - now) / 1000),
        );
      }

      // Step 7: forward to the engine with the service key and X-SVC-Tenant; 502 when unreachable.
      const headers: Record<string, string> = {};
      for (const h of FORWARDED_REQUEST_HEADERS) {
        const v = headerOf(req, h);
        if (v !== undefined) headers[h] = v;
      }
      // An octet-stream body starts flowing only now, under the same rate and size guard.
      if (octetLimit > 0) body = guard = guardBody(req, octetLimit, bodyRate);
      // With several engines a failed connection is retried once on another when that cannot
      // apply the request twice (engines.ts).
      const replayable = replayableOp(route.op, idempotencyKey);
      const upstream = await engine.forward({ method, path: url, headers, body, tenantId: tenant.tenant_id, requestId: rid, replayable });
      lease.release();
      // Until relay() owns it, the engine's body is dropped on any way out (it holds a connection).
      unrelayed = upstream.body;

      // Step 8: metering, only on engine 2xx, in milli-CUs (a reservation is settled either
      // way). The charge is made as durable as the audit record and both are awaited before
      // the response starts: a request the client sees answered is charged and recorded, also
      // when this process is killed right after (Redis: acknowledged; local: in the journal).
      let milli = 0;
      // A write answered from the engine's idempotency record did no work again: it is
      // charged, and counted, as the read of a stored answer that it is (a get).
      const chargedOp = upstream.headers["idempotent-replayed"] === "true" ? "get" : route.op;
      if (upstream.status >= 200 && upstream.status < 300) milli = chargedOp === route.op ? cost : milliCusOf(chargedOp, device);
      const r = reservation as Reservation | null;
      reservation = null;
      const charging = r !== null ? admission.settle(r, chargedOp, milli) : milli > 0 ? usage.add(tenant.tenant_id, periodOf(clock.now()), chargedOp, milli) : null;
      // The charge is known before the header and the record are written: both say what was
      // charged, 0 when the charge failed (Redis down, hung or failing over); the engine has
      // answered, so the answer still goes out.
      if (charging !== null) {
        try {
          await charging;
        } catch (e) {
          reportInternal("usage meter", rid, e);
          milli = 0;
        }
      }
      if (milli > 0) metrics.charged(chargedOp, milli);
      res.setHeader("X-SVC-CUs", String(toCus(milli)));

      // Step 9: audit, written before the response starts; then the engine's answer streams back.
      // A record that cannot be written is reported, and the answer still goes out (the data
      // plane then refuses writes until the log is writable).
      try {
        await record(upstream.status, milli);
      } catch (e) {
        reportInternal("audit log", rid, e);
      }
      res.statusCode = upstream.status;
      for (const [k, v] of Object.entries(responseHeadersToCopy(upstream.headers))) res.setHeader(k, v);
      unrelayed = null;
      await relay(upstream.body, req, res);
    } catch (err) {
      // A client that went away mid-request is recorded as the bad request it is, not as a 502.
      const clientGone = !res.headersSent && clientLeft(req, res);
      let e = clientGone ? new ValidationError("The request was aborted by the client.") : toSvcError(err);
      if (e.code === "internal") reportInternal("data plane", rid, err);
      metrics.refused(e.code);
      if (tenant && !rateHeadersSet && found?.cached) {
        // Refused before step 5 on a cached record: answer as the stored record decides (a key
        // rotated or deactivated meanwhile is a 401 here too).
        try {
          await reauthenticate();
        } catch (re) {
          if (re instanceof SvcError && re.code === "unauthorized") e = re;
        }
      }
      if (tenant && !rateHeadersSet) {
        // 400/403/404/413/415/503 happen before step 5: the refusal counts against the tenant's
        // window, so refusals cannot be sent without limit.
        try {
          const t = tenant as TenantRecord;
          const state = await limiter.hit(t.tenant_id, windowOf(t));
          noteWindow(t.tenant_id, state);
          // (The HTTP parser may have answered a malformed request already: client-error.ts.)
          if (!res.headersSent) setRateHeaders(res, state);
        } catch {
          /* the limiter's store is down; the error answer still goes out */
        }
      }
      // A body left unread (the refusal was decided before it, or it stopped being read) is
      // read to its end and discarded, never held, at the minimum rate and within the largest
      // body allowed, so that the client reads this answer rather than a reset; a body that
      // falls behind or grows past that has its connection destroyed. Too large, too slow or
      // aborted: the connection closes after the answer.
      const close = e.code === "payload_too_large" || e instanceof SlowBodyError || e.message.startsWith("The request was aborted");
      if (!close && !req.complete) {
        const rest = guardBody(req, jsonBodyLimit(deps.maxUploadBytes), bodyRate);
        rest.once("error", () => req.socket?.destroy());
        rest.resume();
      }
      if (close && !res.headersSent) res.setHeader("Connection", "close");
      try {
        if (!quiet) await record(STATUS_OF[e.code], 0);
      } catch {
        // An audit log that cannot be written must not leave the client hanging.
      }
      if (clientGone) {
        res.statusCode = STATUS_OF[e.code]; // for the metrics, as in the audit record; nothing is sent
        res.destroy();
      } else writeError(res, e, rid);
    } finally {
      lease.release();
      if (guard !== null && !guard.destroyed) guard.destroy();
      if (unrelayed !== null) drop(unrelayed);
      // A request refused or failed after its admission: its reservation is dropped.
      if (reservation !== null && op !== null) {
        await admission.settle(reservation, op, 0).catch((e: unknown) => reportInternal("usage meter", rid, e));
      }
    }
    metrics.http.observe(method, metrics.route(path), res.statusCode, (performance.now() - t0) / 1000);
  }

  return app;
}
