// The gateway on a redis-server of the test's own (test/faults/deps.ts): hung (SIGSTOP),
// killed and started again, and failing between a request's admission and its charge. The
// gateway process stays up; a request gets 503 state_unavailable with Retry-After within
// SVC_GATE_REDIS_TIMEOUT_MS (not the length of the hang); /gate/health says store_connected
// false meanwhile; service comes back by itself; X-SVC-CUs and the audit record's cus are 0
// when the charge failed, and a charge that reaches Redis after the gateway stopped waiting for
// it is not applied when Redis resumes. Every wait is a condition with a deadline.
import test from "tape";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway, type RunningGateway } from "../../server/gateway/server.js";
import { periodOf } from "../../server/gateway/meter.js";
import { connectRedis } from "../../server/gateway/redis.js";
import { admin, call, SERVICE_KEY } from "../gateway/helpers.js";
import { startRedisProc, waitFor, type RedisProc } from "./deps.js";

const TIMEOUT_MS = 1000;

/** An engine stand-in whose answers to GET .../slow wait until release() (the charge is then made after a fault). */
async function holdingEngine(): Promise<{ url: string; held: () => number; release: () => void; close: () => Promise<void> }> {
  let waiting: (() => void)[] = [];
  const srv: Server = createServer((req, res) => {
    req.resume();
    const answer = () => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(req.url === "/health" ? { status: "ok", store_connected: true } : { ok: true, path: req.url }));
    };
    if (req.url?.endsWith("/slow")) waiting.push(answer);
    else answer();
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
    held: () => waiting.length,
    release: () => {
      const w = waiting;
      waiting = [];
      for (const f of w) f();
    },
    close: () =>
      new Promise<void>((r) => {
        srv.closeAllConnections();
        srv.close(() => r());
      }),
  };
}

const started = await startRedisProc();
if ("skip" in started) {
  test("Redis faults", (t) => {
    t.comment(`skipped: ${started.skip}`);
    t.end();
  });
} else {
  const redis: RedisProc = started;
  const dir = mkdtempSync(join(tmpdir(), "svc-faults-redis-"));
  const engine = await holdingEngine();
  const gw: RunningGateway = await startGateway(
    loadGatewayConfig({
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      SVC_GATE_REDIS_URL: redis.url,
      SVC_GATE_REDIS_TIMEOUT_MS: String(TIMEOUT_MS),
      SVC_GATE_REDIS_PREFIX: "svc-faults:",
    }),
  );
  test.onFinish(
    () =>
      void (async () => {
        await gw.close();
        await engine.close();
        await redis.destroy();
        rmSync(dir, { recursive: true, force: true });
      })(),
  );
  const health = async () => (await (await fetch(gw.url + "/gate/health")).json()) as { store_connected: boolean };
  const auditOf = (rid: string) =>
    readFileSync(join(dir, "audit.jsonl"), "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { request_id: string; cus: number; status: number })
      .find((r) => r.request_id === rid);

  let key = "";

  test("a hung Redis (SIGSTOP): each request answers 503 state_unavailable within the timeout, /gate/health says so, and service resumes with Redis", async (t) => {
    const created = await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" });
    t.equal(created.status, 201, "tenant created");
    key = created.json.api_key as string;
    t.equal((await call(gw.url, "/v1/get/default/k", { key })).status, 200, "a get before the fault");
    redis.pause();
    try {
      const times: number[] = [];
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        const r = await call(gw.url, "/v1/get/default/k", { key });
        times.push(performance.now() - t0);
        t.equal(r.status, 503, `request ${i}: 503`);
        t.equal(r.json.code, "state_unavailable", `request ${i}: state_unavailable`);
        t.match(r.headers.get("retry-after") ?? "", /^\d+$/, `request ${i}: Retry-After`);
      }
      // the bound is the timeout, not the hang: generous for a loaded machine, far below a 35 s hang
      t.ok(Math.max(...times) < TIMEOUT_MS + 8000, `each answered within the timeout plus slack (${times.map((x) => Math.round(x)).join(", ")} ms)`);
      t.equal((await health()).store_connected, false, "/gate/health: store_connected false");
    } finally {
      redis.resume();
    }
    await waitFor("a get succeeds once Redis runs again", async () => (await call(gw.url, "/v1/get/default/k", { key })).status === 200, 60_000);
    t.equal((await health()).store_connected, true, "/gate/health: store_connected true again");
  });

  test("Redis killed and started again: 503 state_unavailable meanwhile, service back by itself", async (t) => {
    await redis.kill();
    const r = await call(gw.url, "/v1/get/default/k", { key });
    t.equal(r.status, 503, "503 while Redis is down");
    t.equal(r.json.code, "state_unavailable", "state_unavailable");
    t.doesNotMatch(String(r.json.detail), /redis:\/\/|127\.0\.0\.1|\bat\b.*:\d+/, "the detail names no address and no stack");
    await redis.start();
    // the tenant is in Redis's append-only file: it is there after the restart
    await waitFor("a get succeeds after the restart", async () => (await call(gw.url, "/v1/get/default/k", { key })).status === 200, 60_000);
    t.pass("served again without restarting the gateway");
  });

  test("the charge fails after the engine answered: X-SVC-CUs and the audit record say 0, and Redis does not apply it when it resumes", async (t) => {
    // A connection of the test's own reads the usage hash and lists Redis's clients.
    const own = await connectRedis(redis.url);
    const usageKey = `svc-faults:usage:${periodOf(Date.now())}:acme`;
    const total = async () => Number((await own.hGet(usageKey, "_total")) ?? 0);
    const clientIds = async () =>
      new Set(
        String(await own.sendCommand(["CLIENT", "LIST", "TYPE", "normal"]))
          .split("\n")
          .map((l) => /^id=(\d+)/.exec(l)?.[1])
          .filter((x): x is string => x !== undefined),
      );
    const p = call(gw.url, "/v1/get/default/slow", { key });
    await waitFor("the request reached the engine", () => engine.held() === 1, 30_000);
    const before = await total();
    const ownId = String(await own.sendCommand(["CLIENT", "ID"]));
    const gatewayIds = [...(await clientIds())].filter((id) => id !== ownId);
    t.ok(gatewayIds.length > 0, `the gateway's connections to Redis (${gatewayIds.length})`);
    redis.pause();
    try {
      engine.release();
      const r = await p;
      t.equal(r.status, 200, "the engine's answer goes out");
      t.equal(r.headers.get("x-svc-cus"), "0", "X-SVC-CUs: 0 (nothing was charged)");
      const rec = auditOf(r.headers.get("x-request-id")!);
      t.equal(rec?.cus, 0, "the audit record's cus is 0");
    } finally {
      redis.resume();
    }
    // The charge was written to the connection the gateway then gave up on: Redis reads it, and
    // the connection's end after it, once it runs again. Once that connection is gone the charge
    // has been run (or refused) by Redis.
    await waitFor(
      "Redis has read the abandoned connection to its end",
      async () => {
        const now = await clientIds();
        return gatewayIds.every((id) => !now.has(id));
      },
      60_000,
    );
    t.equal(await total(), before, "the late charge was not applied: usage is what it was before the request");
    await own.quit();
    await waitFor("served again", async () => (await call(gw.url, "/v1/get/default/k", { key })).status === 200, 60_000);
    const ok = await call(gw.url, "/v1/get/default/k", { key });
    t.equal(ok.headers.get("x-svc-cus"), "0.1", "a charged get says 0.1");
    t.equal(auditOf(ok.headers.get("x-request-id")!)?.cus, 0.1, "and its record 0.1");
  });
}
