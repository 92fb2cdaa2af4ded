// The import progress bar: on a terminal one line redrawn with \r (count/total, bytes,
// MB/s, ETA), throttled; elsewhere one plain line per file.
import test from "tape";
import { Progress } from "../../bin/cli/progress.js";
import { fmtBytes, fmtDuration } from "../../bin/cli/common.js";

test("progress: plain mode writes one line per finished file with its verdict or failure", (t) => {
  let out = "";
  let now = 0;
  const p = new Progress({
    write: (s) => {
      out += s;
    },
    isTTY: false,
    totalItems: 2,
    totalBytes: 3_000_000,
    now: () => now,
  });
  now = 1000;
  p.done("a/b", 1_000_000, true, "compressed, ratio 5.00");
  now = 2000;
  p.done("c", 2_000_000, false, "The .npy file is truncated");
  p.finish();
  t.deepEqual(
    out.split("\n"),
    ["[1/2] a/b 1.00 MB ok: compressed, ratio 5.00", "[2/2] c 2.00 MB FAILED: The .npy file is truncated", ""],
    "two plain lines, no carriage returns",
  );
  t.end();
});

test("progress: TTY mode redraws one line with \\r showing count, bytes, rate and ETA, at most every minRedrawMs", (t) => {
  let out = "";
  let now = 0;
  const p = new Progress({
    write: (s) => {
      out += s;
    },
    isTTY: true,
    totalItems: 4,
    totalBytes: 40_000_000,
    now: () => now,
    minRedrawMs: 100,
  });
  now = 1000;
  p.done("a", 10_000_000, true, "x");
  t.equal(out, "\r1/4 files  10.0 MB/40.0 MB (25%)  10.0 MB/s  ETA 3s\x1b[K", "first redraw: 10 MB in 1 s, 30 MB left at 10 MB/s");
  now = 1050;
  p.done("b", 10_000_000, false, "bad");
  t.equal(out.split("\r").length, 2, "a second item within 100 ms is not drawn");
  now = 2000;
  p.done("c", 10_000_000, true, "x");
  t.ok(out.endsWith("\r3/4 files  30.0 MB/40.0 MB (75%)  15.0 MB/s  ETA 1s  1 failed\x1b[K"), `third: ${JSON.stringify(out.split("\r").pop())}`);
  now = 2010;
  p.done("d", 10_000_000, true, "x");
  t.ok(out.endsWith("\r4/4 files  40.0 MB/40.0 MB (100%)  19.9 MB/s  ETA 0s  1 failed\x1b[K"), "the last item is always drawn");
  p.finish();
  t.ok(out.endsWith("\n"), "finish ends the line");
  t.notOk(out.includes("\n") && out.indexOf("\n") < out.length - 1, "no newline before the end");
  t.end();
});

test("progress: byte and duration formatting", (t) => {
  t.equal(fmtBytes(999), "999 B");
  t.equal(fmtBytes(1234567), "1.23 MB");
  t.equal(fmtBytes(5e9), "5.00 GB");
  t.equal(fmtDuration(42), "42s");
  t.equal(fmtDuration(185), "3m05s");
  t.equal(fmtDuration(3720), "1h02m");
  t.equal(fmtDuration(Infinity), "?");
  t.end();
});
