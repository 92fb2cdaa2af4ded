// Benchmarks of the provenance appliance. Prints the backend/machine line first, then one
// JSON object per figure:
//   sign / verify          raw ML-DSA-65 operations per second, per backend
//   receipt_verify         the six checks on one receipt (canonicalisation + verify), per backend
//   http_issue             receipts/s through POST /v1/provenance/exact of a real appliance
//                          (child process, durable chain log, receipts built in a worker thread),
//                          liboqs and noble, with the server's CPU time per receipt (all threads)
//   http_verify            verifications/s through POST /v1/provenance/verify, with the server's
//                          CPU time per verification and the rate one free core would allow
// Environment: SVC_BENCH_SECONDS per figure (default 2), SVC_BENCH_CONCURRENCY (default 32).
// Every phase is bounded in time; the temporary home is removed.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { Pool } from "undici";
import { artifactDigest, buildReceipt, signedMessage, verifyReceipt } from "../server/provenance/receipt.js";
import { createBackend, createSigner, type BackendName } from "../server/provenance/signer.js";

const SECONDS = Number(process.env.SVC_BENCH_SECONDS ?? 2);
const CONCURRENCY = Number(process.env.SVC_BENCH_CONCURRENCY ?? 32);
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
  const signer = createSigner(b, b.generateKeyPair());
  const receipt = buildReceipt({ artifact, claims: { run: "bench", step: 1 } }, { serial: 1, previous: null }, signer, new Date());
  const msg = signedMessage(receipt);
  const sig = Buffer.from(receipt.signature.value, "base64");
  const s = rate(() => signer.sign(msg));
  emit({ figure: "sign", backend: b.name, message_bytes: msg.length, ops: s.ops, per_s: s.per_s });
  const v = rate(() => b.verify(msg, sig, signer.publicKey));
  emit({ figure: "verify", backend: b.name, message_bytes: msg.length, ops: v.ops, per_s: v.per_s });
  const opts = { backend: b, keys: [{ publicKey: signer.publicKey, fingerprint: signer.fingerprint }], trustedFingerprints: [signer.fingerprint] };
  const rv = rate(() => {
    if (!verifyReceipt(receipt, opts).valid) throw new Error("receipt did not verify");
  });
  emit({ figure: "receipt_verify", backend: b.name, ops: rv.ops, per_s: rv.per_s });
}

/** CPU seconds (user + system) a process has used, from /proc; null elsewhere. */
function cpuSeconds(pid: number): number | null {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8");
    const rest = f.slice(f.lastIndexOf(")") + 2).split(" ");
    return (Number(rest[11]) + Number(rest[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
  } catch {
    return null;
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

async function load(pool: Pool, path: string, body: string, token: string | null, expect: number): Promise<{ ok: number; per_s: number; p50_ms: number; p99_ms: number; errors: number }> {
  const lat: number[] = [];
  let ok = 0;
  let errors = 0;
  const start = performance.now();
  const end = start + SECONDS * 1000;
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
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
  }));
  const secs = (performance.now() - start) / 1000;
  return { ok, per_s: r1(ok / secs), p50_ms: r1(pct(lat, 50)), p99_ms: r1(pct(lat, 99)), errors };
}

for (const name of ["liboqs", "noble"] as const) {
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
    for (let i = 0; i < 50; i++) {
      // wait for the listener (the key is printed just after listen)
      try {
        await (await pool.request({ method: "GET", path: "/health" })).body.arrayBuffer();
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const issueBody = JSON.stringify({ artifact, claims: { run: "bench" } });
    // the server's own CPU time per request is steadier than throughput on a busy machine
    const c0 = cpuSeconds(child.pid!);
    const issue = await load(pool, "/v1/provenance/exact", issueBody, adminKey, 201);
    const c1 = cpuSeconds(child.pid!);
    const cpuMs = c0 !== null && c1 !== null && issue.ok > 0 ? Math.round(((c1 - c0) * 1e6) / issue.ok) / 1000 : null;
    emit({ figure: "http_issue", backend: name, concurrency: CONCURRENCY, receipts: issue.ok, per_s: issue.per_s, p50_ms: issue.p50_ms, p99_ms: issue.p99_ms, errors: issue.errors, durable: "fdatasync per batch", server_cpu_ms_per_receipt: cpuMs, signing: "worker thread" });
    const one = await pool.request({ method: "POST", path: "/v1/provenance/exact", headers: { "content-type": "application/json", authorization: `Bearer ${adminKey}` }, body: issueBody });
    const receipt = await one.body.json();
    const v0 = cpuSeconds(child.pid!);
    const ver = await load(pool, "/v1/provenance/verify", JSON.stringify({ receipt }), null, 200);
    const v1 = cpuSeconds(child.pid!);
    const vMs = v0 !== null && v1 !== null && ver.ok > 0 ? Math.round(((v1 - v0) * 1e6) / ver.ok) / 1000 : null;
    emit({ figure: "http_verify", backend: name, concurrency: CONCURRENCY, verifications: ver.ok, per_s: ver.per_s, p50_ms: ver.p50_ms, p99_ms: ver.p99_ms, errors: ver.errors, server_cpu_ms_per_verification: vMs, one_core_bound_per_s: vMs ? Math.round(1000 / vMs) : null });
    await pool.close();
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
    rmSync(home, { recursive: true, force: true });
  }
}
