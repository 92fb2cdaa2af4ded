// Gateway overhead: requests per second and p50/p99 latency for `get` and a 64 KiB `put`,
// through the gateway and straight to the engine, with 1 and 50 connections, and the gateway
// with its in-memory limiter/meter against the Redis ones. Loopback only. The variants of one
// figure are measured in interleaved slices (direct, gateway, gateway+Redis, direct, ...;
// SVC_BENCH_ROUNDS rounds, default 3, of SVC_BENCH_SECONDS each, default 1 s, after 0.3 s of
// warm-up) and each figure is the median over the rounds, so that load from other processes on
// a shared machine hits every variant alike; the whole program is bounded (a few minutes).
// The engine and the gateway run as child processes (this same file with --role), the load
// generator (an undici Pool) in this process. SVC_BENCH_OPS (default "get,put_64k") and
// SVC_BENCH_CONNECTIONS (default "1,50") narrow the run to some figures.
// Also measured: one gateway over two engine processes sharing one LMDB directory
// (SVC_GATE_ENGINE_URL with two URLs), against the same gateway over one; and the Redis-backed
// gateway with its own RESP client against node-redis (the library client, same commands),
// on one Redis server and, with SVC_BENCH_REDIS_CLUSTER=1, on a three-master Redis Cluster
// started here from redis-server on free ports (torn down at the end). And a `get` with a
// scoped key of a tenant holding the most scoped keys allowed (its record is the largest a
// tenant has: every key compared, and with Redis the record hashed by the admission script)
// against the same gateway with a tenant's own key; the scoped key is checked to be refused a
// write in another namespace before it is timed.
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
const CONNECTIONS = (process.env.SVC_BENCH_CONNECTIONS ?? "1,50")
  .split(",")
  .map(Number)
  .filter((n) => n > 0);
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
  const g = await startGateway(loadGatewayConfig(process.env), process.env.SVC_BENCH_REDIS_CLIENT === "node-redis" ? { openRedis: nodeRedisLink } : {});
  process.stdout.write(JSON.stringify({ url: g.url }) + "\n");
  process.once("SIGTERM", () => void g.close().then(() => process.exit(0)));
} else {
  await main();
}

/** The library client for comparison: node-redis, one client or a cluster client, as a RedisLink. */
async function nodeRedisLink(target: import("../server/gateway/config.js").RedisTarget) {
  const { createClient, createCluster } = await import("redis");
  const { routingKey } = await import("../server/gateway/redis-ha.js");
  if (target.kind === "single") {
    const c = createClient({ url: target.url, disableOfflineQueue: true });
    c.on("error", () => {});
    await c.connect();
    return { sendCommand: (args: string[]) => c.sendCommand(args) as Promise<unknown>, close: () => c.close() };
  }
  if (target.kind === "cluster") {
    const c = createCluster({ rootNodes: target.nodes.map((url) => ({ url })) });
    c.on("error", () => {});
    await c.connect();
    return { sendCommand: (args: string[]) => c.sendCommand(routingKey(args) ?? undefined, false, args) as Promise<unknown>, close: () => c.close() };
  }
  throw new Error("The node-redis comparison covers one server and a cluster.");
}

/** A three-master Redis Cluster from redis-server on free ports under `dir`; null when redis-server is missing. */
async function startCluster(dir: string): Promise<{ nodes: string[]; stop(): Promise<void> } | null> {
  const { execFile } = await import("node:child_process");
  const { promisify } = await import("node:util");
  const { createServer } = await import("node:net");
  const { mkdir } = await import("node:fs/promises");
  const run = promisify(execFile);
  if (
    !(await run("redis-server", ["--version"]).then(
      () => true,
      () => false,
    ))
  )
    return null;
  const procs: ChildProcess[] = [];
  const ports: number[] = [];
  const stopAll = async () => {
    for (const p of procs)
      if (p.exitCode === null) {
        const d = new Promise((r) => p.once("exit", r));
        p.kill("SIGKILL");
        await d;
      }
  };
  try {
    for (let i = 0; i < 3; i++) {
      const s = createServer();
      await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
      const port = (s.address() as { port: number }).port;
      await new Promise<void>((r) => s.close(() => r()));
      const d = join(dir, `cluster-${i}`);
      await mkdir(d, { recursive: true, mode: 0o700 });
      procs.push(
        spawn(
          "redis-server",
          [
            "--port",
            String(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            d,
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            join(d, "nodes.conf"),
            "--logfile",
            join(d, "log"),
          ],
          { stdio: "ignore" },
        ),
      );
      ports.push(port);
    }
    const deadline = Date.now() + 120_000;
    const ping = async (port: number) => (await run("redis-cli", ["-p", String(port), "PING"]).catch(() => ({ stdout: "" }))).stdout.trim() === "PONG";
    for (const port of ports)
      while (!(await ping(port))) {
        if (Date.now() > deadline) throw new Error("redis-server did not start");
        await new Promise((r) => setTimeout(r, 100));
      }
    await run("redis-cli", ["--cluster", "create", ...ports.map((p) => `127.0.0.1:${p}`), "--cluster-yes"], { timeout: 60_000 });
    const ok = async () => {
      for (const port of ports) if (!/cluster_state:ok/.test((await run("redis-cli", ["-p", String(port), "CLUSTER", "INFO"])).stdout)) return false;
      return true;
    };
    while (!(await ok())) {
      if (Date.now() > deadline) throw new Error("the cluster did not come up");
      await new Promise((r) => setTimeout(r, 100));
    }
    return { nodes: ports.map((p) => `redis://127.0.0.1:${p}`), stop: stopAll };
  } catch (e) {
    await stopAll();
    throw e;
  }
}

async function redisLinkFigures(clusterNodes: string[] | null, prefix: string, median: (xs: number[]) => number): Promise<void> {
  const { RespConnection } = await import("../server/gateway/resp.js");
  const { RespCluster } = await import("../server/gateway/redis-ha.js");
  const { RedisRateLimiter } = await import("../server/gateway/ratelimit.js");
  type Link = { sendCommand(a: string[]): Promise<unknown>; close(): Promise<void> };
  const links: Array<{ client: string; server: string; link: Link; tags: boolean }> = [];
  const add = async (client: string, server: string, tags: boolean, open: () => Promise<Link>) => {
    try {
      links.push({ client, server, tags, link: await open() });
    } catch {
      // that server is not there: the figure is left out
    }
  };
  await add("own", "one server", false, () => RespConnection.open(REDIS_URL));
  await add("node-redis", "one server", false, () => nodeRedisLink({ kind: "single", url: REDIS_URL }));
  if (clusterNodes) {
    await add("own", "cluster", true, () => RespCluster.open(clusterNodes));
    await add("node-redis", "cluster", true, () => nodeRedisLink({ kind: "cluster", nodes: clusterNodes }));
  }
  const spec = { requests: 1_000_000_000, windowMs: 1000 };
  const runs = new Map<string, Array<{ p50_us: number; ops_per_s: number; cpu_us_per_op: number; refused: number }>>();
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const l of links) {
        const limiter = new RedisRateLimiter(l.link, `${prefix}link:${l.client}:`, l.tags);
        let refused = 0;
        const hit = async () => {
          if (!(await limiter.hit("bench", spec)).allowed) refused++;
        };
        const lat: number[] = [];
        let stopAt = Date.now() + WARMUP_MS;
        while (Date.now() < stopAt) await hit();
        stopAt = Date.now() + SECONDS * 500;
        while (Date.now() < stopAt) {
          const t0 = process.hrtime.bigint();
          await hit();
          lat.push(Number(process.hrtime.bigint() - t0) / 1e3);
        }
        lat.sort((a, b) => a - b);
        let ops = 0;
        const cpu0 = process.cpuUsage();
        const t0 = Date.now();
        stopAt = t0 + SECONDS * 500;
        await Promise.all(
          Array.from({ length: 50 }, async () => {
            while (Date.now() < stopAt) {
              await hit();
              ops++;
            }
          }),
        );
        const elapsed = (Date.now() - t0) / 1000;
        const c = process.cpuUsage(cpu0);
        const key = `${l.client}|${l.server}`;
        runs.set(key, [
          ...(runs.get(key) ?? []),
          { p50_us: lat[lat.length >> 1]!, ops_per_s: ops / elapsed, cpu_us_per_op: (c.user + c.system) / ops, refused },
        ]);
      }
    }
    for (const l of links) {
      const rs = runs.get(`${l.client}|${l.server}`)!;
      console.log(
        JSON.stringify({
          bench: "gateway",
          figure: "redis_link",
          client: l.client,
          server: l.server,
          rounds: rs.length,
          p50_us_1_in_flight: Math.round(median(rs.map((r) => r.p50_us))),
          ops_per_s_50_in_flight: Math.round(median(rs.map((r) => r.ops_per_s))),
          cpu_us_per_op_50_in_flight: Math.round(median(rs.map((r) => r.cpu_us_per_op))),
          refused: rs.reduce((a, r) => a + r.refused, 0),
        }),
      );
    }
  } finally {
    for (const l of links) await l.link.close().catch(() => {});
  }
}

/**
 * Steps 2 and 4 of a key in process: confirmKey + checkGrant per call on a tenant with no scoped
 * key (its own key) and on one holding the most allowed (the last one looked for), each call's
 * grant checked to be the expected key's.
 */
async function keyCheckFigures(): Promise<void> {
  const { checkGrant, confirmKey, createScopedKey, MAX_KEYS_PER_TENANT } = await import("../server/gateway/keys.js");
  const { MemoryTenantRegistry } = await import("../server/gateway/tenants.js");
  const { sha256Hex } = await import("../lib/sha256.js");
  const reg = new MemoryTenantRegistry();
  const tenant = (id: string, key: string) => ({
    tenant_id: id,
    plan: "starter" as const,
    namespaces: ["default", "other"],
    email: null,
    key_hash: sha256Hex(key),
    active: true,
    status: "active" as const,
    monthly_quota: null,
    rate_limit: { requests: 1, window_s: 1 },
    custom_rate_limit: false,
    created_at: "",
    updated_at: "",
  });
  await reg.create(tenant("solo", "svc_live_solo"));
  await reg.create(tenant("many", "svc_live_many"));
  let last = { apiKey: "", id: "" };
  for (let i = 0; i < MAX_KEYS_PER_TENANT; i++) {
    const k = await createScopedKey(reg, { tenant_id: "many", name: `k${i}`, scopes: ["read"], namespaces: ["default"] }, Date.now());
    last = { apiKey: k.apiKey, id: k.key.key_id };
  }
  const cases = [
    { keys: 0, record: (await reg.get("solo"))!, hash: sha256Hex("svc_live_solo"), expect: "primary" },
    { keys: MAX_KEYS_PER_TENANT, record: (await reg.get("many"))!, hash: sha256Hex(last.apiKey), expect: last.id },
  ];
  for (const c of cases) {
    const n = 200_000;
    let right = 0;
    const once = () => {
      const { grant } = confirmKey(c.record, c.hash, Date.now());
      checkGrant(grant, "get", ["default"]);
      if (grant.key_id === c.expect) right++;
    };
    for (let i = 0; i < 20_000; i++) once();
    right = 0;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) once();
    const us = Number(process.hrtime.bigint() - t0) / n / 1000;
    console.log(
      JSON.stringify({
        bench: "gateway",
        figure: "key_check",
        scoped_keys_in_record: c.keys,
        us_per_request: Math.round(us * 100) / 100,
        calls: n,
        right_key: right,
      }),
    );
  }
}

interface Child {
  info: Record<string, string>;
  proc: ChildProcess;
}

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

interface Req {
  method: "GET" | "POST";
  path: string;
  headers: Record<string, string>;
  body?: () => string;
}

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
    const a = cpu0[i],
      b = cpuSeconds(p);
    return a === null || b === null || lat.length === 0 ? null : Math.round(((b - a) / lat.length) * 1e6);
  });
  await pool.close();
  lat.sort((a, b) => a - b);
  const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] ?? NaN;
  const r3 = (x: number) => Math.round(x * 1000) / 1000;
  return {
    requests: lat.length,
    errors,
    rps: Math.round(lat.length / elapsed),
    p50_ms: r3(q(0.5)),
    p99_ms: r3(q(0.99)),
    engine_cpu_us_per_req: cpu[0] ?? null,
    gateway_cpu_us_per_req: cpu[1] ?? null,
    engine2_cpu_us_per_req: cpu[2] ?? null,
  };
}

async function main() {
  const dir = await mkdtemp(join(tmpdir(), "svc-bench-gw-"));
  const prefix = `svc-bench:${randomBytes(6).toString("hex")}:`;
  const children: Child[] = [];
  let cluster: Awaited<ReturnType<typeof startCluster>> = null;
  try {
    const engineEnv = {
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: SERVICE_KEY,
      SVC_ENGINE_LOG_LEVEL: "silent",
    };
    const engine = await child("engine", engineEnv);
    children.push(engine);
    // A second engine process on the same LMDB directory: both serve the same entries.
    const engine2 = await child("engine", engineEnv);
    children.push(engine2);
    const gwEnv = (name: string, extra: Record<string, string>): Record<string, string> => ({
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.info.url!,
      SVC_GATE_DATA_DIR: join(dir, `gate-${name}`),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, `audit-${name}.jsonl`),
      SVC_GATE_BILLING_ENABLED: "true",
      // Billing on so that the quota check runs; the payment provider is never called here.
      SVC_GATE_PAYMENT_SECRET_KEY: "sk_test_bench",
      SVC_GATE_PAYMENT_WEBHOOK_SECRET: "whsec_bench",
      SVC_GATE_PAYMENT_PRICE_BUILDER: "price_bench_builder",
      SVC_GATE_PAYMENT_PRICE_PRO: "price_bench_pro",
      SVC_GATE_PAYMENT_API_BASE: "http://127.0.0.1:9",
      ...extra,
    });
    type Via = "direct" | "memory" | "two_engines" | "redis" | "redis_node_redis" | "cluster" | "cluster_node_redis" | "memory_scoped" | "redis_scoped";
    // The scoped variants use the gateway of the same name without the suffix.
    const gatewayOf = (via: Via): Child => gateways.get(via.replace(/_scoped$/, "") as Via)!;
    const gateways = new Map<Via, Child>();
    const tryGateway = async (via: Via, env: Record<string, string>) => {
      try {
        const g = await child("gateway", env);
        children.push(g);
        gateways.set(via, g);
      } catch {
        // Redis (or the cluster) unavailable: the figure is left out
      }
    };
    await tryGateway("memory", gwEnv("memory", {}));
    await tryGateway("two_engines", gwEnv("two", { SVC_GATE_ENGINE_URL: `${engine.info.url},${engine2.info.url}` }));
    await tryGateway("redis", gwEnv("redis", { SVC_GATE_REDIS_URL: REDIS_URL, SVC_GATE_REDIS_PREFIX: `${prefix}own:` }));
    await tryGateway(
      "redis_node_redis",
      gwEnv("redis-lib", { SVC_GATE_REDIS_URL: REDIS_URL, SVC_GATE_REDIS_PREFIX: `${prefix}lib:`, SVC_BENCH_REDIS_CLIENT: "node-redis" }),
    );
    if (process.env.SVC_BENCH_REDIS_CLUSTER === "1") {
      cluster = await startCluster(dir).catch(() => null);
      if (cluster) {
        await tryGateway("cluster", gwEnv("cluster", { SVC_GATE_REDIS_CLUSTER_NODES: cluster.nodes[0]!, SVC_GATE_REDIS_PREFIX: `${prefix}own:` }));
        await tryGateway(
          "cluster_node_redis",
          gwEnv("cluster-lib", {
            SVC_GATE_REDIS_CLUSTER_NODES: cluster.nodes[0]!,
            SVC_GATE_REDIS_PREFIX: `${prefix}lib:`,
            SVC_BENCH_REDIS_CLIENT: "node-redis",
          }),
        );
      }
    }

    // An enterprise tenant with limits far above what the bench sends, so every request runs
    // the limiter, the quota check and the meter without being refused. The 1-s window keeps
    // the sliding log short.
    const keys = new Map<Via, string>();
    for (const [via, g] of gateways) {
      const r = await fetch(g.info.url + "/gate/onboard/create", {
        method: "POST",
        headers: { authorization: `Bearer ${SERVICE_KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ tenant_id: "bench", plan: "enterprise", monthly_quota: 1e12, rate_limit: { requests: 100_000_000, window_s: 1 } }),
      });
      keys.set(via, ((await r.json()) as { api_key: string }).api_key);
    }
    // Tenant bench_keys: its own key unused, MAX_KEYS_PER_TENANT scoped keys; the last one (read
    // and write on namespace default) is timed.
    const { MAX_KEYS_PER_TENANT } = await import("../server/gateway/keys.js");
    const scopedChecks: Record<string, unknown> = {};
    for (const via of ["memory", "redis"] as const) {
      const g = gateways.get(via);
      if (!g) continue;
      const adminPost = (path: string, body: unknown) =>
        fetch(g.info.url + path, {
          method: "POST",
          headers: { authorization: `Bearer ${SERVICE_KEY}`, "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      await adminPost("/gate/onboard/create", {
        tenant_id: "bench_keys",
        namespaces: ["default", "other"],
        plan: "enterprise",
        monthly_quota: 1e12,
        rate_limit: { requests: 100_000_000, window_s: 1 },
      });
      let last = "";
      for (let i = 0; i < MAX_KEYS_PER_TENANT; i++) {
        const r = await adminPost("/gate/admin/keys", {
          tenant_id: "bench_keys",
          name: `team-${i}`,
          scopes: ["read", "write"],
          namespaces: ["default"],
          expires_at: "2099-01-01T00:00:00Z",
        });
        last = ((await r.json()) as { api_key: string }).api_key;
      }
      keys.set(`${via}_scoped`, last);
      const refused = await fetch(g.info.url + "/v1/put", {
        method: "POST",
        headers: { "x-api-key": last, "content-type": "application/json" },
        body: JSON.stringify({ namespace: "other", key: "x", data_b64: "AAAA" }),
      });
      await refused.body?.cancel();
      scopedChecks[via] = refused.status;
    }
    const payload = randomBytes(64 * 1024).toString("base64");
    let n = 0;
    const putBody = () => JSON.stringify({ namespace: "default", key: `p${n++ % 64}`, data_b64: payload });
    // Seed the entry that `get` reads (through the engine directly, tenant "bench").
    const direct = { authorization: `Bearer ${SERVICE_KEY}`, "x-svc-tenant": "bench" };
    await fetch(engine.info.url + "/v1/put", {
      method: "POST",
      headers: { ...direct, "content-type": "application/json" },
      body: JSON.stringify({ namespace: "default", key: "g", data_b64: randomBytes(1024).toString("base64") }),
    });
    await fetch(engine.info.url + "/v1/put", {
      method: "POST",
      headers: { ...direct, "x-svc-tenant": "bench_keys", "content-type": "application/json" },
      body: JSON.stringify({ namespace: "default", key: "g", data_b64: randomBytes(1024).toString("base64") }),
    });
    await keyCheckFigures();
    console.log(
      JSON.stringify({
        bench: "gateway",
        figure: "scoped_key_check",
        scoped_keys_per_tenant: MAX_KEYS_PER_TENANT,
        write_in_other_namespace_status: scopedChecks,
      }),
    );

    const cpu = cpus();
    console.log(
      `# gateway bench: node ${process.version}, ${platform()} ${arch()}, ${cpu[0]?.model ?? "cpu"} x ${cpu.length} threads, ${Math.round(totalmem() / 2 ** 30)} GiB, engine storage ${engine.info.storage}, loopback, ${ROUNDS} interleaved rounds of ${SECONDS} s per figure, redis ${gateways.has("redis") ? REDIS_URL : "unavailable"}, redis cluster ${cluster ? "3 masters, local" : "not run"}, load average ${loadavg()
        .map((x) => x.toFixed(2))
        .join(" ")}`,
    );

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
          const target = via === "direct" ? engine : gatewayOf(via);
          const auth = via === "direct" ? direct : { "x-api-key": keys.get(via)! };
          const req: Req =
            op === "get"
              ? { method: "GET", path: "/v1/get/default/g", headers: auth }
              : { method: "POST", path: "/v1/put", headers: { ...auth, "content-type": "application/json" }, body: putBody };
          const r = await load(target.info.url!, connections, req, [engine.proc.pid, via === "direct" ? undefined : target.proc.pid, engine2.proc.pid]);
          runs.set(via, [...(runs.get(via) ?? []), r]);
        }
      }
      for (const via of vias) {
        const rs = runs.get(via)!;
        const cpu = (k: "engine_cpu_us_per_req" | "gateway_cpu_us_per_req" | "engine2_cpu_us_per_req") => {
          const xs = rs.map((r) => r[k]).filter((x): x is number => x !== null);
          return xs.length ? Math.round(median(xs)) : null;
        };
        const fig = {
          bench: "gateway",
          op,
          via: via === "direct" ? "direct" : "gateway",
          limiter: via === "direct" ? null : via,
          connections,
          rounds: rs.length,
          requests: rs.reduce((a, r) => a + r.requests, 0),
          errors: rs.reduce((a, r) => a + r.errors, 0),
          rps: Math.round(median(rs.map((r) => r.rps))),
          p50_ms: r3(median(rs.map((r) => r.p50_ms))),
          p99_ms: r3(median(rs.map((r) => r.p99_ms))),
          engine_cpu_us_per_req: cpu("engine_cpu_us_per_req"),
          gateway_cpu_us_per_req: cpu("gateway_cpu_us_per_req"),
          ...(via === "two_engines" ? { engine2_cpu_us_per_req: cpu("engine2_cpu_us_per_req") } : {}),
        };
        figures.push({ op, via, connections, rps: fig.rps, p50_ms: fig.p50_ms, p99_ms: fig.p99_ms });
        console.log(JSON.stringify(fig));
      }
    };
    const has = (vias: Via[]) => vias.filter((v) => v === "direct" || gateways.has(v));
    const hasScoped = (vias: Via[]) => vias.filter((v) => keys.has(v));
    if (OPS.includes("get"))
      for (const c of CONNECTIONS)
        await measure("get", c, [
          ...has(["direct", "memory", "two_engines", "redis", "redis_node_redis", "cluster", "cluster_node_redis"]),
          ...hasScoped(["memory_scoped", "redis_scoped"]),
        ]);
    if (OPS.includes("put_64k")) for (const c of CONNECTIONS) await measure("put_64k", c, has(["direct", "memory", "two_engines"]));
    console.log(
      `# load average after the runs: ${loadavg()
        .map((x) => x.toFixed(2))
        .join(" ")}`,
    );

    const find = (op: string, via: Via, c: number) => figures.find((f) => f.op === op && f.via === via && f.connections === c);
    const compare = (figure: string, op: string, base: Via, other: Via) => {
      for (const c of CONNECTIONS) {
        const b = find(op, base, c),
          o = find(op, other, c);
        if (b && o)
          console.log(
            JSON.stringify({ bench: "gateway", figure, op, connections: c, p50_added_ms: r3(o.p50_ms - b.p50_ms), throughput_ratio: r3(o.rps / b.rps) }),
          );
      }
    };
    for (const op of ["get", "put_64k"].filter((o) => OPS.includes(o))) {
      compare("overhead", op, "direct", "memory");
      compare("two_engines_vs_one", op, "memory", "two_engines");
    }
    if (OPS.includes("get")) {
      compare("redis_vs_memory", "get", "memory", "redis");
      compare("node_redis_vs_own_client", "get", "redis", "redis_node_redis");
      compare("cluster_vs_one_server", "get", "redis", "cluster");
      compare("cluster_node_redis_vs_own_client", "get", "cluster", "cluster_node_redis");
      compare("scoped_key_vs_own_key", "get", "memory", "memory_scoped");
      compare("scoped_key_vs_own_key_redis", "get", "redis", "redis_scoped");
    }

    // The Redis client alone, as the gateway uses it: the rate-limit script (one round trip,
    // as the admission script is) one at a time (latency) and 50 in flight (throughput), with
    // this process's CPU per call; own client against node-redis, interleaved rounds.
    await redisLinkFigures(cluster?.nodes ?? null, prefix, median);

    // What the two-engine gateway wrote is the same entry through either engine.
    const two = gateways.get("two_engines");
    if (two) {
      let agree = 0;
      for (let i = 0; i < 8; i++) {
        const r = await fetch(two.info.url + "/v1/put", {
          method: "POST",
          headers: { "x-api-key": keys.get("two_engines")!, "content-type": "application/json" },
          body: JSON.stringify({ namespace: "default", key: `check${i}`, data_b64: randomBytes(256).toString("base64") }),
        });
        const put = (await r.json()) as { version: number; fingerprint: { sha256: string } };
        const [a, b] = await Promise.all(
          [engine, engine2].map(
            async (e) =>
              (await (await fetch(`${e.info.url}/v1/get/default/check${i}`, { headers: direct })).json()) as {
                version: number;
                fingerprint: { sha256: string };
              },
          ),
        );
        if (
          a!.version === put.version &&
          b!.version === put.version &&
          a!.fingerprint.sha256 === put.fingerprint.sha256 &&
          b!.fingerprint.sha256 === put.fingerprint.sha256
        )
          agree++;
      }
      console.log(JSON.stringify({ bench: "gateway", figure: "two_engines_check", puts: 8, same_version_and_fingerprint_on_both_engines: agree }));
    }
  } finally {
    for (const c of children.reverse()) await stop(c);
    await cluster?.stop();
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
