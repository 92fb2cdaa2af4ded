// Start-up time of the built CLI (dist/bin/svc.js, what `npx svc` runs). Prints the machine line
// first, then one JSON object per figure, each the median of SVC_BENCH_CLI_RUNS (default 21)
// processes and with the output it checked:
//   bare   `node -e 0`, the floor every command starts from
//   help   `svc --help` (its usage text checked), and its difference to bare
//   get    `svc get NS KEY` against a gateway and engine on loopback in this process (the JSON
//          printed checked against the entry stored), and its difference to bare
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "../lib/client.js";
import { loadEngineConfig } from "../server/engine/config.js";
import { startEngine } from "../server/engine/server.js";
import { loadGatewayConfig } from "../server/gateway/config.js";
import { startGateway } from "../server/gateway/server.js";

const RUNS = Number(process.env.SVC_BENCH_CLI_RUNS ?? 21);
const root = fileURLToPath(new URL("..", import.meta.url));
const svc = join(root, "dist", "bin", "svc.js");
if (!existsSync(svc)) {
  console.error("bench/cli: dist/bin/svc.js is missing; run `npm run build` first.");
  process.exit(1);
}
console.log(JSON.stringify({ bench: "cli", node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model ?? "unknown", mem_gib: Math.round(totalmem() / 2 ** 30), load: loadavg()[0] }));

function once(args: string[], env: NodeJS.ProcessEnv): Promise<{ ms: number; out: string; code: number | null }> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, args, { env, stdio: ["ignore", "pipe", "ignore"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.on("close", (code) => resolve({ ms: performance.now() - t0, out, code }));
  });
}

async function median(args: string[], env: NodeJS.ProcessEnv, check: (out: string) => boolean): Promise<{ p50: number; checked: boolean }> {
  const ms: number[] = [];
  let checked = true;
  for (let i = 0; i < RUNS; i++) {
    const r = await once(args, env);
    checked &&= r.code === 0 && check(r.out);
    ms.push(r.ms);
  }
  ms.sort((a, b) => a - b);
  return { p50: Math.round(ms[Math.floor(ms.length / 2)]!), checked };
}

const env = { ...process.env };
const bare = await median(["-e", "0"], env, () => true);
console.log(JSON.stringify({ figure: "bare", p50_ms: bare.p50, runs: RUNS, checked: bare.checked }));
const help = await median([svc, "--help"], env, (o) => o.startsWith("svc — tensor-train storage service"));
console.log(JSON.stringify({ figure: "help", p50_ms: help.p50, over_bare_ms: help.p50 - bare.p50, runs: RUNS, checked: help.checked }));

const dir = await mkdtemp(join(tmpdir(), "svc-bench-cli-"));
const serviceKey = "b".repeat(64);
const engine = await startEngine(loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: join(dir, "engine"), SVC_ENGINE_API_KEYS: serviceKey, SVC_ENGINE_LOG_LEVEL: "silent" }));
const gateway = await startGateway(loadGatewayConfig({
  SVC_GATE_HOST: "127.0.0.1", SVC_GATE_PORT: "0", SVC_GATE_ENGINE_URL: engine.url, SVC_GATE_ENGINE_SERVICE_KEY: serviceKey,
  SVC_GATE_DATA_DIR: join(dir, "gate"), SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"), SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "1000000",
}));
try {
  const res = await fetch(`${gateway.url}/gate/onboard/create`, {
    method: "POST", headers: { authorization: `Bearer ${serviceKey}`, "content-type": "application/json" }, body: JSON.stringify({ tenant_id: "bench", namespaces: ["ns"] }),
  });
  const { api_key } = (await res.json()) as { api_key: string };
  const c = createClient({ baseUrl: gateway.url, apiKey: api_key });
  const put = await c.put("ns", "k", Float32Array.from({ length: 4096 }, (_, i) => Math.sin(i / 50)), { shape: [64, 64] });
  await c.close();
  const get = await median([svc, "get", "ns", "k"], { ...env, SVC_API_KEY: api_key, SVC_GATE_URL: gateway.url }, (o) => {
    const e = JSON.parse(o) as { key: string; version: number; fingerprint: { sha256: string } };
    return e.key === "k" && e.version === put.version && e.fingerprint.sha256 === put.fingerprint.sha256;
  });
  console.log(JSON.stringify({ figure: "get", p50_ms: get.p50, over_bare_ms: get.p50 - bare.p50, runs: RUNS, checked: get.checked, load_after: loadavg()[0] }));
} finally {
  await gateway.close();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
}
