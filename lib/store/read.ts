// The reading verbs of the store: get (metadata only, never the payload), list, search,
// serve on the CPU and serve on the GPU.
import { isoTime } from "../iso-time.js";
import { GpuUnavailableError, ValidationError } from "../errors.js";
import { compileFilter, matchFilter } from "../filter.js";
import { isFloatDtype, parseOrThrow, type Dtype } from "../fields.js";
import {
  getOptionsSchema,
  listOptionsSchema,
  plainVersionOptions,
  searchOptionsSchema,
  serveOptionsSchema,
  type GetOptions,
  type ListOptions,
  type SearchOptions,
  type ServeOptions,
} from "../schemas.js";
import { extractBlock, fromWorkingFloat, toWorkingFloat } from "./codec.js";
import { denseOf, maxAbsErrorOf, payloadOf, keyName, liveHeads, namespace, readVersion, secondsSince, ttOf, type Scope } from "./context.js";
import { Pace } from "./pace.js";
import type { GpuHandle, GpuServing } from "./gpu-cache.js";
import { loadTT } from "./ttapi.js";
import { loadPred } from "./predapi.js";
import type { EntryInfo, ListResult, SearchResult, ServeArray, ServeResult } from "./types.js";
import { similarity } from "./queries.js";

/** Device handles behind the GpuHandles this module gave out (for handle.dot(handle)). */
const gpuHandles = new WeakMap<GpuHandle, { backend: unknown; handle: unknown; live: () => void }>();

/** get: metadata and fingerprint of a version (latest by default), without reading the payload. */
export async function get(s: Scope, ns: string, key: string, opts: GetOptions = {}): Promise<EntryInfo> {
  namespace(ns);
  keyName(key);
  const o = plainVersionOptions(opts) ?? parseOrThrow(getOptionsSchema, opts, "options");
  const { head, rec } = await readVersion(s, ns, key, o.version);
  const versions: number[] = [];
  for (let v = head.first_live; v <= head.latest; v++) versions.push(v);
  return {
    namespace: ns,
    key,
    version: rec.version,
    latest_version: head.latest,
    versions,
    created_at: isoTime(rec.created_at),
    dtype: rec.dtype,
    shape: rec.shape,
    metadata: rec.metadata,
    verdict: rec.verdict,
    compressed: rec.verdict !== "passthrough",
    compression_ratio: rec.compression_ratio,
    relative_error: rec.relative_error,
    max_abs_error: maxAbsErrorOf(rec),
    bytes_in: rec.bytes_in,
    bytes_stored: rec.bytes_stored,
    fingerprint: rec.fingerprint,
  };
}

/** list: live keys in ascending byte order. */
export async function list(s: Scope, ns: string, opts: ListOptions = {}): Promise<ListResult> {
  namespace(ns);
  const o = parseOrThrow(listOptionsSchema, opts, "options");
  const keys: ListResult["keys"] = [];
  let total = 0;
  const pace = new Pace(); // the event loop gets a turn every slice of a long scan
  for await (const { key, head } of liveHeads(s, ns, o.prefix)) {
    if (pace.due()) await pace.yield();
    if (total >= o.offset && keys.length < o.limit)
      keys.push({
        key,
        version: head.latest,
        updated_at: isoTime(head.updated_at),
        dtype: head.dtype,
        shape: head.shape,
        verdict: head.verdict,
        codec: head.fingerprint.codec,
        relative_error: head.relative_error ?? null,
        max_abs_error: head.max_abs_error ?? maxAbsErrorOf(head),
      });
    total++;
  }
  return { namespace: ns, keys, total, limit: o.limit, offset: o.offset, next_offset: o.offset + keys.length < total ? o.offset + keys.length : null };
}

/** search: live keys whose latest metadata satisfy `filter`. */
export async function search(s: Scope, ns: string, filter: Record<string, unknown> = {}, opts: SearchOptions = {}): Promise<SearchResult> {
  namespace(ns);
  const node = compileFilter(filter);
  const o = parseOrThrow(searchOptionsSchema, opts, "options");
  const results: SearchResult["results"] = [];
  let total = 0;
  const pace = new Pace();
  for await (const { key, head } of liveHeads(s, ns, o.prefix)) {
    if (pace.due()) await pace.yield();
    if (!matchFilter(node, head.metadata)) continue;
    if (total >= o.offset && results.length < o.limit) results.push({ key, version: head.latest, metadata: head.metadata });
    total++;
  }
  return { namespace: ns, results, total, limit: o.limit, offset: o.offset, next_offset: o.offset + results.length < total ? o.offset + results.length : null };
}

/** What `serve` read of the entry before decoding it: enough to size the answer. */
export interface ServeEntry {
  version: number;
  dtype: Dtype;
  shape: number[];
}

/**
 * serve (CPU): the dense tensor (or one block of it) as a typed array of the stored or requested
 * dtype. `readOnly`: the data may be the payload cache's own bytes. `beforeDecode` is called with
 * the version read, once the request is checked and before anything is decoded (a server sizes
 * and reserves the answer there); what it throws is the call's error.
 */
export async function serve(
  s: Scope,
  ns: string,
  key: string,
  opts: ServeOptions = {},
  readOnly = false,
  beforeDecode?: (entry: ServeEntry) => void,
): Promise<ServeResult> {
  namespace(ns);
  keyName(key);
  const o: ServeOptions = plainVersionOptions(opts) ?? parseOrThrow(serveOptionsSchema, opts, "options");
  const { rec } = await readVersion(s, ns, key, o.version);
  const slice = o.slice;
  if (slice) {
    if (slice.length !== rec.shape.length)
      throw new ValidationError(`slice has ${slice.length} pairs but the entry has ${rec.shape.length} dimensions.`, "slice");
    slice.forEach(([, stop], i) => {
      if (stop > rec.shape[i]!) throw new ValidationError(`slice.${i} stops at ${stop}, beyond dimension size ${rec.shape[i]}.`, `slice.${i}`);
    });
  }
  if (o.dtype && !isFloatDtype(rec.dtype)) throw new ValidationError(`dtype conversion applies to floating data only; the entry is ${rec.dtype}.`, "dtype");
  beforeDecode?.({ version: rec.version, dtype: rec.dtype, shape: rec.shape });
  const outShape = slice ? slice.map(([a, b]) => b - a) : rec.shape;
  const outDtype = (o.dtype ?? rec.dtype) as Dtype;
  const t0 = process.hrtime.bigint();
  let data: ServeArray;
  if (rec.layout.codec === "tt") {
    const tt = await loadTT();
    const work = await tt.reconstruct(await ttOf(s, rec), slice ? { slice: slice.map(([a, b]) => [a, b] as [number, number]) } : undefined);
    data = fromWorkingFloat(work, outDtype as "float32");
  } else if (rec.layout.codec === "pred" && slice) {
    // the stream's blocks are decoded only where the slice touches them
    const pred = await loadPred();
    const work = await pred.decompress(await payloadOf(s, rec), { slice: slice.map(([a, b]) => [a, b] as [number, number]) });
    data = fromWorkingFloat(work, outDtype as "float32");
  } else {
    const full = await denseOf(s, rec, readOnly);
    const block = slice ? extractBlock(full, rec.shape, slice, rec.dtype) : full;
    data = isFloatDtype(rec.dtype) && outDtype !== rec.dtype ? fromWorkingFloat(toWorkingFloat(block, rec.dtype), outDtype as "float32") : block;
  }
  s.core.observer?.reconstruct?.(rec.layout.codec, secondsSince(t0), data.byteLength);
  return { namespace: ns, key, version: rec.version, data, dtype: outDtype, shape: outShape };
}

/**
 * serve on the GPU: loads the entry's TT cores to the device (or finds them resident in the
 * LRU cache) and pins them until `release()`. GpuUnavailableError (with the reason) where
 * there is no usable device or the entry cannot be made resident.
 */
export async function serveGpu(s: Scope, gpu: GpuServing, ns: string, key: string, opts: GetOptions = {}): Promise<GpuHandle> {
  namespace(ns);
  keyName(key);
  const o = plainVersionOptions(opts) ?? parseOrThrow(getOptionsSchema, opts, "options");
  const { rec } = await readVersion(s, ns, key, o.version);
  if ("unavailable" in gpu) throw new GpuUnavailableError(gpu.unavailable);
  if (rec.layout.codec !== "tt")
    throw new ValidationError(
      `Entry ${key} version ${rec.version} is stored without TT cores (${rec.layout.codec}); GPU serving applies to TT-compressed entries.`,
      "key",
    );
  const tt = await ttOf(s, rec);
  const lease = await gpu.cache.acquire({ tenant: s.tenant, ns, key, version: rec.version }, () => tt);
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
      const cpu = () => serve(s, ns, key, { version: rec.version, slice, dtype });
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
      const work = await backend.reconstruct(
        lease.handle,
        { ...tt, shape: rec.shape },
        slice?.map(([a, b]) => [a, b] as [number, number]),
      );
      const outDtype = (dtype ?? rec.dtype) as Dtype;
      return {
        namespace: ns,
        key,
        version: rec.version,
        dtype: outDtype,
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
      const r = await similarity(s, ns, key, other.key, {
        version_a: rec.version,
        version_b: other.version,
        namespace_b: (other as { namespace?: string }).namespace,
        metric: "dot",
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
