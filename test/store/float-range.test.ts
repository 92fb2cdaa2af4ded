// The store's floating path keeps the tolerance for every input within the type's range and for
// the dtypes it converts: float32 near 1e38, float64 near 1e-200, a constant float32 array of
// the smallest subnormal, and float16/bfloat16 entries served back in their own dtype (the
// rounding to it counted), errors measured in float64 from what serve returns.
import { bf16ToFloat, floatToBf16, floatToHalf, halfToFloat } from "../../lib/store/codec.js";
import { storeSuite } from "./harness.js";
import { scaledRelErr } from "../tt/helpers.js";

const suite = storeSuite({ targets: ["memory", "lmdb"], namespaces: ["ns"] });

/** A smooth, non-separable n^3 field of magnitude about `scale`. */
function field(n: number, scale: number, Arr: typeof Float32Array | typeof Float64Array = Float32Array) {
  const out = new Arr(n * n * n);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++)
      for (let k = 0; k < n; k++) {
        const x = i / n,
          y = j / n,
          z = k / n;
        out[(i * n + j) * n + k] =
          scale * (Math.exp(-((x - 0.3) ** 2 + (y - 0.6) ** 2 + (z - 0.4) * (y - 0.2) + (z - 0.5) ** 2) * 6) + 0.5 * Math.sin(3 * x + 2 * y * z));
      }
  return out;
}

suite.test("float32 near 1e38 and float64 near 1e-200 are compressed within the tolerance", async (t, s) => {
  for (const [key, x, tol] of [
    ["big32", field(24, 1e38), 1e-3],
    ["big32-tight", field(24, 1e38), 1e-6],
    ["tiny64", field(24, 1e-200, Float64Array), 1e-9],
    ["big64", field(24, 1e300, Float64Array), 1e-12],
  ] as const) {
    const r = await s.put("ns", key, x, { shape: [24, 24, 24], tolerance: tol });
    t.deepEqual([r.verdict, r.fingerprint.codec], ["compressed", "tt"], `${key}: compressed as a TT`);
    t.ok(r.relative_error <= tol, `${key}: reported error ${r.relative_error.toExponential(2)} <= ${tol}`);
    const back = await s.serve("ns", key);
    const err = scaledRelErr(x, back.data as Float32Array | Float64Array);
    t.ok(err <= tol, `${key}: served error ${err.toExponential(2)} <= ${tol}`);
  }
});

suite.test("a constant float32 array of 1e-45 is stored exactly, not weak and not zeros", async (t, s) => {
  const x = new Float32Array(32 * 32 * 32).fill(1e-45);
  const r = await s.put("ns", "sub", x, { shape: [32, 32, 32] });
  t.deepEqual([r.verdict, r.relative_error], ["compressed", 0], "compressed, error 0");
  const back = (await s.serve("ns", "sub")).data as Float32Array;
  t.ok(
    back.every((v) => v === x[0]),
    "served back as 1e-45 everywhere",
  );
});

suite.test("float16 and bfloat16 entries served in their dtype stay within the tolerance", async (t, s) => {
  const x = field(32, 1);
  const dtypes = [
    ["float16", floatToHalf, halfToFloat],
    ["bfloat16", floatToBf16, bf16ToFloat],
  ] as const;
  for (const [dtype, to, from] of dtypes) {
    const bits = Uint16Array.from(x, (v) => to(v));
    const orig = Float64Array.from(bits, from);
    for (const tol of [3e-2, 1e-2, 3e-3, 1e-3, 1e-4]) {
      const key = `${dtype}-${tol}`;
      const r = await s.put("ns", key, bits, { shape: [32, 32, 32], dtype, tolerance: tol });
      t.ok(r.verdict === "compressed" || r.verdict === "lossless" || r.verdict === "passthrough", `${key}: verdict ${r.verdict}`);
      const back = await s.serve("ns", key);
      t.equal(back.dtype, dtype, `${key}: served as ${dtype}`);
      const err = scaledRelErr(orig, Float64Array.from(back.data as Uint16Array, from));
      t.ok(err <= tol, `${key}: served error ${err.toExponential(2)} <= ${tol} (verdict ${r.verdict}, ratio ${r.compression_ratio.toFixed(1)})`);
    }
  }
});
suite.run();
