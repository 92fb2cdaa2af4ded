// The gateway's data plane: a request to /v1/* through the checks of docs/api.md (order of
// checks). dataPlane lists the steps in order; each is a function over one record of the
// request (Flight), which also holds what the way out must undo (the body lease, a CU
// reservation, an engine body not yet relayed).
import type { IncomingMessage, ServerResponse } from "node:http";
import { isoTime } from "../../lib/iso-time.js";
import { performance } from "node:perf_hooks";
import type { Readable } from "node:stream";
import {
  isNoSpace,
  isReadOnlyFs,
  NotFoundError,
  OverloadedError,
  PayloadTooLargeError,
  QuotaExhaustedError,
  RateLimitedError,
  STATUS_OF,
  SvcError,
  UnsupportedMediaTypeError,
  ValidationError,
} from "../../lib/errors.js";
import { answerLater, gone } from "../http/answer-later.js";
import { bodyStopped, lingerOnClose, refuseBodyOfBodilessMethod } from "../http/body.js";
import { continueOwed, sendContinue } from "../http/expect-continue.js";
import { guardBody, readGuarded, type BodyRate } from "../http/body-guard.js";
import { pathInSentence, toSvcError, writeErrorBody } from "../http/errors.js";
import { bodyLimit, jsonBodyLimit, limitText } from "../http/limits.js";
import { prepareGatewayBody } from "../http/offload.js";
import { queryOf } from "../http/query.js";
import { matchRoute, validatePutQuery, type RouteMatch } from "../http/routes.js";
import { aclAllows, checkAcl } from "./acl.js";
import type { Admission, Lookup, Reservation } from "./admission.js";
import type { GatewayDeps } from "./app.js";
import { headerOf, tenantKeyHashOf } from "./auth.js";
import { BodyLease, type BodyBudget } from "./body-budget.js";
import type { GatewayLimits, RateLimitSpec } from "./config.js";
import { IDEMPOTENCY_KEY_RE, replayableOp } from "./engines.js";
import type { KeyUsageTracker } from "./key-usage.js";
import { checkGrant, confirmKey, PRIMARY_KEY_ID, type KeyGrant } from "./keys.js";
import type { GatewayMetrics } from "./metrics.js";
import { milliCusOf, periodEndMs, periodOf, toCus } from "./meter.js";
import { effectiveRateLimit, enforcedQuota } from "./plans.js";
import { FORWARDED_REQUEST_HEADERS, responseHeadersToCopy, type EngineClient } from "./proxy.js";
import type { RateLimitState, WindowSpec } from "./ratelimit.js";
import type { TenantRecord } from "./tenants.js";

/** What every data-plane request of one gateway app shares. */
export interface GatewayContext {
  deps: GatewayDeps;
  admission: Admission;
  limits: GatewayLimits;
  bodyRate: BodyRate;
  budget: BodyBudget;
  policy: { billingEnabled: boolean; defaultRateLimit: RateLimitSpec };
  metrics: GatewayMetrics;
  keyUsage: KeyUsageTracker;
  reportInternal: (where: string, requestId: string, raw: unknown) => void;
  /**
   * Tenants whose window was found full. While it still is (looked at, not counted), their
   * requests are answered 429 right after authentication, before anything is read, and only the
   * first of those is audited: with refusals counted in the window, the audit records one
   * tenant causes are bounded by its rate limit (plus one per time its window fills).
   */
  overLimit: Map<string, { audited: boolean }>;
}

const isJson = (ct: string | undefined) => !!ct && /^application\/json\s*(;|$)/i.test(ct);
const isOctet = (ct: string | undefined) => !!ct && /^application\/octet-stream\s*(;|$)/i.test(ct);

// Operations that change stored data: refused while the audit log cannot be written.
const WRITES = new Set(["put", "put_cores", "put_cores_batch", "delete"]);

// A GET or DELETE body is read up to this size before its refusal; the rate limit is looked
// at before a JSON body larger than this is read.
const DRAIN_BYTES = 64 * 1024;

/** Why the audit log takes no write, in words, from the code of its last failed append. */
function auditFailure(code: string | undefined): string {
  if (isNoSpace({ code })) return "its disk is full";
  if (isReadOnlyFs({ code })) return "its file system is read-only";
  return code !== undefined ? `${code}; the disk may be full or failing` : "the disk may be full";
}

/** Drops a body that will not be read (its error, an abort, is expected and not reported). */
function drop(body: Readable): void {
  body.once("error", () => undefined);
  body.destroy();
}

/**
 * Streams the engine's body to the client. Plain pipe() rather than stream.pipeline: the
 * latter allocates an AbortController and a DOMException (with a stack) per call, which is
 * measurable per request. A failure on either side tears both down; a client that has gone,
 * before or during the answer, drops the engine's body (and with it the engine connection).
 */
function relay(body: Readable, req: IncomingMessage, res: ServerResponse): Promise<void> {
  // Gone already: its close events have fired, and waiting for them would hold the body for good.
  if (res.writableEnded || gone(req, res)) {
    drop(body);
    return Promise.resolve();
  }
  // Failed while the answer waited for its charge and record: the client's connection is cut.
  if (body.destroyed) {
    res.destroy();
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

/**
 * A 429 without a captured stack: refusals come by the thousand from one tenant over its
 * window, and the stack (never shown, never logged for a 4xx) was the costliest part of one.
 */
export function rateLimited(message: string, retryAfterS: number): RateLimitedError {
  const depth = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return new RateLimitedError(message, retryAfterS);
  } finally {
    Error.stackTraceLimit = depth;
  }
}

const rateRefusal = (tenantId: string, state: RateLimitState): RateLimitedError =>
  rateLimited(`Rate limit exceeded for tenant ${tenantId}; retry after ${state.retryAfterS} seconds.`, state.retryAfterS);

function windowOf(gw: GatewayContext, t: TenantRecord): WindowSpec {
  const rl = effectiveRateLimit(t, gw.policy);
  return { requests: rl.requests, windowMs: rl.window_s * 1000 };
}

/** Notes a tenant whose window was found full (GatewayContext.overLimit). */
function noteWindow(gw: GatewayContext, tenantId: string, state: RateLimitState): void {
  if (state.allowed || gw.overLimit.has(tenantId)) return;
  if (gw.overLimit.size >= 100_000) gw.overLimit.delete(gw.overLimit.keys().next().value!);
  gw.overLimit.set(tenantId, { audited: false });
}

/** One data-plane request as the steps see it. */
class Flight {
  readonly t0 = performance.now();
  readonly url: string;
  readonly method: string;
  readonly path: string;
  tenant: TenantRecord | null = null;
  /** What the request's key allows (scopes, namespaces): checked at step 4. */
  grant: KeyGrant | null = null;
  keyHash: string | null = null;
  found: Lookup | null = null;
  namespace = "";
  op: RouteMatch["op"] | null = null;
  /** The X-RateLimit-* headers' state, once the window was looked at or counted. */
  rate: RateLimitState | null = null;
  /** X-SVC-CUs: 0 until step 8 charges. */
  cus = "0";
  /** Connection: close on the answer (a body left unread that will not be drained). */
  close = false;
  /** A repeated refusal of a tenant over its window: answered, counted in /metrics, not audited. */
  quiet = false;
  readonly lease: BodyLease;
  /** CUs held at admission (quota enforced) until step 8 settles them. */
  reservation: Reservation | null = null;
  /** An octet-stream body flowing to the engine. */
  guard: Readable | null = null;
  /** The engine's body until relay() owns it: dropped on any way out (it holds a connection). */
  unrelayed: Readable | null = null;

  constructor(
    readonly gw: GatewayContext,
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly rid: string,
  ) {
    this.url = req.url ?? "/";
    this.method = req.method ?? "GET";
    this.path = this.url.split("?")[0]!;
    this.lease = new BodyLease(gw.budget);
  }

  /** Step 2 again, on the record as stored now, when the one used so far came from a cache. */
  async reauthenticate(): Promise<TenantRecord> {
    this.tenant = null;
    this.found = this.keyHash === null ? null : await this.gw.admission.refresh(this.keyHash);
    const ok = confirmKey(this.found?.tenant ?? null, this.keyHash, this.gw.deps.clock.now());
    this.grant = ok.grant;
    this.tenant = ok.tenant;
    return ok.tenant;
  }

  /**
   * The headers of this request's answer besides X-Request-Id and the engine's, as name, value
   * pairs: they go to the one writeHead of the answer (no setHeader before it, which puts
   * Node's response on its slower path).
   */
  head(): string[] {
    const h = ["X-SVC-CUs", this.cus];
    const s = this.rate;
    if (s !== null) h.push("X-RateLimit-Limit", String(s.limit), "X-RateLimit-Remaining", String(s.remaining), "X-RateLimit-Reset", String(s.resetS));
    if (this.close) h.push("Connection", "close");
    return h;
  }

  /** The request's audit record. */
  record(status: number, milli: number): Promise<void> {
    return this.gw.deps.audit.write({
      ts: isoTime(this.gw.deps.clock.now()),
      tenant_id: this.tenant?.tenant_id ?? "",
      method: this.method,
      path: this.path,
      namespace: this.namespace,
      status,
      cus: toCus(milli),
      latency_ms: Math.round((performance.now() - this.t0) * 1000) / 1000,
      request_id: this.rid,
      key_id: this.grant?.key_id ?? "",
    });
  }
}

/** What step 3 found: the route, the namespaces named, and the body to forward. */
interface Validated {
  route: RouteMatch;
  namespaces: string[];
  device: string | undefined;
  body: Buffer | Readable | null;
  /** The size limit of an octet-stream body, which flows only at step 7 (0: none). */
  octetLimit: number;
  idempotencyKey: string | undefined;
}

/**
 * Step 2: authentication (X-Api-Key or Bearer); unknown, rotated or deactivated key: 401; two
 * different credentials: 400. With Redis the record may come from the process's cache; step 5
 * confirms it is current before anything is recorded or forwarded, and every earlier refusal
 * re-reads it first. A tenant found over its window is answered 429 here, before anything is read.
 */
async function authenticate(f: Flight): Promise<void> {
  const { gw } = f;
  const { clock, limiter } = gw.deps;
  f.keyHash = tenantKeyHashOf(f.req);
  f.found = f.keyHash === null ? null : await gw.admission.lookup(f.keyHash);
  const authed = confirmKey(f.found?.tenant ?? null, f.keyHash, clock.now());
  f.tenant = authed.tenant;
  f.grant = authed.grant;
  // A scoped key's last use, noted in memory and written in batches (key-usage.ts).
  if (authed.grant.key_id !== PRIMARY_KEY_ID) gw.keyUsage.touch(authed.tenant.tenant_id, authed.grant.key_id, clock.now());
  const over = gw.overLimit.get(authed.tenant.tenant_id);
  if (over === undefined) return;
  // A cached record is confirmed first: a key deactivated meanwhile is a 401, not a 429.
  const tenant = f.found?.cached ? await f.reauthenticate() : authed.tenant;
  const state = await limiter.peek(tenant.tenant_id, windowOf(gw, tenant));
  if (!state.allowed) {
    f.quiet = over.audited;
    over.audited = true;
    f.rate = state;
    throw rateRefusal(tenant.tenant_id, state);
  }
  gw.overLimit.delete(tenant.tenant_id);
}

/**
 * Step 3: validation. Route and path names, media type, Content-Length against the upload limit
 * before reading, then the JSON body (read once; its bytes are what is forwarded).
 */
async function validate(f: Flight): Promise<Validated> {
  const { gw, req, res } = f;
  const query = queryOf(f.url);
  const route: RouteMatch | null = matchRoute(f.method, f.path, query);
  if (!route) throw new NotFoundError(`No endpoint ${f.method} ${pathInSentence(f.path)}.`);
  f.op = route.op;
  // A body the route does not take is read (up to a small size) and refused, as the engine
  // refuses it, so that the client gets the answer and nothing is forwarded or charged.
  if (route.body === "none") await refuseBodyOfBodilessMethod(req, res);
  // Data-changing requests wait for an audit log that can be written again.
  if (gw.deps.audit.writable === false && WRITES.has(route.op)) {
    throw new OverloadedError(
      `The audit log cannot be written (${auditFailure(gw.deps.audit.failure)}), so requests that change data are refused; reads are served; retry after 10 seconds.`,
      10,
    );
  }
  const v: Validated = { route, namespaces: route.pathNamespaces, device: undefined, body: null, octetLimit: 0, idempotencyKey: undefined };
  const ct = headerOf(req, "content-type");
  if (route.body !== "none") {
    // The engine's limits: the payload itself for octet-stream, its base64 and fields for JSON.
    const limit = bodyLimit(gw.deps.maxUploadBytes, isOctet(ct), f.path);
    const len = headerOf(req, "content-length");
    if (len !== undefined && Number(len) > limit) {
      throw new PayloadTooLargeError(`The request body of ${len} bytes is larger than ${limitText(limit, isOctet(ct) ? undefined : f.path)}.`);
    }
    if (route.body === "json-or-octet" && isOctet(ct)) {
      // Streamed to the engine (never held whole here); its namespace is in the query, so
      // step 4 refuses a foreign one before a byte of the body is read.
      v.namespaces = [validatePutQuery(query)];
      v.octetLimit = limit;
    } else if (isJson(ct)) {
      const read = await readJsonBody(f, route, limit, len === undefined ? undefined : Number(len));
      v.namespaces = read.namespaces;
      v.device = read.device;
      v.body = read.bytes;
    } else {
      throw new UnsupportedMediaTypeError(
        route.body === "json" ? "The request body must be application/json." : "The request body must be application/json or application/octet-stream.",
      );
    }
  }
  f.namespace = v.namespaces[0] ?? "";
  v.idempotencyKey = headerOf(req, "idempotency-key");
  if (v.idempotencyKey !== undefined && !IDEMPOTENCY_KEY_RE.test(v.idempotencyKey)) {
    throw new ValidationError("The Idempotency-Key header must be 1 to 255 visible ASCII characters.", "Idempotency-Key");
  }
  return v;
}

/**
 * A JSON body, read within the tenant's share of the bodies in flight. Checked before a large
 * body, or one whose client waits for 100 Continue, is read: a tenant over its rate limit (the
 * window is only looked at; step 5 counts the request). Parsed and checked against the engine's schema; a large body in a worker thread
 * (server/http/offload.ts), its bytes moved there and back.
 */
async function readJsonBody(f: Flight, route: RouteMatch, limit: number, size: number | undefined) {
  const { gw } = f;
  const tenant = f.tenant!;
  // a large body, or one the client sends only after 100 Continue, is not asked for in vain
  if (size === undefined || size > DRAIN_BYTES || continueOwed(f.res)) {
    const state = await gw.deps.limiter.peek(tenant.tenant_id, windowOf(gw, tenant));
    if (!state.allowed) {
      noteWindow(gw, tenant.tenant_id, state);
      f.rate = state;
      throw rateRefusal(tenant.tenant_id, state);
    }
  }
  const who = tenant.tenant_id;
  if (size !== undefined) f.lease.take(size, who);
  sendContinue(f.res);
  const raw = await readGuarded(guardBody(f.req, limit, gw.bodyRate, size === undefined ? (n) => f.lease.take(n, who) : undefined), size);
  return prepareGatewayBody(route.op, raw);
}

/** Step 4: namespace isolation: every namespace named (path, body, namespace_b), then the key's own scopes and namespaces (keys.ts). */
async function authorize(f: Flight, v: Validated): Promise<void> {
  if (f.found!.cached && !aclAllows(f.tenant!, v.namespaces)) await f.reauthenticate();
  checkAcl(f.tenant!, v.namespaces);
  checkGrant(f.grant!, v.route.op, v.namespaces);
}

/**
 * Steps 5 and 6 in one atomic step (admission.ts): the rate limit's hit (sliding window per
 * tenant) and, when a quota is enforced, the month's usage plus the CUs reserved by requests in
 * flight; this request's CUs are reserved only when that is below the quota. A refused request
 * never reaches the engine. With Redis the same script confirms a cached record. Returns the
 * request's cost in milli-CUs.
 */
async function admit(f: Flight, v: Validated): Promise<number> {
  const { gw } = f;
  const now = gw.deps.clock.now();
  const cost = milliCusOf(v.route.op, v.device);
  const quotaAsk = (q: number | null) => (q === null ? null : { period: periodOf(now), quotaMilli: Math.round(q * 1000), costMilli: cost });
  let quota = enforcedQuota(f.tenant!, gw.policy);
  let admitted = await gw.admission.admit(f.found!, windowOf(gw, f.tenant!), quotaAsk(quota));
  for (let attempt = 1; admitted === null; attempt++) {
    // The cached record is no longer the stored one: nothing was recorded; steps 2 and 4 are
    // decided again on the current record.
    if (attempt > 5) throw new Error("The tenant record kept changing during admission.");
    await f.reauthenticate();
    checkAcl(f.tenant!, v.namespaces);
    checkGrant(f.grant!, v.route.op, v.namespaces);
    quota = enforcedQuota(f.tenant!, gw.policy);
    admitted = await gw.admission.admit(f.found!, windowOf(gw, f.tenant!), quotaAsk(quota));
  }
  const tenant = f.tenant!;
  const { rate, usedMilli: used } = admitted;
  f.reservation = admitted.reservation;
  f.rate = rate;
  if (!rate.allowed) {
    noteWindow(gw, tenant.tenant_id, rate);
    throw rateRefusal(tenant.tenant_id, rate);
  }
  // Step 6: quota (billing enabled only): the month's CUs (with those reserved) reached the plan's quota: 503.
  if (quota !== null && f.reservation === null) {
    const end = periodEndMs(now);
    throw new QuotaExhaustedError(
      `Monthly CU quota exhausted for tenant ${tenant.tenant_id}: ${toCus(used)} of ${quota} CUs used; it resets at ${new Date(end).toISOString()}.`,
      Math.ceil((end - now) / 1000),
    );
  }
  return cost;
}

type Upstream = Awaited<ReturnType<EngineClient["forward"]>>;

/** Step 7: forward to the engine with the service key and X-SVC-Tenant; 502 when unreachable. */
async function forward(f: Flight, v: Validated): Promise<Upstream> {
  const headers: Record<string, string> = {};
  for (const h of FORWARDED_REQUEST_HEADERS) {
    const value = headerOf(f.req, h);
    if (value !== undefined) headers[h] = value;
  }
  let body = v.body;
  // An octet-stream body starts flowing only now, under the same rate and size guard.
  if (v.octetLimit > 0) {
    sendContinue(f.res);
    body = f.guard = guardBody(f.req, v.octetLimit, f.gw.bodyRate);
  }
  // With several engines a failed connection is retried once on another when that cannot
  // apply the request twice (engines.ts).
  const replayable = replayableOp(v.route.op, v.idempotencyKey);
  const upstream = await f.gw.deps.engine.forward({
    method: f.method,
    path: f.url,
    headers,
    body,
    tenantId: f.tenant!.tenant_id,
    requestId: f.rid,
    replayable,
  });
  f.lease.release();
  f.unrelayed = upstream.body;
  return upstream;
}

/**
 * Step 8: metering, only on engine 2xx, in milli-CUs (a reservation is settled either way). The
 * charge is made as durable as the audit record and both are awaited before the response
 * starts: a request the client sees answered is charged and recorded, also when this process is
 * killed right after (Redis: acknowledged; local: in the journal). Returns what was charged.
 */
async function meter(f: Flight, v: Validated, upstream: Upstream, cost: number): Promise<number> {
  const { gw } = f;
  let milli = 0;
  // A write answered from the engine's idempotency record did no work again: it is charged,
  // and counted, as the read of a stored answer that it is (a get).
  const chargedOp = upstream.headers["idempotent-replayed"] === "true" ? "get" : v.route.op;
  if (upstream.status >= 200 && upstream.status < 300) milli = chargedOp === v.route.op ? cost : milliCusOf(chargedOp, v.device);
  const r = f.reservation;
  f.reservation = null;
  const charging =
    r !== null
      ? gw.admission.settle(r, chargedOp, milli)
      : milli > 0
        ? gw.deps.usage.add(f.tenant!.tenant_id, periodOf(gw.deps.clock.now()), chargedOp, milli)
        : null;
  // The charge is known before the header and the record are written: both say what was
  // charged, 0 when the charge failed (Redis down, hung or failing over); the engine has
  // answered, so the answer still goes out.
  if (charging !== null) {
    try {
      await charging;
    } catch (e) {
      gw.reportInternal("usage meter", f.rid, e);
      milli = 0;
    }
  }
  if (milli > 0) gw.metrics.charged(chargedOp, milli);
  f.cus = String(toCus(milli));
  return milli;
}

/**
 * Step 9: audit, written before the response starts; then the engine's answer streams back. A
 * record that cannot be written is reported, and the answer still goes out (the data plane then
 * refuses writes until the log is writable).
 */
async function answer(f: Flight, upstream: Upstream, milli: number): Promise<void> {
  try {
    await f.record(upstream.status, milli);
  } catch (e) {
    f.gw.reportInternal("audit log", f.rid, e);
  }
  f.res.statusCode = upstream.status;
  const head: (string | string[])[] = ["X-Request-Id", f.rid, ...f.head()];
  responseHeadersToCopy(upstream.headers, head);
  // a small answer, read whole (the engine's connection is then free), is written in one piece,
  // at once: the audit record's group commit resolves in the check phase, after the poll phase
  // has read every request that arrived, so the answers of one commit go out together there
  // (deferring them once more, server/http/answer-later.ts, added a turn of the event loop to
  // every answer); a larger one streams
  f.unrelayed = null;
  if (upstream.bytes !== undefined) {
    if (gone(f.req, f.res)) return void f.res.destroy();
    f.res.writeHead(upstream.status, head).end(upstream.bytes);
    return;
  }
  if (upstream.body === null) return void f.res.destroy();
  f.res.writeHead(upstream.status, head);
  await relay(upstream.body, f.req, f.res);
}

/** A refusal or failure at any step: counted against the tenant, audited, answered with the error body. */
async function refuse(f: Flight, err: unknown): Promise<void> {
  const { gw, req, res } = f;
  // A client that went away mid-request is recorded as the bad request it is, not as a 502.
  const clientGone = !res.headersSent && gone(req, res);
  let e = clientGone ? new ValidationError("The request was aborted by the client.") : toSvcError(err);
  if (e.code === "internal") gw.reportInternal("data plane", f.rid, err);
  gw.metrics.refused(e.code);
  if (f.tenant && f.rate === null && f.found?.cached) {
    // Refused before step 5 on a cached record: answer as the stored record decides (a key
    // rotated or deactivated meanwhile is a 401 here too).
    try {
      await f.reauthenticate();
    } catch (re) {
      if (re instanceof SvcError && re.code === "unauthorized") e = re;
    }
  }
  if (f.tenant && f.rate === null) {
    // 400/403/404/413/415/503 happen before step 5: the refusal counts against the tenant's
    // window, so refusals cannot be sent without limit.
    try {
      const t = f.tenant;
      const state = await gw.deps.limiter.hit(t.tenant_id, windowOf(gw, t));
      noteWindow(gw, t.tenant_id, state);
      f.rate = state;
    } catch {
      /* the limiter's store is down; the error answer still goes out */
    }
  }
  // A body left unread (the refusal was decided before it, or it stopped being read) is read to
  // its end and discarded, never held, at the minimum rate and within the largest body allowed,
  // so that the client reads this answer rather than a reset; a body that falls behind or grows
  // past that has its connection destroyed. Too large, too slow or aborted: the connection
  // closes after the answer.
  const stopped = bodyStopped(e);
  // a client still waiting for 100 Continue is not asked for its body: the connection closes
  const close = e.code === "payload_too_large" || stopped || continueOwed(res);
  if (!close && !req.complete) {
    const rest = guardBody(req, jsonBodyLimit(gw.deps.maxUploadBytes), gw.bodyRate);
    rest.once("error", () => req.socket?.destroy());
    rest.resume();
  }
  f.close = close;
  // a connection that closes after this answer (too large, or the client asked it to) reads and
  // drops what the client still sends meanwhile, so that the client reads the answer, not a reset
  if (!req.complete && !stopped) lingerOnClose(res);
  try {
    if (!f.quiet) await f.record(STATUS_OF[e.code], 0);
  } catch {
    // An audit log that cannot be written must not leave the client hanging.
  }
  res.statusCode = STATUS_OF[e.code]; // for the metrics, as in the audit record
  if (clientGone)
    res.destroy(); // nothing is sent
  // after an audit record, at once (as answer() does); a repeated 429, never audited, in the
  // check phase with the other answers of this turn
  else if (!f.quiet) {
    try {
      writeErrorBody(res, e, f.rid, f.head());
    } catch {
      res.destroy(); // an answer that cannot be written ends its connection
    }
  } else answerLater(res, () => writeErrorBody(res, e, f.rid, f.head()));
}

/** On every way out: the body lease, an octet body still flowing, an engine body not relayed, a reservation not settled. */
async function finish(f: Flight): Promise<void> {
  f.lease.release();
  if (f.guard !== null && !f.guard.destroyed) f.guard.destroy();
  if (f.unrelayed !== null) drop(f.unrelayed);
  // A request refused or failed after its admission: its reservation is dropped.
  if (f.reservation !== null && f.op !== null) {
    await f.gw.admission.settle(f.reservation, f.op, 0).catch((e: unknown) => f.gw.reportInternal("usage meter", f.rid, e));
  }
}

/** A /v1/* request through the steps of docs/api.md (order of checks); step 1 (request id) is the caller's. */
export async function dataPlane(gw: GatewayContext, req: IncomingMessage, res: ServerResponse, rid: string): Promise<void> {
  const f = new Flight(gw, req, res, rid);
  try {
    await authenticate(f); // 2
    const v = await validate(f); // 3
    await authorize(f, v); // 4
    const cost = await admit(f, v); // 5, 6
    const upstream = await forward(f, v); // 7
    const milli = await meter(f, v, upstream, cost); // 8
    await answer(f, upstream, milli); // 9
  } catch (err) {
    await refuse(f, err);
  } finally {
    await finish(f);
  }
  gw.metrics.http.observe(f.method, gw.metrics.route(f.path), res.statusCode, (performance.now() - f.t0) / 1000);
}
