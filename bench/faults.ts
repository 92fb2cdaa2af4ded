// Faults: dependencies failing under a mixed load. `svc engine` and `svc gateway` run as
// processes of their own over a PostgreSQL cluster and a redis-server started here on free
// ports (test/faults/deps.ts), and a second pair over LMDB on a small tmpfs. Eight clients
// from three tenants send puts (each with an Idempotency-Key, sent again with it until
// acknowledged), gets, searches and serves, with no client-side retry of their own besides
// that, while the bench restarts PostgreSQL, kills it (-9) and starts it, stops Redis (SIGSTOP)
// for 8 s, kills it and starts it, fills the tmpfs under LMDB and frees it, and makes clients
// leave mid-request. Per fault it prints the statuses seen, the seconds from the end of the
// fault until a put is acknowledged again, whether a process exited, and at the end the
// acknowledged writes not readable with their bytes (must be 0) and the CUs charged against
// the CUs the audit log records as charged (lost: recorded but not counted; double: counted
// but not recorded). Only HTTP and the CLI are used, so the same file measures any revision.
// SVC_BENCH_FAULTS (default all: postgres_restart,postgres_kill_9,redis_sigstop_8s,
// redis_kill_9,clients_leave_early,disk_full_10s) narrows it.
//   node --import tsx bench/faults.ts            (or: npm run bench -- faults)
import { spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { arch, cpus, loadavg, platform, tmpdir, totalmem } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Agent, request } from "undici";
import { mountSmallDisk, startPgCluster, startRedisProc, waitFor, type PgCluster, type RedisProc } from "../test/faults/deps.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const SERVICE_KEY = "svc-bench-faults-" + randomBytes(24).toString("hex");
const TENANTS = ["t0", "t1", "t2"];
const FAULTS = new Set(
  (process.env.SVC_BENCH_FAULTS ?? "postgres_restart,postgres_kill_9,redis_sigstop_8s,redis_kill_9,clients_leave_early,disk_full_10s")
    .split(",")
    .map((x) => x.trim()),
);

console.log(
  JSON.stringify({
    bench: "faults",
    node: process.version,
    platform: `${platform()}-${arch()}`,
    cpu: cpus()[0]?.model ?? "unknown",
    cores: cpus().length,
    mem_gib: Math.round(totalmem() / 2 ** 30),
    loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
  }),
);

function startProc(
  args: string[],
  env: NodeJS.ProcessEnv,
  pattern: RegExp,
): Promise<{ child: ChildProcess; url: string; exited: () => boolean; stderr: () => string }> {
  const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "bin/svc.ts"), ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  let out = "";
  let gone = false;
  child.stderr!.on("data", (d) => (err = (err + d).slice(-20_000)));
  child.once("exit", () => (gone = true));
  return new Promise((resolve, reject) => {
    child.stdout!.on("data", (d) => {
      out += d;
      const m = pattern.exec(out);
      if (m) resolve({ child, url: m[1]!, exited: () => gone, stderr: () => err });
    });
    child.once("exit", (c) => reject(new Error(`svc ${args[0]} exited ${c}: ${err.slice(-2000)}`)));
  });
}

interface Stack {
  engine: Awaited<ReturnType<typeof startProc>>;
  gateway: Awaited<ReturnType<typeof startProc>>;
  keys: Map<string, string>;
  audit: string;
}

async function startStack(dir: string, engineEnv: NodeJS.ProcessEnv, redis: RedisProc): Promise<Stack> {
  const engine = await startProc(
    ["engine"],
    {
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_API_KEYS: SERVICE_KEY,
      SVC_ENGINE_LOG_LEVEL: "silent",
      SVC_ENGINE_DEVICE: "cpu",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      ...engineEnv,
    },
    /engine: (http:\/\/\S+)/,
  );
  const audit = join(dir, "audit.jsonl");
  const gateway = await startProc(
    ["gateway"],
    {
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_REDIS_URL: redis.url,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: audit,
      SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "1000000",
      SVC_GATE_REDIS_PREFIX: `bench-${randomBytes(3).toString("hex")}:`,
    },
    /gateway: (http:\/\/\S+)/,
  );
  const keys = new Map<string, string>();
  for (const id of TENANTS) {
    const r = await request(`${gateway.url}/gate/onboard/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${SERVICE_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ tenant_id: id }),
    });
    const j = (await r.body.json()) as { api_key: string };
    keys.set(id, j.api_key);
  }
  return { engine, gateway, keys, audit };
}

interface Ack {
  tenant: string;
  key: string;
  version: number;
  sha: string;
}

/** The load: statuses per phase, acknowledged writes, and the time of the last acknowledged put. */
class Load {
  statuses = new Map<string, number>();
  acked: Ack[] = [];
  lastPutAck = 0;
  /** Longest request of the current phase, ms (a client that left is not counted). */
  maxMs = 0;
  #stop = false;
  #workers: Promise<void>[] = [];
  #agent = new Agent({ connections: 64, headersTimeout: 60_000, bodyTimeout: 60_000 });
  abortShare = 0;

  constructor(
    readonly stack: Stack,
    readonly clients = 8,
  ) {}

  start(): void {
    for (let w = 0; w < this.clients; w++) this.#workers.push(this.#worker(w));
  }

  async stop(): Promise<void> {
    this.#stop = true;
    await Promise.all(this.#workers);
    await this.#agent.close();
  }

  takeStatuses(): Record<string, number> {
    const o = Object.fromEntries([...this.statuses].sort());
    this.statuses.clear();
    this.maxMs = 0;
    return o;
  }

  #note(s: string): void {
    this.statuses.set(s, (this.statuses.get(s) ?? 0) + 1);
  }

  async #send(tenant: string, method: "GET" | "POST", path: string, body?: Buffer | string, headers: Record<string, string> = {}) {
    const ac = new AbortController();
    const leave = Math.random() < this.abortShare;
    const t = leave ? setTimeout(() => ac.abort(), Math.random() * 20) : null;
    const t0 = performance.now();
    try {
      const r = await request(this.stack.gateway.url + path, {
        method,
        dispatcher: this.#agent,
        signal: ac.signal,
        body,
        headers: {
          "x-api-key": this.stack.keys.get(tenant)!,
          ...(typeof body === "string" ? { "content-type": "application/json" } : body ? { "content-type": "application/octet-stream" } : {}),
          ...headers,
        },
      });
      const buf = Buffer.from(await r.body.arrayBuffer());
      let code = "";
      if (r.statusCode >= 400)
        try {
          code = (JSON.parse(buf.toString()) as { code: string }).code;
        } catch {
          /* not JSON */
        }
      this.#note(r.statusCode >= 400 ? `${r.statusCode} ${code}` : String(r.statusCode));
      this.maxMs = Math.max(this.maxMs, performance.now() - t0);
      return { status: r.statusCode, buf };
    } catch {
      this.#note(leave ? "client left" : "connection error");
      return { status: 0, buf: Buffer.alloc(0) };
    } finally {
      if (t) clearTimeout(t);
    }
  }

  async #worker(w: number): Promise<void> {
    const tenant = TENANTS[w % TENANTS.length]!;
    for (let i = 0; !this.#stop; i++) {
      const op = i % 4;
      const key = `w${w}-k${i % 10}`;
      if (op === 0) {
        // a put with its Idempotency-Key, sent again with the same key until acknowledged
        const data = randomBytes(4096);
        const idem = `w${w}-${i}-${randomBytes(4).toString("hex")}`;
        for (let attempt = 0; !this.#stop || attempt === 0; attempt++) {
          const r = await this.#send(tenant, "POST", `/v1/put?namespace=default&key=${key}&dtype=bytes`, data, { "idempotency-key": idem });
          if (r.status === 201) {
            const v = (JSON.parse(r.buf.toString()) as { version: number }).version;
            this.acked.push({ tenant, key, version: v, sha: createHash("sha256").update(data).digest("hex") });
            this.lastPutAck = performance.now();
            break;
          }
          if (r.status !== 0 && r.status < 500) break; // refused for good (never expected here)
          await new Promise((res) => setTimeout(res, 200));
        }
      } else if (op === 1) await this.#send(tenant, "GET", `/v1/get/default/${key}`);
      else if (op === 2) await this.#send(tenant, "POST", "/v1/search", JSON.stringify({ namespace: "default", prefix: `w${w}-`, limit: 5 }));
      else await this.#send(tenant, "POST", "/v1/serve", JSON.stringify({ namespace: "default", key }), { accept: "application/octet-stream" });
    }
  }
}

/** Runs one fault while the load runs: the statuses it saw, seconds until a put is acknowledged after the fault ended. */
async function fault(load: Load, name: string, apply: () => Promise<void>, end: () => Promise<void>): Promise<void> {
  if (!FAULTS.has(name)) return;
  const exited = () => ({ engine_exited: load.stack.engine.exited(), gateway_exited: load.stack.gateway.exited() });
  try {
    await waitFor(
      `a put acknowledged before ${name}`,
      () => (load.acked.length > 0 && performance.now() - load.lastPutAck < 2000) || load.stack.engine.exited() || load.stack.gateway.exited(),
      120_000,
    );
  } catch {
    /* reported below */
  }
  if (load.stack.engine.exited() || load.stack.gateway.exited() || performance.now() - load.lastPutAck >= 2000) {
    // an earlier fault took the service down: nothing to measure
    console.log(JSON.stringify({ fault: name, not_run: "the service was not serving before it", statuses: load.takeStatuses(), ...exited() }));
    return;
  }
  load.takeStatuses();
  await apply();
  await end();
  const ended = performance.now();
  let back: number | null = null;
  try {
    await waitFor(`a put acknowledged after ${name}`, () => load.lastPutAck > ended || load.stack.engine.exited() || load.stack.gateway.exited(), 120_000);
    back = load.lastPutAck > ended ? (load.lastPutAck - ended) / 1000 : null;
  } catch {
    back = null;
  }
  await new Promise((r) => setTimeout(r, 1000));
  const longest = Math.round(load.maxMs) / 1000;
  console.log(
    JSON.stringify({
      fault: name,
      longest_request_s: longest,
      statuses: load.takeStatuses(),
      back_after_s: back === null ? "never (within 120 s)" : Math.round(back * 100) / 100,
      ...exited(),
      loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
    }),
  );
}

/** Acknowledged writes that do not read back with their bytes, and the CUs the gateway counted against the audit log. */
async function verify(stack: Stack, acked: Ack[], label: string): Promise<void> {
  let lost = 0;
  for (const a of acked) {
    const r = await request(`${stack.gateway.url}/v1/serve`, {
      method: "POST",
      headers: { "x-api-key": stack.keys.get(a.tenant)!, "content-type": "application/json", accept: "application/octet-stream" },
      body: JSON.stringify({ namespace: "default", key: a.key, version: a.version }),
    });
    const b = Buffer.from(await r.body.arrayBuffer());
    if (r.statusCode !== 200 || createHash("sha256").update(b).digest("hex") !== a.sha) lost++;
  }
  // the verification reads are charged too: usage read after them, the audit log read after that
  const recorded = new Map<string, number>();
  const usage = new Map<string, number>();
  for (const id of TENANTS) {
    const r = await request(`${stack.gateway.url}/gate/admin/usage/${id}`, { headers: { authorization: `Bearer ${SERVICE_KEY}` } });
    usage.set(id, ((await r.body.json()) as { cus_used: number }).cus_used);
  }
  await new Promise((r) => setTimeout(r, 500));
  for (const line of readFileSync(stack.audit, "utf8").split("\n")) {
    if (!line) continue;
    const rec = JSON.parse(line) as { tenant_id: string; cus: number; path: string };
    if (rec.path.startsWith("/gate/")) continue;
    recorded.set(rec.tenant_id, (recorded.get(rec.tenant_id) ?? 0) + rec.cus);
  }
  let lostCus = 0;
  let doubleCus = 0;
  for (const id of TENANTS) {
    const d = Math.round(((usage.get(id) ?? 0) - (recorded.get(id) ?? 0)) * 10) / 10;
    if (d < 0) lostCus -= d;
    else doubleCus += d;
  }
  console.log(
    JSON.stringify({
      stack: label,
      acknowledged_writes: acked.length,
      acknowledged_writes_lost: lost,
      engine_exited: stack.engine.exited(),
      cus_recorded: Math.round([...recorded.values()].reduce((a, b) => a + b, 0) * 10) / 10,
      cus_counted: Math.round([...usage.values()].reduce((a, b) => a + b, 0) * 10) / 10,
      cus_lost: Math.round(lostCus * 10) / 10,
      cus_double_counted: Math.round(doubleCus * 10) / 10,
    }),
  );
}

const dir = mkdtempSync(join(tmpdir(), "svc-bench-faults-"));
let pg: PgCluster | null = null;
let redis: RedisProc | null = null;
const stacks: Stack[] = [];
try {
  const p = await startPgCluster();
  const r = await startRedisProc();
  if ("skip" in r) throw new Error(`bench/faults needs redis-server: ${r.skip}`);
  redis = r;
  if ("skip" in p) console.log(JSON.stringify({ skipped: "postgres", reason: p.skip }));
  else {
    pg = p;
    const stack = await startStack(join(dir, "pg"), { SVC_ENGINE_STORE_URL: pg.url }, redis);
    stacks.push(stack);
    const load = new Load(stack);
    load.start();
    const cluster = pg;
    const red = redis;
    await fault(
      load,
      "postgres_restart",
      () => cluster.restart(),
      async () => {},
    );
    await fault(
      load,
      "postgres_kill_9",
      () => cluster.kill(),
      async () => {
        await new Promise((res) => setTimeout(res, 3000));
        await cluster.start();
      },
    );
    await fault(
      load,
      "redis_sigstop_8s",
      async () => red.pause(),
      async () => {
        await new Promise((res) => setTimeout(res, 8000));
        red.resume();
      },
    );
    await fault(
      load,
      "redis_kill_9",
      () => red.kill(),
      async () => {
        await new Promise((res) => setTimeout(res, 3000));
        await red.start();
      },
    );
    await fault(
      load,
      "clients_leave_early",
      async () => {
        load.abortShare = 0.5;
      },
      async () => {
        await new Promise((res) => setTimeout(res, 5000));
        load.abortShare = 0;
      },
    );
    await load.stop();
    await verify(stack, load.acked, "postgres");
  }
  const disk = FAULTS.has("disk_full_10s") ? await mountSmallDisk(64) : { skip: "not asked for (SVC_BENCH_FAULTS)" };
  if ("skip" in disk) console.log(JSON.stringify({ skipped: "disk_full", reason: disk.skip }));
  else {
    try {
      const stack = await startStack(join(dir, "lmdb"), { SVC_ENGINE_DATA_DIR: join(disk.dir, "store") }, redis);
      stacks.push(stack);
      const load = new Load(stack);
      load.start();
      const fill = join(disk.dir, "fill");
      await fault(
        load,
        "disk_full_10s",
        async () => {
          for (let size = 64 * 1024 * 1024; size >= 4096;) {
            try {
              writeFileSync(fill, Buffer.alloc(size), { flag: "a" });
            } catch {
              size = Math.floor(size / 2);
            }
          }
        },
        async () => {
          await new Promise((res) => setTimeout(res, 10_000));
          rmSync(fill, { force: true });
        },
      );
      await load.stop();
      await verify(stack, load.acked, "lmdb");
    } finally {
      for (const s of stacks.splice(0)) {
        s.gateway.child.kill("SIGTERM");
        s.engine.child.kill("SIGTERM");
      }
      await new Promise((res) => setTimeout(res, 1000));
      await disk.destroy();
    }
  }
} finally {
  for (const s of stacks) {
    s.gateway.child.kill("SIGTERM");
    s.engine.child.kill("SIGTERM");
  }
  await redis?.destroy();
  await pg?.destroy();
  rmSync(dir, { recursive: true, force: true });
}
