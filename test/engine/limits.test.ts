// One tenant's expensive filter must not stall another tenant: over real HTTP against the
// engine, with 5,000 entries, the hostile search and top-K (the costliest filters the limits
// accept, several at once) run while another tenant's GET is timed; filters past the limits
// are refused with 400 naming the limit before any entry is read.
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine, type RunningEngine } from "../../server/engine/server.js";
import { FILTER_LIMITS } from "../../lib/filter.js";

const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);
const ENTRIES = 5000;
const PAD = "p".repeat(8);

async function call(e: RunningEngine, tenant: string, method: string, path: string, body?: unknown) {
  const t0 = performance.now();
  const res = await fetch(e.url + path, {
    method,
    headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": tenant, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = (await res.json()) as any;
  return { status: res.status, json, ms: performance.now() - t0 };
}

async function setup(): Promise<{ e: RunningEngine; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), "svc-limits-"));
  const e = await startEngine(loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: dir, SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "silent" }));
  const core = Buffer.from(new Float32Array([1, 2, 3, 4]).buffer).toString("base64");
  // metadata shaped like the hostile filter's values, differing in the last member only, so
  // that every comparison runs to its end
  const pad = PAD;
  for (let b = 0; b < ENTRIES / 1000; b++) {
    const items = Array.from({ length: 1000 }, (_, j) => {
      const i = b * 1000 + j;
      return {
        key: `k${String(i).padStart(5, "0")}`,
        cores: [{ shape: [1, 4, 1], data_b64: core }],
        metadata: { a: { y: pad, z: [1, 2, 3], x: i }, tag: `t${i}` },
      };
    });
    const r = await call(e, "attacker", "POST", "/v1/put_cores_batch", { namespace: "default", items });
    if (r.status !== 201) throw new Error(`setup failed: ${r.status} ${JSON.stringify(r.json)}`);
  }
  const v = await call(e, "victim", "POST", "/v1/put", { namespace: "default", key: "mine", data_b64: Buffer.from("hello").toString("base64") });
  if (v.status !== 201) throw new Error("victim setup failed");
  return { e, dir };
}

/** The costliest filter the limits accept: objects in $in/$nin lists are compared structurally against every entry. */
function hostileFilter(): Record<string, unknown> {
  const values = (n: number, off: number) => Array.from({ length: n }, (_, i) => ({ y: PAD, z: [1, 2, 3], x: -1 - i - off }));
  return { $or: [{ a: { $in: values(330, 0) } }, { a: { $in: values(330, 1000) } }, { a: { $nin: values(330, 2000) }, tag: "none" }] };
}

test("engine: filters past the limits are refused with 400 naming the limit", async (t) => {
  const { e, dir } = await setup();
  try {
    const big = Array.from({ length: 200_000 }, (_, i) => `value-${i}`);
    const many = Object.fromEntries(Array.from({ length: FILTER_LIMITS.maxFields + 1 }, (_, i) => [`f${i}`, i]));
    let deep: Record<string, unknown> = { a: 1 };
    for (let i = 0; i < FILTER_LIMITS.maxDepth + 2; i++) deep = { $not: deep };
    const cases: [string, Record<string, unknown>, number, RegExp][] = [
      // the body of a search or top-K is at most 1 MiB: refused from its Content-Length, unread
      ["a $in list of 200,000 strings", { tag: { $in: big } }, 413, /larger than the limit of 1048576 bytes for this request's JSON body\.$/],
      [
        "a $in list of 800 long strings",
        { tag: { $in: big.slice(0, 800).map((v) => v.padEnd(100, "x")) } },
        400,
        /is \d+ bytes of JSON; the limit is 65536 bytes/,
      ],
      ["a $nin list over its limit", { tag: { $nin: big.slice(0, FILTER_LIMITS.maxInValues + 1) } }, 400, /has 1001 values; the limit is 1000/],
      ["top-level fields over the limit", many, 400, /has 101 members; the limit is 100 per object/],
      [
        "too many conditions in all",
        { $or: Array.from({ length: 60 }, (_, i) => ({ tag: { $in: big.slice(i * 20, i * 20 + 20) } })) },
        400,
        /more than 1000 conditions/,
      ],
      ["too deep", deep, 400, /nested more than 16 levels/],
    ];
    for (const [what, filter, status, re] of cases) {
      for (const [path, body] of [
        ["/v1/search", { namespace: "default", filter }],
        ["/v1/query/topk", { namespace: "default", key: "k00000", filter }],
      ] as const) {
        const r = await call(e, "attacker", "POST", path, body);
        t.equal(r.status, status, `${what} on ${path}: ${status}`);
        t.match(String(r.json.detail), re, `detail names the limit: ${r.json.detail}`);
        t.ok(r.ms < 5000, `refused without a scan (${r.ms.toFixed(0)} ms)`);
      }
    }
    const h = hostileFilter();
    t.ok(Buffer.byteLength(JSON.stringify(h)) <= FILTER_LIMITS.maxBytes, "the hostile filter is within the limits");
    const r = await call(e, "attacker", "POST", "/v1/search", { namespace: "default", filter: h });
    t.equal(r.status, 200, "the hostile filter is accepted");
    t.equal(r.json.total, 0, "and matches nothing (every entry was compared in full)");
    const ok = await call(e, "attacker", "POST", "/v1/search", { namespace: "default", filter: { tag: { $in: ["t7", "t4999", "nope"] } } });
    t.deepEqual(
      ok.json.results.map((x: { key: string }) => x.key),
      ["k00007", "k04999"],
      "$in on strings still matches",
    );
  } finally {
    await e.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("engine: another tenant's GET stays fast while hostile searches and top-K scans run", async (t) => {
  const { e, dir } = await setup();
  try {
    const filter = hostileFilter();
    // a baseline: one hostile scan alone
    const alone = await call(e, "attacker", "POST", "/v1/search", { namespace: "default", filter });
    t.equal(alone.status, 200, `one hostile search alone: 200 in ${alone.ms.toFixed(0)} ms`);
    let running = true;
    const hostile = Promise.all([
      call(e, "attacker", "POST", "/v1/search", { namespace: "default", filter }),
      call(e, "attacker", "POST", "/v1/query/topk", { namespace: "default", key: "k00000", filter }),
    ]).finally(() => (running = false));
    const victim: number[] = [];
    // a short pause so that the hostile requests are being scanned when the victim starts
    await new Promise((r) => setTimeout(r, 20));
    while (running) {
      const g = await call(e, "victim", "GET", "/v1/get/default/mine");
      if (g.status !== 200) t.fail(`victim GET: ${g.status}`);
      if (running) victim.push(g.ms);
    }
    const hs = await hostile;
    for (const h of hs) t.equal(h.status, 200, `hostile request answered 200 in ${h.ms.toFixed(0)} ms`);
    const slowest = Math.max(...hs.map((h) => h.ms));
    const worst = Math.max(...victim);
    t.ok(victim.length >= 3, `${victim.length} victim GETs ran while the hostile requests did (${slowest.toFixed(0)} ms)`);
    // without time slicing the first GET waited for a whole scan (3.7 s here with four at once)
    const median = [...victim].sort((a, b) => a - b)[victim.length >> 1]!;
    t.ok(worst < 1500, `the slowest victim GET took ${worst.toFixed(0)} ms (< 1500; median ${median.toFixed(0)} ms)`);
  } finally {
    await e.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("engine: a large search answer is written in pieces and parses to the same answer", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-limits-"));
  const e = await startEngine(loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: dir, SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "silent" }));
  try {
    const core = Buffer.from(new Float32Array([1, 2]).buffer).toString("base64");
    // 300 entries of about 60 KiB of metadata each: an 18 MB answer
    const items = Array.from({ length: 300 }, (_, i) => ({
      key: `m${String(i).padStart(3, "0")}`,
      cores: [{ shape: [1, 2, 1], data_b64: core }],
      metadata: { i, text: 'é"\\'.repeat(10_000) + i },
    }));
    for (let b = 0; b < 3; b++) {
      const r = await call(e, "acme", "POST", "/v1/put_cores_batch", { namespace: "default", items: items.slice(b * 100, b * 100 + 100) });
      t.equal(r.status, 201, `stored ${r.status === 201 ? "" : r.json.detail}`);
    }
    const big = await call(e, "acme", "POST", "/v1/search", { namespace: "default", filter: { i: { $gte: 0 } }, limit: 1000 });
    t.equal(big.status, 200, `a search answer of 300 entries: 200 in ${big.ms.toFixed(0)} ms`);
    t.deepEqual(Object.keys(big.json), ["namespace", "results", "total", "limit", "offset", "next_offset"], "members in their order");
    t.deepEqual(
      [big.json.namespace, big.json.total, big.json.limit, big.json.offset, big.json.next_offset],
      ["default", 300, 1000, 0, null],
      "the fields around the list",
    );
    t.equal(big.json.results.length, 300, "every result");
    t.deepEqual(big.json.results[299], { key: "m299", version: 1, metadata: items[299]!.metadata }, "a result whole, escapes included");
    const small = await call(e, "acme", "POST", "/v1/search", { namespace: "default", filter: { i: 3 } });
    t.deepEqual(
      small.json.results.map((r: { key: string }) => r.key),
      ["m003"],
      "a small answer as before",
    );
  } finally {
    await e.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
