// Failed authentication and audit volume: failures are throttled per client address (tenant
// keys, service keys on admin routes, missing keys), a throttled address gets 429 +
// Retry-After for failing attempts and writes no audit records for them, while a valid key from
// it is served; behind a trusted proxy the client's own address counts; with Redis the count is
// shared by gateways. Two different credentials are a 400; an audit record stays small
// whatever the path's length; a service key shorter than 32 characters stops start-up.
import test from "tape";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { IncomingMessage } from "node:http";
import { MemoryAuthThrottle, RedisAuthThrottle } from "../../server/gateway/auth-throttle.js";
import { clientAddress, isAddressOrRange, trustedProxies } from "../../server/gateway/client-address.js";
import { AUDIT_MAX_PATH, auditLine } from "../../server/gateway/audit.js";
import { RespConnection } from "../../server/gateway/resp.js";
import { admin, call, createTenant, REDIS_URL, redisFor, SERVICE_KEY, startFakeEngine, startTestGateway, uniquePrefix } from "./helpers.js";

test("failed authentication is throttled per address: failing attempts get 429 + Retry-After, valid keys go on; no audit flood", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url, { limits: { authFailLimit: 5, authFailWindowS: 60 } });
  const key = await createTenant(g.url, { tenant_id: "acme" });
  const before = g.audit.records.length;
  const statuses: number[] = [];
  const wrong = `svc_live_${"x".repeat(43)}`;
  for (let i = 0; i < 4; i++) statuses.push((await call(g.url, "/v1/get/default/k", { key: wrong })).status);
  statuses.push(
    (
      await admin(g.url, "/gate/admin/tenants", undefined, "GET").then(() =>
        call(g.url, "/gate/admin/tenants", { headers: { authorization: `Bearer ${"w".repeat(48)}` } }),
      )
    ).status,
  );
  t.deepEqual(statuses, [401, 401, 401, 401, 401], "five failures (four tenant keys, one service key) are answered 401");
  await new Promise((r) => setTimeout(r, 50));
  const r = await call(g.url, "/v1/get/default/k", { key: wrong });
  t.equal(r.status, 429, "the next failing attempt is refused");
  t.equal(r.json.code, "rate_limited");
  t.match(r.json.detail, /Too many failed authentications from this address; retry after \d+ seconds\./);
  t.ok(Number(r.headers.get("retry-after")) >= 59, "Retry-After up to the window's end");
  t.equal((await call(g.url, "/v1/get/default/k")).status, 429, "a request without a key is refused too");
  t.equal((await call(g.url, "/v1/get/default/k", { key: "not-a-tenant-key" })).status, 429, "and one with a key of the wrong form");
  t.equal((await call(g.url, "/gate/admin/tenants", { headers: { authorization: `Bearer ${"w".repeat(48)}` } })).status, 429, "and a wrong service key");
  const ok = await call(g.url, "/v1/get/default/k", { key });
  t.equal(ok.status, 200, "a valid tenant key from the same address is served");
  const adm = await admin(g.url, "/gate/admin/tenants", undefined, "GET");
  t.equal(adm.status, 200, "the right service key is served on admin routes");
  const flood = await Promise.all(Array.from({ length: 200 }, (_, i) => call(g.url, "/v1/" + "p".repeat(90_000), i % 2 ? { key: wrong } : {})));
  t.ok(
    flood.every((f) => f.status === 429),
    "an unauthenticated flood of 90 KB paths (no key, wrong keys) gets 429s",
  );
  t.equal((await call(g.url, "/v1/get/default/k", { key })).status, 200, "the valid key is still served during the flood");
  const recs = g.audit.records.slice(before);
  t.equal(recs.length, 9, `${recs.length} audit records for ${flood.length + 12} requests: the five 401s and the four calls served, none for a 429`);
  g.clock.advance(61_000);
  t.equal((await call(g.url, "/v1/get/default/k", { key: wrong })).status, 401, "the window over, a wrong key is answered 401 again");
  await g.close();
  await engine.close();
});

test("behind a trusted proxy (SVC_GATE_TRUSTED_PROXIES) failures count per X-Forwarded-For client; elsewhere the header is ignored", async (t) => {
  const engine = await startFakeEngine();
  const wrong = `svc_live_${"y".repeat(43)}`;
  const g = await startTestGateway(engine.url, { limits: { authFailLimit: 3, authFailWindowS: 60, trustedProxies: ["127.0.0.0/8", "::1"] } });
  const key = await createTenant(g.url, { tenant_id: "acme" });
  const from = (xff: string, k = wrong) => call(g.url, "/v1/get/default/k", { key: k, headers: { "x-forwarded-for": xff } });
  for (let i = 0; i < 3; i++) t.equal((await from("203.0.113.7")).status, 401, `failure ${i + 1} of 203.0.113.7`);
  await new Promise((r) => setTimeout(r, 50));
  t.equal((await from("203.0.113.7")).status, 429, "203.0.113.7 is throttled");
  t.equal((await from("198.51.100.1, 203.0.113.7")).status, 429, "an address the client wrote left of it does not help");
  t.equal((await from("203.0.113.7, 127.0.0.1")).status, 429, "a second trusted hop is walked past");
  t.equal((await from("203.0.113.8")).status, 401, "another client behind the same proxy is not throttled");
  t.equal((await from("203.0.113.7", key)).status, 200, "the throttled client's valid key is served");
  await g.close();

  const plain = await startTestGateway(engine.url, { limits: { authFailLimit: 3, authFailWindowS: 60 } });
  const k2 = await createTenant(plain.url, { tenant_id: "acme" });
  for (let i = 0; i < 3; i++) await call(plain.url, "/v1/get/default/k", { key: wrong, headers: { "x-forwarded-for": `192.0.2.${i}` } });
  await new Promise((r) => setTimeout(r, 50));
  const spoofed = await call(plain.url, "/v1/get/default/k", { key: wrong, headers: { "x-forwarded-for": "192.0.2.99" } });
  t.equal(spoofed.status, 429, "without a trusted proxy, X-Forwarded-For does not spread failures over made-up addresses");
  t.equal((await call(plain.url, "/v1/get/default/k", { key: k2 })).status, 200, "and a valid key from that address is served");
  await plain.close();
  await engine.close();
});

test("clientAddress: hostile X-Forwarded-For values", (t) => {
  const trusted = trustedProxies(["10.0.0.0/8", "fd00::/8"]);
  const req = (peer: string, xff?: string | string[]) =>
    ({ socket: { remoteAddress: peer }, headers: xff === undefined ? {} : { "x-forwarded-for": xff } }) as unknown as IncomingMessage;
  t.equal(clientAddress(req("203.0.113.1", "1.2.3.4"), trusted), "203.0.113.1", "an untrusted peer's header is ignored");
  t.equal(clientAddress(req("10.1.2.3", "1.2.3.4"), trusted), "1.2.3.4", "a trusted peer's is read");
  t.equal(clientAddress(req("::ffff:10.1.2.3", " 1.2.3.4 "), trusted), "1.2.3.4", "an IPv4-mapped peer matches the IPv4 range");
  t.equal(clientAddress(req("fd00::5", "2001:db8::1"), trusted), "2001:db8::1", "IPv6 proxy and client");
  t.equal(clientAddress(req("10.1.2.3", "1.2.3.4, not-an-address"), trusted), "10.1.2.3", "garbage ends the walk at the hop that passed it");
  t.equal(clientAddress(req("10.1.2.3", ""), trusted), "10.1.2.3", "an empty header");
  t.equal(clientAddress(req("10.1.2.3", ["5.6.7.8", "1.2.3.4"]), trusted), "1.2.3.4", "two headers read as one list");
  t.equal(clientAddress(req("10.1.2.3", "10.0.0.9, 10.0.0.8"), trusted), "10.0.0.9", "all hops trusted: the leftmost");
  const long = Array.from({ length: 5000 }, () => "10.0.0.1").join(",");
  t.equal(clientAddress(req("10.1.2.3", long), trusted), "10.0.0.1", "a header of 5,000 trusted hops is read from its right end only");
  t.equal(clientAddress(req("10.1.2.3", "1.2.3.4"), trustedProxies([])), "10.1.2.3", "no trusted proxies: the peer");
  t.ok(
    isAddressOrRange("10.0.0.0/8") &&
      isAddressOrRange("::1") &&
      !isAddressOrRange("10.0.0.0/33") &&
      !isAddressOrRange("host.example") &&
      !isAddressOrRange("1.2.3.4/"),
    "config entries: addresses and ranges only",
  );
  t.end();
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
  const two = await rawRequest(
    g.url,
    `GET /v1/get/default/k HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k1}\r\nAuthorization: Bearer ${k2}\r\nConnection: close`,
    [],
    0,
  );
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
  const line = auditLine({
    ...rec,
    method: "X".repeat(10_000),
    tenant_id: "t".repeat(10_000),
    namespace: "n".repeat(10_000),
    request_id: "r".repeat(10_000),
    path: "/".repeat(100_000),
  });
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
