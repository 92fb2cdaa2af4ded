// The similarity verbs of the store: query_similarity, query_topk and query_vector. A top-K
// reads the namespace's heads in key order and scores every live entry of the query's shape;
// TT cores come from the core cache, and those not held yet are read in batches; prediction-codec
// candidates stay streams, scored block by block against the query (never decoded whole).
import { NotFoundError, ValidationError } from "../errors.js";
import { compileFilter, matchFilter, type FilterNode } from "../filter.js";
import { isFloatDtype, parseOrThrow } from "../fields.js";
import {
  similarityOptionsSchema,
  topkOptionsSchema,
  vectorOptionsSchema,
  type Metric,
  type SimilarityOptions,
  type TopkOptions,
  type VectorOptions,
} from "../schemas.js";
import { hasNonFinite, product, toFloat64, toWorkingFloat } from "./codec.js";
import { denseNormScaled, toNumber, type Scaled } from "../scaled.js";
import { loadPred } from "./predapi.js";
import { loadTT } from "./ttapi.js";
import {
  cachedTT,
  decodeTT,
  denseOf,
  keyName,
  liveHeads,
  namespace,
  open,
  payloadOf,
  readVersion,
  sameShape,
  ttOf,
  type Entry,
  type Scope,
} from "./context.js";
import { deviceScores } from "./gpu-query.js";
import { Pace } from "./pace.js";
import { better, RANK_DENSE_CHUNK_BYTES, scoreBatch, similarity as scorePair, type Operand } from "./similarity.js";
import type { TT } from "./ttapi.js";
import type { HeadRecord, PayloadLayout, SimilarityResult, TopkResult } from "./types.js";

/** The metric's score in words, for a refusal. */
const scoreName = (metric: Metric): string => (metric === "l2" ? "l2 distance" : metric === "dot" ? "dot product" : "cosine");

/** Payloads a top-K reads per round trip when the core cache lacks them. */
const PAYLOAD_BATCH = 256;

/**
 * The norm of an entry as an operand carries it: its fingerprint's, or, where that is null
 * (a norm beyond float64's range, docs/store.md), measured again on the stored form, scaled.
 */
const stored = (rec: Entry): Scaled | null => (rec.fingerprint.norm === null ? null : { m: rec.fingerprint.norm, e: 0 });

function ttOperand(rec: Entry, tt: TT): Operand | Promise<Operand> {
  const layout = rec.layout as Extract<PayloadLayout, { codec: "tt" }>;
  const norm = stored(rec);
  if (norm) return { kind: "tt", tt, norm, coreDtype: layout.core_dtype };
  return loadTT()
    .then((api) => api.normScaled(tt))
    .then((n): Operand => ({ kind: "tt", tt, norm: n, coreDtype: layout.core_dtype }));
}

/**
 * An entry as an operand: TT cores, or dense values; with `stream`, a pred entry stays its
 * stream (a candidate, scored block by block) instead of being decoded whole.
 */
async function operand(s: Scope, rec: Entry, what: string, stream = false): Promise<Operand> {
  if (rec.dtype === "bytes") throw new ValidationError(`${what} holds bytes; similarity needs numeric data.`, what);
  if (rec.layout.codec === "tt") return ttOperand(rec, await ttOf(s, rec));
  if (stream && rec.layout.codec === "pred") {
    // the stream holds float32 for float16/bfloat16 entries, whose served values are rounded
    const round = rec.dtype === "float16" ? 1 : rec.dtype === "bfloat16" ? 2 : 0;
    const stream = await payloadOf(s, rec);
    const norm = stored(rec) ?? denseNormScaled(await (await loadPred()).decompress(stream));
    return { kind: "pred", stream, norm, round, f64: rec.dtype === "float64" };
  }
  const dense = await denseOf(s, rec);
  const x =
    rec.dtype === "float64"
      ? (dense as Float64Array)
      : rec.dtype === "float32"
        ? (dense as Float32Array)
        : isFloatDtype(rec.dtype)
          ? toWorkingFloat(dense, rec.dtype)
          : toFloat64(dense, rec.dtype);
  return { kind: "dense", x, norm: stored(rec) ?? denseNormScaled(x) };
}

/** query_similarity: one metric between two entries (of one namespace or two). */
export async function similarity(s: Scope, ns: string, a: string, b: string, opts: SimilarityOptions = {}): Promise<SimilarityResult> {
  namespace(ns);
  keyName(a);
  keyName(b);
  const o = parseOrThrow(similarityOptionsSchema, opts, "options");
  const nsB = o.namespace_b ?? ns;
  const ra = (await readVersion(s, ns, a, o.version_a)).rec;
  const rb = (await readVersion(s, nsB, b, o.version_b)).rec;
  for (const [r, what, k] of [
    [ra, "a", a],
    [rb, "b", b],
  ] as const)
    if (r.dtype === "bytes") throw new ValidationError(`Entry ${k} holds bytes; similarity needs numeric data.`, what);
  if (!sameShape(ra.shape, rb.shape))
    throw new ValidationError(`Entries ${a} [${ra.shape.join(", ")}] and ${b} [${rb.shape.join(", ")}] have different shapes.`, "b");
  const scaled = await scorePair(o.metric, await operand(s, ra, "a"), await operand(s, rb, "b", true));
  const score = toNumber(scaled, `the ${scoreName(o.metric)} of ${a} and ${b}`, "metric");
  return { metric: o.metric, score, a: { key: a, version: ra.version }, b: { key: b, version: rb.version } };
}

async function rank(
  s: Scope,
  ns: string,
  metric: Metric,
  k: number,
  q: Operand,
  shape: number[],
  filter: FilterNode | null,
  exclude: string | null,
  qid: { key: string; version: number } | null = null,
): Promise<TopkResult> {
  const core = open(s);
  let skipped = 0;
  const keys: string[] = [];
  const versions: number[] = [];
  const scores: Scaled[] = [];
  // Candidates are scored in chunks of at most RANK_DENSE_CHUNK_BYTES of dense data or pred
  // streams, so a namespace of them is never held in memory whole (TT candidates cost their
  // cores; a pred candidate costs its stream, and one block per thread while it is scored).
  let cands: (Operand | undefined)[] = [];
  let denseBytes = 0;
  // TT candidates whose cores the cache lacks: read together, PAYLOAD_BATCH per round trip
  let pending: { at: number; head: HeadRecord }[] = [];
  const fetch = async () => {
    const batch = pending;
    pending = [];
    const ids = [...new Set(batch.map((p) => p.head.fingerprint.sha256))];
    const got = await core.backend.getPayloads(s.tenant, ids);
    for (const { at, head } of batch) {
      const tt = cachedTT(s, head) ?? (got.has(head.fingerprint.sha256) ? decodeTT(s, head, got.get(head.fingerprint.sha256)!) : undefined);
      if (!tt) throw new NotFoundError("The entry's payload is missing.");
      const op = ttOperand(head, tt);
      cands[at] = op instanceof Promise ? await op : op;
    }
  };
  // on the device when GPU serving is on for queries (SVC_ENGINE_DEVICE=cuda), else the CPU
  const ids = (key: string, version: number) => ({ tenant: s.tenant, ns, key, version });
  const flush = async () => {
    if (pending.length > 0) await fetch();
    if (cands.length === 0) return;
    const all = cands as Operand[];
    const from = scores.length;
    const onDevice = await deviceScores(
      core.gpu,
      metric,
      q,
      qid && ids(qid.key, qid.version),
      all,
      keys.slice(from).map((key, i) => ids(key, versions[from + i]!)),
    );
    for (const x of onDevice ?? (await scoreBatch(metric, q, all))) scores.push(x);
    cands = [];
    denseBytes = 0;
  };
  const pace = new Pace(); // the event loop gets a turn every slice of a long scan
  for await (const { key, head } of liveHeads(s, ns, "")) {
    if (pace.due()) await pace.yield();
    if (key === exclude) continue;
    if (filter && !matchFilter(filter, head.metadata)) continue;
    if (head.dtype === "bytes" || !sameShape(head.shape, shape)) {
      skipped++;
      continue;
    }
    keys.push(key);
    versions.push(head.latest);
    if (head.layout.codec === "tt") {
      const tt = cachedTT(s, head);
      if (tt) {
        const op = ttOperand(head, tt);
        cands.push(op instanceof Promise ? await op : op);
      } else {
        pending.push({ at: cands.length, head });
        cands.push(undefined);
        if (pending.length >= PAYLOAD_BATCH) await fetch();
      }
    } else {
      const op = await operand(s, head, key, true);
      cands.push(op);
      const bytes = op.kind === "dense" ? op.x.byteLength : op.kind === "pred" ? op.stream.byteLength : 0;
      if ((denseBytes += bytes) >= RANK_DENSE_CHUNK_BYTES) await flush();
    }
  }
  await flush();
  const order = scores.map((_, i) => i);
  order.sort((i, j) => better(metric, scores[i]!, scores[j]!) || (keys[i]! < keys[j]! ? -1 : 1));
  const query = qid ? qid.key : "the vector";
  return {
    metric,
    // ranked on the scaled scores; a score to report beyond float64's range is refused (docs/store.md)
    results: order.slice(0, k).map((i) => ({
      key: keys[i]!,
      version: versions[i]!,
      score: scores[i]!.e === 0 ? scores[i]!.m : toNumber(scores[i]!, `the ${scoreName(metric)} of ${query} and ${keys[i]!}`, "metric"),
    })),
    scanned: scores.length,
    skipped,
  };
}

/** query_topk: the k entries of a namespace nearest to one of its entries. */
export async function topk(s: Scope, ns: string, opts: TopkOptions): Promise<TopkResult> {
  namespace(ns);
  const o = parseOrThrow(topkOptionsSchema, opts, "options");
  const filter = o.filter ? compileFilter(o.filter) : null;
  const { rec } = await readVersion(s, ns, o.key, o.version);
  const q = await operand(s, rec, "key");
  return rank(s, ns, o.metric, o.k, q, rec.shape, filter, o.include_self ? null : o.key, { key: o.key, version: rec.version });
}

/** query_vector: the k entries of a namespace nearest to a dense vector. */
export async function vector(s: Scope, ns: string, opts: VectorOptions): Promise<TopkResult> {
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
  if (product(shape) !== x.length) throw new ValidationError(`vector has ${x.length} values but shape [${shape.join(", ")}] needs ${product(shape)}.`, "shape");
  return rank(s, ns, o.metric, o.k, { kind: "dense", x, norm: denseNormScaled(x) }, shape, filter, null);
}
