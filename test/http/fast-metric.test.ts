// The request paths' counters and histograms (server/http/fast-metric.ts) against prom-client's
// own: the same observations give the same text on a registry's /metrics and the same JSON,
// with and without labels, on and between the bucket bounds, above all of them, after a reset;
// a label outside the metric's names is refused as prom-client refuses it.
import test from "tape";
import { Counter, Histogram, Registry } from "prom-client";
import { FastCounter, FastHistogram } from "../../server/http/fast-metric.js";

const BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5];
const VALUES = [0, 0.001, 0.0011, 0.004, 0.005, 0.02, 0.1, 0.3, 1, 4.9, 5, 7, 100, 1e-9, 0.5];

function pair() {
  const theirs = new Registry();
  const ours = new Registry();
  const labelNames = ["method", "route", "status"] as const;
  return {
    theirs,
    ours,
    pc: new Counter({ name: "x_requests_total", help: "Requests.", labelNames, registers: [theirs] }),
    fc: new FastCounter({ name: "x_requests_total", help: "Requests.", labelNames, registers: [ours] }),
    ph: new Histogram({ name: "x_seconds", help: "Durations.", labelNames, buckets: BUCKETS, registers: [theirs] }),
    fh: new FastHistogram({ name: "x_seconds", help: "Durations.", labelNames, buckets: BUCKETS, registers: [ours] }),
    pc0: new Counter({ name: "x_plain_total", help: "No labels.", registers: [theirs] }),
    fc0: new FastCounter({ name: "x_plain_total", help: "No labels.", registers: [ours] }),
    ph0: new Histogram({ name: "x_plain_seconds", help: "No labels.", buckets: BUCKETS, registers: [theirs] }),
    fh0: new FastHistogram({ name: "x_plain_seconds", help: "No labels.", buckets: BUCKETS, registers: [ours] }),
  };
}

test("fast metrics: the same text and JSON as prom-client's for the same observations", async (t) => {
  const m = pair();
  t.equal(await m.ours.metrics(), await m.theirs.metrics(), "before any observation");
  const sets = [
    { method: "GET", route: "/v1/get/:namespace/:key*", status: "200" },
    { method: "POST", route: "/v1/serve", status: "429" },
    { method: "GET", route: 'a "quoted" \\ route\n', status: 500 },
  ];
  const children = sets.map((l) => ({ pc: m.pc.labels(l), fc: m.fc.labels(l), ph: m.ph.labels(l), fh: m.fh.labels(l) }));
  VALUES.forEach((v, i) => {
    const c = children[i % children.length]!;
    c.pc.inc();
    c.fc.inc();
    c.ph.observe(v);
    c.fh.observe(v);
    m.pc.inc(sets[0]!, 3);
    m.fc.inc(sets[0]!, 3);
    m.ph.observe(sets[1]!, v * 2);
    m.fh.observe(sets[1]!, v * 2);
    m.pc0.inc(i);
    m.fc0.inc(i);
    m.ph0.observe(v);
    m.fh0.observe(v);
  });
  const text = await m.ours.metrics();
  t.equal(text, await m.theirs.metrics(), "the registry's text");
  t.ok(text.includes('x_seconds_bucket{le="+Inf",method="GET",route="/v1/get/:namespace/:key*",status="200"} 5'), "a histogram's +Inf bucket, with its labels");
  t.deepEqual(await m.ours.getMetricsAsJSON(), await m.theirs.getMetricsAsJSON(), "the registry's JSON");
  m.ours.resetMetrics();
  m.theirs.resetMetrics();
  t.equal(await m.ours.metrics(), await m.theirs.metrics(), "after a reset");
  children[0]!.pc.inc(2);
  children[0]!.fc.inc(2);
  children[0]!.ph.observe(0.2);
  children[0]!.fh.observe(0.2);
  t.equal(await m.ours.metrics(), await m.theirs.metrics(), "children made before the reset count again after it");
  t.end();
});

test("fast metrics: a label outside the metric's names, a value that is not a number, a negative count are refused", (t) => {
  const m = pair();
  const bad = { method: "GET", other: "x" } as unknown as Record<"method", string>;
  t.throws(() => m.fc.inc(bad), /not included in initial labelset/, "counter: unknown label");
  t.throws(() => m.fh.observe(bad, 1), /not included in initial labelset/, "histogram: unknown label");
  t.throws(() => m.fh.observe({ method: "GET" }, NaN), /not a valid number/, "histogram: NaN");
  t.throws(() => m.fc.inc({ method: "GET" }, -1), /not possible to decrease/, "counter: negative");
  t.end();
});
