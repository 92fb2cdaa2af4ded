// The device residency cache: TT entries loaded to GPU memory, keyed by (tenant, namespace,
// key, version), bounded by a byte budget (SVC_ENGINE_GPU_CACHE_BYTES) with LRU eviction.
// The device sits behind DeviceAllocator: the CUDA one (lib/gpu.ts) and an in-memory one for
// tests of the accounting, which can be told to run out of memory.
import { GpuUnavailableError, InternalError, ValidationError } from "../errors.js";
import { loadTT, type TT } from "./ttapi.js";
import { clampCosine } from "../scaled.js";

/** Thrown by an allocator when the device has no room for an allocation. */
export class DeviceOutOfMemoryError extends Error {
  constructor(readonly bytes: number) {
    super(`The device cannot allocate ${bytes} bytes.`);
  }
}

/** A device that TT entries can be loaded to. H identifies one loaded entry. */
export interface DeviceAllocator<H = unknown> {
  /** The device's name for answers (`cuda:0`). */
  readonly device: string;
  /** Bytes the entry will take on the device once loaded. */
  bytesFor(tt: TT): number;
  /** Allocates device memory for the entry and copies its cores there; DeviceOutOfMemoryError when full. */
  load(tt: TT): Promise<H>;
  /** Frees what load allocated. Called once per handle, never while the entry is pinned. */
  free(handle: H): void;
}

/** One identity of a resident entry: versions are immutable, so an id never goes stale. */
export interface EntryId {
  tenant: string;
  ns: string;
  key: string;
  version: number;
}

/** A pinned resident entry: not evicted until release() (idempotent). */
export interface Lease<H> {
  readonly handle: H;
  readonly bytes: number;
  /** true when the entry was already resident (no load happened). */
  readonly hit: boolean;
  release(): void;
}

export interface GpuCacheStats {
  device: string;
  budget_bytes: number;
  bytes_on_device: number;
  entries: number;
  pinned: number;
  hits: number;
  misses: number;
  evictions: number;
}

interface Slot<H> {
  bytes: number;
  pins: number;
  handle?: H;
  loading?: Promise<H>;
}

const idOf = (e: EntryId): string => JSON.stringify([e.tenant, e.ns, e.key, e.version]);

/**
 * LRU residency cache over a DeviceAllocator.
 * @example
 * const cache = new GpuCache(cudaAllocator(), 8 << 30);
 * const lease = await cache.acquire({ tenant, ns, key, version }, () => loadCores());
 * try { use(lease.handle); } finally { lease.release(); }
 */
export class GpuCache<H = unknown> {
  // Map order is recency order: the first entry is the least recently used.
  readonly #slots = new Map<string, Slot<H>>();
  #bytes = 0; // reserved or resident, loads in flight included
  #hits = 0;
  #misses = 0;
  #evictions = 0;

  constructor(
    readonly allocator: DeviceAllocator<H>,
    readonly budgetBytes: number,
  ) {
    if (!Number.isSafeInteger(budgetBytes) || budgetBytes < 0)
      throw new ValidationError("The GPU cache budget must be a whole number of bytes, at least 0.", "budget_bytes");
  }

  get device(): string {
    return this.allocator.device;
  }

  /**
   * Pins the entry on the device, loading it (from `source`) when absent. Least recently used
   * unpinned entries are evicted until it fits. An entry larger than the whole budget, or one
   * that cannot fit beside the pinned entries, is refused with GpuUnavailableError.
   */
  async acquire(id: EntryId, source: () => TT | Promise<TT>): Promise<Lease<H>> {
    const k = idOf(id);
    const found = this.#slots.get(k);
    if (found) {
      found.pins++;
      this.#touch(k, found);
      try {
        const handle = found.handle ?? (await found.loading!);
        this.#hits++;
        return this.#lease(found, handle, true);
      } catch (e) {
        found.pins--;
        throw e;
      }
    }
    const tt = await source();
    // another acquire may have started the same load while source() ran
    const again = this.#slots.get(k);
    if (again) return this.acquire(id, () => tt);
    const bytes = this.allocator.bytesFor(tt);
    if (bytes > this.budgetBytes)
      throw new GpuUnavailableError(
        `Entry ${id.key} version ${id.version} needs ${bytes} bytes on the device, more than the GPU cache budget of ${this.budgetBytes} bytes.`,
      );
    this.#makeRoom(bytes);
    if (this.#bytes + bytes > this.budgetBytes)
      throw new GpuUnavailableError(
        `The GPU cache has no room for ${bytes} more bytes: ${this.#bytes} of ${this.budgetBytes} bytes are held by entries in use; retry later.`,
      );
    const slot: Slot<H> = { bytes, pins: 1 };
    this.#slots.set(k, slot);
    this.#bytes += bytes;
    this.#misses++;
    slot.loading = this.#load(tt, bytes);
    try {
      slot.handle = await slot.loading;
    } catch (e) {
      this.#slots.delete(k);
      this.#bytes -= bytes;
      throw e;
    } finally {
      slot.loading = undefined;
    }
    return this.#lease(slot, slot.handle, false);
  }

  /** Whether the entry is resident (or loading) now; does not change recency. */
  has(id: EntryId): boolean {
    return this.#slots.has(idOf(id));
  }

  /** Frees every unpinned entry; pinned ones stay until released. Returns the bytes freed. */
  clear(): number {
    let freed = 0;
    for (const [k, s] of [...this.#slots]) {
      if (s.pins > 0 || s.handle === undefined) continue;
      freed += this.#evict(k, s);
    }
    return freed;
  }

  stats(): GpuCacheStats {
    let pinned = 0;
    for (const s of this.#slots.values()) if (s.pins > 0) pinned++;
    return {
      device: this.allocator.device,
      budget_bytes: this.budgetBytes,
      bytes_on_device: this.#bytes,
      entries: this.#slots.size,
      pinned,
      hits: this.#hits,
      misses: this.#misses,
      evictions: this.#evictions,
    };
  }

  // A device that runs out of memory below the budget (other processes use it too): evict
  // unpinned entries one at a time and retry, then give up with gpu_unavailable.
  async #load(tt: TT, bytes: number): Promise<H> {
    for (;;) {
      try {
        return await this.allocator.load(tt);
      } catch (e) {
        if (!(e instanceof DeviceOutOfMemoryError)) throw e;
        if (this.#evictOne() === 0) throw new GpuUnavailableError(`The GPU is out of memory: it cannot hold ${bytes} more bytes even with the cache emptied.`);
      }
    }
  }

  #lease(slot: Slot<H>, handle: H, hit: boolean): Lease<H> {
    let done = false;
    return {
      handle,
      bytes: slot.bytes,
      hit,
      release: () => {
        if (done) return;
        done = true;
        slot.pins--;
      },
    };
  }

  #touch(k: string, s: Slot<H>): void {
    this.#slots.delete(k);
    this.#slots.set(k, s);
  }

  #makeRoom(bytes: number): void {
    while (this.#bytes + bytes > this.budgetBytes) if (this.#evictOne() === 0) return;
  }

  /** Evicts the least recently used unpinned, loaded entry; returns its bytes (0: none). */
  #evictOne(): number {
    for (const [k, s] of this.#slots) if (s.pins === 0 && s.handle !== undefined) return this.#evict(k, s);
    return 0;
  }

  #evict(k: string, s: Slot<H>): number {
    this.#slots.delete(k);
    this.#bytes -= s.bytes;
    this.#evictions++;
    this.allocator.free(s.handle as H);
    return s.bytes;
  }
}

/** Bytes of an entry on the device: float32 cores (the device format) plus a small header. */
export function deviceBytesOf(tt: TT): number {
  let n = 0;
  for (const c of tt.cores) n += c.length * 4;
  return n + 16 * (tt.modes.length + 1);
}

/**
 * A device in host memory: the same accounting as a GPU (capacity, out-of-memory), holding
 * float32 copies of the cores and computing with the CPU engine. For tests of the cache and
 * of the serving path on machines without a GPU.
 */
export class MemoryDeviceAllocator implements DeviceBackend<number> {
  readonly device = "memory:0";
  readonly #entries = new Map<number, { tt: TT; bytes: number }>();
  #next = 1;
  #used = 0;
  /** Loads still to fail with out-of-memory regardless of room (to simulate other processes). */
  failNext = 0;

  constructor(readonly capacityBytes: number) {}

  get usedBytes(): number {
    return this.#used;
  }

  get live(): number {
    return this.#entries.size;
  }

  bytesFor(tt: TT): number {
    return deviceBytesOf(tt);
  }

  async load(tt: TT): Promise<number> {
    const bytes = this.bytesFor(tt);
    if (this.failNext > 0) {
      this.failNext--;
      throw new DeviceOutOfMemoryError(bytes);
    }
    if (this.#used + bytes > this.capacityBytes) throw new DeviceOutOfMemoryError(bytes);
    const copy: TT = { modes: [...tt.modes], ranks: [...tt.ranks], cores: tt.cores.map((c) => Float32Array.from(c)), shape: tt.shape && [...tt.shape] };
    const h = this.#next++;
    this.#entries.set(h, { tt: copy, bytes });
    this.#used += bytes;
    return h;
  }

  free(handle: number): void {
    const e = this.#entries.get(handle);
    if (!e) throw new InternalError(`Device handle ${handle} freed twice or never allocated.`);
    this.#entries.delete(handle);
    this.#used -= e.bytes;
  }

  /** The TT held by a handle (what a kernel would read). */
  get(handle: number): TT {
    const e = this.#entries.get(handle);
    if (!e) throw new InternalError(`Device handle ${handle} is not allocated.`);
    return e.tt;
  }

  async reconstruct(handle: number, tt: TT, slice?: [number, number][]): Promise<Float32Array> {
    const t = { ...this.get(handle), shape: tt.shape ?? tt.modes };
    return (await loadTT()).reconstruct(t, slice ? { slice } : undefined) as Promise<Float32Array>;
  }

  async dot(a: number, b: number): Promise<number> {
    return (await loadTT()).dot(this.get(a), this.get(b));
  }

  async dotDense(handle: number, x: Float32Array | Float64Array): Promise<number> {
    return (await loadTT()).dotDense(this.get(handle), Float32Array.from(x));
  }

  async topk(query: number, candidates: number[], norms: Float64Array | null, metric: "cosine" | "dot" | "l2", k: number) {
    const raw = await (
      await loadTT()
    ).dotBatch(
      this.get(query),
      candidates.map((c) => this.get(c)),
    );
    return rankScores(raw, norms, metric, k);
  }
}

/** The metric over raw inner products and the k best (ties by position), as native/cuda/topk.cu does. */
export function rankScores(
  raw: Float64Array,
  norms: Float64Array | null,
  metric: "cosine" | "dot" | "l2",
  k: number,
): { index: Uint32Array; score: Float64Array } {
  if (metric !== "dot" && (!norms || norms.length !== raw.length + 1))
    throw new ValidationError("norms must hold the query's norm then one per candidate.", "norms");
  const s = Float64Array.from(raw, (v, j) => {
    if (metric === "cosine") {
      const den = norms![0]! * norms![j + 1]!;
      return den > 0 ? clampCosine(v / den) : 0;
    }
    if (metric === "l2") return Math.sqrt(Math.max(0, norms![0]! ** 2 + norms![j + 1]! ** 2 - 2 * v));
    return v;
  });
  const lower = metric === "l2";
  const idx = Array.from(s.keys()).sort((a, b) => (s[a] === s[b] ? a - b : lower ? s[a]! - s[b]! : s[b]! - s[a]!));
  const n = Math.min(k, idx.length);
  return { index: Uint32Array.from(idx.slice(0, n)), score: Float64Array.from(idx.slice(0, n), (i) => s[i]!) };
}

/** What a device computes on resident entries, next to loading them (lib/gpu.ts: CUDA). */
export interface DeviceBackend<H = unknown> extends DeviceAllocator<H> {
  /** The dense tensor, or a block (one [start, stop) per dense dimension), as float32. */
  reconstruct(handle: H, tt: TT, slice?: [number, number][]): Promise<Float32Array>;
  /** ⟨a, b⟩ of two resident entries with the same modes. */
  dot(a: H, b: H): Promise<number>;
  /** ⟨entry, x⟩ for a dense x over the entry's dense shape. */
  dotDense(handle: H, x: Float32Array | Float64Array): Promise<number>;
  /** The k best candidates for the metric: positions into `candidates` and scores, best first. */
  topk(query: H, candidates: H[], norms: Float64Array | null, metric: "cosine" | "dot" | "l2", k: number): Promise<{ index: Uint32Array; score: Float64Array }>;
}

/** GPU serving for a store: a residency cache over a device, or why there is none. */
export type GpuServing =
  { cache: GpuCache<unknown>; backend: DeviceBackend<unknown>; /** query.topk on the device too */ queries: boolean } | { unavailable: string };

/** Serving over `backend` with a cache of `budgetBytes`; `queries`: top-K queries use the device as well. */
export function gpuServing<H>(backend: DeviceBackend<H>, budgetBytes: number, queries = false): GpuServing {
  return { cache: new GpuCache<H>(backend, budgetBytes) as GpuCache<unknown>, backend: backend as DeviceBackend<unknown>, queries };
}

/** What serveGpu returns: an entry pinned on the device until release(). */
export interface GpuHandle {
  namespace: string;
  key: string;
  version: number;
  /** `cuda:0` (or the in-memory device's name in tests). */
  device: string;
  resident: true;
  bytes_on_device: number;
  tt: { modes: number[]; ranks: number[] };
  /** The dense tensor or a block, reconstructed on the device (blocks of entries whose dense
   *  dimensions span several TT modes: on the CPU), in the entry's dtype or `dtype`. */
  reconstruct(opts?: { slice?: [number, number][]; dtype?: "float32" | "float64" | "float16" | "bfloat16" }): Promise<import("./types.js").ServeResult>;
  /** ⟨this, other⟩: on the device for another live handle with the same modes, else on the CPU. */
  dot(other: GpuHandle | { key: string; version?: number; namespace?: string }): Promise<number>;
  /** Unpins the entry (the cache may then evict it); later calls on the handle fail. Idempotent. */
  release(): void;
}
