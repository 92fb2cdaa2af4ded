// Time slicing (lib/store/pace.ts): pacedScan covers [0, n) once, in order, stops at the first
// block that returns true, and gives the event loop a turn whenever a slice is used up, so a
// long pass over data lets other work run in between.
import test from "tape";
import { pacedScan, SCAN_SLICE_MS } from "../../lib/store/pace.js";

test("pacedScan visits every index once, in order, and stops at the first true block", async (t) => {
  for (const n of [0, 1, 1000, (1 << 18) - 1, 1 << 18, (1 << 18) + 1, 3 * (1 << 18) + 17]) {
    let next = 0;
    let ok = true;
    const found = await pacedScan(n, (a, b) => {
      ok &&= a === next && b > a && b <= n;
      next = b;
    });
    t.ok(ok && next === n && found === false, `n = ${n}: blocks cover [0, ${n}) in order, nothing found`);
  }
  let blocks = 0;
  const found = await pacedScan(10 * (1 << 18), (a) => {
    blocks++;
    return a >= 2 * (1 << 18);
  });
  t.ok(found && blocks === 3, "stops at the third block, the first to return true");
});

test("pacedScan gives the event loop a turn once a slice is used up", async (t) => {
  // each block busies the loop for 2 ms: 40 blocks take 80 ms, several slices of SCAN_SLICE_MS
  let turns = 0;
  const tick = setInterval(() => turns++, 0);
  await new Promise((r) => setImmediate(r));
  const before = turns;
  let blocks = 0;
  await pacedScan(40 * (1 << 18), () => {
    blocks++;
    const end = performance.now() + 2;
    while (performance.now() < end);
  });
  clearInterval(tick);
  t.equal(blocks, 40, "every block ran");
  t.ok(turns - before >= Math.floor(80 / SCAN_SLICE_MS) - 2, `timers ran ${turns - before} times during the 80 ms scan (slices of ${SCAN_SLICE_MS} ms)`);
});
