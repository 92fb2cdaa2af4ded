// `svc engine` and `svc gateway` as separate processes configured by environment: they find
// each other, answer /health, stop with exit 0 on SIGTERM; a bad variable is one sentence
// naming it and exit 1.
import test from "tape";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "undici";

const root = new URL("../..", import.meta.url).pathname;
const KEY = "k".repeat(64);

function clean(): NodeJS.ProcessEnv {
  const e = { ...process.env };
  for (const k of Object.keys(e)) if (k.startsWith("SVC_")) delete e[k];
  return e;
}

async function start(cmd: string, env: NodeJS.ProcessEnv, label: string): Promise<{ child: ChildProcess; url: string; exited: Promise<number | null> }> {
  const child = spawn(process.execPath, ["--import", "tsx", "bin/svc.ts", cmd], { cwd: root, env: { ...clean(), ...env }, stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise<number | null>((r) => child.on("exit", (c) => r(c)));
  let out = "";
  child.stdout!.on("data", (d) => {
    out += d;
  });
  child.stderr!.on("data", (d) => {
    out += d;
  });
  const re = new RegExp(`^${label}: (\\S+)$`, "m");
  const deadline = Date.now() + 120_000;
  while (!re.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`svc ${cmd} did not start: ${out}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return { child, url: re.exec(out)![1]!, exited };
}

test("svc engine + svc gateway: separate processes, health, SIGTERM exits 0", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-servers-"));
  try {
    const engine = await start(
      "engine",
      { SVC_ENGINE_PORT: "0", SVC_ENGINE_DATA_DIR: join(dir, "engine"), SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "warn" },
      "engine",
    );
    t.match(engine.url, /^http:\/\/127\.0\.0\.1:\d+$/, `engine URL ${engine.url}`);
    const gateway = await start(
      "gateway",
      {
        SVC_GATE_HOST: "127.0.0.1",
        SVC_GATE_PORT: "0",
        SVC_GATE_ENGINE_URL: engine.url,
        SVC_GATE_ENGINE_SERVICE_KEY: KEY,
        SVC_GATE_DATA_DIR: join(dir, "gate"),
        SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      },
      "gateway",
    );
    const h = await request(`${gateway.url}/health`);
    const body = (await h.body.json()) as { status: string; engine_reachable: boolean };
    t.deepEqual([h.statusCode, body.status, body.engine_reachable], [200, "ok", true], "gateway healthy and reaching the engine");
    gateway.child.kill("SIGTERM");
    t.equal(await gateway.exited, 0, "gateway exits 0 on SIGTERM");
    engine.child.kill("SIGINT");
    t.equal(await engine.exited, 0, "engine exits 0 on SIGINT");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc gateway / svc engine: a bad or missing variable is one sentence naming it, exit 1", (t) => {
  const run = (cmd: string, env: NodeJS.ProcessEnv) =>
    spawnSync(process.execPath, ["--import", "tsx", "bin/svc.ts", cmd], { cwd: root, env: { ...clean(), ...env }, encoding: "utf8", timeout: 30_000 });
  const noKey = run("gateway", { SVC_GATE_PORT: "0" });
  t.equal(noKey.status, 1, "missing service key: exit 1");
  t.match(noKey.stderr, /^svc: SVC_GATE_ENGINE_SERVICE_KEY must be set.*\.\n$/, `stderr: ${noKey.stderr.trim()}`);
  const badPort = run("gateway", { SVC_GATE_PORT: "eighty", SVC_GATE_ENGINE_SERVICE_KEY: KEY });
  t.equal(badPort.status, 1, "bad port: exit 1");
  t.match(badPort.stderr, /^svc: SVC_GATE_PORT .*\.\n$/, `stderr: ${badPort.stderr.trim()}`);
  const badEngine = run("engine", { SVC_ENGINE_PORT: "-1" });
  t.equal(badEngine.status, 1, "bad engine port: exit 1");
  t.match(badEngine.stderr, /^svc: SVC_ENGINE_PORT .*\n$/, `stderr: ${badEngine.stderr.trim()}`);
  t.notOk(/\n\s+at /.test(badEngine.stderr + badPort.stderr + noKey.stderr), "no stack traces");
  t.end();
});
