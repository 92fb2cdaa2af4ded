// Prometheus metrics of the appliance, in a registry of its own (no global state, so
// several apps can live in one test process); the HTTP part is server/http/metrics.ts.
import { Counter, type Registry } from "prom-client";
import type { FastHistogram } from "../http/fast-metric.js";
import { createHttpMetrics, type HttpMetrics } from "../http/metrics.js";

export interface ProvenanceMetrics {
  readonly registry: Registry;
  readonly receiptsIssued: Counter;
  readonly verifications: Counter<"verdict">;
  readonly bundlesExported: Counter;
  readonly requestDuration: FastHistogram<"method" | "route" | "status">;
  /** Requests and their durations by method, route and status. */
  readonly http: HttpMetrics;
}

export function createMetrics(opts: { defaultMetrics?: boolean } = {}): ProvenanceMetrics {
  const http = createHttpMetrics("svc_provenance_", opts);
  const registry = http.registry;
  return {
    registry,
    receiptsIssued: new Counter({ name: "svc_provenance_receipts_issued_total", help: "Receipts signed and returned.", registers: [registry] }),
    verifications: new Counter({
      name: "svc_provenance_verifications_total",
      help: "Receipt verifications by verdict (verify endpoint and bundle export).",
      labelNames: ["verdict"],
      registers: [registry],
    }),
    bundlesExported: new Counter({ name: "svc_provenance_bundles_exported_total", help: "Evidence bundles exported.", registers: [registry] }),
    requestDuration: http.duration,
    http,
  };
}
