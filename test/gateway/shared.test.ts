// Several gateway processes sharing one real Redis: tenants, key hashes, usage and the rate
// window live there, so a key rotated through one process fails on the other at once,
// usage sums across processes, and the window is one window.
import test from "tape";
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { admin, call, REDIS_URL, redisFor, SERVICE_KEY, startFakeEngine, uniquePrefix } from "./helpers.js";

interface Proc {
  url: string;
  child: ChildProcess;
}

async function spawnGateway(env: Record<string, string>): Promise<Proc> {
  const child = spawn(process.execPath, ["--import", "tsx", "test/gateway/fixtures/gateway-proc.ts"], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  const url = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    rl.once("line", (l) => resolve(JSON.parse(l).url as string));
    child.once("exit", (c) => reject(new Error(`gateway exited ${c}: ${err}`)));
  });
  return { url, child };
}

async function stop(p: Proc): Promise<number | null> {
  if (p.child.exitCode !== null) return p.child.exitCode;
  const done = new Promise<number | null>((r) => p.child.once("exit", (c) => r(c)));
  p.child.kill("SIGTERM");
  return done;
}

test("two gateway processes on one Redis behave as one", async (t) => {
  const engine = await startFakeEngine();
  const prefix = uniquePrefix();
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-shared-"));
  const base = {
    SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
    SVC_GATE_HOST: "127.0.0.1",
    SVC_GATE_PORT: "0",
    SVC_GATE_ENGINE_URL: engine.url,
    SVC_GATE_REDIS_URL: REDIS_URL,
    SVC_GATE_REDIS_PREFIX: prefix,
    SVC_GATE_DEFAULT_RATE_LIMIT_REQUESTS: "6",
  };
  const [a, b] = await Promise.all([
    spawnGateway({ ...base, SVC_GATE_DATA_DIR: join(dir, "a"), SVC_GATE_AUDIT_LOG_PATH: join(dir, "a.jsonl") }),
    spawnGateway({ ...base, SVC_GATE_DATA_DIR: join(dir, "b"), SVC_GATE_AUDIT_LOG_PATH: join(dir, "b.jsonl") }),
  ]);
  try {
    const created = await admin(a.url, "/gate/onboard/create", { tenant_id: "acme" });
    t.equal(created.status, 201, "created through A");
    const oldKey = created.json.api_key as string;
    t.equal((await call(b.url, "/v1/get/default/k", { key: oldKey })).status, 200, "the key works on B at once");
    t.equal((await admin(b.url, "/gate/onboard/create", { tenant_id: "acme" })).status, 409, "B sees the tenant exists");

    const rot = await admin(a.url, "/gate/onboard/rotate-key", { tenant_id: "acme" });
    t.equal(rot.status, 200, "rotated through A");
    t.equal((await call(b.url, "/v1/get/default/k", { key: oldKey })).status, 401, "the old key fails on B at once");
    t.equal((await call(a.url, "/v1/get/default/k", { key: oldKey })).status, 401, "and on A");
    const key = rot.json.api_key as string;
    t.equal((await call(b.url, "/v1/get/default/k", { key })).status, 200, "the new key works on B");

    // Usage: 2 gets so far (0.2 CU); 1 more on A, 1 put on B.
    await call(a.url, "/v1/get/default/k", { key });
    await call(b.url, "/v1/put", { key, body: { namespace: "default", key: "k", data_b64: "AAAA" } });
    const ua = await admin(a.url, "/gate/admin/usage/acme", undefined, "GET");
    const ub = await admin(b.url, "/gate/admin/usage/acme", undefined, "GET");
    t.equal(ua.json.cus_used, 1.3, "usage sums across both processes (0.3 get + 1 put)");
    t.deepEqual(ua.json, ub.json, "both report the same record");

    // Rate limit: 6 per 60 s, 4 used; one on A, one on B, the next is refused on either.
    const r5 = await call(a.url, "/v1/get/default/k", { key });
    t.equal(r5.headers.get("x-ratelimit-remaining"), "1", "A counts B's requests");
    const r6 = await call(b.url, "/v1/get/default/k", { key });
    t.equal(r6.headers.get("x-ratelimit-remaining"), "0");
    const r7 = await call(a.url, "/v1/get/default/k", { key });
    t.equal(r7.status, 429, "the seventh in the window is refused");
    t.match(r7.json.detail, /^Rate limit exceeded for tenant acme; retry after \d+ seconds\.$/);

    const dec = await admin(b.url, "/gate/onboard/deactivate", { tenant_id: "acme" });
    t.equal(dec.status, 200, "deactivated through B");
    t.equal((await call(a.url, "/v1/get/default/k", { key })).status, 401, "the key fails on A at once");
    t.deepEqual((await admin(a.url, "/gate/admin/reload")).json, { status: "ok", tenants_loaded: 1 }, "reload counts the shared tenants");
    const h = await call(a.url, "/health");
    t.deepEqual([h.json.engine_reachable, h.json.store_connected], [true, true], "health on A");
  } finally {
    t.equal(await stop(a), 0, "A exits cleanly");
    t.equal(await stop(b), 0, "B exits cleanly");
    const { cleanup } = await redisFor(prefix);
    await cleanup();
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("health reports store_connected false when Redis goes away", async (t) => {
  const engine = await startFakeEngine();
  const { connectRedis } = await import("../../server/gateway/redis.js");
  const { RedisTenantRegistry } = await import("../../server/gateway/tenants.js");
  const { startTestGateway } = await import("./helpers.js");
  const redis = await connectRedis(REDIS_URL);
  const g = await startTestGateway(engine.url, { registry: new RedisTenantRegistry(redis, uniquePrefix()) });
  t.equal((await call(g.url, "/health")).json.store_connected, true, "connected");
  redis.destroy();
  t.equal((await call(g.url, "/health")).json.store_connected, false, "after the connection is gone: false");
  const t0 = Date.now();
  const r = await call(g.url, "/v1/get/default/k", { key: "svc_live_" + "a".repeat(43) });
  t.equal(r.status, 500, "a data-plane request gets a prompt error answer, not a hang");
  t.deepEqual([r.json.code, r.json.detail], ["internal", "Internal error."], "no internals in the body");
  t.ok(Date.now() - t0 < 3000, "promptly");
  t.equal(g.audit.records.at(-1)!.status, 500, "audited");
  await g.close();
  await engine.close();
});

test("an unexpected failure is logged with the request id and the error's class only", async (t) => {
  const engine = await startFakeEngine();
  const { MemoryTenantRegistry } = await import("../../server/gateway/tenants.js");
  const { startTestGateway } = await import("./helpers.js");
  const registry = new MemoryTenantRegistry();
  const logged: Array<Record<string, unknown>> = [];
  const g = await startTestGateway(engine.url, { registry, log: (e) => logged.push(e) });
  const secret = "svc_live_" + "s".repeat(43);
  registry.findByKeyHash = async () => {
    throw new TypeError(`boom with ${secret}`);
  };
  registry.list = async () => {
    throw new RangeError(`list failed for ${secret}`);
  };
  const r = await call(g.url, "/v1/get/default/k", { key: secret });
  t.equal(r.status, 500);
  t.deepEqual([r.json.code, r.json.detail], ["internal", "Internal error."], "no message or stack in the body");
  const a = await admin(g.url, "/gate/admin/tenants", undefined, "GET");
  t.equal(a.status, 500, "admin failure: 500");
  t.equal(logged.length, 2, "both failures logged");
  t.deepEqual(logged[0], { level: "error", msg: "internal error in the data plane", request_id: r.json.request_id, error: "TypeError" });
  t.deepEqual(logged[1], { level: "error", msg: "internal error in the admin routes", request_id: a.json.request_id, error: "RangeError" });
  t.notOk(JSON.stringify(logged).includes(secret), "the key in the error message never reaches the log");
  await g.close();
  await engine.close();
});
