// Start-up time of the built CLI (dist/bin/svc.js, what `npx svc` runs). Prints the machine line
// first, then one JSON object per figure, each the median of SVC_BENCH_CLI_RUNS (default 21)
// processes and with the output it checked:
//   bare   `node -e 0`, the floor every command starts from
//   help   `svc --help` (its usage text checked), and its difference to bare
//   get    `svc get NS KEY` against a gateway and engine on loopback in this process (the JSON
//          printed checked against the entry stored), and its difference to bare
//   ls     `svc ls NS` (the one line of the entry checked)
//   topk   `svc topk NS KEY --k 2` (the two nearest entries, in their order)
//   usage  `svc usage --mine` (the tenant's own line)
// SVC_BENCH_CLI_BASELINE=/path/to/other/dist/bin/svc.js times another build of the CLI (an
// older commit's, say) on the same commands, each of its runs next to one of this build's, so
// that both see the same load; its figures carry `"build": "baseline"` and the ratio to it.
// The run fails when any output is wrong. A command's target (docs/cli.md): a data command
// within 300 ms, `--help` within 100 ms of bare.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "../lib/client.js";
import { loadEngineConfig } from "../server/engine/config.js";
import { startEngine } from "../server/engine/server.js";
import { loadGatewayConfig } from "../server/gateway/config.js";
import { startGateway } from "../server/gateway/server.js";

const RUNS = Number(process.env.SVC_BENCH_CLI_RUNS ?? 21);
const root = fileURLToPath(new URL("..", import.meta.url));
const svc = join(root, "dist", "bin", "svc.js");
const baseline = process.env.SVC_BENCH_CLI_BASELINE ? resolve(process.env.SVC_BENCH_CLI_BASELINE) : undefined;
for (const f of [svc, baseline]) {
  if (f !== undefined && !existsSync(f)) {
    console.error(`bench/cli: ${f} is missing; run \`npm run build\` first (or fix SVC_BENCH_CLI_BASELINE).`);
    process.exit(1);
  }
}
console.log(
  JSON.stringify({
    bench: "cli",
    node: process.version,
    cpus: cpus().length,
    cpu: cpus()[0]?.model ?? "unknown",
    mem_gib: Math.round(totalmem() / 2 ** 30),
    load: loadavg()[0],
    baseline: baseline ?? null,
  }),
);

function once(args: string[], env: NodeJS.ProcessEnv): Promise<{ ms: number; out: string; err: string; code: number | null }> {
  return new Promise((done) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("close", (code) => done({ ms: performance.now() - t0, out, err, code }));
  });
}

const p50 = (ms: number[]) => Math.round([...ms].sort((a, b) => a - b)[Math.floor(ms.length / 2)]!);
let wrong = 0;

/** RUNS processes of `svc ARGS` (and of the baseline's, alternating), each output checked. */
async function figure(name: string, args: string[], env: NodeJS.ProcessEnv, check: (out: string, err: string) => boolean, bare: number): Promise<void> {
  const builds = baseline
    ? ([
        ["this", svc],
        ["baseline", baseline],
      ] as const)
    : ([["this", svc]] as const);
  const ms = new Map<string, number[]>(builds.map(([b]) => [b, []]));
  const checked = new Map<string, boolean>(builds.map(([b]) => [b, true]));
  for (let i = 0; i < RUNS; i++) {
    for (const [b, file] of i % 2 ? [...builds].reverse() : builds) {
      const r = await once([file, ...args], env);
      let ok = r.code === 0;
      try {
        ok &&= check(r.out, r.err);
      } catch {
        ok = false;
      }
      if (!ok && checked.get(b)) console.error(`bench/cli: ${name} (${b}) printed a wrong answer (exit ${r.code}): ${(r.out + r.err).slice(0, 300)}`);
      checked.set(b, checked.get(b)! && ok);
      ms.get(b)!.push(r.ms);
    }
  }
  const mine = p50(ms.get("this")!);
  const line: Record<string, unknown> = { figure: name, p50_ms: mine, over_bare_ms: mine - bare, runs: RUNS, checked: checked.get("this") };
  if (baseline) {
    const theirs = p50(ms.get("baseline")!);
    line.baseline_p50_ms = theirs;
    line.baseline_checked = checked.get("baseline");
    line.ratio_to_baseline = Number((mine / theirs).toFixed(2));
  }
  line.load = Number(loadavg()[0].toFixed(2));
  console.log(JSON.stringify(line));
  for (const ok of checked.values()) if (!ok) wrong++;
}

const env = { ...process.env };
// the floor: RUNS processes of a bare node
const bareMs: number[] = [];
for (let i = 0; i < RUNS; i++) bareMs.push((await once(["-e", "0"], env)).ms);
const bare = p50(bareMs);
console.log(JSON.stringify({ figure: "bare", p50_ms: bare, runs: RUNS, checked: true }));
await figure("help", ["--help"], env, (o) => o.startsWith("svc — tensor-train storage service"), bare);

const dir = await mkdtemp(join(tmpdir(), "svc-bench-cli-"));
const serviceKey = "b".repeat(64);
const engine = await startEngine(
  loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: join(dir, "engine"), SVC_ENGINE_API_KEYS: serviceKey, SVC_ENGINE_LOG_LEVEL: "silent" }),
);
const gateway = await startGateway(
  loadGatewayConfig({
    SVC_GATE_HOST: "127.0.0.1",
    SVC_GATE_PORT: "0",
    SVC_GATE_ENGINE_URL: engine.url,
    SVC_GATE_ENGINE_SERVICE_KEY: serviceKey,
    SVC_GATE_DATA_DIR: join(dir, "gate"),
    SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
    SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "1000000",
  }),
);
try {
  const res = await fetch(`${gateway.url}/gate/onboard/create`, {
    method: "POST",
    headers: { authorization: `Bearer ${serviceKey}`, "content-type": "application/json" },
    body: JSON.stringify({ tenant_id: "bench", namespaces: ["ns"] }),
  });
  const { api_key } = (await res.json()) as { api_key: string };
  const c = createClient({ baseUrl: gateway.url, apiKey: api_key });
  // three 64x64 fields: k, a near neighbour of k and a far one
  const field = (f: number) => Float32Array.from({ length: 4096 }, (_, i) => Math.sin(i / 50 + f));
  const put = await c.put("ns", "k", field(0), { shape: [64, 64] });
  await c.put("ns", "near", field(0.05), { shape: [64, 64] });
  await c.put("ns", "far", field(2), { shape: [64, 64] });
  await c.close();
  const tenant = { ...env, SVC_API_KEY: api_key, SVC_GATE_URL: gateway.url };
  await figure(
    "get",
    ["get", "ns", "k"],
    tenant,
    (o) => {
      const e = JSON.parse(o) as { key: string; version: number; fingerprint: { sha256: string } };
      return e.key === "k" && e.version === put.version && e.fingerprint.sha256 === put.fingerprint.sha256;
    },
    bare,
  );
  await figure(
    "ls",
    ["ls", "ns"],
    tenant,
    (o) => {
      const lines = o
        .trim()
        .split("\n")
        .map((l) => l.split("\t"));
      return (
        lines.length === 3 &&
        lines
          .map((l) => l[0])
          .sort()
          .join(",") === "far,k,near" &&
        lines.every((l) => l[1] === "v1" && l[3] === "64x64")
      );
    },
    bare,
  );
  await figure(
    "topk",
    ["topk", "ns", "k", "--k", "2"],
    tenant,
    (o, e) => {
      const keys = o
        .trim()
        .split("\n")
        .map((l) => l.split("\t")[1]);
      return keys.join(",") === "near,far" && /^2 results by cosine; 2 entries scanned/.test(e);
    },
    bare,
  );
  await figure("usage", ["usage", "--mine"], tenant, (o) => /^Tenant bench \(plan \w+\), period \d{4}-\d{2}:/.test(o), bare);
} finally {
  await gateway.close();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
}
if (wrong) {
  console.error(`bench/cli: ${wrong} figure(s) rest on a wrong answer.`);
  process.exit(1);
}
