// Cosine scores lie in [-1, 1] on every codec and every query that computes them: an entry
// against itself is 1 exactly (the float64 quotient of a dot product and the product of two
// norms, each rounded, came out as 1.0000000000000024), against its negation -1.
import test from "tape";
import { createStore } from "../../lib/store/index.js";
import { cosine } from "../../lib/scaled.js";
import { scoreOf } from "../../lib/store/similarity.js";
import { rankScores } from "../../lib/store/gpu-cache.js";

const N = 64 * 64;
const fields: [string, (i: number) => number][] = [
  ["(i*7919)%13", (i) => (i * 7919) % 13],
  ["sin(i/30)", (i) => Math.sin(i / 30)],
  ["0.1 + i/7", (i) => 0.1 + i / 7],
  ["cos(i/5) * 1e-3", (i) => Math.cos(i / 5) * 1e-3],
  ["1 / (1 + i)", (i) => 1 / (1 + i)],
  ["(i%3) - 1 + 1e-7 i", (i) => (i % 3) - 1 + 1e-7 * i],
];
const codecs = ["lossless", "tt", "pred", "auto"] as const;

test("cosine of an entry with itself, its negation and a vector: within [-1, 1]", async (t) => {
  const s = await createStore({ path: ":memory:" });
  const inRange = (what: string, v: number) => t.ok(v >= -1 && v <= 1, `${what}: ${v} within [-1, 1]`);
  try {
    for (const [fi, [name, f]] of fields.entries()) {
      const d = Float32Array.from({ length: N }, (_, i) => f(i));
      const neg = d.map((x) => -x);
      for (const codec of codecs) {
        const k = `${codec}-${fi}`;
        await s.put("ns", k, d, { shape: [64, 64], codec });
        await s.put("ns", `${k}-neg`, neg, { shape: [64, 64], codec });
        const self = await s.query.similarity("ns", k, k);
        t.equal(self.metric, "cosine", "cosine is the default");
        inRange(`${codec} ${name} with itself`, self.score);
        inRange(`${k} with its negation`, (await s.query.similarity("ns", k, `${k}-neg`)).score);
        inRange(`${k} with itself, metric named`, (await s.query.similarity("ns", k, k, { metric: "cosine" })).score);
      }
      for (const codec of codecs) {
        const top = await s.query.topk("ns", { key: `${codec}-${fi}`, k: 100, include_self: true });
        for (const r of top.results) inRange(`top-K of ${codec}-${name}: ${r.key}`, r.score);
      }
      const v = await s.query.vector("ns", { vector: d, shape: [64, 64], k: 100 });
      for (const r of v.results) inRange(`vector query, ${name}: ${r.key}`, r.score);
    }
  } finally {
    await s.close();
  }
});

test("the scoring functions clamp cosine to [-1, 1]", (t) => {
  // a dot product rounded up against norms rounded down: the quotient leaves [-1, 1]
  const n = { m: 3, e: 0 };
  t.equal(scoreOf("cosine", { m: 9.000000000000002, e: 0 }, n, n).m, 1, "plain formula, above 1");
  t.equal(scoreOf("cosine", { m: -9.000000000000002, e: 0 }, n, n).m, -1, "plain formula, below -1");
  const big = { m: 3, e: 900 };
  t.equal(scoreOf("cosine", { m: 9.000000000000002, e: 1800 }, big, big).m, 1, "scaled formula, above 1");
  t.equal(cosine({ m: -9.000000000000002, e: 1800 }, big, big), -1, "lib/scaled.ts cosine, below -1");
  t.equal(scoreOf("cosine", { m: 4, e: 0 }, n, n).m, 4 / 9, "a cosine inside the range is unchanged");
  const r = rankScores(Float64Array.of(9.000000000000002, -9.000000000000002, 4), Float64Array.of(3, 3, 3, 3), "cosine", 3);
  t.deepEqual(Array.from(r.score), [1, 4 / 9, -1], "rankScores (the device's CPU mirror)");
  t.end();
});
