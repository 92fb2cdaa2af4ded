// tt.chooseModes: a deterministic function of the shape whose modes group into the dimensions.
import test from "tape";
import * as tt from "../../lib/tt.js";

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
    t.equal(m.reduce((a, b) => a * b, 1), shape.reduce((a, b) => a * b, 1), `${shape}: product kept`);
  }
  t.end();
});
