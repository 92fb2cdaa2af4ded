// Benchmarks of the store on LMDB and on PostgreSQL side by side. Prints the backend/machine
// line first, then one JSON object per figure, each with its `storage`:
//   put        puts/s and p50 latency for smooth float32 tensors of 4 KiB, 64 KiB, 1 MiB, and
//              for 1 MiB of noise (incompressible: must end as passthrough early)
//   get        in-process get latency (p50, p99), and through the engine over HTTP
//              (get_engine), each checked against the version and fingerprint stored
//   serve      dense reconstruction throughput of 64³ float32 entries, the served tensor
//              checked bit for bit against the other backend's
//   topk       top-K over N entries of a 64³ smooth field family (TT, ranks ≤ 16: 16 TT-SVD
//              bases, members perturb their cores by up to ±2.5%) against a
//              dense float32 brute-force scan of the same entries; cold: the first query of a
//              store just opened (empty core cache: every payload read), warm: the p50 after
//   disk       store size on disk (data and lock files, at close, no compact) against the sum
//              of bytes_stored (each payload once) plus metadata (JSON of each entry's get),
//              with the pages of the records, of the payload databases and the rest
// Environment: SVC_BENCH_TOPK_N (default 10000), SVC_BENCH_SECONDS per put size (default 2),
// SVC_BENCH_STORE_BACKENDS (default lmdb,postgres), SVC_BENCH_PG_URL (a server where the bench
// creates and drops a database of its own; default postgres://postgres@127.0.0.1:5432/postgres).
// Every phase is bounded; temporary files live under os.tmpdir() and are removed.
import { closeSync, mkdtempSync, openSync, readSync, rmSync, statSync, writeSync, readdirSync } from "node:fs";
import { cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { Pool } from "undici";
import * as tt from "../lib/tt.js";
import { createStore, type Store } from "../lib/store/index.js";
import { LmdbBackend } from "../lib/store/lmdb.js";
import { createApp } from "../server/engine/app.js";
import { loadEngineConfig } from "../server/engine/config.js";

const TOPK_N = Number(process.env.SVC_BENCH_TOPK_N ?? 10_000);
const SECONDS = Number(process.env.SVC_BENCH_SECONDS ?? 2);
const K = 10;
type Kind = "lmdb" | "postgres";
const BACKENDS = (process.env.SVC_BENCH_STORE_BACKENDS ?? "lmdb,postgres").split(",").map((x) => x.trim()) as Kind[];
if (!BACKENDS.includes("lmdb") || BACKENDS.some((k) => k !== "lmdb" && k !== "postgres")) {
  console.error("SVC_BENCH_STORE_BACKENDS must list lmdb and optionally postgres (the dense comparison and disk figures use LMDB).");
  process.exit(2);
}
const PG_SERVER = process.env.SVC_BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

const b = tt.backend();
console.log(
  JSON.stringify({
    bench: "store",
    isa: b.isa,
    threads: b.threads,
    cuda_device: b.cuda_device,
    node: process.version,
    cpus: cpus().length,
    cpu: cpus()[0]?.model ?? "unknown",
    mem_gib: Math.round(totalmem() / 2 ** 30),
    storage: BACKENDS,
  }),
);
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o));
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const r3 = (x: number) => Math.round(x * 1000) / 1000;

/** A smooth field over `shape` (sums of separable sines), parameterised by `p`. */
function smooth(shape: number[], p: number): Float32Array {
  const n = shape.reduce((a, b) => a * b, 1);
  const out = new Float32Array(n);
  const d = shape.length;
  const idx = new Array<number>(d).fill(0);
  for (let i = 0; i < n; i++) {
    let a = 1,
      c = 1;
    for (let k = 0; k < d; k++) {
      a *= Math.sin((idx[k]! + 1 + p) / (5 + k));
      c *= Math.cos(idx[k]! / (7 + 2 * k) - p);
    }
    out[i] = a + 0.5 * c;
    for (let k = d - 1; k >= 0; k--) {
      if (++idx[k]! < shape[k]!) break;
      idx[k] = 0;
    }
  }
  return out;
}

/** A 64³ member of the top-K family: six separable terms, TT ranks up to about 11 at 1e-4. */
function familyField(p: number): Float32Array {
  const n = 64;
  const x = new Float32Array(n ** 3);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++)
      for (let k = 0; k < n; k++) {
        let v = 0;
        for (let t = 0; t < 6; t++)
          v += (Math.sin((i + 1 + p) / (5 + t) + t) * Math.cos(j / (7 + 2 * t) - p) * Math.sin(k / (4 + t) + 0.5 * t + p * t)) / (1 + t);
        x[(i * n + j) * n + k] = v;
      }
  return x;
}

const dir = mkdtempSync(join(tmpdir(), "svc-bench-store-"));
const pgDb = `svc_bench_${randomBytes(5).toString("hex")}`;
const pgUrl = (() => {
  const u = new URL(PG_SERVER);
  u.pathname = `/${pgDb}`;
  return u.toString();
})();
async function pgAdmin(sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: PG_SERVER });
  c.on("error", () => undefined);
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}
const open = (kind: Kind): Promise<Store> => (kind === "lmdb" ? createStore({ path: join(dir, "db") }) : createStore({ url: pgUrl }));
const stores = new Map<Kind, Store>();
let pgCreated = false;
try {
  if (BACKENDS.includes("postgres")) {
    await pgAdmin(`CREATE DATABASE ${pgDb}`);
    pgCreated = true;
  }
  for (const kind of BACKENDS) stores.set(kind, await open(kind));
  const lmdb = () => stores.get("lmdb")!;

  // ---- put ----
  for (const [kind, store] of stores) {
    for (const [label, shape] of [
      ["4KiB", [32, 32]],
      ["64KiB", [128, 128]],
      ["1MiB", [64, 64, 64]],
      ["1MiB-noise", [64, 64, 64]],
    ] as const) {
      let seed = 99;
      const noise = (n: number) => Float32Array.from({ length: n }, () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5);
      const variants = Array.from({ length: 8 }, (_, i) => (label === "1MiB-noise" ? noise(64 ** 3) : smooth([...shape], i * 0.1)));
      const lat: number[] = [];
      const verdicts = new Set<string>();
      const t0 = performance.now();
      for (let i = 0; performance.now() - t0 < SECONDS * 1000 && i < 2000; i++) {
        const s = performance.now();
        const r = await store.put("put", `${label}/${i}`, variants[i % 8]!, { shape: [...shape] });
        lat.push(performance.now() - s);
        verdicts.add(r.verdict);
      }
      const total = (performance.now() - t0) / 1000;
      // the share of the TT engine: the same compression alone, outside the store
      const comp: number[] = [];
      for (let i = 0; i < Math.min(lat.length, 10); i++) {
        const s = performance.now();
        await tt.compress(variants[i % 8]!, [...shape], { tolerance: 1e-3, max_rank: 256, min_ratio: 1.2 });
        comp.push(performance.now() - s);
      }
      emit({
        figure: "put",
        storage: kind,
        size: label,
        tt_compress_p50_ms: r3(pct(comp, 50)),
        puts: lat.length,
        puts_per_s: r3(lat.length / total),
        p50_ms: r3(pct(lat, 50)),
        p99_ms: r3(pct(lat, 99)),
        verdicts: [...verdicts],
      });
    }
  }

  // ---- the 64³ family, stored as TT (one TT-SVD per base field, members perturb its cores) ----
  const BASES = 16;
  const bases: tt.CompressResult[] = [];
  for (let i = 0; i < BASES; i++) bases.push((await tt.compress(familyField(i * 0.37), [64, 64, 64], { tolerance: 1e-4, max_rank: 16 }))!);
  let seed = 12345;
  const rnd = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5;
  const member = (i: number): tt.TT => {
    const base = bases[i % BASES]!;
    return { modes: base.modes, ranks: base.ranks, shape: [64, 64, 64], cores: base.cores.map((c) => Float32Array.from(c, (v) => v * (1 + 0.05 * rnd()))) };
  };
  const densePath = join(dir, "dense.f32");
  const fd = openSync(densePath, "w");
  const BYTES = 64 ** 3 * 4;
  const tSetup = performance.now();
  let maxRank = 0;
  for (let start = 0; start < TOPK_N; start += 500) {
    const items = [];
    for (let i = start; i < Math.min(TOPK_N, start + 500); i++) {
      const m = member(i);
      maxRank = Math.max(maxRank, ...m.ranks);
      // the dense copy is the reconstruction of exactly what is stored
      const x = (await tt.reconstruct(m)) as Float32Array;
      writeSync(fd, new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
      items.push({
        key: `m${String(i).padStart(6, "0")}`,
        cores: m.cores.map((c, k) => ({ shape: [m.ranks[k]!, m.modes[k]!, m.ranks[k + 1]!] as [number, number, number], data: c as Float32Array })),
        shape: [64, 64, 64],
        metadata: { i, base: i % BASES },
      });
    }
    for (const store of stores.values()) await store.putCoresBatch("fam", items);
    // the first 2000 also form a namespace of their own, for the in-memory comparison
    const head = items.filter((it) => Number(it.key.slice(1)) < 2000);
    if (head.length) await lmdb().putCoresBatch("fam2k", head);
  }
  closeSync(fd);
  emit({ figure: "setup", entries: TOPK_N, max_rank: maxRank, seconds: r3((performance.now() - tSetup) / 1000) });

  // ---- get: in-process, then through the engine over HTTP ----
  const keyOf = (i: number) => `m${String((i * 7919) % TOPK_N).padStart(6, "0")}`;
  const fingerprints = new Map<string, string>();
  for (let i = 0; i < 200; i++) fingerprints.set(keyOf(i), (await lmdb().get("fam", keyOf(i))).fingerprint.sha256);
  for (const [kind, store] of stores) {
    const gl: number[] = [];
    let right = 0;
    for (let i = 0; i < 20_000; i++) {
      const key = keyOf(i);
      const s = performance.now();
      const g = await store.get("fam", key);
      gl.push((performance.now() - s) * 1000);
      if (i < 200 && g.version === 1 && g.fingerprint.sha256 === fingerprints.get(key)) right++;
    }
    emit({ figure: "get", storage: kind, gets: gl.length, p50_us: r3(pct(gl, 50)), p99_us: r3(pct(gl, 99)), checked: 200, same_fingerprint: right });
    // through the engine: the engine's app over this store, one keep-alive connection
    const serviceKey = "b".repeat(64);
    const config = loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: serviceKey, SVC_ENGINE_LOG_LEVEL: "silent", SVC_ENGINE_DEVICE: "cpu" });
    const server = http.createServer(createApp({ store, config, gpu: { unavailable: "bench" } }));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connections: 1 });
    const hl: number[] = [];
    let hright = 0;
    for (let i = 0; i < 5000; i++) {
      const key = keyOf(i);
      const s = performance.now();
      const res = await pool.request({
        method: "GET",
        path: `/v1/get/fam/${key}`,
        headers: { authorization: `Bearer ${serviceKey}`, "x-svc-tenant": "local" },
      });
      const g = (await res.body.json()) as { version: number; fingerprint: { sha256: string } };
      hl.push(performance.now() - s);
      if (i < 200 && res.statusCode === 200 && g.version === 1 && g.fingerprint.sha256 === fingerprints.get(key)) hright++;
    }
    await pool.close();
    await new Promise<void>((r) => server.close(() => r()));
    emit({ figure: "get_engine", storage: kind, gets: hl.length, p50_ms: r3(pct(hl, 50)), p99_ms: r3(pct(hl, 99)), checked: 200, same_fingerprint: hright });
  }

  // ---- serve ----
  const served = new Map<Kind, Buffer>();
  for (const [kind, store] of stores) {
    const t0 = performance.now();
    let n = 0;
    while (performance.now() - t0 < SECONDS * 1000 && n < 2000) await store.serve("fam", `m${String(n++ % TOPK_N).padStart(6, "0")}`);
    const s = (performance.now() - t0) / 1000;
    const d = (await store.serve("fam", "m000001")).data;
    served.set(kind, Buffer.from(d.buffer, d.byteOffset, d.byteLength));
    const same = Buffer.compare(served.get(kind)!, served.get("lmdb")!) === 0;
    emit({
      figure: "serve",
      storage: kind,
      entry: "64^3 float32 (TT)",
      serves: n,
      serves_per_s: r3(n / s),
      mb_per_s: r3((n * BYTES) / 2 ** 20 / s),
      same_as_lmdb: same,
    });
  }

  // ---- top-K: TT on the stored form vs a dense float32 scan ----
  const qKey = "m000003";
  const topks = new Map<Kind, { cold: number; warm: number[]; res: Awaited<ReturnType<Store["query"]["topk"]>> }>();
  for (const kind of BACKENDS) {
    // cold: a store just opened, as after an engine restart (LMDB: the file in the page cache)
    await stores.get(kind)!.close();
    const store = await open(kind);
    stores.set(kind, store);
    const tCold = performance.now();
    const cold = await store.query.topk("fam", { key: qKey, k: K, metric: "cosine" });
    const coldMs = performance.now() - tCold;
    const warm: number[] = [];
    let res = cold;
    for (let r = 0; r < 5; r++) {
      const s = performance.now();
      res = await store.query.topk("fam", { key: qKey, k: K, metric: "cosine" });
      warm.push(performance.now() - s);
    }
    topks.set(kind, { cold: coldMs, warm, res });
  }
  // dense brute force: the same entries as float32 arrays, dot with the query, norms, top-K
  const q = new Float32Array(BYTES / 4);
  const qfd = openSync(densePath, "r");
  readSync(qfd, new Uint8Array(q.buffer), 0, BYTES, 3 * BYTES);
  const qn = Math.sqrt(await tt.denseDot(q, q));
  const CHUNK = 64;
  const buf = new Float32Array((CHUNK * BYTES) / 4);
  const denseRun = async (): Promise<{ ms: number; top: string[] }> => {
    const s = performance.now();
    const scores: { key: number; score: number }[] = [];
    for (let start = 0; start < TOPK_N; start += CHUNK) {
      const n = Math.min(CHUNK, TOPK_N - start);
      readSync(qfd, new Uint8Array(buf.buffer, 0, n * BYTES), 0, n * BYTES, start * BYTES);
      const views = Array.from({ length: n }, (_, j) => buf.subarray((j * BYTES) / 4, ((j + 1) * BYTES) / 4));
      const [dots, norms] = await Promise.all([Promise.all(views.map((v) => tt.denseDot(q, v))), Promise.all(views.map((v) => tt.denseDot(v, v)))]);
      for (let j = 0; j < n; j++) if (start + j !== 3) scores.push({ key: start + j, score: dots[j]! / (qn * Math.sqrt(norms[j]!)) });
    }
    scores.sort((a, b) => b.score - a.score);
    return { ms: performance.now() - s, top: scores.slice(0, K).map((x) => `m${String(x.key).padStart(6, "0")}`) };
  };
  await denseRun(); // warm the page cache
  const dense: number[] = [];
  let dtop: string[] = [];
  for (let r = 0; r < 2; r++) {
    const d = await denseRun();
    dense.push(d.ms);
    dtop = d.top;
  }
  // the same comparison with the dense side fully in memory, over the first M entries
  const M = Math.min(TOPK_N, 2000); // must match the fam2k namespace of the setup
  const mem: Float32Array[] = [];
  for (let i = 0; i < M; i++) {
    const a = new Float32Array(BYTES / 4);
    readSync(qfd, new Uint8Array(a.buffer), 0, BYTES, i * BYTES);
    mem.push(a);
  }
  const memRuns: number[] = [];
  for (let r = 0; r < 3; r++) {
    const s = performance.now();
    const scores: { key: number; score: number }[] = [];
    for (let start = 0; start < M; start += CHUNK) {
      const views = mem.slice(start, start + CHUNK);
      const [dots, norms] = await Promise.all([Promise.all(views.map((v) => tt.denseDot(q, v))), Promise.all(views.map((v) => tt.denseDot(v, v)))]);
      views.forEach((_, j) => start + j !== 3 && scores.push({ key: start + j, score: dots[j]! / (qn * Math.sqrt(norms[j]!)) }));
    }
    scores.sort((a, b) => b.score - a.score);
    memRuns.push(performance.now() - s);
  }
  mem.length = 0;
  const sub: number[] = [];
  for (let r = 0; r < 3; r++) {
    const s = performance.now();
    await lmdb().query.topk(M === TOPK_N ? "fam" : "fam2k", { key: qKey, k: K, metric: "cosine" });
    sub.push(performance.now() - s);
  }
  emit({
    figure: "topk_in_memory",
    storage: "lmdb",
    entries: M,
    tt_ms_p50: r3(pct(sub, 50)),
    dense_f32_in_memory_ms: r3(Math.min(...memRuns)),
    speedup: r3(Math.min(...memRuns) / pct(sub, 50)),
    note: "TT top-K over a namespace of the first M entries vs the same entries held in memory as float32",
  });
  closeSync(qfd);
  const denseMs = Math.min(...dense);
  const ref = topks.get("lmdb")!;
  for (const [kind, { cold, warm, res }] of topks) {
    const ttMs = pct(warm, 50);
    emit({
      figure: "topk",
      storage: kind,
      entries: TOPK_N,
      shape: [64, 64, 64],
      k: K,
      metric: "cosine",
      scanned: res.scanned,
      skipped: res.skipped,
      dense_source: "file in the page cache, read in 64 MiB chunks",
      tt_ms_p50: r3(ttMs),
      tt_cold_ms: r3(cold),
      dense_f32_scan_ms: r3(denseMs),
      speedup: r3(denseMs / ttMs),
      warm_vs_lmdb: r3(ttMs / pct(ref.warm, 50)),
      cold_vs_lmdb: r3(cold / ref.cold),
      same_top_k: JSON.stringify(res.results.map((x) => x.key)) === JSON.stringify(dtop),
      same_scores_as_lmdb: JSON.stringify(res.results) === JSON.stringify(ref.res.results),
    });
  }

  // ---- disk (LMDB) ----
  {
    const store = lmdb();
    let stored = 0;
    let meta = 0;
    const seen = new Set<string>();
    for (const ns of ["put", "fam", "fam2k"]) {
      for (let off = 0; ;) {
        const page = await store.list(ns, { offset: off, limit: 1000 });
        for (const item of page.keys) {
          const g = await store.get(ns, item.key);
          if (!seen.has(g.fingerprint.sha256)) {
            seen.add(g.fingerprint.sha256);
            stored += g.bytes_stored;
          }
          meta += Buffer.byteLength(JSON.stringify(g)) - Buffer.byteLength(JSON.stringify(g.fingerprint.sha256));
        }
        if (page.next_offset === null) break;
        off = page.next_offset;
      }
    }
    await store.close();
    stores.delete("lmdb");
    let disk = 0;
    let allocated = 0;
    for (const f of readdirSync(join(dir, "db"))) {
      const st = statSync(join(dir, "db", f));
      disk += st.size;
      allocated += st.blocks * 512;
    }
    // where the pages go: records, payload databases (index, bodies, stream), and the rest
    // (free pages kept for reuse, LMDB's meta pages)
    const lb = new LmdbBackend(join(dir, "db"));
    const st = lb.stats();
    await lb.close();
    const pagesOf = (names: string[]) => names.reduce((s, n) => s + st.dbs[n]!.pages, 0) * st.page_size;
    const recordBytes = pagesOf(["records"]);
    const payloadDbBytes = pagesOf(["payloads", "payload_index", "payload_bodies", "payload_stream"]);
    emit({
      figure: "disk",
      storage: "lmdb",
      payload_bytes: stored,
      metadata_bytes: meta,
      file_bytes: disk,
      allocated_bytes: allocated,
      ratio_file: r3(disk / (stored + meta)),
      ratio_allocated: r3(allocated / (stored + meta)),
      records_pages_bytes: recordBytes,
      payload_pages_bytes: payloadDbBytes,
      other_pages_bytes: (st.last_page + 1) * st.page_size - recordBytes - payloadDbBytes,
    });
  }
} finally {
  for (const s of stores.values()) await s.close();
  rmSync(dir, { recursive: true, force: true });
  if (pgCreated) await pgAdmin(`DROP DATABASE IF EXISTS ${pgDb} WITH (FORCE)`);
}
