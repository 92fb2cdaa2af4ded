// Gateway overhead: requests per second and p50/p99 latency for `get` and a 64 KiB `put`,
// through the gateway and straight to the engine, with 1 and 50 connections, and the gateway
// with its in-memory limiter/meter against the Redis ones. Loopback only. The variants of one
// figure are measured in interleaved slices (direct, gateway, gateway+Redis, direct, ...;
// SVC_BENCH_ROUNDS rounds, default 3, of SVC_BENCH_SECONDS each, default 1 s, after 0.3 s of
// warm-up) and each figure is the median over the rounds, so that load from other processes on
// a shared machine hits every variant alike; the whole program is bounded (about a minute).
// The engine and the gateway run as child processes (this same file with --role), the load
// generator (an undici Pool) in this process. SVC_BENCH_OPS (default "get,put_64k") and
// SVC_BENCH_CONNECTIONS (default "1,50") narrow the run to some figures.
//   node --import tsx bench/gateway.ts            (or: npm run bench -- gateway)
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, tmpdir, totalmem, platform, arch, loadavg } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";

const SERVICE_KEY = randomBytes(32).toString("hex");
const SECONDS = Number(process.env.SVC_BENCH_SECONDS) || 1;
const ROUNDS = Number(process.env.SVC_BENCH_ROUNDS) || 3;
const WARMUP_MS = 300;
const OPS = (process.env.SVC_BENCH_OPS ?? "get,put_64k").split(",").map((s) => s.trim());
const CONNECTIONS = (process.env.SVC_BENCH_CONNECTIONS ?? "1,50").split(",").map(Number).filter((n) => n > 0);
const REDIS_URL = process.env.SVC_BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";
const role = process.argv.find((a) => a.startsWith("--role="))?.slice(7);

if (role === "engine") {
  const { loadEngineConfig } = await import("../server/engine/config.js");
  const { startEngine } = await import("../server/engine/server.js");
  const e = await startEngine(loadEngineConfig(process.env));
  process.stdout.write(JSON.stringify({ url: e.url, storage: e.store.storage }) + "\n");
  process.once("SIGTERM", () => void e.close().then(() => process.exit(0)));
} else if (role === "gateway") {
  const { loadGatewayConfig } = await import("../server/gateway/config.js");
  const { startGateway } = await import("../server/gateway/server.js");
  const g = await startGateway(loadGatewayConfig(process.env));
  process.stdout.write(JSON.stringify({ url: g.url }) + "\n");
  process.once("SIGTERM", () => void g.close().then(() => process.exit(0)));
} else {
  await main();
}

interface Child { info: Record<string, string>; proc: ChildProcess }

async function child(r: string, env: Record<string, string>): Promise<Child> {
  const proc = spawn(process.execPath, ["--import", "tsx", fileURLToPath(import.meta.url), `--role=${r}`], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  // `node` itself (no npx/shell wrapper), so /proc/<pid>/stat is the server's own CPU time.
  const info = await new Promise<Record<string, string>>((resolve, reject) => {
    createInterface({ input: proc.stdout! }).once("line", (l) => resolve(JSON.parse(l)));
    proc.once("exit", (c) => reject(new Error(`${r} exited with ${c}`)));
  });
  return { info, proc };
}

async function stop(c: Child): Promise<void> {
  if (c.proc.exitCode !== null) return;
  const done = new Promise((r) => c.proc.once("exit", r));
  c.proc.kill("SIGTERM");
  await done;
}

interface Req { method: "GET" | "POST"; path: string; headers: Record<string, string>; body?: () => string }

/** CPU seconds (user + system) a process has used so far; null off Linux. */
function cpuSeconds(pid: number | undefined): number | null {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100; // utime + stime in clock ticks (USER_HZ = 100)
  } catch {
    return null;
  }
}

async function load(url: string, connections: number, req: Req, pids: Array<number | undefined>) {
  const pool = new Pool(url, { connections, pipelining: 1 });
  const lat: number[] = [];
  let errors = 0;
  let measuring = false;
  let stopAt = 0;
  const worker = async () => {
    while (Date.now() < stopAt) {
      const t0 = process.hrtime.bigint();
      try {
        const r = await pool.request({ method: req.method, path: req.path, headers: req.headers, body: req.body?.() });
        await r.body.dump();
        if (r.statusCode >= 300) errors++;
      } catch {
        errors++;
      }
      if (measuring) lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  };
  stopAt = Date.now() + WARMUP_MS;
  await Promise.all(Array.from({ length: connections }, worker));
  measuring = true;
  const cpu0 = pids.map(cpuSeconds);
  const start = Date.now();
  stopAt = start + SECONDS * 1000;
  await Promise.all(Array.from({ length: connections }, worker));
  const elapsed = (Date.now() - start) / 1000;
  const cpu = pids.map((p, i) => {
    const a = cpu0[i], b = cpuSeconds(p);
    return a === null || b === null || lat.length === 0 ? null : Math.round(((b - a) / lat.length) * 1e6);
  });
  await pool.close();
  lat.sort((a, b) => a - b);
  const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] ?? NaN;
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return {
    requests: lat.length, errors, rps: Math.round(lat.length / elapsed), p50_ms: r3(q(0.5)), p99_ms: r3(q(0.99)),
    engine_cpu_us_per_req: cpu[0] ?? null, gateway_cpu_us_per_req: cpu[1] ?? null,
  };
}

async function main() {
  const dir = await mkdtemp(join(tmpdir(), "svc-bench-gw-"));
  const prefix = `svc-bench:${randomBytes(6).toString("hex")}:`;
  const children: Child[] = [];
  try {
    const engine = await child("engine", {
      SVC_ENGINE_HOST: "127.0.0.1", SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: SERVICE_KEY, SVC_ENGINE_LOG_LEVEL: "silent",
    });
    children.push(engine);
    const gwEnv = (redis: boolean): Record<string, string> => ({
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY, SVC_GATE_HOST: "127.0.0.1", SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.info.url!, SVC_GATE_DATA_DIR: join(dir, redis ? "gate-redis" : "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, redis ? "audit-redis.jsonl" : "audit.jsonl"), SVC_GATE_BILLING_ENABLED: "true",
      // Billing on so that the quota check runs; the payment provider is never called here.
      SVC_GATE_PAYMENT_SECRET_KEY: "sk_test_bench", SVC_GATE_PAYMENT_WEBHOOK_SECRET: "whsec_bench",
      SVC_GATE_PAYMENT_PRICE_BUILDER: "price_bench_builder", SVC_GATE_PAYMENT_PRICE_PRO: "price_bench_pro",
      SVC_GATE_PAYMENT_API_BASE: "http://127.0.0.1:9",
      ...(redis ? { SVC_GATE_REDIS_URL: REDIS_URL, SVC_GATE_REDIS_PREFIX: prefix } : {}),
    });
    const gwMem = await child("gateway", gwEnv(false));
    children.push(gwMem);
    let gwRedis: Child | null = null;
    try {
      gwRedis = await child("gateway", gwEnv(true));
      children.push(gwRedis);
    } catch {
      gwRedis = null;
    }

    // An enterprise tenant with limits far above what the bench sends, so every request runs
    // the limiter, the quota check and the meter without being refused. The 1-s window keeps
    // the sliding log short.
    const keys = new Map<string, string>();
    for (const [name, g] of [["memory", gwMem], ["redis", gwRedis]] as const) {
      if (!g) continue;
      const r = await fetch(g.info.url + "/gate/onboard/create", {
        method: "POST",
        headers: { authorization: `Bearer ${SERVICE_KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ tenant_id: "bench", plan: "enterprise", monthly_quota: 1e12, rate_limit: { requests: 100_000_000, window_s: 1 } }),
      });
      keys.set(name, ((await r.json()) as { api_key: string }).api_key);
    }
    const payload = randomBytes(64 * 1024).toString("base64");
    let n = 0;
    const putBody = () => JSON.stringify({ namespace: "default", key: `p${n++ % 64}`, data_b64: payload });
    // Seed the entry that `get` reads (through the engine directly, tenant "bench").
    const direct = { authorization: `Bearer ${SERVICE_KEY}`, "x-svc-tenant": "bench" };
    await fetch(engine.info.url + "/v1/put", { method: "POST", headers: { ...direct, "content-type": "application/json" }, body: JSON.stringify({ namespace: "default", key: "g", data_b64: randomBytes(1024).toString("base64") }) });

    const cpu = cpus();
    console.log(`# gateway bench: node ${process.version}, ${platform()} ${arch()}, ${cpu[0]?.model ?? "cpu"} x ${cpu.length} threads, ${Math.round(totalmem() / 2 ** 30)} GiB, engine storage ${engine.info.storage}, loopback, ${ROUNDS} interleaved rounds of ${SECONDS} s per figure, redis ${gwRedis ? REDIS_URL : "unavailable"}, load average ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);

    type Via = "direct" | "memory" | "redis";
    const median = (xs: number[]) => {
      const v = [...xs].sort((a, b) => a - b);
      return v.length % 2 ? v[v.length >> 1]! : (v[v.length / 2 - 1]! + v[v.length / 2]!) / 2;
    };
    const r3 = (x: number) => Math.round(x * 1000) / 1000;
    const figures: Array<{ op: string; via: Via; connections: number; rps: number; p50_ms: number; p99_ms: number }> = [];
    const measure = async (op: "get" | "put_64k", connections: number, vias: Via[]) => {
      const runs = new Map<Via, Array<Awaited<ReturnType<typeof load>>>>();
      for (let round = 0; round < ROUNDS; round++) {
        for (const via of vias) {
          const target = via === "direct" ? engine : via === "redis" ? gwRedis! : gwMem;
          const auth = via === "direct" ? direct : { "x-api-key": keys.get(via)! };
          const req: Req = op === "get"
            ? { method: "GET", path: "/v1/get/default/g", headers: auth }
            : { method: "POST", path: "/v1/put", headers: { ...auth, "content-type": "application/json" }, body: putBody };
          const r = await load(target.info.url!, connections, req, [engine.proc.pid, via === "direct" ? undefined : target.proc.pid]);
          runs.set(via, [...(runs.get(via) ?? []), r]);
        }
      }
      for (const via of vias) {
        const rs = runs.get(via)!;
        const cpu = (k: "engine_cpu_us_per_req" | "gateway_cpu_us_per_req") => {
          const xs = rs.map((r) => r[k]).filter((x): x is number => x !== null);
          return xs.length ? Math.round(median(xs)) : null;
        };
        const fig = {
          bench: "gateway", op, via: via === "direct" ? "direct" : "gateway", limiter: via === "direct" ? null : via, connections,
          rounds: rs.length, requests: rs.reduce((a, r) => a + r.requests, 0), errors: rs.reduce((a, r) => a + r.errors, 0),
          rps: Math.round(median(rs.map((r) => r.rps))), p50_ms: r3(median(rs.map((r) => r.p50_ms))), p99_ms: r3(median(rs.map((r) => r.p99_ms))),
          engine_cpu_us_per_req: cpu("engine_cpu_us_per_req"), gateway_cpu_us_per_req: cpu("gateway_cpu_us_per_req"),
        };
        figures.push({ op, via, connections, rps: fig.rps, p50_ms: fig.p50_ms, p99_ms: fig.p99_ms });
        console.log(JSON.stringify(fig));
      }
    };
    if (OPS.includes("get")) for (const c of CONNECTIONS) await measure("get", c, gwRedis ? ["direct", "memory", "redis"] : ["direct", "memory"]);
    if (OPS.includes("put_64k")) for (const c of CONNECTIONS) await measure("put_64k", c, ["direct", "memory"]);
    console.log(`# load average after the runs: ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);

    const find = (op: string, via: Via, c: number) => figures.find((f) => f.op === op && f.via === via && f.connections === c)!;
    for (const op of ["get", "put_64k"].filter((o) => OPS.includes(o))) {
      for (const c of CONNECTIONS) {
        const d = find(op, "direct", c);
        const g = find(op, "memory", c);
        console.log(JSON.stringify({ bench: "gateway", figure: "overhead", op, connections: c, p50_added_ms: r3(g.p50_ms - d.p50_ms), throughput_ratio: r3(g.rps / d.rps) }));
      }
    }
    if (gwRedis && OPS.includes("get")) {
      for (const c of CONNECTIONS) {
        const m = find("get", "memory", c);
        const r = find("get", "redis", c);
        console.log(JSON.stringify({ bench: "gateway", figure: "redis_vs_memory", op: "get", connections: c, p50_added_ms: r3(r.p50_ms - m.p50_ms), throughput_ratio: r3(r.rps / m.rps) }));
      }
    }
  } finally {
    for (const c of children.reverse()) await stop(c);
    try {
      const { connectRedis, deletePrefix } = await import("../server/gateway/redis.js");
      const redis = await connectRedis(REDIS_URL);
      await deletePrefix(redis, prefix);
      await redis.quit();
    } catch {
      // no Redis: nothing to clean
    }
    await rm(dir, { recursive: true, force: true });
  }
}
