// Benchmarks of the provenance appliance. Prints the backend/machine line first, then one
// JSON object per figure:
//   sign / verify          raw ML-DSA-65 operations per second, per backend
//   receipt_verify         the six checks on one receipt (canonicalisation + verify), per backend
//   http_issue             receipts/s through POST /v1/provenance/exact of a real appliance
//                          (child process, durable chain log, receipts built in a worker thread),
//                          liboqs and noble, with the server's CPU time per receipt: all threads,
//                          the main thread (HTTP, validation) and the receipt worker (the chain's
//                          critical section: canonical body, ML-DSA-65, hash), and the load
//                          generator's own CPU time per request (it shares the machine)
//   http_verify            verifications/s through POST /v1/provenance/verify, with the server's
//                          CPU time per verification and the rate one free core would allow
// Names on the command line pick figures and/or backends (default: all):
//   node --import tsx bench/provenance.ts http_issue liboqs
// Environment: SVC_BENCH_SECONDS per figure (default 2), SVC_BENCH_CONCURRENCY (default 32),
// SVC_BENCH_WARMUP_SECONDS (default 1): unmeasured load before each HTTP figure, so that the
// figure is the steady state and not the server's and the client's JIT warm-up.
// Every phase is bounded in time; the temporary home is removed.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { Pool } from "undici";
import { artifactDigest, buildReceipt, signedMessage, verifyReceipt } from "../server/provenance/receipt.js";
import { createBackend, createSigner, type BackendName } from "../server/provenance/signer.js";
import { isDeepStrictEqual } from "node:util";
import { readJson } from "../server/http/json.js";

const SECONDS = Number(process.env.SVC_BENCH_SECONDS ?? 2);
const CONCURRENCY = Number(process.env.SVC_BENCH_CONCURRENCY ?? 32);
const WARMUP_SECONDS = Number(process.env.SVC_BENCH_WARMUP_SECONDS ?? 1);
const FIGURES = ["sign", "verify", "receipt_verify", "json_read", "http_issue", "http_verify"];
const BACKENDS: BackendName[] = ["liboqs", "noble"];
const args = process.argv.slice(2);
const unknownArg = args.find((a) => !FIGURES.includes(a) && !(BACKENDS as string[]).includes(a));
if (unknownArg) {
  console.error(`Unknown figure or backend ${unknownArg}; available: ${[...FIGURES, ...BACKENDS].join(", ")}.`);
  process.exit(2);
}
const wantFigures = args.filter((a) => FIGURES.includes(a));
const wantBackends = args.filter((a) => (BACKENDS as string[]).includes(a)) as BackendName[];
const on = (figure: string) => wantFigures.length === 0 || wantFigures.includes(figure);
const backendOn = (b: BackendName) => wantBackends.length === 0 || wantBackends.includes(b);
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o));
const r1 = (x: number) => Math.round(x * 10) / 10;
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? 0;
};

const backends: Record<BackendName, Awaited<ReturnType<typeof createBackend>>> = {
  liboqs: await createBackend("liboqs"),
  noble: await createBackend("noble"),
};
emit({
  bench: "provenance",
  backends: Object.fromEntries(Object.values(backends).map((b) => [b.name, b.version])),
  algorithm: "ML-DSA-65",
  node: process.version,
  cpus: cpus().length,
  cpu: cpus()[0]?.model ?? "unknown",
  mem_gib: Math.round(totalmem() / 2 ** 30),
  // other work on the machine skews every figure: record how busy it was
  loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
  seconds: SECONDS,
  warmup_seconds: WARMUP_SECONDS,
  concurrency: CONCURRENCY,
});

/** Calls fn repeatedly for `seconds`; returns operations per second. */
function rate(fn: () => void, seconds = SECONDS): { ops: number; per_s: number } {
  const end = performance.now() + seconds * 1000;
  let n = 0;
  const start = performance.now();
  while (performance.now() < end) {
    fn();
    n++;
  }
  return { ops: n, per_s: r1(n / ((performance.now() - start) / 1000)) };
}

const artifact = { name: "model.safetensors", ...artifactDigest(Buffer.from("x")), media_type: "application/octet-stream" };
for (const b of Object.values(backends)) {
  if (!backendOn(b.name) || !(on("sign") || on("verify") || on("receipt_verify"))) continue;
  const signer = createSigner(b, b.generateKeyPair());
  const receipt = buildReceipt({ artifact, claims: { run: "bench", step: 1 } }, { serial: 1, previous: null }, signer, new Date());
  const msg = signedMessage(receipt);
  const sig = Buffer.from(receipt.signature.value, "base64");
  if (on("sign")) {
    const s = rate(() => signer.sign(msg));
    emit({ figure: "sign", backend: b.name, message_bytes: msg.length, ops: s.ops, per_s: s.per_s });
  }
  if (on("verify")) {
    const v = rate(() => b.verify(msg, sig, signer.publicKey));
    emit({ figure: "verify", backend: b.name, message_bytes: msg.length, ops: v.ops, per_s: v.per_s });
  }
  if (on("receipt_verify")) {
    const opts = { backend: b, keys: [{ publicKey: signer.publicKey, fingerprint: signer.fingerprint }], trustedFingerprints: [signer.fingerprint] };
    const rv = rate(() => {
      if (!verifyReceipt(receipt, opts).valid) throw new Error("receipt did not verify");
    });
    emit({ figure: "receipt_verify", backend: b.name, ops: rv.ops, per_s: rv.per_s });
  }
}

// The I-JSON reader against JSON.parse on the bodies the appliance reads: a /verify body with
// a typical receipt, and an issuance body with 64 KiB of mixed claims. Rounds alternate so
// that load on the machine falls on both alike; the value read must equal JSON.parse's. The
// reader is JSON.parse plus a scan of the text for I-JSON problems.
if (on("json_read")) {
  const b = backends.liboqs;
  const signer = createSigner(b, b.generateKeyPair());
  const receipt = buildReceipt({ artifact, claims: { run: "bench", step: 1 } }, { serial: 1, previous: null }, signer, new Date());
  const claims: Record<string, unknown> = {};
  for (let i = 0; JSON.stringify(claims).length < 60 * 1024; i++)
    claims[`k${i}`] = { n: i, f: i / 7, s: `value ${i} \u00e9`, b: i % 2 === 0, z: null, a: [i, i + 1] };
  const bodies: Array<[string, string]> = [
    ["verify_body", JSON.stringify({ receipt })],
    ["issue_body_64k_claims", JSON.stringify({ artifact, claims })],
  ];
  for (const [name, text] of bodies) {
    const r = readJson(text);
    const same = r.problem === null && isDeepStrictEqual(r.value, JSON.parse(text));
    const strict: number[] = [];
    const plain: number[] = [];
    for (let round = 0; round < 6; round++) {
      strict.push(rate(() => readJson(text), SECONDS / 6).per_s);
      plain.push(rate(() => JSON.parse(text), SECONDS / 6).per_s);
    }
    // the best round of each: the one least disturbed by other work on the machine
    emit({
      figure: "json_read",
      body: name,
      bytes: text.length,
      same_value_as_json_parse: same,
      strict_us: r1(1e6 / Math.max(...strict)),
      json_parse_us: r1(1e6 / Math.max(...plain)),
    });
  }
}

/** CPU seconds (user + system) from a /proc stat file; null where there is none. */
function statSeconds(path: string): number | null {
  try {
    const f = readFileSync(path, "utf8");
    const rest = f.slice(f.lastIndexOf(")") + 2).split(" ");
    return (Number(rest[11]) + Number(rest[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
  } catch {
    return null;
  }
}

/** CPU seconds of a process in all, and per thread (by thread id), from /proc. */
function cpuSeconds(pid: number): { total: number; threads: Map<string, number> } | null {
  const total = statSeconds(`/proc/${pid}/stat`);
  if (total === null) return null;
  const threads = new Map<string, number>();
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const t = statSeconds(`/proc/${pid}/task/${tid}/stat`);
      if (t !== null) threads.set(tid, t);
    }
  } catch {
    /* threads unknown: only the total is reported */
  }
  return { total, threads };
}

/**
 * Milliseconds of server CPU per request between two samples: all threads, the main
 * thread, and the busiest other thread (the receipt worker when issuing); and the load
 * generator's (this process's) CPU per request.
 */
function cpuPerRequest(
  pid: number,
  a: ReturnType<typeof cpuSeconds>,
  b: ReturnType<typeof cpuSeconds>,
  client: NodeJS.CpuUsage,
  n: number,
): Record<string, number | null> {
  const ms = (s: number) => Math.round((s * 1e6) / n) / 1000;
  if (!a || !b || n === 0) return { server_cpu_ms: null };
  const d = (tid: string) => (b.threads.get(tid) ?? 0) - (a.threads.get(tid) ?? 0);
  const others = [...b.threads.keys()].filter((t) => t !== String(pid)).map(d);
  return {
    server_cpu_ms: ms(b.total - a.total),
    main_thread_ms: b.threads.size ? ms(d(String(pid))) : null,
    busiest_other_thread_ms: others.length ? ms(Math.max(...others)) : null,
    client_cpu_ms: ms((client.user + client.system) / 1e6),
  };
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

async function load(
  pool: Pool,
  path: string,
  body: string,
  token: string | null,
  expect: number,
  seconds = SECONDS,
): Promise<{ ok: number; per_s: number; p50_ms: number; p99_ms: number; errors: number }> {
  const lat: number[] = [];
  let ok = 0;
  let errors = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (performance.now() < end) {
        const t0 = performance.now();
        const res = await pool.request({
          method: "POST",
          path,
          headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
          body,
        });
        await res.body.arrayBuffer();
        lat.push(performance.now() - t0);
        if (res.statusCode === expect) ok++;
        else errors++;
      }
    }),
  );
  const secs = (performance.now() - start) / 1000;
  return { ok, per_s: r1(ok / secs), p50_ms: r1(pct(lat, 50)), p99_ms: r1(pct(lat, 99)), errors };
}

for (const name of BACKENDS) {
  if (!backendOn(name) || !(on("http_issue") || on("http_verify"))) continue;
  const home = mkdtempSync(join(tmpdir(), "svc-prov-bench-"));
  const port = await freePort();
  const child = spawn(process.execPath, ["--import", "tsx", "bin/svc-provenance.ts", "serve"], {
    env: {
      ...process.env,
      SVC_PROVENANCE_HOME: join(home, "home"),
      SVC_PROVENANCE_CONFIG: join(home, "service.env"),
      SVC_PROVENANCE_PORT: String(port),
      SVC_PROVENANCE_BACKEND: name,
    },
    stdio: ["ignore", "pipe", "ignore"], // the request log goes to stderr: dropped here
  });
  try {
    const adminKey = await new Promise<string>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error("the appliance did not start in 30 s")), 30_000);
      child.stdout.on("data", (d) => {
        out += d;
        const m = /SVC_PROVENANCE_ADMIN_KEY=(\S+)\n/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
      child.on("exit", () => reject(new Error("the appliance exited")));
    });
    const pool = new Pool(`http://127.0.0.1:${port}`, { connections: CONCURRENCY });
    for (let i = 0; i < 300; i++) {
      // wait for the listener (the key is printed at first boot, before the worker starts and
      // the listener opens: seconds on a busy machine)
      try {
        await (await pool.request({ method: "GET", path: "/health" })).body.arrayBuffer();
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const issueBody = JSON.stringify({ artifact, claims: { run: "bench" } });
    const measured = async (path: string, body: string, token: string | null, expect: number) => {
      if (WARMUP_SECONDS > 0) await load(pool, path, body, token, expect, WARMUP_SECONDS);
      // the server's own CPU time per request is steadier than throughput on a busy machine
      const c0 = cpuSeconds(child.pid!);
      const u0 = process.cpuUsage();
      const r = await load(pool, path, body, token, expect);
      const cpu = cpuPerRequest(child.pid!, c0, cpuSeconds(child.pid!), process.cpuUsage(u0), r.ok);
      return { ...r, cpu };
    };
    if (on("http_issue")) {
      const issue = await measured("/v1/provenance/exact", issueBody, adminKey, 201);
      emit({
        figure: "http_issue",
        backend: name,
        concurrency: CONCURRENCY,
        receipts: issue.ok,
        per_s: issue.per_s,
        p50_ms: issue.p50_ms,
        p99_ms: issue.p99_ms,
        errors: issue.errors,
        durable: "fdatasync per batch",
        signing: "worker thread",
        server_cpu_ms_per_receipt: issue.cpu.server_cpu_ms,
        main_thread_ms_per_receipt: issue.cpu.main_thread_ms,
        worker_thread_ms_per_receipt: issue.cpu.busiest_other_thread_ms,
        client_cpu_ms_per_request: issue.cpu.client_cpu_ms,
        loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
      });
    }
    if (on("http_verify")) {
      const one = await pool.request({
        method: "POST",
        path: "/v1/provenance/exact",
        headers: { "content-type": "application/json", authorization: `Bearer ${adminKey}` },
        body: issueBody,
      });
      const receipt = await one.body.json();
      const ver = await measured("/v1/provenance/verify", JSON.stringify({ receipt }), null, 200);
      const vMs = ver.cpu.server_cpu_ms;
      emit({
        figure: "http_verify",
        backend: name,
        concurrency: CONCURRENCY,
        verifications: ver.ok,
        per_s: ver.per_s,
        p50_ms: ver.p50_ms,
        p99_ms: ver.p99_ms,
        errors: ver.errors,
        server_cpu_ms_per_verification: vMs,
        one_core_bound_per_s: vMs ? Math.round(1000 / vMs) : null,
        client_cpu_ms_per_request: ver.cpu.client_cpu_ms,
        loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
      });
    }
    await pool.close();
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
    rmSync(home, { recursive: true, force: true });
  }
}
