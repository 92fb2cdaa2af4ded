// pred on noise-like data at tight bounds, where the quantisation codes spread over thousands of
// values and are coded as tokens plus raw bits: every bound holds, the ratio is that of coding
// the codes near their entropy, and damaged raw bits give a ValidationError or a valid array.
import test from "tape";
import { pred, ValidationError } from "../../lib/index.js";
import { errors, rng } from "./helpers.js";

/** Independent uniform values in [-a, a] (weights as initialised and barely trained). */
function uniform(n: number, a: number, seed: number, f64 = false): Float32Array | Float64Array {
  const r = rng(seed);
  const x = f64 ? new Float64Array(n) : new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = a * (2 * r() - 1);
  return x;
}

test("pred: wide codes hold every bound on noise at tight tolerances", async (t) => {
  let seed = 1;
  for (const shape of [[2048, 64], [131072], [2, 2, 128, 213], [40, 50, 60]]) {
    for (const f64 of [false, true]) {
      const n = shape.reduce((a, b) => a * b, 1);
      const x = uniform(n, 0.056, seed++, f64);
      for (const bound of <{ tolerance?: number; max_abs_error?: number }[]>[
        { tolerance: 1e-4 },
        { tolerance: 1e-5 },
        { max_abs_error: 1e-6 },
        { tolerance: 1e-4, max_abs_error: 2e-6 },
      ]) {
        const r = await pred.compress(x, { shape, ...bound });
        const y = await pred.decompress(r.stream);
        const e = errors(x, y);
        const eb = pred.info(r.stream).max_abs_error;
        const ok =
          (bound.tolerance !== undefined ? e.rel <= bound.tolerance : true) &&
          (bound.max_abs_error !== undefined ? e.maxAbs <= bound.max_abs_error : true) &&
          e.maxAbs <= eb &&
          e.maxAbs === r.max_abs_error;
        t.ok(
          ok,
          `[${shape.join("x")}] ${f64 ? "f64" : "f32"} ${JSON.stringify(bound)}: ratio ${r.compression_ratio.toFixed(2)}, rel ${e.rel.toExponential(2)}, max ${e.maxAbs.toExponential(2)}`,
        );
      }
    }
  }
});

test("pred: noise at 1e-4 is coded near the entropy of its codes", async (t) => {
  // uniform values quantised in steps of 2eb: about log2(range / 2eb) bits each, plus what the
  // prediction from noisy neighbours adds; a table of every code value (thousands of them, in
  // five contexts) would cost a further 3-4 bits per value
  const shape = [2048, 64];
  const x = uniform(2048 * 64, 0.056, 7);
  const r = await pred.compress(x, { shape, tolerance: 1e-4 });
  const eb = pred.info(r.stream).max_abs_error;
  const bitsPerValue = (8 * r.stream.byteLength) / x.length;
  const floor = Math.log2((2 * 0.056) / (2 * eb));
  t.ok(
    bitsPerValue < floor + 1.2,
    `${bitsPerValue.toFixed(2)} bits per value, ${floor.toFixed(2)} for the codes alone (ratio ${r.compression_ratio.toFixed(2)})`,
  );
});

test("pred: damaged wide-code sections give a ValidationError or a valid array", async (t) => {
  const shape = [2048, 64];
  const x = uniform(2048 * 64, 0.056, 9);
  const r = await pred.compress(x, { shape, tolerance: 1e-4 });
  let refused = 0,
    decoded = 0;
  for (let k = 0; k < 300; k++) {
    const s = Uint8Array.from(r.stream);
    const at = 40 + ((k * 104729) % (s.length - 40));
    s[at] ^= 1 << (k % 8);
    try {
      const y = await pred.decompress(s);
      if (y.length === x.length) decoded++;
    } catch (e) {
      if (e instanceof ValidationError && e.field === "stream") refused++;
      else t.fail(`flip at ${at}: ${(e as Error).message}`);
    }
  }
  t.equal(refused + decoded, 300, `300 damaged streams: ${refused} refused, ${decoded} decoded to an array of the header's size`);
  for (const cut of [r.stream.length - 1, r.stream.length - 100, Math.floor(r.stream.length / 2)]) {
    try {
      await pred.decompress(r.stream.subarray(0, cut));
      t.fail(`truncated to ${cut}: expected a ValidationError`);
    } catch (e) {
      t.ok(e instanceof ValidationError && e.field === "stream", `truncated to ${cut} bytes: ${(e as Error).message}`);
    }
  }
});
