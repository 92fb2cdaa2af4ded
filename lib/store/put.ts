// The writing verbs of the store: put (compression, lossless or raw), put_cores and
// put_cores_batch, and delete. Heavy work (compression, norms) runs before the write
// transaction; each transaction only reads the heads, checks if_version, then writes payload,
// version record and head (and, for an idempotent write, its stored response).
import { isoTime } from "../iso-time.js";
import { z } from "zod";
import { NotFoundError, ValidationError, VersionConflictError } from "../errors.js";
import { isFloatDtype, itemsize, naturalDtype, parseOrThrow, shapeSchema, type Dtype } from "../fields.js";
import { copyPutData } from "../dtypes.js";
import { putCoresOptionsSchema, putOptionsSchema, putPredOptionsSchema, type PutCoresOptions, type PutOptions, type PutPredOptions } from "../schemas.js";
import type { RecordKey } from "./backend.js";
import { addScaledSquares, asBytes, hasNonFinite, losslessEncode, maxAbs, product, sha256hex, toFloat64, toWorkingFloat, typedView } from "./codec.js";
import { headKey, idempotencyKey, keyName, namespace, open, secondsSince, versionKey, TOMBSTONE_RETENTION_MS, type Scope } from "./context.js";
import { checkCores, type CoreInput } from "./cores.js";
import { lookup, recordOf, replayOf } from "./idempotency.js";
import { packRecord, unpackRecord } from "./records.js";
import { loadTT, type TT } from "./ttapi.js";
import type { DeleteResult, HeadRecord, PayloadLayout, PutResult, ServeArray, VersionRecord } from "./types.js";
import { pacedScan } from "./pace.js";
import { exactAsked, exactRoute, finiteNorm, losslessPayload, lossyRoute, type Encoded, type FloatJob } from "./choose.js";
import { describe, value } from "../scaled.js";
import { loadPred } from "./predapi.js";

/** Data accepted by put: a typed array, a Buffer or an ArrayBuffer (bytes, little-endian, C order). */
export type PutData = ArrayBufferView | ArrayBuffer;

/** Put data whose memory the caller has handed over (handOver): stored without a copy of its own. */
const handedOver = new WeakSet<object>();

/**
 * Hands `data` over to the store: a put of it stores its memory as it is rather than a copy,
 * so the caller must not change it afterwards. A server's request body, used once, is such data.
 * @example await store.put("ns", "k", handOver(body));
 */
export function handOver<T extends PutData>(data: T): T {
  handedOver.add(data);
  return data;
}

export interface PutCoresItem extends PutCoresOptions {
  key: string;
  cores: CoreInput[];
}

function checkDataKind(data: unknown): asserts data is PutData {
  if (!(data instanceof ArrayBuffer) && !ArrayBuffer.isView(data)) throw new ValidationError("data must be a typed array, a Buffer or an ArrayBuffer.", "data");
}

/** Which explicit dtypes may reinterpret a typed array of another element type. */
function compatible(natural: Dtype | "raw", dtype: Dtype): boolean {
  if (natural === "raw" || natural === dtype) return true;
  if (natural === "uint8") return true; // plain bytes
  if (natural === "uint16") return dtype === "float16" || dtype === "bfloat16";
  return false;
}

interface Prepared {
  record: Omit<VersionRecord, "version" | "created_at">;
  payload: Uint8Array;
}

async function prepare(s: Scope, data: PutData, o: z.output<typeof putOptionsSchema>): Promise<Prepared> {
  const { config } = s.core;
  const natural = naturalDtype(data);
  const dtype: Dtype = o.dtype ?? (natural === "raw" ? "bytes" : natural);
  if (!compatible(natural, dtype)) throw new ValidationError(`dtype ${dtype} does not match the data's element type ${natural}.`, "dtype");
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
  const maxRank = o.max_rank ?? config.default_max_rank;
  const bytesIn = bytes.byteLength;
  const view = typedView(bytes, dtype);

  const raw = async (norm: number | null): Promise<Prepared> => {
    // own copy: the caller may reuse its buffer, unless it handed it over (put's copy is)
    const payload = handedOver.has(data) ? bytes : new Uint8Array(bytes);
    return {
      payload,
      record: base(dtype, shape!, "passthrough", 1, 0, bytesIn, bytesIn, { sha256: await sha256hex(payload), codec: "raw", tt: null, norm }, { codec: "raw" }),
    };
  };

  const lossless = async (norm: number | null): Promise<Prepared> => {
    const best = await losslessPayload(bytes, dtype, shape!, config.min_compression_ratio);
    if (!best) return raw(norm);
    const { payload, layout } = best;
    const ratio = bytesIn / payload.byteLength;
    const fingerprint = { sha256: await sha256hex(payload), codec: "lossless" as const, tt: null, norm };
    return { payload, record: base(dtype, shape!, "lossless", ratio, 0, bytesIn, payload.byteLength, fingerprint, layout) };
  };

  if (isFloatDtype(dtype)) {
    // the passes over the data below run in slices (pacedScan): 100 MiB of floats is 25 million values
    const work = await workingFloatPaced(view, dtype);
    if (await hasNonFinitePaced(work)) throw new ValidationError("data contains NaN or infinite values; floating data must be finite.", "data");
    if (bytesIn < config.min_compress_bytes) return raw(finiteNorm(await denseNormPaced(work)));
    let stats: Promise<{ norm: number; max: number; rms: number }> | undefined;
    const job: FloatJob = {
      work,
      dtype,
      shape,
      bytesIn,
      config,
      codec: o.codec ?? "auto",
      maxRank,
      capped: o.max_rank !== undefined,
      // a tolerance applies where given, or by default where no max_abs_error was given either
      tolerance: o.tolerance ?? (o.max_abs_error === undefined ? config.default_tolerance : undefined),
      maxAbs: o.max_abs_error,
      stats: () => (stats ??= normAndMaxPaced(work)),
    };
    const encoded = async (e: Encoded): Promise<Prepared> => ({
      payload: e.payload,
      record: base(
        dtype,
        shape,
        e.verdict,
        bytesIn / e.payload.byteLength,
        e.relative_error,
        bytesIn,
        e.payload.byteLength,
        { sha256: await sha256hex(e.payload), codec: e.codec, tt: e.tt, norm: e.norm },
        e.layout,
        e.max_abs_error,
      ),
    });
    const exact = async (): Promise<Prepared> => {
      const norm = finiteNorm((await job.stats()).norm);
      const e = await exactRoute(job, await losslessEncode(bytes, dtype), config.min_compression_ratio, norm);
      return e ? encoded(e) : raw(norm);
    };
    if (exactAsked(job)) return exact();
    if (await isAllZeroPaced(work)) {
      // All zeros (an initialised array, say): the exact TT has rank 1 and zero cores. The
      // TT engine refuses zero data, since a relative tolerance means nothing there.
      const tt = await loadTT();
      const coreBytes = dtype === "float64" ? 8 : 4;
      const modes = tt.chooseModes(shape);
      const cores = modes.map((n) => (coreBytes === 8 ? new Float64Array(n) : new Float32Array(n)));
      const payload = concatCores(cores);
      const stored = payload.byteLength;
      // a prime length, say: the rank-1 TT is no smaller than the data
      if (bytesIn / stored < config.min_compression_ratio) return job.codec === "tt" ? raw(0) : exact();
      const info = { modes, ranks: [1, ...modes.map(() => 1)] };
      return encoded({
        payload,
        verdict: "compressed",
        relative_error: 0,
        max_abs_error: 0,
        norm: 0,
        codec: "tt",
        tt: info,
        layout: { codec: "tt", core_dtype: coreBytes === 8 ? "float64" : "float32", ...info },
      });
    }
    const e = await lossyRoute(job);
    return e ? encoded(e) : job.codec === "tt" ? raw(finiteNorm((await job.stats()).norm)) : exact();
  }
  const norm = dtype === "bytes" ? null : finiteNorm(await denseNormPaced(view, dtype));
  if (bytesIn < config.min_compress_bytes) return raw(norm);
  return lossless(norm);
}

async function prepareCores(cores: CoreInput[], denseShape: number[] | undefined, where: string): Promise<Prepared> {
  const checked = checkCores(cores, where);
  const arrays = checked.map((c) => c.values);
  const modes = checked.map((c) => c.shape[1]);
  const ranks = [1, ...checked.map((c) => c.shape[2])];
  const shape = denseShape ? parseOrThrow(shapeSchema, denseShape, "shape") : [...modes];
  if (product(shape) !== product(modes))
    throw new ValidationError(`shape [${shape.join(", ")}] has ${product(shape)} elements but the cores' modes give ${product(modes)}.`, "shape");
  const dtype = checked[0]!.dtype;
  const t: TT = { modes, ranks, cores: arrays, ...(denseShape ? { shape } : {}) };
  // kept scaled while it is measured, so that any norm a float64 holds is accepted
  const scaledNorm = await (await loadTT()).normScaled(t);
  const norm = value(scaledNorm);
  if (!Number.isFinite(norm))
    throw new ValidationError(
      `${where}: the tensor's norm is about ${describe(scaledNorm)}, beyond float64's largest value (1.8e308); put_cores takes tensors whose norm is a float64.`,
      where,
    );
  const payload = concatCores(arrays);
  const bytesIn = product(shape) * itemsize(dtype);
  const info = { modes, ranks };
  return {
    payload,
    record: base(
      dtype,
      shape,
      "compressed",
      bytesIn / payload.byteLength,
      0,
      bytesIn,
      payload.byteLength,
      { sha256: await sha256hex(payload), codec: "tt", tt: info, norm },
      { codec: "tt", core_dtype: dtype, ...info },
    ),
  };
}

/** put: compresses (or stores losslessly or raw) and adds version n+1. */
export async function put(s: Scope, ns: string, key: string, data: PutData, opts: PutOptions = {}): Promise<PutResult> {
  open(s);
  namespace(ns);
  keyName(key);
  checkDataKind(data);
  const o = parseOrThrow(putOptionsSchema, opts, "options");
  // the data as they are now: the caller may change its buffer while the put runs
  if (!handedOver.has(data)) data = handOver(copyPutData(data));
  const stored = await lookup(s);
  if (stored !== undefined) return stored as PutResult;
  const t0 = process.hrtime.bigint();
  const prepared = await prepare(s, data, o);
  const r = prepared.record;
  s.core.observer?.compress?.(r.layout.codec, secondsSince(t0), r.bytes_in, r.bytes_stored);
  return commit(s, ns, [{ key, prepared, if_version: o.if_version, metadata: o.metadata ?? {} }], false, (r) => r[0]!);
}

/** put_cores: stores a TT given by its cores (verdict `compressed`, relative_error 0). */
export async function putCores(s: Scope, ns: string, key: string, cores: CoreInput[], opts: PutCoresOptions = {}): Promise<PutResult> {
  open(s);
  namespace(ns);
  keyName(key);
  const o = parseOrThrow(putCoresOptionsSchema, opts, "options");
  const stored = await lookup(s);
  if (stored !== undefined) return stored as PutResult;
  const prepared = await prepareCores(cores, o.shape, "cores");
  return commit(s, ns, [{ key, prepared, if_version: o.if_version, metadata: o.metadata ?? {} }], false, (r) => r[0]!);
}

/**
 * The pointwise bound a declared max_abs_error may reach over the stream's own: the encoder keeps
 * every element strictly within it, measured in float64, so only the rounding of that measure is allowed.
 */
const DECLARED_BOUND_SLACK = 1e-9;

/**
 * Checks a pred stream given by a writer as hostile data and prepares its record: the header
 * (every length checked against the stream before anything is allocated), the request's dtype and
 * shape against it, a full decode (native, off the event loop) whose values must be finite, and
 * the declared errors against the stream's own pointwise bound. The stream is stored as it is.
 */
async function preparePred(stream: Uint8Array, o: ReturnType<typeof putPredOptionsSchema.parse>): Promise<Prepared> {
  const pred = await loadPred();
  const h = pred.info(stream);
  if (o.dtype !== undefined && o.dtype !== h.dtype) throw new ValidationError(`dtype ${o.dtype} does not match the stream's ${h.dtype}.`, "dtype");
  if (o.shape !== undefined && (o.shape.length !== h.shape.length || o.shape.some((n, i) => n !== h.shape[i])))
    throw new ValidationError(`shape [${o.shape.join(", ")}] does not match the stream's [${h.shape.join(", ")}].`, "shape");
  if (h.lossless && (o.relative_error !== 0 || o.max_abs_error !== 0))
    throw new ValidationError("The stream is lossless, so both declared errors must be 0.", "max_abs_error");
  if (o.max_abs_error > h.max_abs_error * (1 + DECLARED_BOUND_SLACK))
    throw new ValidationError(`The declared max_abs_error ${o.max_abs_error} is above the stream's own pointwise bound ${h.max_abs_error}.`, "max_abs_error");
  const decoded = await pred.decompress(stream);
  if (await hasNonFinitePaced(decoded)) throw new ValidationError("The stream decodes to NaN or infinite values; floating data must be finite.", "stream");
  const norm = finiteNorm((await normAndMaxPaced(decoded)).norm);
  const bytesIn = decoded.byteLength;
  return {
    payload: stream,
    record: base(
      h.dtype,
      [...h.shape],
      h.lossless ? "lossless" : "compressed",
      bytesIn / stream.byteLength,
      o.relative_error,
      bytesIn,
      stream.byteLength,
      { sha256: await sha256hex(stream), codec: "pred", tt: null, norm },
      { codec: "pred", lossless: h.lossless },
      o.max_abs_error,
    ),
  };
}

/**
 * put of a pred stream (lib/pred.ts) encoded by the writer: validated and decoded in full, then
 * stored as it is. relative_error and max_abs_error are the writer's own measurement against its
 * data (the store cannot see that data) and become the entry's errors.
 */
export async function putPred(s: Scope, ns: string, key: string, stream: Uint8Array, opts: PutPredOptions): Promise<PutResult> {
  open(s);
  namespace(ns);
  keyName(key);
  if (!(stream instanceof Uint8Array)) throw new ValidationError("stream must be a Uint8Array.", "stream");
  const o = parseOrThrow(putPredOptionsSchema, opts, "options");
  const stored = await lookup(s);
  if (stored !== undefined) return stored as PutResult;
  // own copy: the caller may reuse its buffer, unless it handed it over
  // (a detached stream has no bytes, and copying it would throw a TypeError)
  const prepared = await preparePred(handedOver.has(stream) || stream.byteLength === 0 ? stream : new Uint8Array(stream), o);
  return commit(s, ns, [{ key, prepared, if_version: o.if_version, metadata: o.metadata ?? {} }], false, (r) => r[0]!);
}

/** put_cores_batch: every item is validated before any is stored; all are stored in one transaction. */
export async function putCoresBatch(s: Scope, ns: string, items: PutCoresItem[]): Promise<{ results: PutResult[] }> {
  open(s);
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
  const stored = await lookup(s);
  if (stored !== undefined) return stored as { results: PutResult[] };
  const prepared: Prepared[] = [];
  for (let i = 0; i < checked.length; i++) {
    try {
      prepared.push(await prepareCores(checked[i]!.cores, checked[i]!.o.shape, "cores"));
    } catch (e) {
      throw itemError(e, i);
    }
  }
  return commit(
    s,
    ns,
    checked.map((c, i) => ({ key: c.key, prepared: prepared[i]!, if_version: c.o.if_version, metadata: c.o.metadata ?? {} })),
    true,
    (results) => ({ results }),
  );
}

/**
 * One write transaction for all items: read heads (and the stored response of an idempotent
 * write), check if_version, then write. `respond` shapes the results into the verb's answer.
 */
async function commit<R>(
  s: Scope,
  ns: string,
  items: { key: string; prepared: Prepared; if_version: number | undefined; metadata: Record<string, unknown> }[],
  batch: boolean,
  respond: (results: PutResult[]) => R,
): Promise<R> {
  const { backend, clock } = open(s);
  const t = s.tenant;
  const idem = s.idem;
  const keys: RecordKey[] = [...new Set(items.map((it) => it.key))].map((k) => headKey(t, ns, k));
  if (idem) keys.push(idempotencyKey(t, idem.key));
  const stage = items.map((it) => ({ tenant: t, id: it.prepared.record.fingerprint.sha256, bytes: it.prepared.payload }));
  return backend.transact({ keys, stage }, (tx) => {
    const now = clock.now();
    if (idem) {
      // a request with the same key committed since the lookup: its response, nothing written
      const stored = replayOf(idem, tx.get(idempotencyKey(t, idem.key)), now);
      if (stored !== undefined) return stored as R;
    }
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
        relative_error: rec.relative_error,
        max_abs_error: rec.max_abs_error,
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
      tx.putPayload(t, rec.fingerprint.sha256, it.prepared.payload);
      tx.put(versionKey(t, ns, it.key, version), packRecord(rec));
      tx.put(headKey(t, ns, it.key), packRecord(next));
      results.push(putResult(ns, it.key, rec));
    }
    const answer = respond(results);
    if (idem) tx.put(idempotencyKey(t, idem.key), recordOf(idem, answer, now));
    return answer;
  });
}

/** Tombstones whose purge times fall in the same clock hour, over adjacent versions, are kept as one. */
const TOMBSTONE_MERGE_MS = 3600 * 1000;

/**
 * The head's tombstones with `t` added. A key put and deleted over and over would otherwise
 * carry one tombstone per cycle for the 30 days they are kept, and every read of the key decodes
 * them all (5,000 cycles made its get 130 times slower). A tombstone that directly follows the
 * last one (its versions start where the last one's end) and whose purge time falls in the same
 * clock hour is merged into it, with the later purge time: versions are then purged less than
 * an hour after their own delete's purge_after, however long the churn goes on, and a head keeps
 * at most one tombstone per hour.
 */
function withTombstone(list: HeadRecord["tombstones"], t: HeadRecord["tombstones"][number]): HeadRecord["tombstones"] {
  const last = list.at(-1);
  const hour = (ms: number) => Math.floor(ms / TOMBSTONE_MERGE_MS);
  if (last && last.upto + 1 === t.from && hour(last.purge_after) === hour(t.purge_after) && t.purge_after >= last.purge_after)
    return [...list.slice(0, -1), { from: last.from, upto: t.upto, purge_after: t.purge_after }];
  return [...list, t];
}

/** delete: soft delete with a tombstone kept 30 days. */
export async function remove(s: Scope, ns: string, key: string): Promise<DeleteResult> {
  const { backend, clock } = open(s);
  namespace(ns);
  keyName(key);
  const t = s.tenant;
  const idem = s.idem;
  const stored = await lookup(s);
  if (stored !== undefined) return stored as DeleteResult;
  const keys: RecordKey[] = [headKey(t, ns, key)];
  if (idem) keys.push(idempotencyKey(t, idem.key));
  return backend.transact({ keys }, (tx) => {
    const now = clock.now();
    if (idem) {
      const again = replayOf(idem, tx.get(idempotencyKey(t, idem.key)), now);
      if (again !== undefined) return again as DeleteResult;
    }
    const head = unpackRecord<HeadRecord>(tx.get(headKey(t, ns, key)));
    if (!head || head.deleted) throw new NotFoundError(`No entry ${key} in namespace ${ns}.`);
    const purgeAfter = now + TOMBSTONE_RETENTION_MS;
    const next: HeadRecord = {
      ...head,
      deleted: true,
      updated_at: now,
      tombstones: withTombstone(head.tombstones, { from: head.first_live, upto: head.latest, purge_after: purgeAfter }),
    };
    tx.put(headKey(t, ns, key), packRecord(next));
    const answer: DeleteResult = { namespace: ns, key, deleted: true as const, version: head.latest, purge_after: isoTime(purgeAfter) };
    if (idem) tx.put(idempotencyKey(t, idem.key), recordOf(idem, answer, now));
    return answer;
  });
}

function itemError(e: unknown, i: number): unknown {
  if (!(e instanceof ValidationError)) return e;
  const field = e.field ? `items.${i}.${e.field}` : `items.${i}`;
  return new ValidationError(`items.${i}: ${e.message}`, field);
}

// Passes over a put's data in slices of the event loop (pacedScan), with the results of
// their one-piece forms in lib/store/codec.ts.

/** Whether every element is zero (stops at the first block that is not, so other data pay little). */
function isAllZeroPaced(x: ArrayLike<number>): Promise<boolean> {
  return pacedScan(x.length, (a, b) => {
    for (let i = a; i < b; i++) if (x[i] !== 0) return true;
  }).then((nonzero) => !nonzero);
}

function hasNonFinitePaced(x: Float32Array | Float64Array): Promise<boolean> {
  return pacedScan(x.length, (a, b) => hasNonFinite(x.subarray(a, b)));
}

/**
 * denseNorm (scaled by the largest magnitude, so no square overflows), in slices; with
 * `dtype`, `x` holds values of that dtype, read as float64 a block at a time.
 */
/**
 * The Frobenius norm and the largest magnitude of `x`, in slices, and their ratio `rms` =
 * norm / (max · √n), which stays a float64 where the norm (float64 data near 1e308) does not:
 * the norm is then Infinity.
 */
async function normAndMaxPaced(x: Float32Array | Float64Array): Promise<{ norm: number; max: number; rms: number }> {
  let max = 0;
  await pacedScan(x.length, (a, b) => {
    max = maxAbs(x.subarray(a, b), max);
  });
  if (max === 0) return { norm: 0, max, rms: 0 };
  let s = 0;
  await pacedScan(x.length, (a, b) => {
    s = addScaledSquares(x.subarray(a, b), max, s);
  });
  return { norm: max * Math.sqrt(s), max, rms: Math.sqrt(s / x.length) };
}

async function denseNormPaced(x: Float32Array | Float64Array | ServeArray, dtype?: Dtype): Promise<number> {
  const block = (a: number, b: number): ArrayLike<number> =>
    dtype === undefined || dtype === "float32" || dtype === "float64"
      ? (x.subarray(a, b) as ArrayLike<number>)
      : toFloat64(x.subarray(a, b) as ServeArray, dtype);
  let scale = 0;
  await pacedScan(x.length, (a, b) => {
    scale = maxAbs(block(a, b), scale);
  });
  if (scale === 0 || !Number.isFinite(scale)) return scale;
  let s = 0;
  await pacedScan(x.length, (a, b) => {
    s = addScaledSquares(block(a, b), scale, s);
  });
  return scale * Math.sqrt(s);
}

/** toWorkingFloat in slices: float32 and float64 as they are, float16 and bfloat16 widened to float32. */
async function workingFloatPaced(arr: ServeArray, dtype: Dtype): Promise<Float32Array | Float64Array> {
  if (dtype === "float32" || dtype === "float64") return toWorkingFloat(arr, dtype);
  const src = arr as Uint16Array;
  const out = new Float32Array(src.length);
  await pacedScan(src.length, (a, b) => {
    out.set(toWorkingFloat(src.subarray(a, b), dtype), a);
  });
  return out;
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
  dtype: Dtype,
  shape: number[],
  verdict: VersionRecord["verdict"],
  ratio: number,
  relErr: number,
  bytesIn: number,
  bytesStored: number,
  fingerprint: VersionRecord["fingerprint"],
  layout: PayloadLayout,
  maxAbsErr = 0,
): Prepared["record"] {
  return {
    dtype,
    shape,
    metadata: {},
    verdict,
    compression_ratio: ratio,
    relative_error: relErr,
    max_abs_error: maxAbsErr,
    bytes_in: bytesIn,
    bytes_stored: bytesStored,
    fingerprint,
    layout,
  };
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
    max_abs_error: rec.max_abs_error ?? 0,
    dtype: rec.dtype,
    shape: rec.shape,
    tt: rec.fingerprint.tt,
    bytes_in: rec.bytes_in,
    bytes_stored: rec.bytes_stored,
    fingerprint: rec.fingerprint,
  };
}
