// query.topk on the device: when GPU serving is on for queries (SVC_ENGINE_DEVICE=cuda), a TT
// query and TT candidates of the same modes are made resident (LRU cache) and their inner
// products come from one batched device call; the metric is then applied exactly as on the
// CPU (including the exact l2 for near-equal tensors). Anything else answers null: CPU path.
import type { Metric } from "../schemas.js";
import { GpuUnavailableError } from "../errors.js";
import type { EntryId, GpuServing, Lease } from "./gpu-cache.js";
import type { Scaled } from "../scaled.js";
import { exactDistance, l2NeedsExact, scoreOf, type Operand } from "./similarity.js";

// The device's products run in float32/float64 without scaling: operands whose norms lie far
// from 1 (data near float64's limits) are scored on the CPU, which keeps them scaled.
const onDeviceNorm = (n: Scaled): boolean => n.e === 0 && (n.m === 0 || (n.m > 2 ** -60 && n.m < 2 ** 60));

const sameModes = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((m, i) => m === b[i]);

/** Scores of q against every candidate computed on the device, or null where the CPU must do it. */
export async function deviceScores(
  gpu: GpuServing | undefined,
  metric: Metric,
  q: Operand,
  qid: EntryId | null,
  cands: Operand[],
  ids: EntryId[],
): Promise<Scaled[] | null> {
  if (!gpu || "unavailable" in gpu || !gpu.queries || q.kind !== "tt" || qid === null || cands.length === 0) return null;
  const modes = q.tt.modes;
  if (!cands.every((c) => c.kind === "tt" && sameModes(c.tt.modes, modes))) return null;
  if (!onDeviceNorm(q.norm) || !cands.every((c) => onDeviceNorm(c.norm))) return null;
  const leases: Lease<unknown>[] = [];
  try {
    try {
      leases.push(await gpu.cache.acquire(qid, () => q.tt));
      for (let i = 0; i < cands.length; i++) {
        const c = cands[i] as Extract<Operand, { kind: "tt" }>;
        leases.push(await gpu.cache.acquire(ids[i]!, () => c.tt));
      }
    } catch (e) {
      if (e instanceof GpuUnavailableError) return null; // the candidates do not fit the cache: CPU
      throw e;
    }
    const r = await gpu.backend.topk(
      leases[0]!.handle,
      leases.slice(1).map((l) => l.handle),
      null,
      "dot",
      cands.length,
    );
    const dots = new Array<Scaled>(cands.length);
    r.index.forEach((pos, j) => (dots[pos] = { m: r.score[j]!, e: 0 }));
    if (dots.some((d) => !Number.isFinite(d.m))) return null;
    const scores = new Array<Scaled>(cands.length);
    for (let i = 0; i < cands.length; i++) {
      const c = cands[i]!;
      scores[i] = metric === "l2" && l2NeedsExact(dots[i]!, q.norm, c.norm) ? await exactDistance(q, c) : scoreOf(metric, dots[i]!, q.norm, c.norm);
    }
    return scores;
  } finally {
    for (const l of leases) l.release();
  }
}
