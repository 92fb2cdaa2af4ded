// Prometheus metrics of the appliance, in a registry of its own (no global state, so
// several apps can live in one test process).
import { Counter, Histogram, Registry, collectDefaultMetrics } from "prom-client";

export interface ProvenanceMetrics {
  readonly registry: Registry;
  readonly receiptsIssued: Counter;
  readonly verifications: Counter<"verdict">;
  readonly bundlesExported: Counter;
  readonly requestDuration: Histogram<"method" | "route" | "status">;
}

export function createMetrics(opts: { defaultMetrics?: boolean } = {}): ProvenanceMetrics {
  const registry = new Registry();
  if (opts.defaultMetrics) collectDefaultMetrics({ register: registry, prefix: "svc_provenance_" });
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
    requestDuration: new Histogram({
      name: "svc_provenance_http_request_duration_seconds",
      help: "HTTP request durations by method, route and status.",
      labelNames: ["method", "route", "status"],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
  };
}
