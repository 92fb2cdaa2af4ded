// Prometheus metrics shared by the engine, the gateway and the provenance appliance: a
// registry per app (no global state, so several apps can live in one process), the HTTP
// request counter and latency histogram, bounded labels, and the bearer-protected
// GET /metrics handler. Labels never come from raw input: a route label is one of the
// app's route templates (or "other"), a method one of the HTTP methods (or "other").
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { Counter, Registry, collectDefaultMetrics } from "prom-client";
import type { NextFunction, Request, RequestHandler, Response } from "express";
import { UnauthorizedError } from "../../lib/errors.js";
import { FastCounter, FastHistogram, type CounterChild, type HistogramChild } from "./fast-metric.js";
import { offloadStats } from "./offload.js";

export type HttpLabels = "method" | "route" | "status";

export interface HttpMetrics {
  readonly registry: Registry;
  readonly requests: FastCounter<HttpLabels>;
  readonly duration: FastHistogram<HttpLabels>;
  /** Counts one finished request and its latency. */
  observe(method: string, route: string, status: number, seconds: number): void;
}

/** Latency buckets in seconds: 1 ms to 10 s (a put of a large tensor takes seconds). */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);
/** An HTTP method as a label: one of the usual seven, else "other". */
export const methodLabel = (m: string | undefined): string => (m !== undefined && METHODS.has(m) ? m : "other");

/**
 * A registry with `<prefix>http_requests_total` and `<prefix>http_request_duration_seconds`
 * (labels method, route, status), and the process metrics of prom-client when asked.
 */
export function createHttpMetrics(prefix: string, opts: { defaultMetrics?: boolean } = {}): HttpMetrics {
  const registry = new Registry();
  if (opts.defaultMetrics) collectDefaultMetrics({ register: registry, prefix });
  // counted on every request: the request paths' metrics (fast-metric.ts), read as prom-client's
  const requests = new FastCounter<HttpLabels>({
    name: `${prefix}http_requests_total`,
    help: "HTTP requests by method, route template and status.",
    labelNames: ["method", "route", "status"],
    registers: [registry],
  });
  const duration = new FastHistogram<HttpLabels>({
    name: `${prefix}http_request_duration_seconds`,
    help: "HTTP request durations by method, route template and status.",
    labelNames: ["method", "route", "status"],
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  // work on large bodies done in worker threads (server/http/offload.ts), for the whole process
  new Counter({
    name: `${prefix}offload_jobs_total`,
    help: "Large request or response bodies worked on in a worker thread instead of the event loop (this process).",
    registers: [registry],
    collect() {
      this.reset();
      this.inc(offloadStats.jobs);
    },
  });
  new Counter({
    name: `${prefix}offload_bytes_total`,
    help: "Bytes of the bodies worked on in worker threads (this process).",
    registers: [registry],
    collect() {
      this.reset();
      this.inc(offloadStats.bytes);
    },
  });
  // the children per (method, route, status), found once: prom-client hashes the labels on
  // every call otherwise (the label set is bounded, so is this map)
  const children = new Map<string, { count: CounterChild; time: HistogramChild }>();
  return {
    registry,
    requests,
    duration,
    observe(method, route, status, seconds) {
      const mth = methodLabel(method);
      const key = `${mth} ${route} ${status}`;
      let c = children.get(key);
      if (!c) {
        const labels = { method: mth, route, status: String(status) };
        children.set(key, (c = { count: requests.labels(labels), time: duration.labels(labels) }));
      }
      c.count.inc();
      c.time.observe(seconds);
    },
  };
}

/**
 * Maps a request path to one of `templates` ("/v1/get/:namespace/:key": `:name` is one path
 * segment, `:name*` the rest of the path), or "other". The label set is the template list.
 */
export function routeLabeler(templates: readonly string[]): (path: string) => string {
  const exact = new Map<string, string>();
  const patterns: [RegExp, string][] = [];
  for (const t of templates) {
    if (!t.includes(":")) {
      exact.set(t, t);
      continue;
    }
    const src = t
      .split("/")
      .map((seg) => (seg.startsWith(":") ? (seg.endsWith("*") ? ".+" : "[^/]+") : seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")))
      .join("/");
    patterns.push([new RegExp(`^${src}$`), t]);
  }
  return (path) => {
    const hit = exact.get(path);
    if (hit !== undefined) return hit;
    for (const [re, t] of patterns) if (re.test(path)) return t;
    return "other";
  };
}

/**
 * Express middleware counting every request it sees once its response is finished (or the
 * connection closed first), under the route template of its path.
 */
export function countRequests(m: HttpMetrics, label: (path: string) => string): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    const t0 = process.hrtime.bigint();
    const path = req.path;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      m.observe(req.method, label(path), res.statusCode, Number(process.hrtime.bigint() - t0) / 1e9);
    };
    res.once("finish", finish);
    res.once("close", finish);
    next();
  };
}

const sha256 = (s: string): Buffer => createHash("sha256").update(s, "utf8").digest();

/** SHA-256 digests of the secrets that may read /metrics (the secrets themselves are not kept). */
export const metricsDigests = (secrets: readonly (string | null | undefined)[]): Buffer[] =>
  secrets.filter((s): s is string => typeof s === "string" && s.length > 0).map(sha256);

/** Whether `Authorization: Bearer <secret>` names one of `digests`; every digest is compared, in constant time. */
export function bearerAllowed(req: IncomingMessage, digests: readonly Buffer[]): boolean {
  const h = req.headers.authorization;
  const m = typeof h === "string" ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
  if (!m) return false;
  const given = sha256(m[1]!);
  let ok = false;
  for (const d of digests) ok = timingSafeEqual(given, d) || ok;
  return ok;
}

/**
 * GET /metrics in the Prometheus text format. `digests` null: open (an engine run with
 * SVC_ENGINE_REQUIRE_AUTH=false, where every route is open); otherwise a bearer token whose
 * SHA-256 is one of them, else 401 through the app's error handler.
 */
export function metricsHandler(registry: Registry, digests: readonly Buffer[] | null) {
  return (req: IncomingMessage, res: ServerResponse, next: (e?: unknown) => void): void => {
    if (digests !== null && !bearerAllowed(req, digests)) {
      return next(new UnauthorizedError("Missing or invalid bearer token for /metrics: send the service key or the metrics token."));
    }
    registry.metrics().then(
      (text) => {
        res.setHeader("Content-Type", registry.contentType);
        res.setHeader("Cache-Control", "no-store");
        res.end(text);
      },
      (e: unknown) => next(e),
    );
  };
}

/** The data-plane routes of the engine and the gateway, as route labels. */
export const DATA_PLANE_ROUTES = [
  "/v1/put",
  "/v1/put_cores",
  "/v1/put_cores_batch",
  "/v1/get/:namespace/:key*",
  "/v1/delete/:namespace/:key*",
  "/v1/list/:namespace",
  "/v1/search",
  "/v1/serve",
  "/v1/query/similarity",
  "/v1/query/topk",
  "/v1/query/vector",
] as const;
