// Billing survives kill -9: a real gateway process under load (local usage files, then Redis)
// is killed with SIGKILL; after a restart on the same data, every 2xx the clients received is
// charged, and usage agrees with the audit log to within the requests in flight at the kill.
import test from "tape";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { admin, REDIS_URL, redisFor, SERVICE_KEY, startFakeEngine, uniquePrefix } from "./helpers.js";
import { spawnGateway, stopGateway } from "./abuse-env.js";

const CLIENTS = 8;

async function loadAndKill(env: Record<string, string>, dir: string, engineUrl: string) {
  const gw = await spawnGateway(env);
  const key = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
  let ackedMilli = 0;
  let acked = 0;
  let stop = false;
  const loop = async (c: number) => {
    for (let i = 0; !stop; i++) {
      try {
        const isPut = i % 4 === 0;
        const r = await fetch(gw.url + (isPut ? "/v1/put" : `/v1/get/default/k${c}`), {
          method: isPut ? "POST" : "GET",
          headers: { "x-api-key": key, ...(isPut ? { "content-type": "application/json" } : {}) },
          body: isPut ? JSON.stringify({ namespace: "default", key: `k${c}-${i}`, data_b64: "AAAA" }) : undefined,
        });
        await r.arrayBuffer();
        if (r.status >= 200 && r.status < 300) {
          ackedMilli += Math.round(Number(r.headers.get("x-svc-cus")) * 1000);
          acked++;
        }
      } catch {
        return; // the gateway is gone
      }
    }
  };
  const loops = Array.from({ length: CLIENTS }, (_, c) => loop(c));
  // Under load until enough has been acknowledged (the machine may be busy), then the kill.
  for (const t0 = Date.now(); acked < 100 && Date.now() - t0 < 20_000;) await new Promise((r) => setTimeout(r, 50));
  await stopGateway(gw, "SIGKILL");
  stop = true;
  await Promise.all(loops);
  // The same data, a new process.
  const again = await spawnGateway(env);
  const usage = (await admin(again.url, "/gate/admin/usage/acme", undefined, "GET")).json;
  await stopGateway(again);
  const lines = (await readFile(join(dir, "audit.jsonl"), "utf8"))
    .split("\n")
    .filter(Boolean)
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as { tenant_id: string; path: string; cus: number; status: number }];
      } catch {
        return [];
      }
    });
  const auditMilli = lines.filter((l) => l.tenant_id === "acme" && l.path.startsWith("/v1/")).reduce((s, l) => s + Math.round(l.cus * 1000), 0);
  void engineUrl;
  return { acked, ackedMilli, usageMilli: Math.round(usage.cus_used * 1000), auditMilli };
}

for (const mode of ["local", "redis"] as const) {
  test(`kill -9 of a gateway (${mode}): no acknowledged charge is lost; usage matches the audit log`, async (t) => {
    const engine = await startFakeEngine();
    const dir = await mkdtemp(join(tmpdir(), `svc-crash-${mode}-`));
    const prefix = uniquePrefix();
    const env: Record<string, string> = {
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "1000000",
      ...(mode === "redis" ? { SVC_GATE_REDIS_URL: REDIS_URL, SVC_GATE_REDIS_PREFIX: prefix } : {}),
    };
    const r = await loadAndKill(env, dir, engine.url);
    t.ok(r.acked >= 100, `${r.acked} requests acknowledged before the kill`);
    t.ok(r.usageMilli >= r.ackedMilli, `usage ${r.usageMilli / 1000} CUs covers the ${r.ackedMilli / 1000} CUs the clients were told`);
    t.ok(r.auditMilli >= r.ackedMilli, `the audit log (${r.auditMilli / 1000} CUs) covers them too`);
    // Charge and record are written side by side before each answer: they differ at most by
    // the requests in flight at the kill (one put, 1 CU, per client).
    t.ok(Math.abs(r.usageMilli - r.auditMilli) <= CLIENTS * 1000, `usage and audit differ by ${(r.usageMilli - r.auditMilli) / 1000} CUs (at most ${CLIENTS})`);
    if (mode === "redis") {
      const { cleanup } = await redisFor(prefix);
      await cleanup();
    }
    await rm(dir, { recursive: true, force: true });
    await engine.close();
  });
}
