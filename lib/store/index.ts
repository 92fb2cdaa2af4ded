// The embedded store of the library: versions, soft deletes, list/search, serve and
// similarity, on LMDB, PostgreSQL or memory behind lib/store/backend.ts. This file holds the
// options and the `Store` surface; each verb lives in the file of its kind: put.ts (put,
// put_cores, put_cores_batch, delete), read.ts (get, list, search, serve), queries.ts
// (similarity, top-K), maintenance.ts (compact).
import { z } from "zod";
import { ValidationError } from "../errors.js";
import { parseOrThrow, tenantIdSchema } from "../fields.js";
import {
  idempotencyKeySchema,
  maxRankSchema,
  toleranceSchema,
  type GetOptions,
  type ListOptions,
  type PutCoresOptions,
  type PutOptions,
  type PutPredOptions,
  type SearchOptions,
  type ServeOptions,
  type SimilarityOptions,
  type TopkOptions,
  type VectorOptions,
} from "../schemas.js";
import { systemClock, type Clock } from "../clock.js";
import type { TensorStore } from "../tensor-store.js";
import type { StorageBackend } from "./backend.js";
import { gpuServingFor } from "../gpu.js";
import { type GpuHandle, type GpuServing } from "./gpu-cache.js";
import { CoreCache, PayloadCache, whileOpen, type Core, type Scope, type StoreObserver } from "./context.js";
import { LmdbBackend } from "./lmdb.js";
import { MemoryBackend } from "./memory.js";
import { compact } from "./maintenance.js";
import { put, putCores, putCoresBatch, putPred, remove, type PutCoresItem, type PutData } from "./put.js";
import { get, list, search, serve, serveGpu, type ServeEntry } from "./read.js";
import { similarity, topk, vector } from "./queries.js";
import type { CoreInput } from "./cores.js";
import type { CompactResult, DeleteResult, EntryInfo, ListResult, PutResult, SearchResult, ServeResult, SimilarityResult, TopkResult } from "./types.js";

export type * from "./types.js";
export type { CoreInput } from "./cores.js";
export type { PutCoresItem, PutData } from "./put.js";
export { handOver } from "./put.js";
export { TOMBSTONE_RETENTION_MS } from "./context.js";
export type { StoreObserver } from "./context.js";
export { IDEMPOTENCY_TTL_MS } from "./idempotency.js";

const PG_URL = /^postgres(ql)?:\/\//;

const storeOptionsSchema = z
  .strictObject({
    /** An LMDB directory (created if absent), or ":memory:". */
    path: z.string().min(1, "path must not be empty").optional(),
    /** A PostgreSQL connection URL (postgres://user@host:port/database). */
    url: z.string().regex(PG_URL, "url must be a postgres:// or postgresql:// URL").optional(),
    /** PostgreSQL: the most connections the store's pool opens. */
    pool_size: z.number().int().min(1).max(1000).default(10),
    /** PostgreSQL: the longest wait, in ms, for a connection and for one statement (store_unavailable past it). */
    timeout_ms: z.number().int().min(100).max(600_000).default(5000),
    /** PostgreSQL: open even when the database cannot be reached yet (calls fail with store_unavailable until it can). */
    lazy_connect: z.boolean().default(false),
    tenant: tenantIdSchema.default("local"),
    min_compress_bytes: z.number().int().min(0).default(4096),
    min_compression_ratio: z.number().min(1, "min_compression_ratio must be at least 1").default(1.2),
    default_tolerance: toleranceSchema.default(1e-3),
    default_max_rank: maxRankSchema.default(256),
    clock: z.custom<Clock>((c) => typeof (c as Clock | null)?.now === "function", "clock must have a now() method").optional(),
    core_cache_bytes: z
      .number()
      .int()
      .min(0)
      .default(256 * 1024 * 1024),
    payload_cache_bytes: z
      .number()
      .int()
      .min(0)
      .default(64 * 1024 * 1024),
    // GPU serving (lib/store/gpu-cache.ts); absent: decided on first use from the native backend
    gpu: z.custom<GpuServing>((g) => g !== null && typeof g === "object" && ("unavailable" in g || "cache" in g), "gpu must be a GpuServing").optional(),
  })
  .refine((o) => (o.path === undefined) !== (o.url === undefined), { message: "exactly one of path and url is required", path: ["path"] });
export type StoreOptions = z.input<typeof storeOptionsSchema>;

/**
 * Opens a store on an LMDB directory (created if absent), on a PostgreSQL database (`url`:
 * tables created or migrated on first connect) or, with `path: ":memory:"`, in memory.
 * @example
 * const store = await createStore({ path: "./svc-data" });
 * await store.put("default", "a", new Float32Array(4096).fill(1), { shape: [16, 256] });
 * const shared = await createStore({ url: "postgres://svc@db.internal:5432/svc" });
 */
export async function createStore(options: StoreOptions): Promise<Store> {
  const o = parseOrThrow(storeOptionsSchema, options, "options");
  let backend: StorageBackend;
  if (o.url !== undefined) {
    const { PostgresBackend } = await import("./postgres.js");
    backend = await PostgresBackend.open(o.url, { poolSize: o.pool_size, timeoutMs: o.timeout_ms, lazy: o.lazy_connect });
  } else backend = o.path === ":memory:" ? new MemoryBackend() : new LmdbBackend(o.path!);
  const { path: _p, url: _u, pool_size: _s, timeout_ms: _t, lazy_connect: _l, tenant, clock, gpu, ...config } = o;
  return new Store(
    {
      backend,
      config,
      clock: clock ?? systemClock,
      cache: new CoreCache(o.core_cache_bytes),
      payloads: new PayloadCache(o.payload_cache_bytes),
      closed: false,
      gpu,
    },
    tenant,
  );
}

/**
 * A store scoped to one tenant; `forTenant` gives views of the same database for others.
 * It implements `TensorStore`, the surface it shares with `createClient`'s client.
 */
export class Store implements TensorStore {
  readonly #core: Core;
  readonly #scope: Scope;
  /** The tenant every key of this view is scoped to. */
  readonly tenant: string;
  /** Similarity queries (query_similarity, query_topk, query_vector). */
  readonly query: {
    similarity: (ns: string, a: string, b: string, opts?: SimilarityOptions) => Promise<SimilarityResult>;
    topk: (ns: string, opts: TopkOptions) => Promise<TopkResult>;
    vector: (ns: string, opts: VectorOptions) => Promise<TopkResult>;
  };

  constructor(core: Core, tenant: string, idem?: Scope["idem"]) {
    this.#core = core;
    this.tenant = tenant;
    const s: Scope = idem ? { core, tenant, idem } : { core, tenant };
    this.#scope = s;
    this.query = {
      similarity: (ns, a, b, opts) => whileOpen(core, similarity(s, ns, a, b, opts)),
      topk: (ns, opts) => whileOpen(core, topk(s, ns, opts)),
      vector: (ns, opts) => whileOpen(core, vector(s, ns, opts)),
    };
  }

  /** The storage backend's name (`lmdb`, `postgres` or `memory`). */
  get storage(): "lmdb" | "memory" | "postgres" {
    return this.#core.backend.name;
  }

  /** A view of the same store scoped to tenant `id`. */
  forTenant(id: string): Store {
    return new Store(this.#core, parseOrThrow(tenantIdSchema, id, "tenant"));
  }

  /**
   * A view whose writes (put, putCores, putCoresBatch, delete) are idempotent under `key`: the
   * first write stores its answer with `request_hash` (a digest of the request that the caller
   * computes) in the same transaction, kept 24 hours; a repeat with the same hash answers the
   * stored result and writes nothing (`replayed` is then true); a repeat with another hash
   * rejects with IdempotencyKeyReusedError. One view per request.
   * @example
   * const v = store.idempotent(req.get("idempotency-key")!, sha256(method, path, body));
   * const r = await v.put("ns", "k", data, opts); // v.replayed: answered from the stored response
   */
  idempotent(key: string, requestHash: string): Store {
    parseOrThrow(idempotencyKeySchema, key, "Idempotency-Key");
    if (typeof requestHash !== "string" || requestHash.length < 1 || requestHash.length > 128)
      throw new ValidationError("request_hash must be a string of 1 to 128 characters.", "request_hash");
    return new Store(this.#core, this.tenant, { key, request_hash: requestHash, replayed: false });
  }

  /** Whether a write of this idempotent view was answered from a stored response. */
  get replayed(): boolean {
    return this.#scope.idem?.replayed ?? false;
  }

  /** put: compresses (or stores losslessly or raw) and adds version n+1. */
  put(ns: string, key: string, data: PutData, opts: PutOptions = {}): Promise<PutResult> {
    return whileOpen(this.#core, put(this.#scope, ns, key, data, opts));
  }

  /** put_cores: stores a TT given by its cores (verdict `compressed`, relative_error 0). */
  putCores(ns: string, key: string, cores: CoreInput[], opts: PutCoresOptions = {}): Promise<PutResult> {
    return whileOpen(this.#core, putCores(this.#scope, ns, key, cores, opts));
  }

  /**
   * put of a stream of the prediction codec (lib/pred.ts) encoded by the caller: checked and
   * decoded in full, stored as it is; `relative_error` and `max_abs_error` are the caller's
   * measurement against its own data and become the entry's errors.
   */
  putPred(ns: string, key: string, stream: Uint8Array, opts: PutPredOptions): Promise<PutResult> {
    return whileOpen(this.#core, putPred(this.#scope, ns, key, stream, opts));
  }

  /** put_cores_batch: every item is validated before any is stored; all are stored in one transaction. */
  putCoresBatch(ns: string, items: PutCoresItem[]): Promise<{ results: PutResult[] }> {
    return whileOpen(this.#core, putCoresBatch(this.#scope, ns, items));
  }

  /** get: metadata and fingerprint of a version (latest by default), without reading the payload. */
  get(ns: string, key: string, opts: GetOptions = {}): Promise<EntryInfo> {
    return whileOpen(this.#core, get(this.#scope, ns, key, opts));
  }

  /** delete: soft delete with a tombstone kept 30 days. */
  delete(ns: string, key: string): Promise<DeleteResult> {
    return whileOpen(this.#core, remove(this.#scope, ns, key));
  }

  /** list: live keys in ascending byte order. */
  list(ns: string, opts: ListOptions = {}): Promise<ListResult> {
    return whileOpen(this.#core, list(this.#scope, ns, opts));
  }

  /** search: live keys whose latest metadata satisfy `filter`. */
  search(ns: string, filter: Record<string, unknown> = {}, opts: SearchOptions = {}): Promise<SearchResult> {
    return whileOpen(this.#core, search(this.#scope, ns, filter, opts));
  }

  /** serve (CPU): the dense tensor (or one block of it) as a typed array of the stored or requested dtype. */
  serve(ns: string, key: string, opts: ServeOptions = {}): Promise<ServeResult> {
    return whileOpen(this.#core, serve(this.#scope, ns, key, opts));
  }

  /**
   * serve for an answer that is only sent (a server writing it to a socket): the same result,
   * except that its data may share memory with the store's payload cache, so the caller must
   * never write into it. Saves the copy of a cached payload (about 0.4 ms per MiB).
   * `beforeDecode` gets the version read, its dtype and shape, before anything is decoded.
   */
  serveReadOnly(ns: string, key: string, opts: ServeOptions = {}, beforeDecode?: (entry: ServeEntry) => void): Promise<ServeResult> {
    return whileOpen(this.#core, serve(this.#scope, ns, key, opts, true, beforeDecode));
  }

  /** GPU serving of this store (every tenant view): set by the engine from SVC_ENGINE_DEVICE. */
  /** Metrics hooks of this store (every tenant view); null removes them. */
  observe(observer: StoreObserver | null): void {
    this.#core.observer = observer ?? undefined;
  }

  /** Whether the backend can serve now: one round trip to PostgreSQL; LMDB and memory are local (true while open). */
  async connected(): Promise<boolean> {
    return this.#core.backend.ping ? this.#core.backend.ping() : !this.#core.closed;
  }

  /** Bytes of the store on disk (`file`) and in use (`used`); null where the backend cannot tell. */
  sizeBytes(): { file: number; used: number } | null {
    return this.#core.backend.sizeBytes?.() ?? null;
  }

  useGpu(gpu: GpuServing): void {
    this.#core.gpu = gpu;
  }

  /** The GPU serving in use: the configured one, or (library use) the first CUDA device. */
  gpu(): GpuServing {
    return (this.#core.gpu ??= gpuServingFor("auto", null));
  }

  /**
   * serve on the GPU: loads the entry's TT cores to the device (or finds them resident in the
   * LRU cache) and pins them until `release()`. GpuUnavailableError (with the reason) where
   * there is no usable device or the entry cannot be made resident.
   */
  async serveGpu(ns: string, key: string, opts: GetOptions = {}): Promise<GpuHandle> {
    return whileOpen(this.#core, serveGpu(this.#scope, this.gpu(), ns, key, opts));
  }

  /**
   * Purges tombstones whose `purge_after` is at or before `now` (default: the store's clock)
   * and payloads that no kept version references. Covers every tenant.
   */
  compact(opts: { now?: number | Date } = {}): Promise<CompactResult> {
    return whileOpen(this.#core, compact(this.#core, opts));
  }

  /** The storage backend (for tools that copy a store: svc migrate). */
  get backend(): StorageBackend {
    return this.#core.backend;
  }

  /** Flushes and closes the store (every tenant view of it). */
  async close(): Promise<void> {
    if (this.#core.closed) return;
    this.#core.closed = true;
    await this.#core.backend.close();
  }
}
