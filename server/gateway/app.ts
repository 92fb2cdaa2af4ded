// The gateway as an express app built from its dependencies; only server.ts listens. The data
// plane (data-plane.ts) runs the checks of docs/api.md (order of checks) as one list of steps.
import express, { type ErrorRequestHandler, type Express, type NextFunction, type Request, type Response, type Router } from "express";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import { NotFoundError, systemCode } from "../../lib/errors.js";
import { tenantIdSchema } from "../../lib/fields.js";
import { hasBody, lingerOnClose } from "../http/body.js";
import { requestEntry } from "../http/entry.js";
import { answerClientErrors } from "../http/client-error.js";
import { pathInSentence, sendError, writeErrorBody } from "../http/errors.js";
import { holdContinue } from "../http/expect-continue.js";
import { MAX_HEADER_BYTES } from "../http/limits.js";
import { capConnections } from "../http/connection-cap.js";
import { countRequests, metricsDigests, metricsHandler } from "../http/metrics.js";
import { noteRequestId, requestId, requestIdFrom, requestIdOf } from "../http/request-id.js";
import { accountRouter } from "./account.js";
import { adminRouter, type AdminBilling } from "./admin.js";
import { directAdmission, type Admission } from "./admission.js";
import { MemoryAuditSink, type AuditSink } from "./audit.js";
import { memoryAuditTail, type AuditTailReader } from "./audit-tail.js";
import { sha256Hex } from "../../lib/sha256.js";
import { credentialOf, headerOf, KEY_PREFIX, secretsEqual } from "./auth.js";
import { MemoryAuthThrottle, type AuthThrottle } from "./auth-throttle.js";
import { BodyBudget } from "./body-budget.js";
import { clientAddress, trustedProxies, trusts } from "./client-address.js";
import type { Clock } from "./clock.js";
import { DEFAULT_LIMITS, type GatewayLimits, type RateLimitSpec } from "./config.js";
import { consoleRouter } from "./console.js";
import { corsMiddleware } from "./cors.js";
import { dataPlane, rateLimited, type GatewayContext } from "./data-plane.js";
import { healthHandler } from "./health.js";
import { KeyUsageTracker, MemoryKeyUsageStore } from "./key-usage.js";
import { confirmKey } from "./keys.js";
import type { UsageStore } from "./meter.js";
import { createGatewayMetrics, type GatewayMetrics } from "./metrics.js";
import { openApiHandler } from "./openapi.js";
import type { EngineClient } from "./proxy.js";
import type { RateLimiter } from "./ratelimit.js";
import type { TenantRegistry } from "./tenants.js";

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
  /**
   * With billing on: cancels at the payment provider the subscription of a tenant that an admin
   * call deactivates or moves to starter or enterprise (billing.ts PendingCancellations).
   */
  billingAdmin?: AdminBilling;
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

const DATA_PLANE = /^\/v1(\/|\?|$)/;

/**
 * Step 1 on a plain Node request (same rule as server/http/request-id.ts). The data plane writes
 * X-Request-Id and X-SVC-CUs with the rest of its answer's headers; with CORS on, they are set
 * here for the preflights answered before it.
 */
function takeRequestId(req: IncomingMessage, res: ServerResponse, setNow: boolean): string {
  const id = requestIdFrom(headerOf(req, "x-request-id"));
  noteRequestId(res, id);
  if (setNow) {
    res.setHeader("X-Request-Id", id);
    res.setHeader("X-SVC-CUs", "0");
  }
  return id;
}

/**
 * Before every route, from a client address over its failed-authentication limit: a request
 * whose credential does not verify (none, unknown, wrong) is answered 429 without an audit
 * record; one whose key verifies (a tenant key, the service key, the metrics token) goes on, so
 * a flood of bad keys behind a shared address locks nobody out. Every 401 this gateway answers
 * counts one failure against the client address (clientAddress: the peer, or what a trusted
 * proxy names in X-Forwarded-For).
 */
function authScreen(gw: GatewayContext) {
  const { deps, limits } = gw;
  const throttle = deps.authThrottle ?? new MemoryAuthThrottle({ limit: limits.authFailLimit, windowMs: limits.authFailWindowS * 1000 }, deps.clock);
  const trusted = trustedProxies(limits.trustedProxies);
  const checked = new WeakSet<IncomingMessage>();

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
    const l = await gw.admission.lookup(h);
    try {
      confirmKey(l?.tenant ?? null, h, deps.clock.now());
      return true;
    } catch {
      return false;
    }
  }

  return (req: IncomingMessage, res: ServerResponse, rid: string, go: () => void): void => {
    if (checked.has(req)) return go();
    checked.add(req);
    const addr = clientAddress(req, trusted);
    res.once("finish", () => {
      if (res.statusCode === 401) throttle.fail(addr).catch(() => undefined);
    });
    const wait = throttle.blockedFor(addr);
    if (wait === 0) return go();
    const refuse = () => {
      const close = hasBody(req) ? ["Connection", "close"] : [];
      if (close.length) lingerOnClose(res);
      writeErrorBody(res, rateLimited(`Too many failed authentications from this address; retry after ${wait} seconds.`, wait), rid, close);
    };
    verifies(req).then((ok) => (ok ? go() : refuse()), refuse);
  };
}

/**
 * Admin calls leave the audit record too (the tenant acted on, no namespace, 0 CUs), written
 * before the response is sent: the response's end waits for the record, whichever handler (or
 * error handler) ends it. An audit log that cannot be written must not hang the call.
 */
function auditBeforeEnd(deps: GatewayDeps, req: Request, res: Response): void {
  const t0 = performance.now();
  const end = res.end.bind(res) as (...args: unknown[]) => Response;
  let ended = false;
  res.end = ((...args: unknown[]) => {
    if (ended) return res;
    ended = true;
    const named =
      (res.locals.tenant_id as string | undefined) ??
      /^\/gate\/admin\/(?:usage|keys)\/([^/]+)$/.exec(req.path)?.[1] ??
      (req.body as { tenant_id?: unknown } | undefined)?.tenant_id;
    void deps.audit
      .write({
        ts: new Date(deps.clock.now()).toISOString(),
        tenant_id: typeof named === "string" && tenantIdSchema.safeParse(named).success ? named : "",
        method: req.method,
        path: req.originalUrl.split("?")[0]!,
        namespace: "",
        status: res.statusCode,
        cus: 0,
        latency_ms: Math.round((performance.now() - t0) * 1000) / 1000,
        request_id: requestIdOf(res),
      })
      .catch(() => undefined)
      .then(() => end(...args));
    return res;
  }) as Response["end"];
}

function contextOf(deps: GatewayDeps): GatewayContext {
  const { registry, limiter, usage, clock } = deps;
  const limits: GatewayLimits = { ...DEFAULT_LIMITS, ...deps.limits };
  const log = deps.log ?? stderrLog;
  return {
    deps,
    admission: deps.admission ?? directAdmission(registry, limiter, usage, () => clock.now()),
    limits,
    bodyRate: { minBytesPerS: limits.bodyMinBytesPerS, graceMs: limits.bodyGraceS * 1000 },
    budget: deps.bodyBudget ?? new BodyBudget(limits.bodyBytesInFlight, limits.bodyTenantSharePct),
    policy: { billingEnabled: deps.billingEnabled, defaultRateLimit: deps.defaultRateLimit },
    metrics: deps.metrics ?? createGatewayMetrics(),
    keyUsage: deps.keyUsage ?? new KeyUsageTracker(new MemoryKeyUsageStore()),
    reportInternal: (where, requestId, raw) => {
      const line: Record<string, unknown> = {
        level: "error",
        msg: `internal error in the ${where}`,
        request_id: requestId,
        error: (raw as Error | null)?.constructor?.name ?? typeof raw,
      };
      // a system error's code (ENOSPC, EROFS) says what the operator must fix; nothing else of it is logged
      const code = systemCode(raw);
      if (code !== undefined) line.code = code;
      log(line as Parameters<typeof log>[0]);
    },
    overLimit: new Map(),
  };
}

/** The routes outside the data plane: metrics, health, OpenAPI, console, account, admin, billing, 404, errors. */
function mountRoutes(app: Express, gw: GatewayContext): void {
  const { deps, metrics, policy } = gw;
  const { registry, limiter, usage, audit, engine, clock } = deps;
  // Every request outside the data plane counted once answered; GET /metrics (docs/operations.md).
  app.use(countRequests(metrics.http, metrics.route));
  app.get("/metrics", metricsHandler(metrics.registry, metricsDigests([deps.serviceKey, deps.metricsToken])));
  app.get(
    ["/health", "/gate/health"],
    healthHandler(engine, registry, clock.now(), () => clock.now()),
  );
  app.get("/openapi.json", openApiHandler({ billing: deps.billing ? {} : undefined }));
  // The web console (static files, its own Content-Security-Policy) and the tenant's own account view.
  app.use(consoleRouter(deps.consoleDir));
  app.use(accountRouter({ registry, limiter, usage, audit, clock, policy }));
  const auditTail = deps.auditTail ?? (audit instanceof MemoryAuditSink ? memoryAuditTail(audit.records) : undefined);
  const admin = adminRouter({ registry, usage, clock, policy, serviceKey: deps.serviceKey, auditTail, keyUsage: gw.keyUsage, billing: deps.billingAdmin });
  app.use((req, res, next) => {
    if (/^\/gate\/(onboard|admin)(\/|$)/.test(req.path)) {
      auditBeforeEnd(deps, req, res);
      return admin(req, res, next);
    }
    next();
  });
  // Billing plugs in here: checkout (tenant key) and the payment webhook (raw body).
  if (deps.billing) app.use(deps.billing);
  app.use((req: Request, _res: Response, next: NextFunction) => {
    next(new NotFoundError(`No endpoint ${req.method} ${pathInSentence(req.path)}.`));
  });
  app.use(((err, _req, res, _next) => {
    const rid = requestIdOf(res);
    const e = sendError(res, err, rid);
    if (e.code === "internal") gw.reportInternal("admin routes", rid, err);
  }) as ErrorRequestHandler);
}

/**
 * The gateway app. The data plane runs on plain Node request/response objects: `app.listen`
 * (what startGateway and the tests use) serves `/v1/*` straight from the HTTP server without
 * entering express, whose per-request set-up (prototype swaps, router state) measurably
 * costs on the gateway's hot path; every other path, and `/v1/*` when the app is mounted as
 * a plain handler, goes through the express router below and reaches the same code.
 * A request's path: 1. request id (taken from X-Request-Id when it is a UUID, echoed), the
 * failed-authentication screen, X-SVC-CUs 0 and CORS (preflights answered before
 * authentication); then /v1/* goes to dataPlane (steps 2-9, data-plane.ts) and everything else
 * to the routes of mountRoutes.
 */
export function createApp(deps: GatewayDeps): Express {
  const gw = contextOf(deps);
  const screened = authScreen(gw);
  const cors = corsMiddleware(deps.corsOrigins ?? []);
  const corsOn = (deps.corsOrigins ?? []).length > 0;
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  app.set("query parser", "simple");
  // As a plain handler, /v1/* is dispatched to the data plane from this first layer.
  app.use((req, res, next) => {
    requestId(req, res, () => {
      screened(req, res, requestIdOf(res), () => {
        res.setHeader("X-SVC-CUs", "0");
        cors(req, res, () => {
          if (DATA_PLANE.test(req.url)) return void dataPlane(gw, req, res, requestIdOf(res));
          next();
        });
      });
    });
  });
  // The fast path: the same steps for /v1/* without the express router.
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    if (!DATA_PLANE.test(req.url ?? "")) return void app(req, res);
    const rid = takeRequestId(req, res, corsOn);
    screened(req, res, rid, () => cors(req, res, () => void dataPlane(gw, req, res, rid)));
  };
  // The engine's header limit (X-SVC-Metadata may carry 64 KiB), and requests Node cannot parse
  // answered with the JSON error body (400, Connection: close) rather than a bare status line.
  app.listen = ((...args: unknown[]): Server => {
    // Pipelined requests in turn and a missing Host in JSON (server/http/entry.ts).
    const server = answerClientErrors(createServer({ maxHeaderSize: MAX_HEADER_BYTES, requireHostHeader: false }, requestEntry(handler)), MAX_HEADER_BYTES);
    // one client address may not hold every connection (SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS)
    const proxies = trustedProxies(gw.limits.trustedProxies);
    capConnections(server, gw.limits.maxConnectionsPerAddress, proxies && ((addr) => trusts(proxies, addr)), () => gw.metrics.connectionRefused());
    // Expect: 100-continue: the data plane sends 100 Continue right before it reads the body,
    // so that a request refused before that is not sent; other routes get it at once, as from Node.
    server.on(
      "checkContinue",
      requestEntry((req: IncomingMessage, res: ServerResponse) => {
        if (DATA_PLANE.test(req.url ?? "")) holdContinue(res);
        else res.writeContinue();
        handler(req, res);
      }),
    );
    return server.listen(...(args as Parameters<Server["listen"]>));
  }) as unknown as Express["listen"];
  mountRoutes(app, gw);
  return app;
}
