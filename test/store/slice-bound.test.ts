// max_abs_error holds for every value a serve gives, slices of TT entries included. A slice is
// contracted in another order than the whole reconstruction that the put measured (another
// split, merged factor cores), so its values may differ in their last bits; a TT whose
// measured error left no room for that gave slice values above the bound (by one float32 unit
// in the last place, for bounds equal to the TT's own measured error).
import test from "tape";
import { createStore } from "../../lib/store/index.js";

const shape = [8, 9, 10];

function lcg(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    return x / 0x7fffffff;
  };
}

function field(r: () => number): Float32Array {
  return Float32Array.from({ length: 720 }, (_, i) => Math.sin(i / 13) * 3 + Math.cos(i / 7) + (r() - 0.5) * 1e-3);
}

/** The largest |x - served| over every one-row slice [i, i+1) × [j, j+1) × [0, 10). */
async function worstSliceError(s: Awaited<ReturnType<typeof createStore>>, key: string, x: Float32Array): Promise<number> {
  let worst = 0;
  for (let i = 0; i < shape[0]!; i++)
    for (let j = 0; j < shape[1]!; j++) {
      const got = (
        await s.serve("ns", key, {
          slice: [
            [i, i + 1],
            [j, j + 1],
            [0, 10],
          ],
        })
      ).data as Float32Array;
      for (let k = 0; k < 10; k++) worst = Math.max(worst, Math.abs(x[(i * 9 + j) * 10 + k]! - got[k]!));
    }
  return worst;
}

test("max_abs_error at the TT's own measured error: every slice's values within it", async (t) => {
  const s = await createStore({ path: ":memory:", min_compress_bytes: 0, min_compression_ratio: 1 });
  try {
    const r = lcg(11);
    for (let trial = 0; trial < 6; trial++) {
      const x = field(r);
      const first = await s.put("ns", `t${trial}`, x, { shape, codec: "tt", tolerance: 1e-3 });
      t.equal(first.fingerprint.codec, "tt", `trial ${trial}: TT at tolerance 1e-3 (max error ${first.max_abs_error})`);
      const bound = first.max_abs_error!;
      const second = await s.put("ns", `b${trial}`, x, { shape, codec: "tt", tolerance: 1e-3, max_abs_error: bound });
      const worst = await worstSliceError(s, `b${trial}`, x);
      t.ok(worst <= bound, `trial ${trial}: slices of the entry put under max_abs_error ${bound} (${second.fingerprint.codec}) err at most ${worst}`);
    }
  } finally {
    await s.close();
  }
});

test("max_abs_error with room for the rounding of slices: TT kept, every slice within it", async (t) => {
  const s = await createStore({ path: ":memory:", min_compress_bytes: 0, min_compression_ratio: 1 });
  try {
    const x = field(lcg(3));
    const bound = 1e-2;
    const put = await s.put("ns", "k", x, { shape, codec: "tt", max_abs_error: bound });
    t.equal(put.fingerprint.codec, "tt", `kept as TT (ratio ${put.compression_ratio}, max error ${put.max_abs_error})`);
    t.ok((await worstSliceError(s, "k", x)) <= bound, "every slice within the bound");
  } finally {
    await s.close();
  }
});
