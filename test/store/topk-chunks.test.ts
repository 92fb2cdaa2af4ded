// Top-K over dense entries larger in all than RANK_DENSE_CHUNK_BYTES: the scan scores its
// candidates chunk by chunk instead of holding them all, and every score stays with its key.
import test from "tape";
import { createStore } from "../../lib/store/index.js";
import { RANK_DENSE_CHUNK_BYTES } from "../../lib/store/similarity.js";

test("topk: dense candidates scored in chunks keep their keys and scores", async (t) => {
  const store = await createStore({ path: ":memory:" });
  try {
    const n = 4 * 1024 * 1024; // int32 entries, worked on as float64: 32 MiB each
    const entries = 5;
    t.ok(entries * n * 8 > 2 * RANK_DENSE_CHUNK_BYTES, "the candidates span more than two chunks");
    const make = (j: number) => {
      const x = new Int32Array(n);
      for (let i = 0; i < n; i++) x[i] = (i % 7) + j * (i % 3);
      return x;
    };
    for (let j = 0; j < entries; j++) {
      const r = await store.put("default", `e${j}`, make(j), { shape: [n], dtype: "int32" });
      t.equal(r.version, 1, `e${j} stored (${r.verdict})`);
    }
    const q = new Float64Array(n);
    for (let i = 0; i < n; i++) q[i] = (i % 7) + 2.5 * (i % 3);
    const expected: { key: string; score: number }[] = [];
    for (let j = 0; j < entries; j++) {
      const x = make(j);
      let dot = 0,
        nx = 0,
        nq = 0;
      for (let i = 0; i < n; i++) {
        dot += x[i]! * q[i]!;
        nx += x[i]! * x[i]!;
        nq += q[i]! * q[i]!;
      }
      expected.push({ key: `e${j}`, score: dot / Math.sqrt(nx * nq) });
    }
    expected.sort((a, b) => b.score - a.score);
    const r = await store.query.vector("default", { vector: q, shape: [n], k: entries });
    t.equal(r.scanned, entries, "every entry scanned");
    t.deepEqual(
      r.results.map((x) => x.key),
      expected.map((x) => x.key),
      `order ${expected.map((x) => x.key).join(" ")}`,
    );
    t.ok(
      r.results.every((x, i) => Math.abs(x.score - expected[i]!.score) < 1e-9),
      "each score is its entry's cosine",
    );
  } finally {
    await store.close();
  }
});
