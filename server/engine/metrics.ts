// The engine's Prometheus metrics: HTTP requests by route template and status (server/http/
// metrics.ts), compression and reconstruction time and bytes by codec, the decoded-core
// cache's hits and misses (hooks on the store), and the store's size, read at each scrape.
import { Gauge, type Registry } from "prom-client";
import { FastCounter, FastHistogram } from "../http/fast-metric.js";
import type { Store } from "../../lib/store/index.js";
import { createHttpMetrics, DATA_PLANE_ROUTES, routeLabeler, type HttpMetrics } from "../http/metrics.js";

export interface EngineMetrics {
  readonly registry: Registry;
  readonly http: HttpMetrics;
  /** The route label of a request path (a template of the engine's routes, or "other"). */
  readonly route: (path: string) => string;
  /** A connection closed on arrival: its address held SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS. */
  connectionRefused(): void;
}

const WORK_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** Metrics of an engine over `store`; installs the store's observer (one engine per store). */
export function createEngineMetrics(store: Store, opts: { defaultMetrics?: boolean } = {}): EngineMetrics {
  const http = createHttpMetrics("svc_engine_", opts);
  const registers = [http.registry];
  const codec = ["codec"] as const;
  const compressSeconds = new FastHistogram({
    name: "svc_engine_compress_seconds",
    help: "Time to encode a put's data, by the codec chosen (tt, pred, lossless, raw).",
    labelNames: codec,
    buckets: WORK_BUCKETS,
    registers,
  });
  const compressIn = new FastCounter({
    name: "svc_engine_compress_input_bytes_total",
    help: "Bytes given to put, by the codec chosen.",
    labelNames: codec,
    registers,
  });
  const compressStored = new FastCounter({
    name: "svc_engine_compress_stored_bytes_total",
    help: "Bytes stored for them, by codec.",
    labelNames: codec,
    registers,
  });
  const reconstructSeconds = new FastHistogram({
    name: "svc_engine_reconstruct_seconds",
    help: "Time to produce the dense data of a CPU serve, by the stored codec.",
    labelNames: codec,
    buckets: WORK_BUCKETS,
    registers,
  });
  const reconstructBytes = new FastCounter({
    name: "svc_engine_reconstruct_bytes_total",
    help: "Dense bytes produced by CPU serves, by the stored codec.",
    labelNames: codec,
    registers,
  });
  const hits = new FastCounter({ name: "svc_engine_core_cache_hits_total", help: "Lookups of decoded TT cores found in the core cache.", registers });
  const misses = new FastCounter({ name: "svc_engine_core_cache_misses_total", help: "Lookups of decoded TT cores that decoded the payload.", registers });
  const sizeOf = () => {
    try {
      return store.sizeBytes();
    } catch {
      return null; // a closed store: no sample
    }
  };
  new Gauge({
    name: "svc_engine_store_file_bytes",
    help: "Size of the store's data file on disk (what a backup copies at most).",
    registers,
    collect() {
      const s = sizeOf();
      if (s) this.set(s.file);
    },
  });
  new Gauge({
    name: "svc_engine_store_used_bytes",
    help: "Bytes of the store's pages up to the last one in use (free pages included).",
    registers,
    collect() {
      const s = sizeOf();
      if (s) this.set(s.used);
    },
  });
  store.observe({
    compress(c, s, bytesIn, bytesStored) {
      compressSeconds.observe({ codec: c }, s);
      compressIn.inc({ codec: c }, bytesIn);
      compressStored.inc({ codec: c }, bytesStored);
    },
    reconstruct(c, s, bytesOut) {
      reconstructSeconds.observe({ codec: c }, s);
      reconstructBytes.inc({ codec: c }, bytesOut);
    },
    coreCache(hit) {
      (hit ? hits : misses).inc();
    },
  });
  const refusedConnections = new FastCounter({
    name: "svc_engine_connections_refused_total",
    help: "Connections closed on arrival because their client address held SVC_ENGINE_MAX_CONNECTIONS_PER_ADDRESS open.",
    registers,
  });
  return {
    registry: http.registry,
    http,
    route: routeLabeler(["/health", "/metrics", ...DATA_PLANE_ROUTES]),
    connectionRefused: () => refusedConnections.inc(),
  };
}
