// Float64 data of any finite magnitude, 1e-300 to 1e308, and float32 near its limits: every
// put is accepted within its tolerance, the fingerprint norm is the norm of the served values
// (null only where that exceeds float64's range), relative_error is the measured one, an entry
// scores cosine 1 with itself, and one entry of huge values never breaks the scores or the
// order of a top-K. References are computed here in float64 on values scaled by a power of two.
import { ValidationError } from "../../lib/errors.js";
import { storeSuite } from "./harness.js";

const suite = storeSuite({ targets: ["memory", "lmdb"], namespaces: ["m", "k", "k0", "k1", "k2", "k3", "k4"] });

const N = 64;
const wave = (M: number, f = 30) => Float64Array.from({ length: N * N }, (_, i) => Math.sin(i / f) * M);

/** The power of two p with 2^p <= |x| < 2^(p+1). */
function log2Floor(x: number): number {
  let p = Math.floor(Math.log2(x));
  if (2 ** p > x) p--;
  if (2 ** (p + 1) <= x) p++;
  return p;
}

/** ‖x‖ as [m, p] with the norm m · 2^p, summed (Kahan) on x / 2^p, p from the largest magnitude. */
function refNorm(x: ArrayLike<number>): [number, number] {
  let max = 0;
  for (let i = 0; i < x.length; i++) max = Math.max(max, Math.abs(x[i]!));
  if (max === 0) return [0, 0];
  const p = log2Floor(max);
  let s = 0,
    c = 0;
  for (let i = 0; i < x.length; i++) {
    const v = x[i]! * 2 ** -Math.trunc(p / 2) * 2 ** (Math.trunc(p / 2) - p);
    const y = v * v - c;
    const t = s + y;
    c = t - s - y;
    s = t;
  }
  return [Math.sqrt(s), p];
}

/** ⟨a, b⟩ / (‖a‖ ‖b‖) on scaled values. */
function refCosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const [na, pa] = refNorm(a);
  const [nb, pb] = refNorm(b);
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * 2 ** -pa * (b[i]! * 2 ** -pb);
  return s / (na * nb);
}

/** ‖a − b‖ / ‖a‖ on scaled values. */
function refRelErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const [na, p] = refNorm(a);
  let s = 0;
  for (let i = 0; i < a.length; i++) s += (a[i]! * 2 ** -p - b[i]! * 2 ** -p) ** 2;
  return Math.sqrt(s) / na;
}

const close = (a: number, b: number, rel: number) => Math.abs(a - b) <= rel * Math.abs(b);

suite.test(
  "float64 of every magnitude from 1e-300 to 1e308 (and float32 extremes): accepted within the tolerance, measured norm and error, cosine with itself 1",
  async (t, s) => {
    for (const M of [1e-300, 1e-200, 1e150, 1e154, 1e200, 1e300, 1e307, 1e308]) {
      for (const opts of [{}, { codec: "pred" as const }, { codec: "tt" as const, tolerance: 1e-6 }]) {
        const name = `1e${Math.round(Math.log10(M))} ${JSON.stringify(opts)}`;
        const key = `w${Math.round(Math.log10(M)) + 400}-${opts.codec ?? "auto"}`;
        const x = wave(M);
        const r = await s.put("m", key, x, { shape: [N, N], ...opts });
        const tol = opts.tolerance ?? 1e-3;
        const back = (await s.serve("m", key)).data as Float64Array;
        t.ok(
          back.every((v) => Number.isFinite(v)),
          `${name}: served values finite`,
        );
        const err = refRelErr(x, back);
        t.ok(err <= tol, `${name}: served error ${err.toExponential(2)} <= ${tol} (${r.fingerprint.codec})`);
        t.ok(
          close(r.relative_error, err, 1e-6) || (r.relative_error === 0 && err === 0),
          `${name}: reported relative_error ${r.relative_error} is the measured ${err}`,
        );
        const [m, p] = refNorm(back);
        const want = m * 2 ** p;
        if (Number.isFinite(want)) t.ok(r.fingerprint.norm !== null && close(r.fingerprint.norm, want, 1e-12), `${name}: norm ${r.fingerprint.norm} = ${want}`);
        else t.equal(r.fingerprint.norm, null, `${name}: norm ${m} * 2^${p} exceeds float64: null`);
        const self = await s.query.similarity("m", key, key, { metric: "cosine" });
        t.ok(close(self.score, 1, 1e-12), `${name}: cosine with itself ${self.score}`);
        const l2 = await s.query.similarity("m", key, key, { metric: "l2" });
        t.ok(l2.score >= 0 && l2.score <= 1e-12 * want, `${name}: l2 to itself ${l2.score}`);
      }
    }
    // float32 near its largest value and subnormal
    for (const M of [3.3e38, 1e-40]) {
      const x = Float32Array.from(wave(M));
      const key = M > 1 ? "f32-big" : "f32-sub";
      const r = await s.put("m", key, x, { shape: [N, N] });
      const back = (await s.serve("m", key)).data as Float32Array;
      const err = refRelErr(x, back);
      t.ok(err <= 1e-3, `${M}: served error ${err.toExponential(2)}`);
      const [m, p] = refNorm(back);
      t.ok(r.fingerprint.norm !== null && close(r.fingerprint.norm, m * 2 ** p, 1e-6), `${M}: norm ${r.fingerprint.norm} = ${m * 2 ** p}`);
      const self = await s.query.similarity("m", key, key);
      t.ok(close(self.score, 1, 1e-6), `${M}: cosine with itself ${self.score}`);
    }
  },
);

suite.test("one entry of huge values keeps top-K's scores and order right", async (t, s) => {
  const q = Float64Array.from({ length: N * N }, (_, i) => Math.cos(i / 40));
  const other = Float64Array.from({ length: N * N }, (_, i) => Math.cos(i / 41));
  const cases = [
    [1e160, {}],
    [1e200, {}],
    [1e300, {}],
    [1e300, { codec: "pred" as const }],
    [1e300, { tolerance: 0 }],
  ] as const;
  for (const [i, [M, opts]] of cases.entries()) {
    const ns = `k${i}`;
    await s.put(ns, "q", q, { shape: [N, N] });
    await s.put(ns, "other", other, { shape: [N, N] });
    await s.put(ns, "big", wave(M), { shape: [N, N], ...opts });
    const served = async (key: string) => (await s.serve(ns, key)).data as Float64Array;
    const [sq, so, sb] = [await served("q"), await served("other"), await served("big")];
    const cos = await s.query.topk(ns, { key: "q", k: 5, metric: "cosine" });
    const wantCos = [refCosine(sq, so), refCosine(sq, sb)];
    t.deepEqual(
      cos.results.map((r) => r.key),
      ["other", "big"],
      `${ns} cosine: order other, big`,
    );
    t.ok(
      close(cos.results[0]!.score, wantCos[0]!, 1e-9) && close(cos.results[1]!.score, wantCos[1]!, 1e-9),
      `${ns} cosine: scores ${cos.results.map((r) => r.score)} = ${wantCos}`,
    );
    const l2 = await s.query.topk(ns, { key: "q", k: 5, metric: "l2" });
    t.deepEqual(
      l2.results.map((r) => r.key),
      ["other", "big"],
      `${ns} l2: order other, big`,
    );
    const [m, p] = refNorm(Float64Array.from(sb, (v, i) => v - sq[i]!));
    t.ok(close(l2.results[1]!.score, m * 2 ** p, 1e-9), `${ns} l2: big at ${l2.results[1]!.score} = ${m * 2 ** p}`);
  }
});

suite.test("dot products below float64's normal range rank in their true order", async (t, s) => {
  const x = wave(1e-200);
  await s.put("k", "q", x, { shape: [N, N], tolerance: 0 });
  // keys in the opposite order to the scores: a tie would put "a" first
  await s.put(
    "k",
    "a",
    Float64Array.from(x, (v) => v * 0.5),
    { shape: [N, N], tolerance: 0 },
  );
  await s.put(
    "k",
    "z",
    Float64Array.from(x, (v) => v * 2),
    { shape: [N, N], tolerance: 0 },
  );
  const r = await s.query.topk("k", { key: "q", k: 2, metric: "dot" });
  t.deepEqual(
    r.results.map((e) => e.key),
    ["z", "a"],
    `dot ~1e-396 and ~1e-397: z before a (${JSON.stringify(r.results)})`,
  );
});

suite.test("a vector of 1e308 values: cosine scores, a dot beyond float64 is refused with a sentence", async (t, s) => {
  await s.put("m", "v", new Float64Array([1, 2, 3, 4]), { shape: [4] });
  const v = [1e308, 1e308, 1e308, 1e308];
  const r = await s.query.vector("m", { vector: v, k: 3 });
  t.ok(close(r.results[0]!.score, 10 / Math.sqrt(4 * 30), 1e-12), `cosine ${r.results[0]!.score}`);
  const l2 = await s.query.vector("m", { vector: [1e307, 1e307, 1e307, 1e307], k: 3, metric: "l2" });
  t.ok(close(l2.results[0]!.score, 2e307, 1e-12), `l2 of [1e307 x4] and [1, 2, 3, 4]: ${l2.results[0]!.score}`);
  try {
    await s.query.vector("m", { vector: v, k: 3, metric: "dot" });
    t.fail("a dot product of 1e309 should be refused");
  } catch (e) {
    t.ok(e instanceof ValidationError, `ValidationError: ${(e as Error).message}`);
    t.ok((e as Error).message.includes("beyond float64's largest value"), "the sentence says why");
  }
});

suite.test("put_cores takes a TT of norm 4.5e301 and refuses one beyond float64 with a sentence", async (t, s) => {
  const a = Float64Array.from({ length: 64 }, (_, i) => Math.sin(i / 7) * 1e150);
  const b = Float64Array.from({ length: 64 }, (_, i) => Math.cos(i / 5) * 1e151);
  const r = await s.putCores("m", "c", [
    { shape: [1, 64, 1], data: a, dtype: "float64" },
    { shape: [1, 64, 1], data: b, dtype: "float64" },
  ]);
  const [ma, pa] = refNorm(a);
  const [mb, pb] = refNorm(b);
  const want = ma * mb * 2 ** (pa + pb);
  t.ok(r.fingerprint.norm !== null && close(r.fingerprint.norm, want, 1e-12), `norm ${r.fingerprint.norm} = ${want}`);
  const self = await s.query.similarity("m", "c", "c");
  t.ok(close(self.score, 1, 1e-12), `cosine with itself ${self.score}`);
  try {
    await s.putCores("m", "d", [
      { shape: [1, 64, 1], data: Float64Array.from(a, (v) => v * 1e10), dtype: "float64" },
      { shape: [1, 64, 1], data: b, dtype: "float64" },
    ]);
    t.fail("a norm of 4.5e311 should be refused");
  } catch (e) {
    t.ok(e instanceof ValidationError && (e as Error).message.includes("beyond float64's largest value"), `refused: ${(e as Error).message}`);
  }
});

suite.run();
