// Serving speed against the ceiling of this machine: a bare node:http server answering the same
// bytes from memory, measured in the same run. The engine (LMDB, and PostgreSQL for the GET),
// the gateway (in-memory registry) and the bare server run as child processes (this file with
// --role); the load comes from wrk (one thread), a process of its own, or from an undici Pool
// in a child process where wrk is missing. Every answer's status is checked, and every 64th
// body is compared byte for byte with the expected one (the bodies the engine answered once
// before the run); a figure with a wrong status or body is reported as such.
// Figures: requests per second at 32 connections and p50 at one connection for
//   meta      GET /v1/get/{ns}/{key} (a small entry's metadata) against bare sending that body
//   serve16k  POST /v1/serve, Accept: application/octet-stream, 16 KiB of bytes, against bare
//   serve1m   the same for 1 MiB
//   gateway   GET through the gateway against the engine directly
//   refused   the gateway's 429 (a tenant over its rate limit) against bare
//   put64k    POST /v1/put of 64 KiB of random bytes (octet-stream) to the engine, over 256 keys
//   pg        GET on a PostgreSQL-backed engine against the LMDB one
// SVC_BENCH_SECONDS (default 3) per figure after 1 s of warm-up; SVC_BENCH_SERVING narrows the
// run to some figures (comma-separated names above); SVC_BENCH_LOADGEN=undici forces the undici
// generator; SVC_BENCH_PROFILE=DIR writes a CPU profile of each server child there (node
// --cpu-prof, one sample every 100 us); SVC_BENCH_NODE_FLAGS passes more flags to the server
// children (for example --perf-basic-prof, for `perf record -p`); SVC_BENCH_ENGINE_LINK=tcp has
// the gateway reach the engine over TCP rather than its Unix socket. The machine may be shared:
// the load average is printed with the figures.
//   node --import tsx bench/serving.ts            (or: npm run bench -- serving)
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createServer } from "node:http";
import { readFileSync, writeSync } from "node:fs";
import { createInterface } from "node:readline";
import { mkdtemp, rm, writeFile, readFile } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { fileURLToPath, pathToFileURL } from "node:url";

const SECONDS = Number(process.env.SVC_BENCH_SECONDS) || 3;
const SERVICE_KEY = randomBytes(32).toString("hex");
const PG_SERVER = process.env.SVC_BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const LINK = process.env.SVC_BENCH_ENGINE_LINK === "tcp" ? "tcp" : "unix";
const WANTED = (process.env.SVC_BENCH_SERVING ?? "meta,serve16k,serve1m,gateway,refused,put64k,pg").split(",").map((s) => s.trim());
const role = process.argv.find((a) => a.startsWith("--role="))?.slice(7);

interface Case {
  method: "GET" | "POST";
  path: string;
  headers: Record<string, string>;
  /** Request body file (bytes sent as they are). */
  bodyFile?: string;
  status: number;
  /** Expected answer body file; absent: only the status is checked. */
  expectFile?: string;
  /** Appends `0`..`rotate-1` in turn to the path (distinct keys for puts). */
  rotate?: number;
}

interface LoadResult {
  requests: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
  wrong_status: number;
  compared: number;
  wrong_body: number;
  errors: number;
}
interface Row extends LoadResult {
  cpu_us_per_req: number | null;
  engine_cpu_us_per_req?: number | null;
}

/** CPU seconds (user + system, all threads) a process has used so far; null off Linux. */
function cpuSeconds(pid: number | undefined): number | null {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100; // utime + stime in clock ticks (USER_HZ = 100)
  } catch {
    return null;
  }
}

/** A server child says where it listens on fd 3; its stdout (the logs) goes to /dev/null. */
function tell(url: string): void {
  writeSync(3, JSON.stringify({ url }) + "\n");
}

/** The undici generator: `connections` requests in flight for 1 s of warm-up then SECONDS. */
async function undiciLoad(url: string, connections: number, c: Case): Promise<LoadResult> {
  const { Pool } = await import("undici");
  const body = c.bodyFile ? await readFile(c.bodyFile) : undefined;
  const expect = c.expectFile ? await readFile(c.expectFile) : undefined;
  const pool = new Pool(url, { connections, pipelining: 1 });
  const lat: number[] = [];
  let wrong_status = 0,
    compared = 0,
    wrong_body = 0,
    errors = 0,
    n = 0;
  let measuring = false,
    stopAt = 0;
  const worker = async () => {
    while (Date.now() < stopAt) {
      const t0 = process.hrtime.bigint();
      try {
        const path = c.rotate ? `${c.path}${n % c.rotate}` : c.path;
        const r = await pool.request({ method: c.method, path, headers: c.headers, body });
        if (r.statusCode !== c.status) wrong_status++;
        if (expect && n % 64 === 0) {
          compared++;
          if (!Buffer.from(await r.body.arrayBuffer()).equals(expect)) wrong_body++;
        } else await r.body.dump();
      } catch {
        errors++;
      }
      n++;
      if (measuring) lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  };
  stopAt = Date.now() + 1000;
  await Promise.all(Array.from({ length: connections }, worker));
  measuring = true;
  const start = Date.now();
  stopAt = start + SECONDS * 1000;
  await Promise.all(Array.from({ length: connections }, worker));
  const elapsed = (Date.now() - start) / 1000;
  await pool.close();
  lat.sort((a, b) => a - b);
  const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] ?? NaN;
  return { requests: lat.length, rps: Math.round(lat.length / elapsed), p50_ms: r3(q(0.5)), p99_ms: r3(q(0.99)), wrong_status, compared, wrong_body, errors };
}

function r3(x: number): number {
  return Math.round(x * 1000) / 1000;
}

const lua = (s: string) => JSON.stringify(s); // a JSON string literal is a valid Lua string literal for these (ASCII, no control characters)

/** wrk's script: the request, and per thread the answers counted, statuses checked and every 64th body compared. */
function wrkScript(c: Case): string {
  const headers = Object.entries(c.headers)
    .map(([k, v]) => `wrk.headers[${lua(k)}] = ${lua(v)}`)
    .join("\n");
  return `
wrk.method = ${lua(c.method)}
${headers}
local function slurp(p) local f = assert(io.open(p, "rb")); local s = f:read("*a"); f:close(); return s end
${c.bodyFile ? `wrk.body = slurp(${lua(c.bodyFile)})` : ""}
local expect = ${c.expectFile ? `slurp(${lua(c.expectFile)})` : "nil"}
${
  c.rotate
    ? `local seq = 0
function request()
  seq = seq + 1
  return wrk.format(nil, ${lua(c.path)} .. (seq % ${c.rotate}))
end`
    : ""
}
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) n = 0; wrong_status = 0; compared = 0; wrong_body = 0 end
function response(status, headers, body)
  n = n + 1
  if status ~= ${c.status} then wrong_status = wrong_status + 1 end
  if expect and n % 64 == 1 then
    compared = compared + 1
    if body ~= expect then wrong_body = wrong_body + 1 end
  end
end
function done(summary, latency, requests)
  local ws, cmp, wb = 0, 0, 0
  for _, t in ipairs(threads) do ws = ws + t:get("wrong_status"); cmp = cmp + t:get("compared"); wb = wb + t:get("wrong_body") end
  local e = summary.errors
  io.write(string.format('RESULT {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"wrong_status":%d,"compared":%d,"wrong_body":%d,"errors":%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), ws, cmp, wb, e.connect + e.read + e.write + e.timeout))
end
`;
}

const haveWrk = process.env.SVC_BENCH_LOADGEN !== "undici" && spawnSync("wrk", ["--version"]).error === undefined;

async function wrkLoad(dir: string, url: string, connections: number, c: Case, pids: Array<number | undefined>): Promise<Row> {
  const script = join(dir, `wrk-${randomBytes(4).toString("hex")}.lua`);
  await writeFile(script, wrkScript(c), { mode: 0o600 });
  const run = async (seconds: number) => {
    const p = spawn("wrk", ["-t1", `-c${connections}`, `-d${seconds}s`, "--timeout", "30s", "-s", script, url + c.path], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    p.stdout.on("data", (d: Buffer) => (out += d.toString()));
    await new Promise((r) => p.once("exit", r));
    const line = out.split("\n").find((l) => l.startsWith("RESULT "));
    if (!line) throw new Error(`wrk gave no result: ${out.slice(-500)}`);
    return JSON.parse(line.slice(7)) as {
      requests: number;
      duration_us: number;
      p50_us: number;
      p99_us: number;
      wrong_status: number;
      compared: number;
      wrong_body: number;
      errors: number;
    };
  };
  await run(1);
  const cpu0 = pids.map(cpuSeconds);
  const r = await run(SECONDS);
  const cpu = pids.map((p, i) => {
    const a = cpu0[i],
      b = cpuSeconds(p);
    return a === null || b === null || r.requests === 0 ? null : Math.round(((b - a) / r.requests) * 1e6);
  });
  return {
    cpu_us_per_req: cpu[0] ?? null,
    ...(pids.length > 1 ? { engine_cpu_us_per_req: cpu[1] ?? null } : {}),
    requests: r.requests,
    rps: Math.round(r.requests / (r.duration_us / 1e6)),
    p50_ms: r3(r.p50_us / 1000),
    p99_ms: r3(r.p99_us / 1000),
    wrong_status: r.wrong_status,
    compared: r.compared,
    wrong_body: r.wrong_body,
    errors: r.errors,
  };
}

async function undiciChild(url: string, connections: number, c: Case, pids: Array<number | undefined>): Promise<Row> {
  const cpu0 = pids.map(cpuSeconds);
  const p = spawn(process.execPath, ["--import", "tsx", fileURLToPath(import.meta.url), "--role=loadgen"], {
    env: { ...process.env, SVC_BENCH_LOAD: JSON.stringify({ url, connections, c }) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: p.stdout! }).once("line", resolve);
    p.once("exit", (code) => reject(new Error(`load generator exited with ${code}`)));
  });
  const r = JSON.parse(line) as LoadResult;
  // the warm-up second is counted here too: the CPU figure is over all requests sent
  const cpu = pids.map((p, i) => {
    const a = cpu0[i],
      b = cpuSeconds(p);
    return a === null || b === null || r.requests === 0 ? null : Math.round(((b - a) / r.requests) * 1e6);
  });
  return { ...r, cpu_us_per_req: cpu[0] ?? null, ...(pids.length > 1 ? { engine_cpu_us_per_req: cpu[1] ?? null } : {}) };
}

interface Child {
  url: string;
  proc: ChildProcess;
}

// The engine and the gateway run as users run them: the JavaScript that `npm install` compiles
// into dist/ (compiled again here before the run, so the figures are of the sources in the
// tree), with plain node. SVC_BENCH_SOURCES=1 runs the TypeScript sources through tsx instead,
// which adds the loader's work to every request (tsx keeps function names with a helper call
// per closure made).
const FROM_SOURCES = process.env.SVC_BENCH_SOURCES === "1";
const ROOT = fileURLToPath(new URL("..", import.meta.url));

function compileProduct(): void {
  const r = spawnSync(process.execPath, [join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", join(ROOT, "tsconfig.json")], { stdio: "inherit" });
  if (r.status !== 0) throw new Error("tsc -p tsconfig.json failed: the servers cannot be compiled into dist/.");
}

/** Code for `node -e` that starts a compiled server and tells its URL on fd 3. */
function distStarter(r: "engine" | "gateway"): string {
  const m = (f: string) => JSON.stringify(pathToFileURL(join(ROOT, "dist", "server", r, f)).href);
  const [load, start] = r === "engine" ? ["loadEngineConfig", "startEngine"] : ["loadGatewayConfig", "startGateway"];
  return [
    `import { writeSync } from "node:fs";`,
    `const { ${load} } = await import(${m("config.js")});`,
    `const { ${start} } = await import(${m("server.js")});`,
    `const s = await ${start}(${load}(process.env));`,
    `writeSync(3, JSON.stringify({ url: s.url }) + "\\n");`,
    `process.once("SIGTERM", () => void s.close().then(() => process.exit(0)));`,
  ].join("\n");
}

async function child(r: string, env: Record<string, string>): Promise<Child> {
  const prof = process.env.SVC_BENCH_PROFILE ? ["--cpu-prof", "--cpu-prof-interval=100", `--cpu-prof-dir=${join(process.env.SVC_BENCH_PROFILE, r)}`] : [];
  const compiled = !FROM_SOURCES && (r === "engine" || r === "gateway");
  const args = compiled ? ["--input-type=module", "-e", distStarter(r)] : ["--import", "tsx", fileURLToPath(import.meta.url), `--role=${r}`];
  const extra = process.env.SVC_BENCH_NODE_FLAGS ? process.env.SVC_BENCH_NODE_FLAGS.split(" ") : [];
  const proc = spawn(process.execPath, [...extra, ...prof, ...args], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ["ignore", "ignore", "inherit", "pipe"],
  });
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: proc.stdio[3] as NodeJS.ReadableStream }).once("line", (l) => resolve((JSON.parse(l) as { url: string }).url));
    proc.once("exit", (code) => reject(new Error(`${r} exited with ${code}`)));
  });
  return { url, proc };
}

async function stop(c: Child): Promise<void> {
  if (c.proc.exitCode !== null) return;
  const done = new Promise((r) => c.proc.once("exit", r));
  c.proc.kill("SIGTERM");
  await done;
}

async function pgAdmin(sql: string): Promise<void> {
  const pg = (await import("pg")).default;
  const c = new pg.Client({ connectionString: PG_SERVER });
  c.on("error", () => undefined);
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

async function main() {
  if (!FROM_SOURCES) compileProduct();
  const dir = await mkdtemp(join(tmpdir(), "svc-bench-serving-"));
  const children: Child[] = [];
  const pgDb = `svc_bench_serving_${randomBytes(4).toString("hex")}`;
  let pgCreated = false;
  const file = async (name: string, bytes: Buffer | string) => {
    const p = join(dir, name);
    await writeFile(p, bytes, { mode: 0o600 });
    return p;
  };
  try {
    // SVC_ENGINE_* settings of this process reach the engines (a cache size, a budget); the
    // bench's own address, port, directory, key and log level win
    const passed = Object.fromEntries(Object.entries(process.env).filter(([k, v]) => k.startsWith("SVC_ENGINE_") && v !== undefined)) as Record<string, string>;
    const engineEnv = (extra: Record<string, string>) => ({
      ...passed,
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: SERVICE_KEY,
      // the access log is part of the request path being measured: on, written to /dev/null
      SVC_ENGINE_LOG_LEVEL: "info",
      ...extra,
    });
    // the gateway reaches the engine as svc up has it reach it: over the engine's Unix socket
    // (SVC_BENCH_ENGINE_LINK=tcp: over its TCP port instead)
    const socketPath = LINK === "unix" ? join(dir, "engine.sock") : "";
    const engine = await child("engine", engineEnv({ SVC_ENGINE_SOCKET: socketPath }));
    children.push(engine);
    const direct = { authorization: `Bearer ${SERVICE_KEY}`, "x-svc-tenant": "bench" };
    const put = async (url: string, key: string, bytes: Buffer) => {
      const r = await fetch(`${url}/v1/put?namespace=default&key=${key}`, {
        method: "POST",
        headers: { ...direct, "content-type": "application/octet-stream" },
        body: bytes,
      });
      if (r.status !== 201) throw new Error(`seeding ${key}: ${r.status} ${await r.text()}`);
    };
    await put(engine.url, "m", randomBytes(1024));
    await put(engine.url, "b16k", randomBytes(16 * 1024));
    await put(engine.url, "b1m", randomBytes(1024 * 1024));
    const fetchBody = async (url: string, init: RequestInit) => {
      const r = await fetch(url, init);
      if (r.status !== 200) throw new Error(`${url}: ${r.status}`);
      return { body: Buffer.from(await r.arrayBuffer()), type: r.headers.get("content-type")! };
    };
    const serveInit = (key: string): RequestInit => ({
      method: "POST",
      headers: { ...direct, "content-type": "application/json", accept: "application/octet-stream" },
      body: JSON.stringify({ namespace: "default", key }),
    });
    const meta = await fetchBody(`${engine.url}/v1/get/default/m`, { headers: direct });
    const s16 = await fetchBody(`${engine.url}/v1/serve`, serveInit("b16k"));
    const s1m = await fetchBody(`${engine.url}/v1/serve`, serveInit("b1m"));
    const metaFile = await file("meta.json", meta.body),
      s16File = await file("s16k.bin", s16.body),
      s1mFile = await file("s1m.bin", s1m.body);
    const bare = await child("bare", {
      SVC_BENCH_BARE: JSON.stringify({
        "/meta": { file: metaFile, type: meta.type },
        "/s16k": { file: s16File, type: s16.type },
        "/s1m": { file: s1mFile, type: s1m.type },
      }),
    });
    children.push(bare);

    const gateway = await child("gateway", {
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: LINK === "unix" ? `unix:${socketPath}` : engine.url,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
    });
    children.push(gateway);
    const onboard = async (tenant_id: string, rate_limit: { requests: number; window_s: number }) => {
      const r = await fetch(gateway.url + "/gate/onboard/create", {
        method: "POST",
        headers: { authorization: `Bearer ${SERVICE_KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ tenant_id, plan: "enterprise", monthly_quota: 1e12, rate_limit }),
      });
      if (r.status !== 201 && r.status !== 200) throw new Error(`onboarding ${tenant_id}: ${r.status} ${await r.text()}`);
      return ((await r.json()) as { api_key: string }).api_key;
    };
    const benchKey = await onboard("bench", { requests: 100_000_000, window_s: 1 });
    const limitedKey = await onboard("limited", { requests: 1, window_s: 86_400 });
    // the limited tenant's one allowed request, so that every timed one is refused
    await (await fetch(gateway.url + "/v1/get/default/m", { headers: { "x-api-key": limitedKey } })).arrayBuffer();

    let pgEngine: Child | null = null;
    if (WANTED.includes("pg")) {
      try {
        await pgAdmin(`CREATE DATABASE ${pgDb}`);
        pgCreated = true;
        const u = new URL(PG_SERVER);
        u.pathname = `/${pgDb}`;
        pgEngine = await child("engine", engineEnv({ SVC_ENGINE_STORE_URL: u.toString() }));
        children.push(pgEngine);
        await put(pgEngine.url, "m", randomBytes(1024));
      } catch (e) {
        console.log(`# PostgreSQL figures skipped: ${(e as Error).message}`);
        pgEngine = null;
      }
    }
    const pgMetaFile = pgEngine ? await file("pg-meta.json", (await fetchBody(`${pgEngine.url}/v1/get/default/m`, { headers: direct })).body) : null;
    const putFile = await file("put64k.bin", randomBytes(64 * 1024));
    const serveBodyFile = async (key: string) => file(`serve-${key}.json`, JSON.stringify({ namespace: "default", key }));

    const measure = async (target: Child, connections: number, c: Case) => {
      const pids = target === gateway ? [gateway.proc.pid, engine.proc.pid] : [target.proc.pid];
      return haveWrk ? wrkLoad(dir, target.url, connections, c, pids) : undiciChild(target.url, connections, c, pids);
    };
    const out: Record<string, Row> = {};
    const row = (name: string, connections: number, r: Row) => {
      out[`${name}@${connections}`] = r;
      const ok = r.requests > 0 && r.wrong_status === 0 && r.wrong_body === 0 && r.errors === 0;
      console.log(JSON.stringify({ bench: "serving", figure: name, connections, ...r, answers_checked: ok ? "ok" : "WRONG" }));
    };
    const pair = async (name: string, targets: Array<[string, Child, Case]>) => {
      for (const conns of [32, 1]) for (const [label, target, c] of targets) row(`${name}:${label}`, conns, await measure(target, conns, c));
    };
    const ratio = (figure: string, a: string, b: string) => {
      const x = out[`${a}@32`],
        y = out[`${b}@32`],
        x1 = out[`${a}@1`],
        y1 = out[`${b}@1`];
      if (!x || !y) return;
      const cpu = x.cpu_us_per_req !== null && y.cpu_us_per_req !== null ? { cpu_per_req_ratio_32: r3(x.cpu_us_per_req / y.cpu_us_per_req) } : {};
      console.log(
        JSON.stringify({
          bench: "serving",
          figure,
          of: a,
          to: b,
          rps_ratio_32: r3(x.rps / y.rps),
          ...cpu,
          ...(x1 && y1 ? { p50_added_ms_1: r3(x1.p50_ms - y1.p50_ms) } : {}),
        }),
      );
    };

    const getCase = (headers: Record<string, string>, expectFile: string | undefined, status = 200): Case => ({
      method: "GET",
      path: "/v1/get/default/m",
      headers,
      status,
      ...(expectFile ? { expectFile } : {}),
    });
    if (WANTED.includes("meta"))
      await pair("meta", [
        ["bare", bare, { method: "GET", path: "/meta", headers: {}, status: 200, expectFile: metaFile }],
        ["engine", engine, getCase(direct, metaFile)],
      ]);
    if (WANTED.includes("serve16k")) {
      const body = await serveBodyFile("b16k");
      await pair("serve16k", [
        ["bare", bare, { method: "GET", path: "/s16k", headers: {}, status: 200, expectFile: s16File }],
        [
          "engine",
          engine,
          {
            method: "POST",
            path: "/v1/serve",
            headers: { ...direct, "content-type": "application/json", accept: "application/octet-stream" },
            bodyFile: body,
            status: 200,
            expectFile: s16File,
          },
        ],
      ]);
    }
    if (WANTED.includes("serve1m")) {
      const body = await serveBodyFile("b1m");
      await pair("serve1m", [
        ["bare", bare, { method: "GET", path: "/s1m", headers: {}, status: 200, expectFile: s1mFile }],
        [
          "engine",
          engine,
          {
            method: "POST",
            path: "/v1/serve",
            headers: { ...direct, "content-type": "application/json", accept: "application/octet-stream" },
            bodyFile: body,
            status: 200,
            expectFile: s1mFile,
          },
        ],
      ]);
    }
    if (WANTED.includes("gateway")) {
      // the gateway's answer adds headers but the body is the engine's
      await pair("gateway", [
        ["engine", engine, getCase(direct, metaFile)],
        ["gateway", gateway, getCase({ "x-api-key": benchKey }, metaFile)],
      ]);
    }
    if (WANTED.includes("refused"))
      await pair("refused", [
        ["bare", bare, { method: "GET", path: "/meta", headers: {}, status: 200 }],
        ["gateway", gateway, getCase({ "x-api-key": limitedKey }, undefined, 429)],
      ]);
    if (WANTED.includes("put64k"))
      await pair("put64k", [
        [
          "engine",
          engine,
          {
            method: "POST",
            path: "/v1/put?namespace=default&key=p",
            rotate: 256,
            headers: { ...direct, "content-type": "application/octet-stream" },
            bodyFile: putFile,
            status: 201,
          },
        ],
      ]);
    if (WANTED.includes("pg") && pgEngine && pgMetaFile)
      await pair("pg", [
        ["lmdb", engine, getCase(direct, metaFile)],
        ["postgres", pgEngine, getCase(direct, pgMetaFile)],
      ]);

    ratio("engine_vs_bare", "meta:engine", "meta:bare");
    ratio("engine_vs_bare", "serve16k:engine", "serve16k:bare");
    ratio("engine_vs_bare", "serve1m:engine", "serve1m:bare");
    ratio("gateway_vs_engine", "gateway:gateway", "gateway:engine");
    ratio("refused_vs_bare", "refused:gateway", "refused:bare");
    ratio("postgres_vs_lmdb", "pg:postgres", "pg:lmdb");
    const cpu = cpus();
    console.log(
      `# serving bench: node ${process.version}, ${cpu[0]?.model ?? "cpu"} x ${cpu.length}, load generator ${haveWrk ? "wrk -t1" : "undici Pool (child process)"}, servers ${FROM_SOURCES ? "from the TypeScript sources (tsx)" : "compiled (dist/)"}, gateway to engine over ${LINK === "unix" ? "a Unix socket" : "TCP"}, ${SECONDS} s per figure after 1 s warm-up, access logs on (to /dev/null), load average ${loadavg()
        .map((x) => x.toFixed(2))
        .join(" ")}`,
    );
  } finally {
    for (const c of children.reverse()) await stop(c);
    if (pgCreated) await pgAdmin(`DROP DATABASE IF EXISTS ${pgDb} WITH (FORCE)`).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
}

if (role === "engine") {
  const { loadEngineConfig } = await import("../server/engine/config.js");
  const { startEngine } = await import("../server/engine/server.js");
  const e = await startEngine(loadEngineConfig(process.env));
  tell(e.url);
  process.once("SIGTERM", () => void e.close().then(() => process.exit(0)));
} else if (role === "gateway") {
  const { loadGatewayConfig } = await import("../server/gateway/config.js");
  const { startGateway } = await import("../server/gateway/server.js");
  const g = await startGateway(loadGatewayConfig(process.env));
  tell(g.url);
  process.once("SIGTERM", () => void g.close().then(() => process.exit(0)));
} else if (role === "bare") {
  // the ceiling: the answers the engine gave, from memory, with the same content types
  const files = JSON.parse(process.env.SVC_BENCH_BARE!) as Record<string, { file: string; type: string }>;
  const bodies = new Map<string, { body: Buffer; type: string }>();
  for (const [path, f] of Object.entries(files)) bodies.set(path, { body: await readFile(f.file), type: f.type });
  const server = createServer((req, res) => {
    const b = bodies.get(req.url!);
    req.resume();
    req.on("end", () => {
      if (!b) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { "content-type": b.type, "content-length": b.body.byteLength });
      res.end(b.body);
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, "127.0.0.1", () => tell(`http://127.0.0.1:${(server.address() as { port: number }).port}`));
  process.once("SIGTERM", () => process.exit(0));
} else if (role === "loadgen") {
  const { url, connections, c } = JSON.parse(process.env.SVC_BENCH_LOAD!) as { url: string; connections: number; c: Case };
  process.stdout.write(JSON.stringify(await undiciLoad(url, connections, c)) + "\n");
} else {
  await main();
}
