// Failed authentication and audit volume: failures are throttled per client address (tenant
// keys, service keys on admin routes, missing keys), a throttled address gets 429 +
// Retry-After even with a valid key and writes no audit records; with Redis the count is
// shared by gateways. Two different credentials are a 400; an audit record stays small
// whatever the path's length; a service key shorter than 32 characters stops start-up.
import test from "tape";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryAuthThrottle, RedisAuthThrottle } from "../../server/gateway/auth-throttle.js";
import { AUDIT_MAX_PATH, auditLine } from "../../server/gateway/audit.js";
import { RespConnection } from "../../server/gateway/resp.js";
import { admin, call, createTenant, REDIS_URL, redisFor, SERVICE_KEY, startFakeEngine, startTestGateway, uniquePrefix } from "./helpers.js";

test("failed authentication is throttled per address: 429 + Retry-After, then even a valid key waits; no audit flood", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url, { limits: { authFailLimit: 5, authFailWindowS: 60 } });
  const key = await createTenant(g.url, { tenant_id: "acme" });
  const before = g.audit.records.length;
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) statuses.push((await call(g.url, "/v1/get/default/k", { key: `svc_live_${"x".repeat(43)}` })).status);
  statuses.push((await admin(g.url, "/gate/admin/tenants", undefined, "GET").then(() => call(g.url, "/gate/admin/tenants", { headers: { authorization: `Bearer ${"w".repeat(48)}` } }))).status);
  t.deepEqual(statuses, [401, 401, 401, 401, 401], "five failures (four tenant keys, one service key) are answered 401");
  await new Promise((r) => setTimeout(r, 50));
  const r = await call(g.url, "/v1/get/default/k", { key });
  t.equal(r.status, 429, "the next request, with a valid key, is refused");
  t.equal(r.json.code, "rate_limited");
  t.match(r.json.detail, /Too many failed authentications from this address; retry after \d+ seconds\./);
  t.ok(Number(r.headers.get("retry-after")) >= 59, "Retry-After up to the window's end");
  const adm = await admin(g.url, "/gate/admin/tenants", undefined, "GET");
  t.equal(adm.status, 429, "admin routes too, even with the right service key");
  const flood = await Promise.all(Array.from({ length: 200 }, () => call(g.url, "/v1/" + "p".repeat(90_000))));
  t.ok(flood.every((f) => f.status === 429), "an unauthenticated flood of 90 KB paths gets 429s");
  const recs = g.audit.records.slice(before);
  t.ok(recs.length <= 6, `${recs.length} audit records for ${flood.length + 7} requests (the 401s and one admin call)`);
  g.clock.advance(61_000);
  t.equal((await call(g.url, "/v1/get/default/k", { key })).status, 200, "the window over, the valid key works");
  await g.close();
  await engine.close();
});

test("memory throttle: a fixed window per address, other addresses unaffected", async (t) => {
  let now = 0;
  const th = new MemoryAuthThrottle({ limit: 3, windowMs: 10_000 }, { now: () => now });
  for (let i = 0; i < 2; i++) await th.fail("10.0.0.1");
  t.equal(th.blockedFor("10.0.0.1"), 0, "below the limit");
  await th.fail("10.0.0.1");
  t.equal(th.blockedFor("10.0.0.1"), 10, "at the limit: blocked to the window's end");
  t.equal(th.blockedFor("10.0.0.2"), 0, "another address is not");
  now = 10_000;
  t.equal(th.blockedFor("10.0.0.1"), 0, "the window over");
  await th.fail("10.0.0.1");
  t.equal(th.blockedFor("10.0.0.1"), 0, "a new window starts counting from 1");
});

test("Redis throttle: gateways share the count; a guesser is stopped at each one failure after the limit", async (t) => {
  const prefix = uniquePrefix();
  const { cleanup } = await redisFor(prefix);
  const a = await RespConnection.open(REDIS_URL);
  const b = await RespConnection.open(REDIS_URL);
  let now = 1_000_000;
  const clock = { now: () => now };
  const ga = new RedisAuthThrottle(a, prefix, { limit: 4, windowMs: 30_000 }, clock);
  const gb = new RedisAuthThrottle(b, prefix, { limit: 4, windowMs: 30_000 }, clock);
  for (let i = 0; i < 3; i++) await ga.fail("192.0.2.7");
  t.equal(ga.blockedFor("192.0.2.7"), 0, "three failures on A: not yet");
  t.equal(gb.blockedFor("192.0.2.7"), 0, "B has seen none");
  await gb.fail("192.0.2.7");
  t.ok(gb.blockedFor("192.0.2.7") >= 29, "B's first failure is the fourth of the shared count: blocked");
  await ga.fail("192.0.2.7");
  t.ok(ga.blockedFor("192.0.2.7") >= 29, "A is blocked at its next failure");
  t.equal(ga.blockedFor("192.0.2.8"), 0, "another address is not");
  now += 31_000;
  t.equal(ga.blockedFor("192.0.2.7"), 0, "the block ends with the window");
  await a.close();
  await b.close();
  await cleanup();
});

test("two different credentials are a 400; the same key twice is fine", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url);
  const k1 = await createTenant(g.url, { tenant_id: "acme" });
  const k2 = await createTenant(g.url, { tenant_id: "other" });
  const cases: Array<[string, Record<string, string>, number]> = [
    ["X-Api-Key of one tenant, Bearer of another", { "x-api-key": k1, authorization: `Bearer ${k2}` }, 400],
    ["X-Api-Key and an unknown Bearer", { "x-api-key": k1, authorization: "Bearer nonsense" }, 400],
    ["two X-Api-Key values", { "x-api-key": `${k1}, ${k2}` }, 400],
    ["the same key in both", { "x-api-key": k1, authorization: `Bearer ${k1}` }, 200],
  ];
  engine.seen.length = 0;
  for (const [name, headers, status] of cases) {
    const r = await call(g.url, "/v1/get/default/k", { headers });
    t.equal(r.status, status, `${name}: ${status}`);
    if (status === 400) t.match(r.json.detail, /two different credentials/, "the detail says why");
  }
  t.equal(engine.seen.length, 1, "only the consistent request reached the engine");
  const adm = await call(g.url, "/gate/admin/tenants", { headers: { authorization: `Bearer ${SERVICE_KEY}`, "x-api-key": k1 } });
  t.equal(adm.status, 400, "a service key with a tenant key on an admin route: 400");
  // Two Authorization headers (Node keeps only the first in req.headers).
  const { rawRequest } = await import("./abuse-env.js");
  const two = await rawRequest(g.url, `GET /v1/get/default/k HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k1}\r\nAuthorization: Bearer ${k2}\r\nConnection: close`, [], 0);
  t.equal(two.status, 400, "two Authorization headers with different keys: 400");
  await g.close();
  await engine.close();
});

test("an audit record is bounded: a long path is cut with a marker", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url);
  const key = await createTenant(g.url, { tenant_id: "acme" });
  const long = "/v1/get/default/" + "k".repeat(60_000);
  const r = await call(g.url, long, { key });
  t.equal(r.status, 400, "a key that long is refused");
  const rec = g.audit.records.at(-1)!;
  t.ok(rec.path.length < AUDIT_MAX_PATH + 40, `the stored path has ${rec.path.length} characters`);
  t.ok(rec.path.startsWith("/v1/get/default/kkk"), "it keeps the beginning");
  t.match(rec.path, new RegExp(`\\.\\.\\.\\[truncated ${long.length - AUDIT_MAX_PATH} characters\\]$`), "and says how much was dropped");
  const line = auditLine({ ...rec, method: "X".repeat(10_000), tenant_id: "t".repeat(10_000), namespace: "n".repeat(10_000), request_id: "r".repeat(10_000), path: "/".repeat(100_000) });
  t.ok(line.length < 2000, `every field is bounded: a record of hostile fields is ${line.length} bytes`);
  await g.close();
  await engine.close();
});

test("a service key shorter than 32 characters stops svc gateway and svc up with one line naming the variable", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-short-key-"));
  for (const cmd of [["gateway"], ["up", "--port", "0", "--engine-port", "0", "--data", dir]]) {
    const r = spawnSync(process.execPath, ["--import", "tsx", "bin/svc.ts", ...cmd], {
      env: { PATH: process.env.PATH, SVC_GATE_ENGINE_SERVICE_KEY: "k".repeat(31), SVC_ENGINE_LOG_LEVEL: "warn" },
      encoding: "utf8",
      timeout: 60_000,
    });
    t.notEqual(r.status, 0, `svc ${cmd[0]} exits non-zero`);
    const lines = r.stderr.trim().split("\n");
    t.equal(lines.length, 1, `svc ${cmd[0]}: one line`);
    t.match(lines[0]!, /SVC_GATE_ENGINE_SERVICE_KEY must be at least 32 characters/, `svc ${cmd[0]}: names the variable`);
  }
  rmSync(dir, { recursive: true, force: true });
  t.end();
});
