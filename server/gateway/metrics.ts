// The gateway's Prometheus metrics: HTTP requests by route template and status (server/http/
// metrics.ts), CUs charged by operation, and the data-plane requests refused by the rate
// limit (429) and by the monthly quota (503). No label carries a tenant: tenants are many,
// and their usage is what GET /gate/admin/usage reports.
import type { Registry } from "prom-client";
import { FastCounter, type CounterChild } from "../http/fast-metric.js";
import { createHttpMetrics, DATA_PLANE_ROUTES, routeLabeler, type HttpMetrics } from "../http/metrics.js";

export interface GatewayMetrics {
  readonly registry: Registry;
  readonly http: HttpMetrics;
  /** The route label of a request path (a template of the gateway's routes, or "other"). */
  readonly route: (path: string) => string;
  /** CUs charged for one data-plane request (`milli` thousandths of a CU). */
  charged(op: string, milli: number): void;
  /** A data-plane request refused with `code`; counts rate_limited and quota_exhausted. */
  refused(code: string): void;
  /** A connection closed on arrival: its address held SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS. */
  connectionRefused(): void;
}

export const GATEWAY_ROUTES = [
  "/health",
  "/gate/health",
  "/openapi.json",
  "/metrics",
  "/gate/onboard/create",
  "/gate/onboard/rotate-key",
  "/gate/onboard/add-namespace",
  "/gate/onboard/update-tier",
  "/gate/onboard/deactivate",
  "/gate/admin/tenants",
  "/gate/admin/usage",
  "/gate/admin/usage/:tenant_id",
  "/gate/admin/reload",
  "/gate/checkout",
  "/webhooks/payment",
  ...DATA_PLANE_ROUTES,
] as const;

export function createGatewayMetrics(opts: { defaultMetrics?: boolean } = {}): GatewayMetrics {
  const http = createHttpMetrics("svc_gate_", opts);
  const registers = [http.registry];
  const cus = new FastCounter({ name: "svc_gate_cus_charged_total", help: "Compute units charged to tenants, by operation.", labelNames: ["op"], registers });
  const rateLimited = new FastCounter({
    name: "svc_gate_rate_limit_rejections_total",
    help: "Data-plane requests refused by the rate limit (429).",
    registers,
  });
  const quota = new FastCounter({
    name: "svc_gate_quota_rejections_total",
    help: "Data-plane requests refused because the monthly CU quota is used up (503).",
    registers,
  });
  const connections = new FastCounter({
    name: "svc_gate_connections_refused_total",
    help: "Connections closed on arrival because their client address held SVC_GATE_MAX_CONNECTIONS_PER_ADDRESS open.",
    registers,
  });
  // per-op children found once (the operations are the data plane's, a fixed set)
  const perOp = new Map<string, CounterChild>();
  return {
    registry: http.registry,
    http,
    route: routeLabeler(GATEWAY_ROUTES),
    charged(op, milli) {
      let c = perOp.get(op);
      if (!c) perOp.set(op, (c = cus.labels({ op })));
      c.inc(milli / 1000);
    },
    refused(code) {
      if (code === "rate_limited") rateLimited.inc();
      else if (code === "quota_exhausted") quota.inc();
    },
    connectionRefused() {
      connections.inc();
    },
  };
}
