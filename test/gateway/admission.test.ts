// The one-round-trip Redis admission (admission.ts): tenant records cached per gateway and
// confirmed by the admission script, so that every change made through another gateway
// (rotation, deactivation, new namespace, new limits) decides the very next request; the
// cache bound; the quota read of the same script with billing on (503 before the engine, the
// next UTC month admits again); and the usage increment acknowledged after the response.
import test from "tape";
import { RedisAdmission } from "../../server/gateway/admission.js";
import type { GatewayDeps } from "../../server/gateway/app.js";
import { MemoryUsageStore, RedisUsageStore } from "../../server/gateway/meter.js";
import { RedisRateLimiter } from "../../server/gateway/ratelimit.js";
import { RespConnection } from "../../server/gateway/resp.js";
import { RedisTenantRegistry } from "../../server/gateway/tenants.js";
import { admin, call, createTenant, REDIS_URL, redisFor, startFakeEngine, startTestGateway, uniquePrefix, type TestGateway } from "./helpers.js";

async function redisGateway(
  engineUrl: string,
  prefix: string,
  maxEntries?: number,
  over: Partial<GatewayDeps> = {},
): Promise<TestGateway & { admission: RedisAdmission; link: RespConnection }> {
  const link = await RespConnection.open(REDIS_URL);
  const registry = new RedisTenantRegistry(link, prefix);
  const admission = new RedisAdmission(link, registry, prefix, maxEntries);
  const g = await startTestGateway(engineUrl, {
    registry,
    admission,
    limiter: new RedisRateLimiter(link, prefix),
    usage: new RedisUsageStore(link, prefix),
    defaultRateLimit: { requests: 50, window_s: 60 },
    ...over,
  });
  return {
    ...g,
    admission,
    link,
    close: async () => {
      await g.close();
      await link.close();
    },
  };
}

test("admission: a change made through gateway A decides the next request on gateway B, whose cache holds the old record", async (t) => {
  const engine = await startFakeEngine();
  const prefix = uniquePrefix();
  const a = await redisGateway(engine.url, prefix);
  const b = await redisGateway(engine.url, prefix);
  try {
    const oldKey = await createTenant(a.url, { tenant_id: "acme" });
    const r1 = await call(b.url, "/v1/get/default/k", { key: oldKey });
    t.equal(r1.status, 200, "B serves the key");
    t.equal(b.admission.cachedEntries, 1, "and caches the record");
    t.equal(r1.headers.get("x-ratelimit-remaining"), "49");

    const rot = await admin(a.url, "/gate/onboard/rotate-key", { tenant_id: "acme" });
    t.equal(rot.status, 200, "rotated through A");
    engine.seen.length = 0;
    const r2 = await call(b.url, "/v1/get/default/k", { key: oldKey });
    t.equal(r2.status, 401, "the old key fails on B at once, although B had it cached");
    t.equal(r2.json.detail, "Invalid API key.");
    t.equal(r2.headers.get("x-ratelimit-remaining"), null, "no rate headers for an unknown key");
    t.equal(b.audit.records.at(-1)!.tenant_id, "", "audited as unauthenticated");
    const r3 = await call(b.url, "/v1/put", { key: oldKey, body: { namespace: "default" } });
    t.equal(r3.status, 401, "a malformed request with the old key is a 401 too, not a 400");
    const r4 = await call(b.url, "/v1/get/other/k", { key: oldKey });
    t.equal(r4.status, 401, "and one naming a namespace outside the ACL, not a 403");
    t.equal(engine.seen.length, 0, "none of them reached the engine");

    const key = rot.json.api_key as string;
    const r5 = await call(b.url, "/v1/get/default/k", { key });
    t.equal(r5.status, 200, "the new key works on B");
    t.equal(r5.headers.get("x-ratelimit-remaining"), "48", "the refused requests were never counted in the window");

    // A new namespace through A: B's cached ACL lacks it, the request is decided on the stored record.
    t.equal((await admin(a.url, "/gate/onboard/add-namespace", { tenant_id: "acme", namespace: "extra" })).status, 200);
    const r6 = await call(b.url, "/v1/get/extra/k", { key });
    t.equal(r6.status, 200, "the namespace added through A is allowed on B at once, not 403");
    t.equal(engine.seen.at(-1)!.url, "/v1/get/extra/k");

    // New limits through A: the cached record passes the ACL but the admission script sees the change.
    const up = await admin(a.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "enterprise", rate_limit: { requests: 7, window_s: 30 } });
    t.equal(up.status, 200);
    const r7 = await call(b.url, "/v1/get/default/k", { key });
    t.equal(r7.status, 200);
    t.equal(r7.headers.get("x-ratelimit-limit"), "7", "B applies the limit set through A at once");

    const r8 = await call(b.url, "/v1/get/nope/k", { key });
    t.equal(r8.status, 403, "a namespace that is really outside the ACL: 403");
    t.equal(r8.headers.get("x-ratelimit-limit"), "7", "with the window's headers");

    t.equal((await admin(a.url, "/gate/onboard/deactivate", { tenant_id: "acme" })).status, 200, "deactivated through A");
    t.equal((await call(b.url, "/v1/get/default/k", { key })).status, 401, "the key fails on B at once");
    t.equal(b.admission.cachedEntries, 0, "and B's cache no longer holds it");

    const u = await admin(a.url, "/gate/admin/usage/acme", undefined, "GET");
    t.equal(u.json.cus_used, 0.4, "usage: exactly the four 200s served by B (0.1 CU each)");
  } finally {
    await a.close();
    await b.close();
    const { cleanup } = await redisFor(prefix);
    await cleanup();
    await engine.close();
  }
});

test("admission with billing on: the quota read in the admission script gives 503 before the engine; the next UTC month admits again", async (t) => {
  const engine = await startFakeEngine();
  const prefix = uniquePrefix();
  const g = await redisGateway(engine.url, prefix, undefined, { billingEnabled: true });
  try {
    g.clock.set(Date.UTC(2026, 0, 31, 23, 0, 0));
    const key = await createTenant(g.url, { tenant_id: "acme" }); // starter: 1,000 CUs, 10 requests per 60 s
    await g.deps.usage.add("acme", "2026-01", "put", 999_500);
    const r1 = await call(g.url, "/v1/put", { key, body: { namespace: "default", key: "k", data_b64: "AAAA" } });
    t.equal(r1.status, 201, "999.5 of 1000 CUs used: forwarded");
    t.equal(r1.headers.get("x-ratelimit-limit"), "10", "the starter plan's rate limit (billing on)");
    t.equal(g.admission.cachedEntries, 1, "the record is cached: the next request is admitted by the one script");
    t.equal(await g.deps.usage.total("acme", "2026-01"), 1_000_500, "the put's CU is in Redis");

    engine.seen.length = 0;
    const r2 = await call(g.url, "/v1/get/default/k", { key });
    t.equal(r2.status, 503, "quota reached: 503");
    t.equal(r2.json.code, "quota_exhausted");
    t.equal(
      r2.json.detail,
      "Monthly CU quota exhausted for tenant acme: 1000.5 of 1000 CUs used; it resets at 2026-02-01T00:00:00.000Z.",
      "the detail names tenant, usage, quota and reset instant",
    );
    t.equal(r2.headers.get("retry-after"), "3600", "Retry-After up to the reset instant");
    t.equal(r2.headers.get("x-svc-cus"), "0", "nothing charged");
    t.equal(r2.headers.get("x-ratelimit-remaining"), "8", "the 503 counted in the window (step 5 admitted it)");
    t.equal(engine.seen.length, 0, "the engine was not contacted");
    t.equal(g.audit.records.at(-1)!.status, 503, "audited");
    t.equal((await call(g.url, "/v1/list/default", { key })).status, 503, "every operation is blocked");

    g.clock.set(Date.UTC(2026, 0, 31, 23, 59, 59, 999));
    t.equal((await call(g.url, "/v1/get/default/k", { key })).status, 503, "1 ms before the month ends: still 503");
    t.equal(engine.seen.length, 0, "still not contacted");
    g.clock.set(Date.UTC(2026, 1, 1, 0, 0, 0, 0));
    const r3 = await call(g.url, "/v1/get/default/k", { key });
    t.equal(r3.status, 200, "at 2026-02-01T00:00Z the new period admits again");
    t.equal(engine.seen.length, 1, "and the engine is contacted");
    t.equal(await g.deps.usage.total("acme", "2026-02"), 100, "February usage starts from the one get");
    t.equal(await g.deps.usage.total("acme", "2026-01"), 1_000_500, "January is kept");

    await g.deps.usage.add("acme", "2026-02", "put", 999_900);
    t.equal((await call(g.url, "/v1/get/default/k", { key })).status, 503, "exhausted again in February: the script reads the new period's total");
  } finally {
    await g.close();
    const { cleanup } = await redisFor(prefix);
    await cleanup();
    await engine.close();
  }
});

test("admission: the cache keeps at most maxEntries records, oldest dropped first", async (t) => {
  const engine = await startFakeEngine();
  const prefix = uniquePrefix();
  const g = await redisGateway(engine.url, prefix, 2);
  try {
    const keys = [];
    for (const id of ["t1", "t2", "t3"]) keys.push(await createTenant(g.url, { tenant_id: id }));
    for (const k of keys) t.equal((await call(g.url, "/v1/get/default/k", { key: k })).status, 200);
    t.equal(g.admission.cachedEntries, 2, "bounded");
    t.equal((await call(g.url, "/v1/get/default/k", { key: keys[0] })).status, 200, "an evicted record is read again");
    t.equal(g.admission.cachedEntries, 2);
  } finally {
    await g.close();
    const { cleanup } = await redisFor(prefix);
    await cleanup();
    await engine.close();
  }
});

test("metering: the charge is acknowledged before the response starts; a failure is logged, not hidden", async (t) => {
  const engine = await startFakeEngine();
  const usage = new MemoryUsageStore();
  const logged: Array<Record<string, unknown>> = [];
  const g = await startTestGateway(engine.url, { usage, log: (e) => logged.push(e) });
  const key = await createTenant(g.url, { tenant_id: "acme" });
  // The increment is in the store by the time the client has the response.
  const r1 = await call(g.url, "/v1/get/default/k", { key });
  t.equal(r1.headers.get("x-svc-cus"), "0.1");
  t.equal(await usage.total("acme", "2026-01"), 100, "counted before the client saw the answer");

  // An increment that fails after the engine answered 2xx: the client gets the engine's answer
  // (the operation happened); the failure is reported with the request id and class only.
  let release!: () => void;
  const slow = new Promise<void>((r) => (release = r));
  usage.add = async () => {
    await slow;
    throw new RangeError("store gone");
  };
  let answered = false;
  const pending = call(g.url, "/v1/get/default/k", { key }).then((r) => {
    answered = true;
    return r;
  });
  await new Promise((r) => setTimeout(r, 300));
  t.notOk(answered, "the response waits for the charge (a killed gateway loses no acknowledged charge)");
  t.equal(logged.length, 0, "nothing logged while the increment is in flight");
  release();
  const r2 = await pending;
  t.equal(r2.status, 200, "the engine's answer goes out once the charge failed");
  t.deepEqual(
    logged,
    [{ level: "error", msg: "internal error in the usage meter", request_id: r2.headers.get("x-request-id"), error: "RangeError" }],
    "the failure is logged",
  );
  t.equal(r2.headers.get("x-svc-cus"), "0", "X-SVC-CUs says nothing was charged");
  t.equal(g.audit.records.at(-1)!.cus, 0, "the audit record says what was charged: nothing, since the charge failed");
  await g.close();
  await engine.close();
});
