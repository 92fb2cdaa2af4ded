// Billing enabled: plan rate limits, quota exhaustion (503 before the engine), the monthly
// reset at 00:00 UTC on the 1st with an injected clock, and a tier upgrade lifting the block.
import test from "tape";
import { admin, call, createTenant, startFakeEngine, startTestGateway } from "./helpers.js";

test("quota: 503 quota_exhausted with the detail and Retry-After; reset on the 1st 00:00 UTC; upgrade lifts it", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url, { billingEnabled: true });
  g.clock.set(Date.UTC(2026, 0, 31, 23, 0, 0));
  const key = await createTenant(g.url, { tenant_id: "acme" });
  // 999.5 CUs already used this month: one more put (1 CU) is allowed, then the quota is reached.
  await g.deps.usage.add("acme", "2026-01", "put", 999_500);
  const r1 = await call(g.url, "/v1/put", { key, body: { namespace: "default", key: "k", data_b64: "AAAA" } });
  t.equal(r1.status, 201, "under the quota: forwarded");
  t.equal(r1.headers.get("x-ratelimit-limit"), "10", "billing on: the starter plan's 10 requests");
  engine.seen.length = 0;
  const r2 = await call(g.url, "/v1/get/default/k", { key });
  t.equal(r2.status, 503, "quota reached: 503");
  t.equal(r2.json.code, "quota_exhausted");
  t.equal(
    r2.json.detail,
    "Monthly CU quota exhausted for tenant acme: 1000.5 of 1000 CUs used; it resets at 2026-02-01T00:00:00.000Z.",
    "detail names tenant, usage, quota and reset instant",
  );
  t.equal(r2.headers.get("retry-after"), "3600", "Retry-After up to the reset instant");
  t.equal(r2.headers.get("x-svc-cus"), "0");
  t.ok(r2.headers.get("x-ratelimit-remaining") !== null, "rate-limit headers on the 503");
  t.equal(engine.seen.length, 0, "the engine was not contacted");
  t.equal(g.audit.records.at(-1)!.status, 503, "the 503 is audited");
  const u = await admin(g.url, "/gate/admin/usage/acme", undefined, "GET");
  t.equal(u.json.utilization, 1.0005);
  t.equal(u.json.overage_cus, 0.5, "0.5 CU over");
  t.equal(u.json.overage_amount, 0, "starter has no overage rate");

  g.clock.set(Date.UTC(2026, 0, 31, 23, 59, 59, 999));
  t.equal((await call(g.url, "/v1/get/default/k", { key })).status, 503, "1 ms before the month ends: still 503");
  g.clock.set(Date.UTC(2026, 1, 1, 0, 0, 0, 0));
  const r3 = await call(g.url, "/v1/get/default/k", { key });
  t.equal(r3.status, 200, "at 2026-02-01T00:00Z the new period starts");
  t.equal((await admin(g.url, "/gate/admin/usage/acme", undefined, "GET")).json.cus_used, 0.1, "February usage starts from zero");
  t.equal((await admin(g.url, "/gate/admin/usage/acme?period=2026-01", undefined, "GET")).json.cus_used, 1000.5, "January is kept");

  await g.deps.usage.add("acme", "2026-02", "put", 1_000_000);
  t.equal((await call(g.url, "/v1/get/default/k", { key })).status, 503, "exhausted again in February");
  const up = await admin(g.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "builder" });
  t.deepEqual(
    up.json,
    { tenant_id: "acme", plan: "builder", monthly_quota: 50000, rate_limit: { requests: 100, window_s: 60 } },
    "billing on: the builder rate limit",
  );
  const r4 = await call(g.url, "/v1/get/default/k", { key });
  t.equal(r4.status, 200, "a tier upgrade lifts the block at once");
  t.equal(r4.headers.get("x-ratelimit-limit"), "100", "and the plan's rate limit applies");
  await g.close();
  await engine.close();
});

test("billing off: usage is metered but no quota is enforced; enterprise overrides apply", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url, { billingEnabled: false, defaultRateLimit: { requests: 50, window_s: 60 } });
  const key = await createTenant(g.url, { tenant_id: "free" });
  await g.deps.usage.add("free", "2026-01", "put", 5_000_000);
  const r = await call(g.url, "/v1/get/default/k", { key });
  t.equal(r.status, 200, "5,000 CUs over a 1,000 quota, still served with billing off");
  t.equal(r.headers.get("x-ratelimit-limit"), "50", "the SVC_GATE_DEFAULT_* limit, not the plan's 10");
  const ek = await createTenant(g.url, { tenant_id: "big", plan: "enterprise", rate_limit: { requests: 2, window_s: 5 }, monthly_quota: 10 });
  await call(g.url, "/v1/get/default/k", { key: ek });
  await call(g.url, "/v1/get/default/k", { key: ek });
  const r2 = await call(g.url, "/v1/get/default/k", { key: ek });
  t.equal(r2.status, 429, "an enterprise tenant's own rate limit applies with billing off");
  t.equal(r2.headers.get("x-ratelimit-limit"), "2");
  await g.close();
  await engine.close();
});

test("billing on: enterprise without a quota is never blocked; with one it is", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url, { billingEnabled: true });
  const none = await createTenant(g.url, { tenant_id: "ent", plan: "enterprise" });
  await g.deps.usage.add("ent", "2026-01", "put", 10_000_000_000);
  t.equal((await call(g.url, "/v1/get/default/k", { key: none })).status, 200, "no quota: served");
  const some = await createTenant(g.url, { tenant_id: "ent2", plan: "enterprise", monthly_quota: 5 });
  await g.deps.usage.add("ent2", "2026-01", "put", 5000);
  t.equal((await call(g.url, "/v1/get/default/k", { key: some })).status, 503, "custom quota of 5 CUs reached: 503");
  await g.close();
  await engine.close();
});
