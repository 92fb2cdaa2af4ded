// The embedded store of docs/store.md: versions, soft deletes, list/search, serve and
// similarity, on LMDB (or memory) behind lib/store/backend.ts. Heavy work (compression,
// reconstruction, batched dots) runs before or outside the write transaction; each
// transaction only checks the head, then writes payload, version record and head.
import { z } from "zod";
import { GpuUnavailableError, NotFoundError, ValidationError, VersionConflictError } from "../errors.js";
import { compileFilter, matchFilter, type FilterNode } from "../filter.js";
import { Pace } from "./pace.js";
import { isFloatDtype, itemsize, keySchema, namespaceSchema, parseOrThrow, shapeSchema, tenantIdSchema, type Dtype } from "../names.js";
import {
  coreDtypeSchema, getOptionsSchema, listOptionsSchema, putCoresOptionsSchema, putOptionsSchema, searchOptionsSchema,
  serveOptionsSchema, similarityOptionsSchema, topkOptionsSchema, vectorOptionsSchema, maxRankSchema, toleranceSchema,
  type GetOptions, type ListOptions, type Metric, type PutCoresOptions, type PutOptions, type SearchOptions,
  type ServeOptions, type SimilarityOptions, type TopkOptions, type VectorOptions,
} from "../schemas.js";
import { systemClock, type Clock } from "../clock.js";
import type { TensorStore } from "../tensor-store.js";
import type { RecordKey, StorageBackend, WriteTx } from "./backend.js";
import {
  asBytes, denseNorm, extractBlock, fromWorkingFloat, hasNonFinite, losslessDecode, losslessEncode, product,
  sha256hex, toFloat64, toWorkingFloat, typedView,
} from "./codec.js";
import { gpuServingFor } from "../gpu.js";
import { type GpuHandle, type GpuServing } from "./gpu-cache.js";
import { deviceScores } from "./gpu-query.js";
import { LmdbBackend } from "./lmdb.js";
import { checkCores, type CoreInput } from "./cores.js";
import { packRecord, unpackRecord } from "./records.js";
import { MemoryBackend } from "./memory.js";
import { RANK_DENSE_CHUNK_BYTES, scoreBatch, similarity, type Operand } from "./query.js";
import { loadTT, type TT } from "./ttapi.js";
import type {
  CompactResult, DeleteResult, EntryInfo, HeadRecord, ListResult, PayloadLayout, PutResult, SearchResult,
  ServeArray, ServeResult, SimilarityResult, TopkResult, VersionRecord,
} from "./types.js";

export type * from "./types.js";

/** Device handles behind the GpuHandles this module gave out (for handle.dot(handle)). */
const gpuHandles = new WeakMap<GpuHandle, { backend: unknown; handle: unknown; live: () => void }>();

/** Tombstones are kept this long after a delete. */
export const TOMBSTONE_RETENTION_MS = 30 * 24 * 3600 * 1000;

const storeOptionsSchema = z.strictObject({
  path: z.string().min(1, "path must not be empty"),
  tenant: tenantIdSchema.default("local"),
  min_compress_bytes: z.number().int().min(0).default(4096),
  min_compression_ratio: z.number().min(1, "min_compression_ratio must be at least 1").default(1.2),
  default_tolerance: toleranceSchema.default(1e-3),
  default_max_rank: maxRankSchema.default(256),
  clock: z.custom<Clock>((c) => typeof (c as Clock | null)?.now === "function", "clock must have a now() method").optional(),
  core_cache_bytes: z.number().int().min(0).default(256 * 1024 * 1024),
  // GPU serving (lib/store/gpu-cache.ts); absent: decided on first use from the native backend
  gpu: z.custom<GpuServing>((g) => g !== null && typeof g === "object" && ("unavailable" in g || "cache" in g), "gpu must be a GpuServing").optional(),
});
export type StoreOptions = z.input<typeof storeOptionsSchema>;
type StoreConfig = Omit<z.output<typeof storeOptionsSchema>, "clock" | "tenant" | "path" | "gpu">;

/** Data accepted by put: a typed array, a Buffer or an ArrayBuffer (bytes, little-endian, C order). */
export type PutData = ArrayBufferView | ArrayBuffer;

export type { CoreInput } from "./cores.js";
export interface PutCoresItem extends PutCoresOptions {
  key: string;
  cores: CoreInput[];
}


// ---- record keys: (tenant, namespace, key) scopes everything ----
const headKey = (t: string, ns: string, key: string): RecordKey => ["h", t, ns, key];
const versionKey = (t: string, ns: string, key: string, v: number): RecordKey => ["v", t, ns, key, v];
const END = "\uffff"; // above every key character

const iso = (ms: number): string => new Date(ms).toISOString();

/** The natural dtype of a typed array (Buffer and ArrayBuffer: raw bytes). */
function naturalDtype(data: PutData): Dtype | "raw" {
  if (data instanceof ArrayBuffer || Buffer.isBuffer(data) || data instanceof DataView) return "raw";
  if (data instanceof Float32Array) return "float32";
  if (data instanceof Float64Array) return "float64";
  if (data instanceof Int8Array) return "int8";
  if (data instanceof Uint8Array || data instanceof Uint8ClampedArray) return "uint8";
  if (data instanceof Int16Array) return "int16";
  if (data instanceof Uint16Array) return "uint16";
  if (data instanceof Int32Array) return "int32";
  if (data instanceof Uint32Array) return "uint32";
  if (data instanceof BigInt64Array) return "int64";
  if (data instanceof BigUint64Array) return "uint64";
  throw new ValidationError("data must be a typed array, a Buffer or an ArrayBuffer.", "data");
}

function checkDataKind(data: unknown): asserts data is PutData {
  if (!(data instanceof ArrayBuffer) && !ArrayBuffer.isView(data))
    throw new ValidationError("data must be a typed array, a Buffer or an ArrayBuffer.", "data");
}

/** Which explicit dtypes may reinterpret a typed array of another element type. */
function compatible(natural: Dtype | "raw", dtype: Dtype): boolean {
  if (natural === "raw" || natural === dtype) return true;
  if (natural === "uint8") return true; // plain bytes
  if (natural === "uint16") return dtype === "float16" || dtype === "bfloat16";
  return false;
}

/** What decoding needs: a version record, or a head (which carries its latest version's). */
type Entry = Pick<VersionRecord, "dtype" | "shape" | "fingerprint" | "layout">;

interface Prepared {
  record: Omit<VersionRecord, "version" | "created_at">;
  payload: Uint8Array;
}

interface Core {
  backend: StorageBackend;
  config: StoreConfig;
  clock: Clock;
  cache: CoreCache;
  closed: boolean;
  gpu?: GpuServing;
  observer?: StoreObserver;
}

/** Hooks for metrics (the engine's /metrics): called after the work, never on a failure. */
export interface StoreObserver {
  /** A put's encoding: the codec chosen (`tt`, `lossless`, `raw`), its time, bytes in and stored. */
  compress?(codec: string, seconds: number, bytesIn: number, bytesStored: number): void;
  /** A CPU serve: the stored codec, the time to produce the dense data, its bytes. */
  reconstruct?(codec: string, seconds: number, bytesOut: number): void;
  /** A lookup in the cache of decoded TT cores. */
  coreCache?(hit: boolean): void;
}

const seconds = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1e9;

/** Decoded TT cores by payload hash (content-addressed, so never stale), bounded in bytes. */
class CoreCache {
  #map = new Map<string, TT>();
  #bytes = 0;
  constructor(readonly limit: number) {}
  get(id: string): TT | undefined {
    const t = this.#map.get(id);
    if (t) {
      this.#map.delete(id);
      this.#map.set(id, t);
    }
    return t;
  }
  set(id: string, t: TT): void {
    const size = t.cores.reduce((s, c) => s + c.byteLength, 0);
    if (size > this.limit || this.#map.has(id)) return;
    this.#map.set(id, t);
    this.#bytes += size;
    for (const [k, v] of this.#map) {
      if (this.#bytes <= this.limit) break;
      this.#map.delete(k);
      this.#bytes -= v.cores.reduce((s, c) => s + c.byteLength, 0);
    }
  }
}

/**
 * Opens a store on an LMDB directory (created if absent) or, with `":memory:"`, in memory.
 * @example
 * const store = await createStore({ path: "./svc-data" });
 * await store.put("default", "a", new Float32Array(4096).fill(1), { shape: [16, 256] });
 */
export async function createStore(options: StoreOptions): Promise<Store> {
  const o = parseOrThrow(storeOptionsSchema, options, "options");
  const backend: StorageBackend = o.path === ":memory:" ? new MemoryBackend() : new LmdbBackend(o.path);
  const { path: _p, tenant, clock, gpu, ...config } = o;
  return new Store({ backend, config, clock: clock ?? systemClock, cache: new CoreCache(o.core_cache_bytes), closed: false, gpu }, tenant);
}

/**
 * A store scoped to one tenant; `forTenant` gives views of the same database for others.
 * It implements `TensorStore`, the surface it shares with `createClient`'s client.
 */
export class Store implements TensorStore {
  readonly #core: Core;
  /** The tenant every key of this view is scoped to. */
  readonly tenant: string;
  /** Similarity queries (query_similarity, query_topk, query_vector). */
  readonly query: {
    similarity: (ns: string, a: string, b: string, opts?: SimilarityOptions) => Promise<SimilarityResult>;
    topk: (ns: string, opts: TopkOptions) => Promise<TopkResult>;
    vector: (ns: string, opts: VectorOptions) => Promise<TopkResult>;
  };

  constructor(core: Core, tenant: string) {
    this.#core = core;
    this.tenant = tenant;
    this.query = {
      similarity: (ns, a, b, opts) => this.#similarity(ns, a, b, opts),
      topk: (ns, opts) => this.#topk(ns, opts),
      vector: (ns, opts) => this.#vector(ns, opts),
    };
  }

  /** The storage backend's name (`lmdb` or `memory`). */
  get storage(): "lmdb" | "memory" {
    return this.#core.backend.name;
  }

  /** A view of the same store scoped to tenant `id`. */
  forTenant(id: string): Store {
    return new Store(this.#core, parseOrThrow(tenantIdSchema, id, "tenant"));
  }

  #open(): Core {
    if (this.#core.closed) throw new ValidationError("The store is closed.");
    return this.#core;
  }

  // ---------------- put ----------------

  /** put: compresses (or stores losslessly or raw) and adds version n+1. */
  async put(ns: string, key: string, data: PutData, opts: PutOptions = {}): Promise<PutResult> {
    const core = this.#open();
    namespace(ns);
    keyName(key);
    checkDataKind(data);
    const o = parseOrThrow(putOptionsSchema, opts, "options");
    const t0 = process.hrtime.bigint();
    const prepared = await this.#prepare(data, o);
    const r = prepared.record;
    core.observer?.compress?.(r.layout.codec, seconds(t0), r.bytes_in, r.bytes_stored);
    return this.#commit(ns, [{ key, prepared, if_version: o.if_version, metadata: o.metadata ?? {} }]).then((r) => r[0]!);
  }

  async #prepare(data: PutData, o: z.output<typeof putOptionsSchema>): Promise<Prepared> {
    const { config } = this.#core;
    const natural = naturalDtype(data);
    const dtype: Dtype = o.dtype ?? (natural === "raw" ? "bytes" : natural);
    if (!compatible(natural, dtype))
      throw new ValidationError(`dtype ${dtype} does not match the data's element type ${natural}.`, "dtype");
    const bytes = asBytes(data);
    const size = itemsize(dtype);
    let shape = o.shape;
    if (!shape) {
      if (dtype !== "bytes") throw new ValidationError(`shape is required for dtype ${dtype}.`, "shape");
      shape = [bytes.byteLength];
    }
    const need = product(shape) * size;
    if (need !== bytes.byteLength)
      throw new ValidationError(`data has ${bytes.byteLength} bytes but shape [${shape.join(", ")}] of ${dtype} needs ${need}.`, "data");
    if (bytes.byteLength === 0) throw new ValidationError("data must not be empty.", "data");
    const tolerance = o.tolerance ?? config.default_tolerance;
    const maxRank = o.max_rank ?? config.default_max_rank;
    const bytesIn = bytes.byteLength;
    const view = typedView(bytes, dtype);

    const raw = (norm: number | null): Prepared => {
      const payload = new Uint8Array(bytes); // own copy: the caller may reuse its buffer
      return {
        payload,
        record: base(dtype, shape!, "passthrough", 1, 0, bytesIn, bytesIn, { sha256: sha256hex(payload), codec: "raw", tt: null, norm }, { codec: "raw" }),
      };
    };

    const lossless = async (norm: number | null): Promise<Prepared> => {
      const { payload, shuffle } = await losslessEncode(bytes, dtype);
      const ratio = bytesIn / payload.byteLength;
      if (ratio < config.min_compression_ratio) return raw(norm);
      return {
        payload,
        record: base(dtype, shape!, "lossless", ratio, 0, bytesIn, payload.byteLength,
          { sha256: sha256hex(payload), codec: "lossless", tt: null, norm }, { codec: "lossless", shuffle }),
      };
    };

    if (isFloatDtype(dtype)) {
      const work = toWorkingFloat(view, dtype);
      if (hasNonFinite(work)) throw new ValidationError("data contains NaN or infinite values; floating data must be finite.", "data");
      if (bytesIn < config.min_compress_bytes) return raw(denseNorm(work));
      const tt = await loadTT();
      // cores are float32 (float64 for float64 data): the reachable ratio is measured against them
      const coreBytes = dtype === "float64" ? 8 : 4;
      const minRatio = config.min_compression_ratio * (coreBytes / size);
      if (isAllZero(work)) {
        // All zeros (an initialised array, say): the exact TT has rank 1 and zero cores. The
        // TT engine refuses zero data, since a relative tolerance means nothing there.
        const modes = tt.chooseModes(shape);
        const cores = modes.map((n) => (coreBytes === 8 ? new Float64Array(n) : new Float32Array(n)));
        const payload = concatCores(cores);
        const stored = payload.byteLength;
        if (bytesIn / stored < config.min_compression_ratio) return raw(0); // a prime length, say
        const info = { modes, ranks: [1, ...modes.map(() => 1)] };
        return {
          payload,
          record: base(dtype, shape, "compressed", bytesIn / stored, 0, bytesIn, stored,
            { sha256: sha256hex(payload), codec: "tt", tt: info, norm: 0 },
            { codec: "tt", core_dtype: coreBytes === 8 ? "float64" : "float32", ...info }),
        };
      }
      // float16/bfloat16 entries are served rounded to their type, which adds up to half a unit
      // in the last place (2^-11, 2^-8 relative): the TT keeps that share of the tolerance free,
      // and where too little would be left the entry is stored losslessly instead
      const unit = dtype === "float16" ? 2 ** -11 : dtype === "bfloat16" ? 2 ** -8 : 0;
      const ttTolerance = tolerance - unit * (1 + tolerance);
      if (ttTolerance < tolerance / 4) return lossless(denseNorm(work));
      // min_ratio also gives up when no TT within the tolerance reaches the ratio (docs/tt.md),
      // so incompressible data are passthrough at once, even where capped ranks would fit
      const res = await tt.compress(work, shape, { tolerance: ttTolerance, max_rank: maxRank, min_ratio: minRatio });
      if (res === null) return raw(denseNorm(work));
      const stored = res.cores.reduce((s, c) => s + c.byteLength, 0);
      const ratio = bytesIn / stored;
      if (ratio < config.min_compression_ratio) return raw(denseNorm(work));
      const payload = concatCores(res.cores);
      const norm = await tt.norm(res);
      const verdict = res.relative_error <= ttTolerance ? "compressed" : "weak";
      const info = { modes: [...res.modes], ranks: [...res.ranks] };
      return {
        payload,
        record: base(dtype, shape, verdict, ratio, res.relative_error, bytesIn, stored,
          { sha256: sha256hex(payload), codec: "tt", tt: info, norm },
          { codec: "tt", core_dtype: coreBytes === 8 ? "float64" : "float32", ...info }),
      };
    }
    const norm = dtype === "bytes" ? null : denseNorm(toFloat64(view, dtype));
    if (bytesIn < config.min_compress_bytes) return raw(norm);
    return lossless(norm);
  }

  /** put_cores: stores a TT given by its cores (verdict `compressed`, relative_error 0). */
  async putCores(ns: string, key: string, cores: CoreInput[], opts: PutCoresOptions = {}): Promise<PutResult> {
    this.#open();
    namespace(ns);
    keyName(key);
    const o = parseOrThrow(putCoresOptionsSchema, opts, "options");
    const prepared = await this.#prepareCores(cores, o.shape, "cores");
    return this.#commit(ns, [{ key, prepared, if_version: o.if_version, metadata: o.metadata ?? {} }]).then((r) => r[0]!);
  }

  /** put_cores_batch: every item is validated before any is stored; all are stored in one transaction. */
  async putCoresBatch(ns: string, items: PutCoresItem[]): Promise<{ results: PutResult[] }> {
    this.#open();
    namespace(ns);
    if (!Array.isArray(items) || items.length < 1 || items.length > 1000)
      throw new ValidationError("items must be a list of 1 to 1000 put_cores requests.", "items");
    const checked = items.map((it, i) => {
      try {
        if (it === null || typeof it !== "object") throw new ValidationError("must be an object.");
        const { key, cores, ...rest } = it;
        keyName(key);
        return { key, cores, o: parseOrThrow(putCoresOptionsSchema, rest) };
      } catch (e) {
        throw itemError(e, i);
      }
    });
    const prepared: Prepared[] = [];
    for (let i = 0; i < checked.length; i++) {
      try {
        prepared.push(await this.#prepareCores(checked[i]!.cores, checked[i]!.o.shape, "cores"));
      } catch (e) {
        throw itemError(e, i);
      }
    }
    const results = await this.#commit(
      ns,
      checked.map((c, i) => ({ key: c.key, prepared: prepared[i]!, if_version: c.o.if_version, metadata: c.o.metadata ?? {} })),
      true,
    );
    return { results };
  }

  async #prepareCores(cores: CoreInput[], denseShape: number[] | undefined, where: string): Promise<Prepared> {
    const checked = checkCores(cores, where);
    const arrays = checked.map((c) => c.values);
    const modes = checked.map((c) => c.shape[1]);
    const ranks = [1, ...checked.map((c) => c.shape[2])];
    const shape = denseShape ? parseOrThrow(shapeSchema, denseShape, "shape") : [...modes];
    if (product(shape) !== product(modes))
      throw new ValidationError(`shape [${shape.join(", ")}] has ${product(shape)} elements but the cores' modes give ${product(modes)}.`, "shape");
    const dtype = checked[0]!.dtype;
    const t: TT = { modes, ranks, cores: arrays, ...(denseShape ? { shape } : {}) };
    const norm = await (await loadTT()).norm(t);
    if (!Number.isFinite(norm)) throw new ValidationError(`${where}: the tensor's norm overflows.`, where);
    const payload = concatCores(arrays);
    const bytesIn = product(shape) * itemsize(dtype);
    const info = { modes, ranks };
    return {
      payload,
      record: base(dtype, shape, "compressed", bytesIn / payload.byteLength, 0, bytesIn, payload.byteLength,
        { sha256: sha256hex(payload), codec: "tt", tt: info, norm }, { codec: "tt", core_dtype: dtype, ...info }),
    };
  }

  /** One write transaction for all items: read heads, check if_version, then write. */
  async #commit(
    ns: string,
    items: { key: string; prepared: Prepared; if_version: number | undefined; metadata: Record<string, unknown> }[],
    batch = false,
  ): Promise<PutResult[]> {
    const { backend, clock } = this.#open();
    const t = this.tenant;
    return backend.transact((tx) => {
      const now = clock.now();
      // check phase: nothing is written until every item passed
      const heads = new Map<string, HeadRecord | undefined>();
      const plans = items.map((it, i) => {
        const head = heads.has(it.key) ? heads.get(it.key) : unpackRecord<HeadRecord>(tx.get(headKey(t, ns, it.key)));
        const live = head !== undefined && !head.deleted;
        const current = live ? head.latest : 0;
        if (it.if_version !== undefined && it.if_version !== current) {
          const msg = `key ${it.key} is at version ${current}, not ${it.if_version}${batch ? ` (items.${i})` : ""}.`;
          throw new VersionConflictError(msg.charAt(0).toUpperCase() + msg.slice(1), it.if_version, current);
        }
        const version = (head?.latest ?? 0) + 1;
        const rec = it.prepared.record;
        const next: HeadRecord = {
          latest: version,
          first_live: live ? head.first_live : version,
          deleted: false,
          updated_at: now,
          dtype: rec.dtype,
          shape: rec.shape,
          verdict: rec.verdict,
          metadata: it.metadata,
          fingerprint: rec.fingerprint,
          layout: rec.layout,
          tombstones: head?.tombstones ?? [],
        };
        heads.set(it.key, next);
        return { it, version, next };
      });
      // write phase
      const results: PutResult[] = [];
      for (const { it, version, next } of plans) {
        const rec: VersionRecord = { ...it.prepared.record, version, created_at: now, metadata: it.metadata };
        if (!tx.hasPayload(rec.fingerprint.sha256)) tx.putPayload(rec.fingerprint.sha256, it.prepared.payload);
        tx.put(versionKey(t, ns, it.key, version), packRecord(rec));
        tx.put(headKey(t, ns, it.key), packRecord(next));
        results.push(putResult(ns, it.key, rec));
      }
      return results;
    });
  }

  // ---------------- get / delete / list / search ----------------

  #head(ns: string, key: string): HeadRecord {
    const h = unpackRecord<HeadRecord>(this.#open().backend.get(headKey(this.tenant, ns, key)));
    if (!h || h.deleted) throw new NotFoundError(`No entry ${key} in namespace ${ns}.`);
    return h;
  }

  #version(ns: string, key: string, version?: number): { head: HeadRecord; rec: VersionRecord } {
    const head = this.#head(ns, key);
    const v = version ?? head.latest;
    const rec = v >= head.first_live && v <= head.latest
      ? unpackRecord<VersionRecord>(this.#core.backend.get(versionKey(this.tenant, ns, key, v)))
      : undefined;
    if (!rec) throw new NotFoundError(`Entry ${key} in namespace ${ns} has no version ${v}.`);
    return { head, rec };
  }

  /** get: metadata and fingerprint of a version (latest by default), without reading the payload. */
  async get(ns: string, key: string, opts: GetOptions = {}): Promise<EntryInfo> {
    namespace(ns);
    keyName(key);
    const o = parseOrThrow(getOptionsSchema, opts, "options");
    const { head, rec } = this.#version(ns, key, o.version);
    const versions: number[] = [];
    for (let v = head.first_live; v <= head.latest; v++) versions.push(v);
    return {
      namespace: ns,
      key,
      version: rec.version,
      latest_version: head.latest,
      versions,
      created_at: iso(rec.created_at),
      dtype: rec.dtype,
      shape: rec.shape,
      metadata: rec.metadata,
      verdict: rec.verdict,
      compressed: rec.verdict !== "passthrough",
      compression_ratio: rec.compression_ratio,
      relative_error: rec.relative_error,
      bytes_in: rec.bytes_in,
      bytes_stored: rec.bytes_stored,
      fingerprint: rec.fingerprint,
    };
  }

  /** delete: soft delete with a tombstone kept 30 days. */
  async delete(ns: string, key: string): Promise<DeleteResult> {
    const { backend, clock } = this.#open();
    namespace(ns);
    keyName(key);
    const t = this.tenant;
    return backend.transact((tx) => {
      const head = unpackRecord<HeadRecord>(tx.get(headKey(t, ns, key)));
      if (!head || head.deleted) throw new NotFoundError(`No entry ${key} in namespace ${ns}.`);
      const now = clock.now();
      const purgeAfter = now + TOMBSTONE_RETENTION_MS;
      const next: HeadRecord = {
        ...head,
        deleted: true,
        updated_at: now,
        tombstones: [...head.tombstones, { from: head.first_live, upto: head.latest, purge_after: purgeAfter }],
      };
      tx.put(headKey(t, ns, key), packRecord(next));
      return { namespace: ns, key, deleted: true as const, version: head.latest, purge_after: iso(purgeAfter) };
    });
  }

  *#liveHeads(ns: string, prefix: string): Iterable<{ key: string; head: HeadRecord }> {
    const { backend } = this.#open();
    for (const { key, value } of backend.range(headKey(this.tenant, ns, prefix), headKey(this.tenant, ns, prefix + END))) {
      const head = value as HeadRecord;
      if (!head.deleted) yield { key: key[3] as string, head: unpackRecord<HeadRecord>(head)! };
    }
  }

  /** list: live keys in ascending byte order. */
  async list(ns: string, opts: ListOptions = {}): Promise<ListResult> {
    namespace(ns);
    const o = parseOrThrow(listOptionsSchema, opts, "options");
    const keys: ListResult["keys"] = [];
    let total = 0;
    const pace = new Pace();
    for (const { key, head } of this.#liveHeads(ns, o.prefix)) {
      if (pace.due()) await pace.yield();
      if (total >= o.offset && keys.length < o.limit)
        keys.push({ key, version: head.latest, updated_at: iso(head.updated_at), dtype: head.dtype, shape: head.shape, verdict: head.verdict });
      total++;
    }
    return { namespace: ns, keys, total, limit: o.limit, offset: o.offset, next_offset: o.offset + keys.length < total ? o.offset + keys.length : null };
  }

  /** search: live keys whose latest metadata satisfy `filter`. */
  async search(ns: string, filter: Record<string, unknown> = {}, opts: SearchOptions = {}): Promise<SearchResult> {
    namespace(ns);
    const node = compileFilter(filter);
    const o = parseOrThrow(searchOptionsSchema, opts, "options");
    const results: SearchResult["results"] = [];
    let total = 0;
    const pace = new Pace();
    for (const { key, head } of this.#liveHeads(ns, o.prefix)) {
      if (pace.due()) await pace.yield();
      if (!matchFilter(node, head.metadata)) continue;
      if (total >= o.offset && results.length < o.limit) results.push({ key, version: head.latest, metadata: head.metadata });
      total++;
    }
    return { namespace: ns, results, total, limit: o.limit, offset: o.offset, next_offset: o.offset + results.length < total ? o.offset + results.length : null };
  }

  // ---------------- serve ----------------

  #payload(rec: Entry): Buffer {
    const p = this.#core.backend.getPayload(rec.fingerprint.sha256);
    if (!p) throw new NotFoundError("The entry's payload is missing.");
    return p;
  }

  #tt(rec: Entry): TT {
    const id = rec.fingerprint.sha256;
    const cached = this.#core.cache.get(id);
    this.#core.observer?.coreCache?.(cached !== undefined);
    if (cached) return cached;
    const layout = rec.layout as Extract<PayloadLayout, { codec: "tt" }>;
    const shapeDiffers = rec.shape.length !== layout.modes.length || rec.shape.some((s, i) => s !== layout.modes[i]);
    const bytes = this.#payload(rec);
    const cores: (Float32Array | Float64Array)[] = [];
    const width = layout.core_dtype === "float64" ? 8 : 4;
    // one aligned copy of the payload, cores are views into it
    const buf = new Uint8Array(bytes.byteLength);
    buf.set(bytes);
    let off = 0;
    for (let k = 0; k < layout.modes.length; k++) {
      const n = layout.ranks[k]! * layout.modes[k]! * layout.ranks[k + 1]!;
      cores.push(layout.core_dtype === "float64" ? new Float64Array(buf.buffer, off, n) : new Float32Array(buf.buffer, off, n));
      off += n * width;
    }
    const t: TT = { modes: layout.modes, ranks: layout.ranks, cores, ...(shapeDiffers ? { shape: rec.shape } : {}) };
    this.#core.cache.set(id, t);
    return t;
  }

  async #dense(rec: Entry): Promise<ServeArray> {
    const payload = this.#payload(rec);
    if (rec.layout.codec === "lossless") return typedView(await losslessDecode(payload, rec.layout.shuffle), rec.dtype);
    return typedView(new Uint8Array(payload), rec.dtype);
  }

  /** serve (CPU): the dense tensor (or one block of it) as a typed array of the stored or requested dtype. */
  async serve(ns: string, key: string, opts: ServeOptions = {}): Promise<ServeResult> {
    namespace(ns);
    keyName(key);
    const o = parseOrThrow(serveOptionsSchema, opts, "options");
    const { rec } = this.#version(ns, key, o.version);
    const slice = o.slice;
    if (slice) {
      if (slice.length !== rec.shape.length)
        throw new ValidationError(`slice has ${slice.length} pairs but the entry has ${rec.shape.length} dimensions.`, "slice");
      slice.forEach(([, stop], i) => {
        if (stop > rec.shape[i]!) throw new ValidationError(`slice.${i} stops at ${stop}, beyond dimension size ${rec.shape[i]}.`, `slice.${i}`);
      });
    }
    if (o.dtype && !isFloatDtype(rec.dtype))
      throw new ValidationError(`dtype conversion applies to floating data only; the entry is ${rec.dtype}.`, "dtype");
    const outShape = slice ? slice.map(([a, b]) => b - a) : rec.shape;
    const outDtype = (o.dtype ?? rec.dtype) as Dtype;
    const t0 = process.hrtime.bigint();
    let data: ServeArray;
    if (rec.layout.codec === "tt") {
      const tt = await loadTT();
      const work = await tt.reconstruct(this.#tt(rec), slice ? { slice: slice.map(([a, b]) => [a, b] as [number, number]) } : undefined);
      data = fromWorkingFloat(work, outDtype as "float32");
    } else {
      const full = await this.#dense(rec);
      const block = slice ? extractBlock(full, rec.shape, slice, rec.dtype) : full;
      data = isFloatDtype(rec.dtype) && outDtype !== rec.dtype
        ? fromWorkingFloat(toWorkingFloat(block, rec.dtype), outDtype as "float32")
        : block;
    }
    this.#core.observer?.reconstruct?.(rec.layout.codec, seconds(t0), data.byteLength);
    return { namespace: ns, key, version: rec.version, data, dtype: outDtype, shape: outShape };
  }

  /** Metrics hooks of this store (every tenant view); null removes them. */
  observe(observer: StoreObserver | null): void {
    this.#core.observer = observer ?? undefined;
  }

  /** Bytes of the store on disk (`file`) and in use (`used`); null for a store in memory. */
  sizeBytes(): { file: number; used: number } | null {
    return this.#open().backend.sizeBytes?.() ?? null;
  }

  /** GPU serving of this store (every tenant view): set by the engine from SVC_ENGINE_DEVICE. */
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
    namespace(ns);
    keyName(key);
    const o = parseOrThrow(getOptionsSchema, opts, "options");
    const { rec } = this.#version(ns, key, o.version);
    const gpu = this.gpu();
    if ("unavailable" in gpu) throw new GpuUnavailableError(gpu.unavailable);
    if (rec.layout.codec !== "tt")
      throw new ValidationError(`Entry ${key} version ${rec.version} is stored without TT cores (${rec.layout.codec}); GPU serving applies to TT-compressed entries.`, "key");
    const tt = this.#tt(rec);
    const lease = await gpu.cache.acquire({ tenant: this.tenant, ns, key, version: rec.version }, () => tt);
    const { backend } = gpu;
    let released = false;
    const live = () => {
      if (released) throw new ValidationError("This GPU handle was released.", "handle");
    };
    const handles = gpuHandles;
    const handle: GpuHandle = {
      namespace: ns,
      key,
      version: rec.version,
      device: gpu.cache.device,
      resident: true,
      bytes_on_device: lease.bytes,
      tt: { modes: [...tt.modes], ranks: [...tt.ranks] },
      reconstruct: async (ro = {}) => {
        live();
        const r = parseOrThrow(serveOptionsSchema, ro, "options");
        const { slice, dtype } = r;
        if (r.version !== undefined) throw new ValidationError("version is fixed by the handle.", "version");
        const cpu = () => this.serve(ns, key, { version: rec.version, slice, dtype });
        if (slice) {
          if (slice.length !== rec.shape.length)
            throw new ValidationError(`slice has ${slice.length} pairs but the entry has ${rec.shape.length} dimensions.`, "slice");
          slice.forEach(([, stop], i) => {
            if (stop > rec.shape[i]!) throw new ValidationError(`slice.${i} stops at ${stop}, beyond dimension size ${rec.shape[i]}.`, `slice.${i}`);
          });
          // blocks of quantized entries (dense dimensions spanning several modes): CPU
          const single = rec.shape.length === tt.modes.length && rec.shape.every((n, i) => n === tt.modes[i]);
          if (!single) return cpu();
        }
        const work = await backend.reconstruct(lease.handle, { ...tt, shape: rec.shape }, slice?.map(([a, b]) => [a, b] as [number, number]));
        const outDtype = (dtype ?? rec.dtype) as Dtype;
        return {
          namespace: ns, key, version: rec.version, dtype: outDtype,
          shape: slice ? slice.map(([a, b]) => b - a) : [...rec.shape],
          data: fromWorkingFloat(work, outDtype as "float32"),
        };
      },
      dot: async (other) => {
        live();
        const mine = handles.get(other as GpuHandle);
        if (mine && mine.backend === backend) {
          mine.live();
          const ot = (other as GpuHandle).tt;
          if (ot.modes.length === tt.modes.length && ot.modes.every((m, i) => m === tt.modes[i])) return backend.dot(lease.handle, mine.handle);
        }
        const r = await this.query.similarity(ns, key, other.key, {
          version_a: rec.version, version_b: other.version, namespace_b: (other as { namespace?: string }).namespace, metric: "dot",
        });
        return r.score;
      },
      release: () => {
        if (released) return;
        released = true;
        lease.release();
      },
    };
    handles.set(handle, { backend, handle: lease.handle, live });
    return handle;
  }

  // ---------------- similarity ----------------

  /** The TT operand of an entry, synchronously (top-K builds thousands). */
  #ttOperand(rec: Entry): Operand {
    const layout = rec.layout as Extract<PayloadLayout, { codec: "tt" }>;
    return { kind: "tt", tt: this.#tt(rec), norm: rec.fingerprint.norm!, coreDtype: layout.core_dtype };
  }

  async #operand(rec: Entry, what: string): Promise<Operand> {
    if (rec.dtype === "bytes") throw new ValidationError(`${what} holds bytes; similarity needs numeric data.`, what);
    if (rec.layout.codec === "tt") return this.#ttOperand(rec);
    const dense = await this.#dense(rec);
    const x = rec.dtype === "float64" ? (dense as Float64Array) : rec.dtype === "float32" ? (dense as Float32Array)
      : isFloatDtype(rec.dtype) ? toWorkingFloat(dense, rec.dtype) : toFloat64(dense, rec.dtype);
    return { kind: "dense", x, norm: rec.fingerprint.norm! };
  }

  async #similarity(ns: string, a: string, b: string, opts: SimilarityOptions = {}): Promise<SimilarityResult> {
    namespace(ns);
    keyName(a);
    keyName(b);
    const o = parseOrThrow(similarityOptionsSchema, opts, "options");
    const nsB = o.namespace_b ?? ns;
    const ra = this.#version(ns, a, o.version_a).rec;
    const rb = this.#version(nsB, b, o.version_b).rec;
    for (const [r, what, k] of [[ra, "a", a], [rb, "b", b]] as const)
      if (r.dtype === "bytes") throw new ValidationError(`Entry ${k} holds bytes; similarity needs numeric data.`, what);
    if (!sameShape(ra.shape, rb.shape))
      throw new ValidationError(`Entries ${a} [${ra.shape.join(", ")}] and ${b} [${rb.shape.join(", ")}] have different shapes.`, "b");
    const score = await similarity(o.metric, await this.#operand(ra, "a"), await this.#operand(rb, "b"));
    return { metric: o.metric, score, a: { key: a, version: ra.version }, b: { key: b, version: rb.version } };
  }

  async #rank(ns: string, metric: Metric, k: number, q: Operand, shape: number[], filter: FilterNode | null, exclude: string | null, qid: { key: string; version: number } | null = null): Promise<TopkResult> {
    let skipped = 0;
    const keys: string[] = [];
    const versions: number[] = [];
    const scores: number[] = [];
    // candidates are scored in chunks of at most RANK_DENSE_CHUNK_BYTES of dense data, so a
    // namespace of dense entries is never held in memory whole (TT candidates cost their cores)
    let cands: Operand[] = [];
    let denseBytes = 0;
    // on the device when GPU serving is on for queries (SVC_ENGINE_DEVICE=cuda), else the CPU
    const ids = (key: string, version: number) => ({ tenant: this.tenant, ns, key, version });
    const flush = async () => {
      if (cands.length === 0) return;
      const from = scores.length;
      const onDevice = await deviceScores(this.#core.gpu, metric, q, qid && ids(qid.key, qid.version), cands, keys.slice(from).map((key, i) => ids(key, versions[from + i]!)));
      for (const x of onDevice ?? (await scoreBatch(metric, q, cands))) scores.push(x);
      cands = [];
      denseBytes = 0;
    };
    const pace = new Pace();
    for (const { key, head } of this.#liveHeads(ns, "")) {
      if (pace.due()) await pace.yield();
      if (key === exclude) continue;
      if (filter && !matchFilter(filter, head.metadata)) continue;
      if (head.dtype === "bytes" || !sameShape(head.shape, shape)) {
        skipped++;
        continue;
      }
      keys.push(key);
      versions.push(head.latest);
      const op = head.layout.codec === "tt" ? this.#ttOperand(head) : await this.#operand(head, key);
      cands.push(op);
      if (op.kind === "dense" && (denseBytes += op.x.byteLength) >= RANK_DENSE_CHUNK_BYTES) await flush();
    }
    await flush();
    const order = scores.map((_, i) => i);
    order.sort((i, j) => (metric === "l2" ? scores[i]! - scores[j]! : scores[j]! - scores[i]!) || (keys[i]! < keys[j]! ? -1 : 1));
    return {
      metric,
      results: order.slice(0, k).map((i) => ({ key: keys[i]!, version: versions[i]!, score: scores[i]! })),
      scanned: scores.length,
      skipped,
    };
  }

  async #topk(ns: string, opts: TopkOptions): Promise<TopkResult> {
    namespace(ns);
    const o = parseOrThrow(topkOptionsSchema, opts, "options");
    const filter = o.filter ? compileFilter(o.filter) : null;
    const { rec } = this.#version(ns, o.key, o.version);
    const q = await this.#operand(rec, "key");
    return this.#rank(ns, o.metric, o.k, q, rec.shape, filter, o.include_self ? null : o.key, { key: o.key, version: rec.version });
  }

  async #vector(ns: string, opts: VectorOptions): Promise<TopkResult> {
    namespace(ns);
    const o = parseOrThrow(vectorOptionsSchema, opts, "options");
    const filter = o.filter ? compileFilter(o.filter) : null;
    let x: Float32Array | Float64Array;
    if (Array.isArray(o.vector)) x = o.dtype === "float32" ? Float32Array.from(o.vector) : Float64Array.from(o.vector);
    else {
      const natural = o.vector instanceof Float32Array ? "float32" : "float64";
      if (o.dtype && o.dtype !== natural) throw new ValidationError(`dtype ${o.dtype} does not match the vector's ${natural} data.`, "dtype");
      x = o.vector;
    }
    if (hasNonFinite(x)) throw new ValidationError("vector contains NaN or infinite values.", "vector");
    const shape = o.shape ?? [x.length];
    if (product(shape) !== x.length)
      throw new ValidationError(`vector has ${x.length} values but shape [${shape.join(", ")}] needs ${product(shape)}.`, "shape");
    return this.#rank(ns, o.metric, o.k, { kind: "dense", x, norm: denseNorm(x) }, shape, filter, null);
  }

  // ---------------- maintenance ----------------

  /**
   * Purges tombstones whose `purge_after` is at or before `now` (default: the store's clock)
   * and payloads that no kept version references. Covers every tenant.
   */
  async compact(opts: { now?: number | Date } = {}): Promise<CompactResult> {
    const { backend, clock } = this.#open();
    const now = opts.now === undefined ? clock.now() : opts.now instanceof Date ? opts.now.getTime() : opts.now;
    if (typeof now !== "number" || !Number.isFinite(now)) throw new ValidationError("now must be a Date or a number of milliseconds.", "now");
    return backend.transact((tx) => compactIn(tx, now));
  }

  /** Flushes and closes the store (every tenant view of it). */
  async close(): Promise<void> {
    if (this.#core.closed) return;
    this.#core.closed = true;
    await this.#core.backend.close();
  }
}

function compactIn(tx: WriteTx, now: number): CompactResult {
  let versionsPurged = 0;
  let keysPurged = 0;
  const referenced = new Set<string>();
  for (const { key, value } of [...tx.range(["h"], ["h", END])]) {
    const head = unpackRecord<HeadRecord>(value)!;
    const [, t, ns, k] = key as [string, string, string, string];
    const expired = head.tombstones.filter((s) => s.purge_after <= now);
    if (expired.length > 0) {
      for (const s of expired) {
        for (let v = s.from; v <= s.upto; v++) {
          if (tx.get(versionKey(t, ns, k, v)) !== undefined) {
            tx.remove(versionKey(t, ns, k, v));
            versionsPurged++;
          }
        }
      }
      const kept = head.tombstones.filter((s) => s.purge_after > now);
      if (head.deleted && kept.length === 0) {
        tx.remove(key);
        keysPurged++;
        continue;
      }
      tx.put(key, packRecord({ ...head, tombstones: kept }));
    }
  }
  for (const { value } of tx.range(["v"], ["v", END])) referenced.add(unpackRecord<VersionRecord>(value)!.fingerprint.sha256);
  let payloadsPurged = 0;
  for (const id of [...tx.payloadIds()]) {
    if (!referenced.has(id)) {
      tx.removePayload(id);
      payloadsPurged++;
    }
  }
  return { versions_purged: versionsPurged, keys_purged: keysPurged, payloads_purged: payloadsPurged };
}

// ---- helpers ----

function namespace(ns: unknown): void {
  parseOrThrow(namespaceSchema, ns, "namespace");
}
function keyName(key: unknown): void {
  parseOrThrow(keySchema, key, "key");
}
const sameShape = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

function itemError(e: unknown, i: number): unknown {
  if (!(e instanceof ValidationError)) return e;
  const field = e.field ? `items.${i}.${e.field}` : `items.${i}`;
  return new ValidationError(`items.${i}: ${e.message}`, field);
}

/** Whether every element is zero (stops at the first that is not, so other data pay little). */
function isAllZero(x: ArrayLike<number>): boolean {
  for (let i = 0; i < x.length; i++) if (x[i] !== 0) return false;
  return true;
}

function concatCores(cores: readonly ArrayBufferView[]): Uint8Array {
  const total = cores.reduce((s, c) => s + c.byteLength, 0);
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of cores) {
    out.set(asBytes(c), off);
    off += c.byteLength;
  }
  return out;
}

function base(
  dtype: Dtype, shape: number[], verdict: VersionRecord["verdict"], ratio: number, relErr: number, bytesIn: number, bytesStored: number,
  fingerprint: VersionRecord["fingerprint"], layout: PayloadLayout,
): Prepared["record"] {
  return { dtype, shape, metadata: {}, verdict, compression_ratio: ratio, relative_error: relErr, bytes_in: bytesIn, bytes_stored: bytesStored, fingerprint, layout };
}

function putResult(ns: string, key: string, rec: VersionRecord): PutResult {
  return {
    namespace: ns,
    key,
    version: rec.version,
    verdict: rec.verdict,
    compressed: rec.verdict !== "passthrough",
    compression_ratio: rec.compression_ratio,
    relative_error: rec.relative_error,
    dtype: rec.dtype,
    shape: rec.shape,
    tt: rec.fingerprint.tt,
    bytes_in: rec.bytes_in,
    bytes_stored: rec.bytes_stored,
    fingerprint: rec.fingerprint,
  };
}

