// Abuse: how much one tenant's abuse costs another, on a real `svc up` (engine and gateway in
// one process, local files). For each pattern the victim tenant reads one entry in a loop, from
// its own loopback address and a process of its own, and the figure is the p50/p99/max of
// those GETs and how many took over 300 ms (a GET that takes more than 10 s is cut and counted
// as a timeout): no abuse; a filter bomb (a search whose $in
// lists 200,000 strings over 2,000 entries, two at a time); trickled uploads (160 octet-stream
// puts sending a byte every 2 s); an unauthenticated flood (3,000 requests with a 90 KB path,
// no key, 32 at a time: also the audit bytes it wrote); large concurrent bodies (four 100 MiB
// JSON puts and two 100 MiB octet-stream puts at once, on `svc up` and on an engine and a
// gateway as processes of their own: also each process's peak RSS). Then CUs lost per kill: eight clients of
// gets and puts, `kill -9` of svc up, a restart on the same directory, and the CUs of 2xx
// records in the audit log minus the usage the restarted gateway reports. Only the CLI and
// HTTP are used, so the same file measures any revision of the service. SVC_BENCH_PATTERNS
// (default "none,filter_bomb,trickle_upload,unauthenticated_flood,large_bodies,kill_9") narrows it.
//   node --import tsx bench/abuse.ts            (or: npm run bench -- abuse)
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { connect } from "node:net";
import { arch, cpus, loadavg, platform, tmpdir, totalmem } from "node:os";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Agent, request } from "undici";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const PATTERNS = new Set(
  (process.env.SVC_BENCH_PATTERNS ?? "none,filter_bomb,trickle_upload,unauthenticated_flood,large_bodies,kill_9").split(",").map((x) => x.trim()),
);
const MiB = 1024 * 1024;

const cpu = cpus()[0];
console.log(
  JSON.stringify({
    bench: "abuse",
    node: process.version,
    platform: `${platform()}-${arch()}`,
    cpu: cpu?.model ?? "unknown",
    cores: cpus().length,
    mem_gib: Math.round(totalmem() / 2 ** 30),
    loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
  }),
);

interface Stack {
  child: ChildProcess;
  gateway: string;
  key: string;
  dir: string;
}

async function startStack(dir: string): Promise<Stack> {
  const env: NodeJS.ProcessEnv = { ...process.env, SVC_ENGINE_LOG_LEVEL: "warn" };
  delete env.SVC_GATE_ENGINE_SERVICE_KEY;
  const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "bin/svc.ts"), "up", "--data", dir, "--port", "0", "--engine-port", "0"], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  const gateway = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    let url = "";
    rl.on("line", (l) => {
      const m = /^gateway:\s+(\S+)/.exec(l);
      if (m) url = m[1]!;
      if (l.startsWith("Ready.")) resolve(url);
    });
    child.once("exit", (c) => reject(new Error(`svc up exited ${c}: ${err}`)));
  });
  const key = (await readFile(join(dir, "service.key"), "utf8")).trim();
  return { child, gateway, key, dir };
}

/** `svc engine` and `svc gateway` as two processes (the gateway's own memory can be read). */
async function startSplit(dir: string): Promise<{ engine: ChildProcess; gateway: Stack }> {
  const key = "k".repeat(64);
  const run = (cmd: string, env: NodeJS.ProcessEnv, prefix: string) => {
    const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "bin/svc.ts"), cmd], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let err = "";
    child.stderr!.on("data", (d) => (err += d));
    const url = new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout! }).on("line", (l) => {
        if (l.startsWith(prefix)) resolve(l.slice(prefix.length).trim());
      });
      child.once("exit", (c) => reject(new Error(`svc ${cmd} exited ${c}: ${err}`)));
    });
    return { child, url };
  };
  const e = run(
    "engine",
    {
      SVC_ENGINE_HOST: "127.0.0.1",
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: key,
      SVC_ENGINE_REQUIRE_AUTH: "true",
      SVC_ENGINE_LOG_LEVEL: "warn",
    },
    "engine:",
  );
  const engineUrl = await e.url;
  const g = run(
    "gateway",
    {
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engineUrl,
      SVC_GATE_ENGINE_SERVICE_KEY: key,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
    },
    "gateway:",
  );
  return { engine: e.child, gateway: { child: g.child, gateway: await g.url, key, dir } };
}

async function stopStack(s: Stack, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (s.child.exitCode !== null || s.child.signalCode !== null) return;
  const done = new Promise<void>((r) => s.child.once("exit", () => r()));
  s.child.kill(signal);
  await done;
}

// Clients from three loopback addresses: a throttle per address must not confuse the victim
// with the flood.
// (undici's connect options do not pass localAddress on, so the socket is made here.)
const agentFrom = (addr: string) =>
  new Agent({
    connections: 256,
    connect: (o, cb) => {
      const sock = connect({ host: o.hostname, port: Number(o.port), localAddress: addr });
      sock.once("connect", () => cb(null, sock));
      sock.once("error", (e) => cb(e, null));
      return sock;
    },
  });
const VICTIM = agentFrom("127.0.0.2");
const ABUSER = agentFrom("127.0.0.1");
const FLOOD = agentFrom("127.0.0.3");

async function http(agent: Agent, url: string, opts: { method?: string; headers?: Record<string, string>; body?: string | Buffer; timeoutMs?: number } = {}) {
  const r = await request(url, {
    dispatcher: agent,
    method: (opts.method ?? (opts.body !== undefined ? "POST" : "GET")) as "GET",
    headers: opts.headers,
    body: opts.body,
    headersTimeout: opts.timeoutMs ?? 600_000,
    bodyTimeout: opts.timeoutMs ?? 600_000,
  });
  const text = await r.body.text();
  return { status: r.statusCode, headers: r.headers, text };
}

async function adminCall(s: Stack, path: string, body?: unknown) {
  const r = await http(ABUSER, s.gateway + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${s.key}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, json: JSON.parse(r.text) as Record<string, unknown> };
}

const tenantBody = (id: string) => ({ tenant_id: id, plan: "enterprise", monthly_quota: null, rate_limit: { requests: 1_000_000, window_s: 60 } });

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! * 10) / 10;
};

// The victim reads from a process of its own, as another tenant is another client: a probe on
// this process's event loop would also time this process's own work of sending the abuse (four
// 133 MiB JSON bodies and two 100 MiB octet bodies written by the same loop), which is not the
// service's. Its GETs run one after another, 50 ms apart, over one keep-alive connection from
// 127.0.0.2; each is cut at 10 s without a byte (a timeout). It reads for `minMs` and until its
// stdin ends, then prints [ms, status] per GET (status 0: cut, -1: failed).
const PROBE = `
import { Agent, request } from "node:http";
const [url, key, minMs] = process.argv.slice(1);
const agent = new Agent({ keepAlive: true, maxSockets: 1 });
let stop = false;
process.stdin.on("end", () => { stop = true; });
process.stdin.resume();
const get = () => new Promise((resolve) => {
  const t0 = performance.now();
  let done = false;
  const finish = (status) => { if (!done) { done = true; resolve([performance.now() - t0, status]); } };
  const req = request(url, { agent, localAddress: "127.0.0.2", headers: { "x-api-key": key }, timeout: 10000 }, (res) => {
    res.resume();
    res.on("end", () => finish(res.statusCode));
    res.on("error", () => finish(-1));
  });
  req.on("timeout", () => { req.destroy(); finish(0); });
  req.on("error", () => finish(-1));
  req.end();
});
const end = performance.now() + Number(minMs);
const out = [];
while (performance.now() < end || !stop) {
  out.push(await get());
  await new Promise((r) => setTimeout(r, 50));
}
agent.destroy();
process.stdout.write(JSON.stringify(out));
`;

/** The victim's GETs (PROBE) for `ms`, and on while `more()` says so. */
async function probe(s: Stack, key: string, ms: number, more: () => boolean = () => false) {
  const child = spawn(process.execPath, ["--input-type=module", "-e", PROBE, `${s.gateway}/v1/get/default/v`, key, String(ms)], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  const exited = new Promise<void>((r) => child.once("close", () => r()));
  const watch = setInterval(() => {
    if (!more()) {
      clearInterval(watch);
      child.stdin!.end();
    }
  }, 50);
  await exited;
  clearInterval(watch);
  const gets = JSON.parse(out) as [number, number][];
  const lat = gets.map(([t]) => t);
  const ok = gets.filter(([, st]) => st === 200).length;
  const timeouts = gets.filter(([, st]) => st === 0).length;
  return {
    victim_gets: lat.length,
    victim_ok: ok,
    victim_errors: gets.length - ok - timeouts,
    victim_timeouts: timeouts,
    p50_ms: pct(lat, 50),
    p99_ms: pct(lat, 99),
    max_ms: Math.round(Math.max(...lat)),
    over_300_ms: lat.filter((t) => t > 300).length,
  };
}

async function peakRss(pid: number): Promise<number> {
  const m = /VmHWM:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, "utf8"));
  return Math.round(Number(m![1]) / 1024);
}

function count(statuses: number[]): Record<string, number> {
  const c: Record<string, number> = {};
  for (const s of statuses) c[String(s)] = (c[String(s)] ?? 0) + 1;
  return c;
}

const f32b64 = (n: number, f: (i: number) => number) => {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = f(i);
  return Buffer.from(a.buffer).toString("base64");
};

const dir = await mkdtemp(join(tmpdir(), "svc-bench-abuse-"));
const stack = await startStack(dir);
const victim = (await adminCall(stack, "/gate/onboard/create", tenantBody("victim"))).json.api_key as string;
const abuser = (await adminCall(stack, "/gate/onboard/create", tenantBody("abuser"))).json.api_key as string;
const put = (key: string, k: string, extra: Record<string, unknown> = {}) =>
  http(ABUSER, `${stack.gateway}/v1/put`, {
    headers: { "x-api-key": key, "content-type": "application/json" },
    body: JSON.stringify({ namespace: "default", key: k, data_b64: f32b64(64, (i) => Math.sin(i / 7 + k.length)), dtype: "float32", shape: [64], ...extra }),
  });
const vput = await put(victim, "v");
if (vput.status !== 201) throw new Error(`victim put: ${vput.status} ${vput.text}`);

// No abuse.
if (PATTERNS.has("none")) console.log(JSON.stringify({ pattern: "none", ...(await probe(stack, victim, 3000)) }));

// Filter bomb.
if (PATTERNS.has("filter_bomb")) {
  const N = 2000;
  for (let i = 0; i < N; i += 16)
    await Promise.all(Array.from({ length: Math.min(16, N - i) }, (_, j) => put(abuser, `e${i + j}`, { metadata: { tag: `t${i + j}` } })));
  const list = Array.from({ length: 200_000 }, (_, i) => `x${i}`);
  list[199_999] = "t7";
  const body = JSON.stringify({ namespace: "default", filter: { tag: { $in: list } }, limit: 10 });
  let stop = false;
  const statuses: number[] = [];
  const bomb = async () => {
    while (!stop) {
      const r = await http(ABUSER, `${stack.gateway}/v1/search`, { headers: { "x-api-key": abuser, "content-type": "application/json" }, body }).catch(() => ({
        status: 0,
        text: "",
      }));
      statuses.push(r.status);
    }
  };
  const bombs = [bomb(), bomb()];
  await new Promise((r) => setTimeout(r, 500));
  const p = await probe(stack, victim, 6000);
  stop = true;
  await Promise.all(bombs);
  console.log(JSON.stringify({ pattern: "filter_bomb", entries: N, in_list: list.length, abuser_statuses: count(statuses), ...p }));
}

// Trickled uploads.
if (PATTERNS.has("trickle_upload")) {
  const u = new URL(stack.gateway);
  const statuses: number[] = [];
  const sockets = Array.from({ length: 160 }, (_, i) => {
    const s = connect(Number(u.port), u.hostname);
    s.on("error", () => undefined);
    s.once("data", (d: Buffer) => statuses.push(Number(d.toString("latin1").split(" ")[1])));
    s.once("connect", () =>
      s.write(
        `POST /v1/put?namespace=default&key=slow${i}&dtype=uint8&shape=1000000 HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${abuser}\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n`,
      ),
    );
    return s;
  });
  const drip = setInterval(() => {
    for (const s of sockets) if (!s.destroyed) s.write("A");
  }, 2000);
  await new Promise((r) => setTimeout(r, 1000));
  const p = await probe(stack, victim, 15_000);
  clearInterval(drip);
  for (const s of sockets) s.destroy();
  console.log(JSON.stringify({ pattern: "trickle_upload", uploads: sockets.length, answered_within_16s: count(statuses), ...p }));
}

// Unauthenticated flood.
if (PATTERNS.has("unauthenticated_flood")) {
  const audit = join(dir, "audit.jsonl");
  const before = (await stat(audit)).size;
  const path = "/v1/get/default/" + "p".repeat(90_000);
  const statuses: number[] = [];
  let sent = 0;
  const t0 = performance.now();
  const flood = (async () => {
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (sent < 3000) {
          sent++;
          const r = await http(FLOOD, stack.gateway + path).catch(() => ({ status: 0 }));
          statuses.push(r.status);
        }
      }),
    );
  })();
  const p = await probe(stack, victim, 3000);
  await flood;
  const secs = (performance.now() - t0) / 1000;
  const after = (await stat(audit)).size;
  console.log(
    JSON.stringify({
      pattern: "unauthenticated_flood",
      requests: statuses.length,
      seconds: Math.round(secs * 10) / 10,
      statuses: count(statuses),
      audit_bytes_written: after - before,
      ...p,
    }),
  );
}

// Large concurrent bodies: four 100 MiB JSON puts and two 100 MiB octet-stream puts at once
// (all-zero data) from one tenant, while another reads, on `svc up` (one process) and on
// `svc engine` + `svc gateway` (two processes); the peak RSS of each process is read. With
// SVC_BENCH_LARGE_TENANTS=4 each JSON put comes from a tenant of its own, so that the per-tenant
// share of the body budget refuses none of them and the gateway's whole budget is in use.
const LARGE_TENANTS = Number(process.env.SVC_BENCH_LARGE_TENANTS ?? "1");
async function largeBodies(layout: string, g: Stack, pids: Record<string, number>): Promise<void> {
  const sv = (await adminCall(g, "/gate/onboard/create", tenantBody("victim"))).json.api_key as string;
  const abusers: string[] = [];
  for (let i = 0; i < Math.max(1, LARGE_TENANTS); i++)
    abusers.push((await adminCall(g, "/gate/onboard/create", tenantBody(i === 0 ? "abuser" : `abuser${i}`))).json.api_key as string);
  const sa = abusers[0]!;
  const vp = await http(VICTIM, `${g.gateway}/v1/put`, {
    headers: { "x-api-key": sv, "content-type": "application/json" },
    body: JSON.stringify({ namespace: "default", key: "v", data_b64: f32b64(64, (i) => Math.sin(i / 7)), dtype: "float32", shape: [64] }),
  });
  if (vp.status !== 201) throw new Error(`victim put: ${vp.status} ${vp.text}`);
  const rssBefore: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) rssBefore[name] = await peakRss(pid);
  const n = (100 * MiB) / 4;
  const raw = Buffer.alloc(100 * MiB);
  const body = Buffer.from(JSON.stringify({ namespace: "default", key: "big", dtype: "float32", shape: [n], data_b64: raw.toString("base64") }));
  const statuses: Record<string, number[]> = { json: [], octet: [] };
  const details: Record<string, string> = {};
  const send = async (kind: "json" | "octet", i: number) => {
    const r =
      kind === "json"
        ? await http(ABUSER, `${g.gateway}/v1/put`, {
            headers: { "x-api-key": abusers[i % abusers.length]!, "content-type": "application/json" },
            body,
            timeoutMs: 600_000,
          }).catch((e: Error) => ({ status: 0, text: JSON.stringify({ detail: e.message }) }))
        : await http(ABUSER, `${g.gateway}/v1/put?namespace=default&key=oct${i}&dtype=float32&shape=${n}`, {
            headers: { "x-api-key": sa, "content-type": "application/octet-stream" },
            body: raw,
            timeoutMs: 600_000,
          }).catch((e: Error) => ({ status: 0, text: JSON.stringify({ detail: e.message }) }));
    statuses[kind]!.push(r.status);
    if (r.status >= 300 || r.status === 0) {
      try {
        details[`${kind} ${r.status}`] ??= String((JSON.parse(r.text) as { detail?: unknown }).detail);
      } catch {
        details[`${kind} ${r.status}`] ??= r.text.slice(0, 200);
      }
    }
  };
  let running = true;
  const puts = Promise.all([...Array.from({ length: 4 }, (_, i) => send("json", i)), ...Array.from({ length: 2 }, (_, i) => send("octet", i))]).finally(
    () => (running = false),
  );
  // the victim reads for as long as the puts run (at least 4 s)
  const t0 = performance.now();
  const p = await probe(g, sv, 4000, () => running);
  await puts;
  const rss: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) rss[name] = await peakRss(pid);
  console.log(
    JSON.stringify({
      pattern: "large_bodies",
      layout,
      json_tenants: abusers.length,
      json_bodies: 4,
      octet_bodies: 2,
      json_body_mib: Math.round(body.length / MiB),
      octet_body_mib: 100,
      statuses: { json: count(statuses.json!), octet: count(statuses.octet!) },
      details,
      peak_rss_mib_before: rssBefore,
      peak_rss_mib: rss,
      puts_s: Math.round((performance.now() - t0) / 100) / 10,
      loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
      ...p,
    }),
  );
}

if (PATTERNS.has("large_bodies")) {
  const up = await startStack(join(dir, "large-up"));
  await largeBodies("svc up", up, { svc_up: up.child.pid! });
  await stopStack(up);
  const split = await startSplit(join(dir, "split"));
  await largeBodies("engine + gateway", split.gateway, { gateway: split.gateway.child.pid!, engine: split.engine.pid! });
  await stopStack(split.gateway);
  split.engine.kill("SIGTERM");
  await new Promise((r) => split.engine.once("exit", r));
}

// CUs lost per kill -9.
if (PATTERNS.has("kill_9")) {
  const key = (await adminCall(stack, "/gate/onboard/create", tenantBody("billed"))).json.api_key as string;
  let stop = false;
  let ackedMilli = 0;
  const loop = async (c: number) => {
    for (let i = 0; !stop; i++) {
      try {
        const r = i % 4 === 0 ? await put(key, `k${c}-${i}`) : await http(ABUSER, `${stack.gateway}/v1/get/default/v`, { headers: { "x-api-key": key } });
        if (r.status >= 200 && r.status < 300) ackedMilli += Math.round(Number(r.headers["x-svc-cus"]) * 1000);
      } catch {
        return;
      }
    }
  };
  const loops = Array.from({ length: 8 }, (_, c) => loop(c));
  await new Promise((r) => setTimeout(r, 3000));
  await stopStack(stack, "SIGKILL");
  stop = true;
  await Promise.all(loops);
  const again = await startStack(dir);
  const usage = (await adminCall(again, "/gate/admin/usage/billed")).json;
  await stopStack(again);
  const lines = (await readFile(join(dir, "audit.jsonl"), "utf8")).split("\n").flatMap((l) => {
    try {
      return [JSON.parse(l) as { tenant_id: string; path: string; cus: number }];
    } catch {
      return [];
    }
  });
  const auditMilli = lines.filter((l) => l.tenant_id === "billed" && l.path.startsWith("/v1/")).reduce((s, l) => s + Math.round(l.cus * 1000), 0);
  const usageMilli = Math.round(Number(usage.cus_used) * 1000);
  console.log(
    JSON.stringify({
      pattern: "kill_9",
      acknowledged_cus: ackedMilli / 1000,
      audited_cus: auditMilli / 1000,
      metered_cus: usageMilli / 1000,
      cus_lost: (auditMilli - usageMilli) / 1000,
      acknowledged_not_metered_cus: Math.max(0, ackedMilli - usageMilli) / 1000,
    }),
  );
}

await stopStack(stack);
await rm(dir, { recursive: true, force: true });
await Promise.all([VICTIM.close(), ABUSER.close(), FLOOD.close()]);
