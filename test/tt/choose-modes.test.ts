// tt.chooseModes: a deterministic function of the shape whose modes group into the dimensions.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { noise, relErr, ttSize } from "./helpers.js";

test("chooseModes: examples, determinism and grouping", (t) => {
  t.deepEqual(tt.chooseModes([256, 256, 256]), [8, 8, 4, 8, 8, 4, 8, 8, 4], "256^3 is quantized per dimension");
  t.deepEqual(tt.chooseModes([32, 48, 7]), [32, 48, 7], "small dimensions stay whole");
  t.deepEqual(tt.chooseModes([97]), [97], "a large prime stays whole");
  t.deepEqual(tt.chooseModes([100]), [5, 5, 4], "100 = 5*5*4");
  t.deepEqual(tt.chooseModes([1, 1024]), [1, 8, 8, 4, 4], "size-1 dimensions are kept");
  t.deepEqual(tt.chooseModes([74]), [37, 2], "a prime above 8 is its own factor");
  for (const shape of [[256, 256, 256], [1000, 3], [4096], [640, 480, 3], [1, 1, 1]]) {
    const m = tt.chooseModes(shape);
    t.deepEqual(tt.chooseModes([...shape]), m, `${shape}: deterministic`);
    t.equal(
      m.reduce((a, b) => a * b, 1),
      shape.reduce((a, b) => a * b, 1),
      `${shape}: product kept`,
    );
  }
  t.end();
});

test("compress keeps a factorisation within the tolerance over one that misses it", async (t) => {
  // White noise 64^3 under max_rank 64: the plain modes need rank 64 (exact), the quantized ones
  // up to 512, so only the plain factorisation meets the tolerance.
  const x = noise(64 ** 3, 4);
  const shape = [64, 64, 64];
  const q = (await tt.compress(x, shape, { tolerance: 1e-3, max_rank: 64, modes: tt.chooseModes(shape) }))!;
  t.ok(q.relative_error > 1e-3, `quantized: max_rank binds (error ${q.relative_error.toFixed(2)})`);
  const dflt = (await tt.compress(x, shape, { tolerance: 1e-3, max_rank: 64 }))!;
  t.deepEqual(dflt.modes, shape, "default modes: the plain factorisation is kept");
  t.ok(dflt.relative_error <= 1e-3 && relErr(x, await tt.reconstruct(dflt)) <= 1e-3, `within the tolerance (${dflt.relative_error.toExponential(2)})`);
  const auto = (await tt.compress(x, shape, { tolerance: 1e-3, max_rank: 64, modes: "auto" }))!;
  t.deepEqual(auto.modes, shape, "modes auto: the plain factorisation although the quantized one is smaller");
  t.ok(ttSize(auto) > ttSize(q), "the quantized result was the smaller one");
});
