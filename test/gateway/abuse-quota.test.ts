// Quota reservations: with billing on, an enterprise tenant with a quota of 5 CUs sends 50
// concurrent puts (1 CU each) and exactly 5 succeed, in memory and on Redis with two gateways
// at once; a request the engine refuses gives its reservation back. A GET or DELETE sent with
// a body gets a JSON 400, is audited as that 400 and charged nothing.
import test from "tape";
import { RedisAdmission } from "../../server/gateway/admission.js";
import { RedisUsageStore } from "../../server/gateway/meter.js";
import type { EngineClient } from "../../server/gateway/proxy.js";
import { UndiciEngineClient } from "../../server/gateway/proxy.js";
import { RedisRateLimiter } from "../../server/gateway/ratelimit.js";
import { RespConnection } from "../../server/gateway/resp.js";
import { RedisTenantRegistry } from "../../server/gateway/tenants.js";
import { rawRequest } from "./abuse-env.js";
import { admin, call, createTenant, REDIS_URL, redisFor, SERVICE_KEY, startFakeEngine, startTestGateway, uniquePrefix } from "./helpers.js";

/** The engine, 50 ms slower: many requests are in flight between admission and settlement. */
function slowEngine(url: string): EngineClient {
  const inner = new UndiciEngineClient(url, SERVICE_KEY, 10_000, 64);
  return {
    forward: async (r) => {
      await new Promise((res) => setTimeout(res, 50));
      return inner.forward(r);
    },
    ping: () => inner.ping(),
    close: () => inner.close(),
  };
}

const TENANT = { tenant_id: "ent", plan: "enterprise", monthly_quota: 5, rate_limit: { requests: 10_000, window_s: 60 } };
const put = (url: string, key: string, i: number) => call(url, "/v1/put", { key, body: { namespace: "default", key: `k${i}`, data_b64: "AAAA" } });

test("memory: 50 concurrent puts against a quota of 5 CUs: exactly 5 succeed, 5 CUs used", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url, { engine: slowEngine(engine.url), billingEnabled: true });
  const key = await createTenant(g.url, TENANT);
  const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => put(g.url, key, i)));
  t.equal(rs.filter((r) => r.status === 201).length, 5, "5 puts stored");
  t.equal(rs.filter((r) => r.status === 503 && r.json.code === "quota_exhausted").length, 45, "45 refused with quota_exhausted");
  t.equal(engine.seen.length, 5, "only the admitted reached the engine");
  const u = await admin(g.url, "/gate/admin/usage/ent", undefined, "GET");
  t.equal(u.json.cus_used, 5, "exactly the quota used");
  await g.close();
  await engine.close();
});

test("memory: a request the engine refuses gives its reservation back; an unsettled one expires", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url, { billingEnabled: true });
  const key = await createTenant(g.url, { ...TENANT, monthly_quota: 1 });
  engine.respond = () => ({ status: 409, body: { detail: "conflict", code: "version_conflict", request_id: "x" } });
  t.equal((await put(g.url, key, 0)).status, 409, "the engine refuses");
  engine.respond = null;
  t.equal((await put(g.url, key, 1)).status, 201, "the CU reserved for it was given back: the next put fits");
  t.equal((await put(g.url, key, 2)).status, 503, "the quota is then used");
  await g.close();
  await engine.close();
});

test("Redis: two gateways, 50 concurrent puts in all against a quota of 5 CUs: exactly 5 succeed", async (t) => {
  const prefix = uniquePrefix();
  const { cleanup } = await redisFor(prefix);
  const engine = await startFakeEngine();
  const links: RespConnection[] = [];
  const gateways = [];
  for (let i = 0; i < 2; i++) {
    const redis = await RespConnection.open(REDIS_URL);
    links.push(redis);
    const registry = new RedisTenantRegistry(redis, prefix);
    gateways.push(
      await startTestGateway(engine.url, {
        engine: slowEngine(engine.url),
        billingEnabled: true,
        registry,
        usage: new RedisUsageStore(redis, prefix),
        limiter: new RedisRateLimiter(redis, prefix),
        admission: new RedisAdmission(redis, registry, prefix),
      }),
    );
  }
  const [a, b] = gateways as [Awaited<ReturnType<typeof startTestGateway>>, Awaited<ReturnType<typeof startTestGateway>>];
  const key = await createTenant(a.url, TENANT);
  const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => put(i % 2 ? a.url : b.url, key, i)));
  t.equal(rs.filter((r) => r.status === 201).length, 5, "5 puts stored across both gateways");
  t.equal(rs.filter((r) => r.status === 503).length, 45, "45 refused");
  const u = await admin(b.url, "/gate/admin/usage/ent", undefined, "GET");
  t.equal(u.json.cus_used, 5, "exactly the quota used");
  t.equal(u.json.breakdown.put, 5, "charged as puts");
  // Reservations are gone once settled: the set is empty (the key expired or holds nothing).
  const { redis } = await redisFor(prefix);
  t.equal(await redis.zCard(`${prefix}resv:2026-01:ent`), 0, "no reservation left behind");
  await redis.quit();
  for (const g of gateways) await g.close();
  for (const l of links) await l.close();
  await engine.close();
  await cleanup();
});

test("GET and DELETE with a body: a JSON 400, audited as 400, nothing charged or forwarded", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url);
  const key = await createTenant(g.url, { tenant_id: "acme" });
  engine.seen.length = 0;
  for (const method of ["GET", "DELETE"]) {
    const path = method === "GET" ? "/v1/get/default/k" : "/v1/delete/default/k";
    const chunked = await rawRequest(
      g.url,
      `${method} ${path} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nTransfer-Encoding: chunked`,
      ["5\r\nhello\r\n0\r\n\r\n"],
      0,
    );
    t.equal(chunked.status, 400, `${method} with a chunked body: 400`);
    t.match(JSON.parse(chunked.body).detail, /^A (GET|DELETE) request takes no body\.$/, "the detail says why");
    t.equal(chunked.headers["x-svc-cus"], "0", "0 CUs");
    const rec = g.audit.records.at(-1)!;
    t.deepEqual([rec.method, rec.status, rec.cus], [method, 400, 0], "audited as the 400 the client got");
    const sized = await rawRequest(g.url, `${method} ${path} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Length: 5`, ["hello"], 0);
    t.equal(sized.status, 400, `${method} with a Content-Length body: 400`);
  }
  t.equal(engine.seen.length, 0, "nothing reached the engine");
  t.equal(await g.deps.usage.total("acme", "2026-01"), 0, "nothing charged");
  const ok = await rawRequest(g.url, `GET /v1/get/default/k HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Length: 0`, [], 0);
  t.equal(ok.status, 200, "Content-Length: 0 is no body");
  await g.close();
  await engine.close();
});
