// What every verb of the store shares: the open store (backend, options, core cache), the
// tenant scope of a view, record keys, and the readers of heads, versions and payloads.
import { NotFoundError, StoreUnavailableError, SvcError } from "../errors.js";
import { itemsize, keyOf, namespaceOf } from "../fields.js";
import type { Clock } from "../clock.js";
import type { RecordKey, StorageBackend } from "./backend.js";
import { allocTyped, fromWorkingFloat, intPredDecode, losslessDecode, product, typedView } from "./codec.js";
import { pacedScan } from "./pace.js";
import { loadPred } from "./predapi.js";
import type { GpuServing } from "./gpu-cache.js";
import { unpackRecord } from "./records.js";
import type { TT } from "./ttapi.js";
import type { HeadRecord, PayloadLayout, ServeArray, VersionRecord } from "./types.js";

/** Tombstones are kept this long after a delete. */
export const TOMBSTONE_RETENTION_MS = 30 * 24 * 3600 * 1000;

export interface StoreConfig {
  min_compress_bytes: number;
  min_compression_ratio: number;
  default_tolerance: number;
  default_max_rank: number;
  core_cache_bytes: number;
  payload_cache_bytes: number;
}

/** One open store, shared by every tenant view of it. */
export interface Core {
  backend: StorageBackend;
  config: StoreConfig;
  clock: Clock;
  cache: CoreCache;
  payloads: PayloadCache;
  closed: boolean;
  gpu?: GpuServing;
  observer?: StoreObserver;
}

/** Hooks for metrics (the engine's /metrics): called after the work, never on a failure. */
export interface StoreObserver {
  /** A put's encoding: the codec chosen (`tt`, `pred`, `lossless`, `raw`), its time, bytes in and stored. */
  compress?(codec: string, seconds: number, bytesIn: number, bytesStored: number): void;
  /** A CPU serve: the stored codec, the time to produce the dense data, its bytes. */
  reconstruct?(codec: string, seconds: number, bytesOut: number): void;
  /** A lookup in the cache of decoded TT cores. */
  coreCache?(hit: boolean): void;
}

export const secondsSince = (t0: bigint): number => Number(process.hrtime.bigint() - t0) / 1e9;

/** A write made idempotent: its response is kept under (tenant, key) with the request's hash. */
export interface Idempotency {
  key: string;
  request_hash: string;
  /** Set when the write was answered from a stored response (nothing was written). */
  replayed: boolean;
}

/** A view of the store: the open store, the tenant, and (for idempotent writes) the key. */
export interface Scope {
  core: Core;
  tenant: string;
  idem?: Idempotency;
}

// ---- record keys: (tenant, namespace, key) scopes everything ----
export const headKey = (t: string, ns: string, key: string): RecordKey => ["h", t, ns, key];
export const versionKey = (t: string, ns: string, key: string, v: number): RecordKey => ["v", t, ns, key, v];
export const idempotencyKey = (t: string, key: string): RecordKey => ["i", t, key];
export const END = "\uffff"; // above every key character

/** What an operation on a closed store (or one in flight when it closed) rejects with. */
export const storeClosed = (): StoreUnavailableError => new StoreUnavailableError("The store is closed.");

export function open(s: Scope): Core {
  if (s.core.closed) throw storeClosed();
  return s.core;
}

/**
 * `p`, with a failure that the backend's closing caused (an error of LMDB's or of the memory
 * backend's, not the library's own, once the store is closed) answered as storeClosed(): the
 * request was not carried out, or not known to be, and may be sent again to a store that is open.
 */
export function whileOpen<T>(core: Core, p: Promise<T>): Promise<T> {
  return p.catch((e: unknown) => {
    throw core.closed && !(e instanceof SvcError) ? storeClosed() : e;
  });
}

export function namespace(ns: unknown): void {
  namespaceOf(ns);
}
export function keyName(key: unknown): void {
  keyOf(key);
}
export const sameShape = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

/** What decoding needs: a version record, or a head (which carries its latest version's). */
export type Entry = Pick<VersionRecord, "dtype" | "shape" | "fingerprint" | "layout">;

/** Values by content address (so never stale), least recently used first out, bounded in bytes. */
class ByteLru<V> {
  #map = new Map<string, V>();
  #bytes = 0;
  constructor(
    readonly limit: number,
    readonly sizeOf: (v: V) => number,
    /** The largest single value kept. */
    readonly maxItem = limit,
  ) {}
  get(id: string): V | undefined {
    const t = this.#map.get(id);
    if (t !== undefined) {
      this.#map.delete(id);
      this.#map.set(id, t);
    }
    return t;
  }
  has(id: string): boolean {
    return this.#map.has(id);
  }
  /** Bytes held. */
  get bytes(): number {
    return this.#bytes;
  }
  set(id: string, t: V): void {
    const size = this.sizeOf(t);
    if (size > this.limit || size > this.maxItem || this.#map.has(id)) return;
    this.#map.set(id, t);
    this.#bytes += size;
    for (const [k, v] of this.#map) {
      if (this.#bytes <= this.limit) break;
      this.#map.delete(k);
      this.#bytes -= this.sizeOf(v);
    }
  }
}

/** Decoded TT cores by payload hash, bounded in bytes. */
export class CoreCache extends ByteLru<TT> {
  constructor(limit: number) {
    super(limit, (t) => t.cores.reduce((s, c) => s + c.byteLength, 0));
  }
}

/**
 * Stored payload bytes by tenant and payload hash, bounded in bytes, each at most an eighth of
 * the bound and 8 MiB: a serve of an entry read recently copies its bytes from here instead of
 * reading the database (and, on LMDB, instead of a round trip to the reader thread). Callers
 * never write into a cached payload.
 */
export class PayloadCache extends ByteLru<Buffer> {
  constructor(limit: number) {
    super(limit, (b) => b.byteLength, Math.min(8 * 1024 * 1024, Math.floor(limit / 8)));
  }
}

export async function readHead(s: Scope, ns: string, key: string): Promise<HeadRecord> {
  const h = unpackRecord<HeadRecord>(await open(s).backend.get(headKey(s.tenant, ns, key)));
  if (!h || h.deleted) throw new NotFoundError(`No entry ${key} in namespace ${ns}.`);
  return h;
}

export async function readVersion(s: Scope, ns: string, key: string, version?: number): Promise<{ head: HeadRecord; rec: VersionRecord }> {
  const got = await open(s).backend.getEntry(s.tenant, ns, key, version);
  const head = unpackRecord<HeadRecord>(got.head);
  if (!head || head.deleted) throw new NotFoundError(`No entry ${key} in namespace ${ns}.`);
  const v = version ?? head.latest;
  let rec = v >= head.first_live && v <= head.latest ? unpackRecord<VersionRecord>(got.record) : undefined;
  // the backends read exactly that version; a record of another one would be read again by number
  if (rec && rec.version !== v) rec = unpackRecord<VersionRecord>(await s.core.backend.get(versionKey(s.tenant, ns, key, v)));
  if (!rec) throw new NotFoundError(`Entry ${key} in namespace ${ns} has no version ${v}.`);
  return { head, rec };
}

/** Live heads of a namespace whose key starts with `prefix`, in key order. */
export async function* liveHeads(s: Scope, ns: string, prefix: string): AsyncIterable<{ key: string; head: HeadRecord }> {
  const { backend } = open(s);
  for await (const { key, value } of backend.range(headKey(s.tenant, ns, prefix), headKey(s.tenant, ns, prefix + END))) {
    const head = value as HeadRecord;
    if (!head.deleted) yield { key: key[3] as string, head: unpackRecord<HeadRecord>(head)! };
  }
}

/** A payload cache entry's name: payloads are deduplicated per tenant. */
const payloadId = (s: Scope, rec: Entry) => `${s.tenant}\0${rec.fingerprint.sha256}`;

/** The entry's stored payload; shared with the payload cache (never written into) when `cached`. */
async function storedPayload(s: Scope, rec: Entry): Promise<{ bytes: Buffer; cached: boolean }> {
  const id = payloadId(s, rec);
  const hit = s.core.payloads.get(id);
  if (hit) return { bytes: hit, cached: true };
  const p = await s.core.backend.getPayload(s.tenant, rec.fingerprint.sha256);
  if (!p) throw new NotFoundError("The entry's payload is missing.");
  // a backend's own copy may be kept; one it keeps itself (the memory backend) is not
  if (!s.core.backend.ownPayloads) return { bytes: p, cached: false };
  s.core.payloads.set(id, p);
  return { bytes: p, cached: s.core.payloads.has(id) };
}

/** The entry's stored payload, to be read only. */
export async function payloadOf(s: Scope, rec: Entry): Promise<Buffer> {
  return (await storedPayload(s, rec)).bytes;
}

const sameList = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** The cached TT of an entry, or undefined (cores of the same bytes under another layout are not a hit). */
export function cachedTT(s: Scope, rec: Entry): TT | undefined {
  const t = cachedLayoutTT(s, rec);
  s.core.observer?.coreCache?.(t !== undefined);
  return t;
}

function cachedLayoutTT(s: Scope, rec: Entry): TT | undefined {
  const t = s.core.cache.get(rec.fingerprint.sha256);
  if (!t) return undefined;
  const layout = rec.layout as Extract<PayloadLayout, { codec: "tt" }>;
  const width = layout.core_dtype === "float64" ? 8 : 4;
  if (!sameList(t.modes, layout.modes) || !sameList(t.ranks, layout.ranks) || t.cores[0]!.BYTES_PER_ELEMENT !== width) return undefined;
  const shapeDiffers = rec.shape.length !== layout.modes.length || rec.shape.some((x, i) => x !== layout.modes[i]);
  if (shapeDiffers ? !t.shape || !sameList(t.shape, rec.shape) : t.shape !== undefined) return undefined;
  return t;
}

/** Decodes a TT payload (cores are views into one aligned copy) and caches it. */
export function decodeTT(s: Scope, rec: Entry, bytes: Uint8Array): TT {
  const layout = rec.layout as Extract<PayloadLayout, { codec: "tt" }>;
  const shapeDiffers = rec.shape.length !== layout.modes.length || rec.shape.some((x, i) => x !== layout.modes[i]);
  const cores: (Float32Array | Float64Array)[] = [];
  const width = layout.core_dtype === "float64" ? 8 : 4;
  const buf = new Uint8Array(bytes.byteLength);
  buf.set(bytes);
  let off = 0;
  for (let k = 0; k < layout.modes.length; k++) {
    const n = layout.ranks[k]! * layout.modes[k]! * layout.ranks[k + 1]!;
    cores.push(layout.core_dtype === "float64" ? new Float64Array(buf.buffer, off, n) : new Float32Array(buf.buffer, off, n));
    off += n * width;
  }
  const t: TT = { modes: layout.modes, ranks: layout.ranks, cores, ...(shapeDiffers ? { shape: rec.shape } : {}) };
  s.core.cache.set(rec.fingerprint.sha256, t);
  return t;
}

/** The TT cores of an entry: from the core cache, or read and decoded. */
export async function ttOf(s: Scope, rec: Entry): Promise<TT> {
  return cachedTT(s, rec) ?? decodeTT(s, rec, await payloadOf(s, rec));
}

/** The measured L∞ error of a record; null for a lossy one stored before it was measured. */
export function maxAbsErrorOf(rec: { max_abs_error?: number; relative_error?: number; verdict: VersionRecord["verdict"] }): number | null {
  if (rec.max_abs_error !== undefined) return rec.max_abs_error;
  // exact entries: lossless, raw, and TT given by its cores (put_cores, relative error 0)
  return rec.verdict === "lossless" || rec.verdict === "passthrough" || rec.relative_error === 0 ? 0 : null;
}

/** The dense values of an entry in its dtype (TT entries excepted: their cores are read with ttOf). */
export async function denseOf(s: Scope, rec: Entry, readOnly = false): Promise<ServeArray> {
  const { bytes: payload, cached } = await storedPayload(s, rec);
  if (rec.layout.codec === "pred") {
    const work = await (await loadPred()).decompress(payload);
    if (rec.dtype !== "float16" && rec.dtype !== "bfloat16") return work;
    // rounded to the entry's 2-byte type in slices of the event loop (25 million values for 100 MiB)
    const out = allocTyped(rec.dtype, work.length) as Uint16Array;
    await pacedScan(work.length, (from, to) => {
      out.set(fromWorkingFloat(work.subarray(from, to), rec.dtype as "float16") as Uint16Array, from);
    });
    return out;
  }
  if (rec.layout.codec === "lossless") {
    const { shuffle, coding } = rec.layout;
    const bytes =
      coding === "intpred"
        ? await intPredDecode(payload, rec.dtype, rec.shape)
        : await losslessDecode(payload, shuffle, product(rec.shape) * itemsize(rec.dtype));
    return typedView(bytes, rec.dtype);
  }
  // the answer is the caller's: a payload the backend or the payload cache keeps is copied, one
  // read for this call alone is not; a caller that only reads it takes the cached bytes
  return typedView(s.core.backend.ownPayloads && (!cached || readOnly) ? payload : new Uint8Array(payload), rec.dtype);
}
