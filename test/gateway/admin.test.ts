// Admin endpoints over real HTTP: statuses of docs/api.md (errors, admin routes), keys shown once and
// stored hashed, rotation and deactivation, plans and enterprise overrides, usage records.
import test from "tape";
import { createHash } from "node:crypto";
import { admin, call, createTenant, SERVICE_KEY, startFakeEngine, startTestGateway, type FakeEngine, type TestGateway } from "./helpers.js";

let engine: FakeEngine;
let gw: TestGateway;

test("setup", async () => {
  engine = await startFakeEngine();
  gw = await startTestGateway(engine.url);
});

test("create: 201 with the documented fields and defaults; the key is stored only as its SHA-256", async (t) => {
  const r = await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme", email: "ops@acme.example" });
  t.equal(r.status, 201);
  t.deepEqual(Object.keys(r.json).sort(), ["api_key", "monthly_quota", "namespaces", "plan", "rate_limit", "tenant_id"], "the documented fields");
  t.equal(r.json.plan, "starter", "default plan starter");
  t.deepEqual(r.json.namespaces, ["default"], "default ACL [default]");
  t.equal(r.json.monthly_quota, 1000, "starter quota 1,000 CUs");
  t.deepEqual(r.json.rate_limit, { requests: 100, window_s: 60 }, "billing off: the SVC_GATE_DEFAULT_* rate limit");
  t.ok(r.json.api_key.length >= 32 && r.json.api_key.startsWith("svc_live_"), "svc_live_ key of at least 32 characters");
  const rec = (await gw.deps.registry.get("acme"))!;
  t.equal(rec.key_hash, createHash("sha256").update(r.json.api_key).digest("hex"), "the registry holds the SHA-256");
  t.notOk(JSON.stringify(rec).includes(r.json.api_key), "and never the key");
  t.equal(rec.email, "ops@acme.example");
});

test("create: 409 for an existing tenant, 400 for an unknown plan, bad id, bad namespace, unknown field, bad JSON", async (t) => {
  const dup = await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" });
  t.equal(dup.status, 409, "existing tenant: 409");
  t.equal(dup.json.code, "version_conflict");
  const cases: Array<[unknown, string]> = [
    [{ tenant_id: "x1", plan: "gold" }, "unknown plan"],
    [{ tenant_id: "Bad Id" }, "bad tenant_id"],
    [{}, "missing tenant_id"],
    [{ tenant_id: "x2", namespaces: ["ok", "no way"] }, "bad namespace"],
    [{ tenant_id: "x3", namespaces: [] }, "empty namespaces"],
    [{ tenant_id: "x4", color: "red" }, "unknown field"],
    [{ tenant_id: "x5", email: "not-an-email" }, "bad email"],
    [{ tenant_id: "x6", plan: "pro", monthly_quota: 5 }, "quota override on a non-enterprise plan"],
    [{ tenant_id: "x7", plan: "enterprise", rate_limit: { requests: 0, window_s: 60 } }, "bad enterprise rate limit"],
  ];
  for (const [body, what] of cases) {
    const r = await admin(gw.url, "/gate/onboard/create", body);
    t.equal(r.status, 400, `${what}: 400`);
    t.equal(r.json.code, "bad_request", `${what}: bad_request (${r.json.detail})`);
  }
  const raw = await fetch(gw.url + "/gate/onboard/create", {
    method: "POST",
    headers: { authorization: `Bearer ${SERVICE_KEY}`, "content-type": "application/json" },
    body: "{oops",
  });
  t.equal(raw.status, 400, "bad JSON: 400");
  t.equal((await gw.deps.registry.list()).length, 1, "no failed request left a tenant behind");
});

test("admin endpoints need the service key: none, a wrong one, or a tenant key is 401", async (t) => {
  const tenantKey = await createTenant(gw.url, { tenant_id: "beta" });
  for (const [what, headers] of [
    ["no key", {}],
    ["wrong key", { authorization: "Bearer wrong-wrong-wrong-wrong" }],
    ["tenant key as Bearer", { authorization: `Bearer ${tenantKey}` }],
    ["tenant key as X-Api-Key", { "x-api-key": tenantKey }],
    ["service key as X-Api-Key", { "x-api-key": SERVICE_KEY }],
  ] as Array<[string, Record<string, string>]>) {
    const r = await fetch(gw.url + "/gate/admin/tenants", { headers });
    t.equal(r.status, 401, `${what}: 401`);
    t.equal(((await r.json()) as { code: string }).code, "unauthorized");
  }
});

test("enterprise monthly_quota: at most three decimals, the thousandths of a CU the meter counts in", async (t) => {
  // 0.0004 was kept as written but enforced as 0 milli-CUs, 1000.0005 as 1000.001.
  for (const q of [0.0004, 1000.0005, 1e-9, 2.0001]) {
    const c = await admin(gw.url, "/gate/onboard/create", { tenant_id: "frac", plan: "enterprise", monthly_quota: q });
    t.equal(c.status, 400, `create with ${q}: 400`);
    t.equal(c.json.detail, "monthly_quota must be a whole number of thousandths of a CU (at most three decimals).", `create with ${q}: the sentence`);
    const u = await admin(gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "enterprise", monthly_quota: q });
    t.equal(u.status, 400, `update-tier with ${q}: 400`);
  }
  t.equal(await gw.deps.registry.get("frac"), null, "no tenant left behind");
  for (const q of [0, 0.001, 1000.5, 1234.567, 999999.999]) {
    const c = await admin(gw.url, "/gate/onboard/create", { tenant_id: `q${String(q).replace(".", "-")}`, plan: "enterprise", monthly_quota: q });
    t.equal(c.status, 201, `create with ${q}: 201`);
    t.equal(c.json.monthly_quota, q, `create with ${q}: kept as written`);
  }
});

test("rotate-key: the old key fails at once, the new one works; 404 for an unknown tenant", async (t) => {
  const oldKey = await createTenant(gw.url, { tenant_id: "rot" });
  t.equal((await call(gw.url, "/v1/get/default/k", { key: oldKey })).status, 200, "old key works before rotation");
  const r = await admin(gw.url, "/gate/onboard/rotate-key", { tenant_id: "rot" });
  t.equal(r.status, 200);
  t.deepEqual(Object.keys(r.json).sort(), ["api_key", "tenant_id"]);
  t.notEqual(r.json.api_key, oldKey, "a new key");
  t.equal((await call(gw.url, "/v1/get/default/k", { key: oldKey })).status, 401, "the old key is refused at once");
  t.equal((await call(gw.url, "/v1/get/default/k", { key: r.json.api_key })).status, 200, "the new key works");
  t.equal((await admin(gw.url, "/gate/onboard/rotate-key", { tenant_id: "ghost" })).status, 404, "unknown tenant: 404");
});

test("add-namespace appends to the ACL (idempotent) and opens that namespace", async (t) => {
  const k = await createTenant(gw.url, { tenant_id: "ns", namespaces: ["a"] });
  t.equal((await call(gw.url, "/v1/list/b", { key: k })).status, 403, "b is not in the ACL yet");
  const r = await admin(gw.url, "/gate/onboard/add-namespace", { tenant_id: "ns", namespace: "b" });
  t.equal(r.status, 200);
  t.deepEqual(r.json, { tenant_id: "ns", namespaces: ["a", "b"] }, "the full list");
  t.deepEqual(
    (await admin(gw.url, "/gate/onboard/add-namespace", { tenant_id: "ns", namespace: "b" })).json.namespaces,
    ["a", "b"],
    "adding twice changes nothing",
  );
  t.equal((await call(gw.url, "/v1/list/b", { key: k })).status, 200, "b is now allowed");
  t.equal((await admin(gw.url, "/gate/onboard/add-namespace", { tenant_id: "ns", namespace: "bad ns" })).status, 400, "bad namespace: 400");
  t.equal((await admin(gw.url, "/gate/onboard/add-namespace", { tenant_id: "nobody", namespace: "c" })).status, 404, "unknown tenant: 404");
});

test("update-tier: plan terms from the tier table; enterprise overrides; unknown plan 400", async (t) => {
  const r = await admin(gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "pro" });
  t.equal(r.status, 200);
  t.deepEqual(
    r.json,
    { tenant_id: "acme", plan: "pro", monthly_quota: 500000, rate_limit: { requests: 100, window_s: 60 } },
    "pro quota; billing off keeps the default rate limit",
  );
  const e = await admin(gw.url, "/gate/onboard/update-tier", {
    tenant_id: "acme",
    plan: "enterprise",
    monthly_quota: 2000000,
    rate_limit: { requests: 5000, window_s: 10 },
  });
  t.deepEqual(
    e.json,
    { tenant_id: "acme", plan: "enterprise", monthly_quota: 2000000, rate_limit: { requests: 5000, window_s: 10 } },
    "enterprise with its own limits, applied even with billing off",
  );
  const e2 = await admin(gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "enterprise", monthly_quota: null });
  t.equal(e2.json.monthly_quota, null, "enterprise without a quota");
  t.equal((await admin(gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "platinum" })).status, 400, "unknown plan: 400");
  t.equal((await admin(gw.url, "/gate/onboard/update-tier", { tenant_id: "nobody", plan: "pro" })).status, 404, "unknown tenant: 404");
  t.equal(
    (await admin(gw.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "builder", rate_limit: { requests: 1, window_s: 1 } })).status,
    400,
    "override on builder: 400",
  );
});

test("deactivate: 200 status deactivated, the key fails at once, listed as inactive; no transition out", async (t) => {
  const k = await createTenant(gw.url, { tenant_id: "gone" });
  const r = await admin(gw.url, "/gate/onboard/deactivate", { tenant_id: "gone" });
  t.equal(r.status, 200);
  t.deepEqual(r.json, { tenant_id: "gone", status: "deactivated" });
  t.equal((await call(gw.url, "/v1/get/default/k", { key: k })).status, 401, "the key is refused at once");
  t.equal((await admin(gw.url, "/gate/onboard/rotate-key", { tenant_id: "gone" })).status, 409, "a deactivated tenant gets no new key (409)");
  t.equal((await admin(gw.url, "/gate/onboard/deactivate", { tenant_id: "gone" })).status, 200, "deactivating again answers 200");
  t.equal((await admin(gw.url, "/gate/onboard/create", { tenant_id: "gone" })).status, 409, "its id cannot be reused");
  t.equal((await admin(gw.url, "/gate/onboard/deactivate", { tenant_id: "nobody" })).status, 404, "unknown tenant: 404");
  const list = await admin(gw.url, "/gate/admin/tenants", undefined, "GET");
  t.equal(list.status, 200);
  t.deepEqual(
    list.json.tenants.find((x: { tenant_id: string }) => x.tenant_id === "gone"),
    { tenant_id: "gone", plan: "starter", namespaces: ["default"], active: false },
  );
  t.ok(
    list.json.tenants.every((x: object) => Object.keys(x).sort().join() === "active,namespaces,plan,tenant_id"),
    "list items have exactly the documented fields",
  );
});

test("usage: per-period list and the single-tenant record with breakdown and overage", async (t) => {
  const k = await createTenant(gw.url, { tenant_id: "meter", plan: "builder" });
  await call(gw.url, "/v1/put", { key: k, body: { namespace: "default", key: "k", data_b64: "AAAA" } });
  await call(gw.url, "/v1/get/default/k", { key: k });
  const one = await admin(gw.url, "/gate/admin/usage/meter", undefined, "GET");
  t.equal(one.status, 200);
  t.equal(one.json.period, "2026-01", "the current UTC month of the injected clock");
  t.equal(one.json.cus_used, 1.1);
  t.equal(one.json.monthly_quota, 50000);
  t.equal(one.json.utilization, 1100 / 50_000_000, "utilization from milli-CUs");
  t.equal(one.json.breakdown.put, 1);
  t.equal(one.json.breakdown.get, 0.1);
  t.deepEqual(
    Object.keys(one.json.breakdown),
    ["put", "put_cores", "put_cores_batch", "get", "serve", "search", "delete", "list", "query_similarity", "query_topk", "query_vector"],
    "every operation is in the breakdown",
  );
  t.equal(one.json.overage_cus, 0);
  t.equal(one.json.overage_amount, 0);
  // Builder over quota: 50,000 CUs + 10.5 CUs over at 0.05 each.
  await gw.deps.usage.add("meter", "2026-01", "put", 50_009_400);
  const over = await admin(gw.url, "/gate/admin/usage/meter?period=2026-01", undefined, "GET");
  t.equal(over.json.cus_used, 50010.5);
  t.equal(over.json.overage_cus, 10.5, "overage in CUs");
  t.equal(over.json.overage_amount, 0.525, "10.5 × 0.05");
  const all = await admin(gw.url, "/gate/admin/usage?period=2026-01", undefined, "GET");
  t.equal(all.status, 200);
  t.equal(all.json.period, "2026-01");
  const m = all.json.tenants.find((x: { tenant_id: string }) => x.tenant_id === "meter");
  t.deepEqual(m, { tenant_id: "meter", cus_used: 50010.5, monthly_quota: 50000, utilization: 50010.5 / 50000 }, "list entries have the documented fields");
  const dec = await admin(gw.url, "/gate/admin/usage/meter?period=2025-12", undefined, "GET");
  t.equal(dec.json.cus_used, 0, "another month is empty");
  t.equal((await admin(gw.url, "/gate/admin/usage/meter?period=2026-13", undefined, "GET")).status, 400, "bad period: 400");
  t.equal((await admin(gw.url, "/gate/admin/usage?period=26-01", undefined, "GET")).status, 400, "bad period: 400");
  for (const path of ["/gate/admin/usage?x=1", "/gate/admin/usage/meter?period=2026-01&x=1"]) {
    const r = await admin(gw.url, path, undefined, "GET");
    t.equal(r.status, 400, `${path}: an unknown query parameter is a 400, as on /gate/account`);
    t.equal(r.json.detail, 'Unknown query parameter "x"; only period is accepted.', "the detail names it");
  }
  t.equal((await admin(gw.url, "/gate/admin/usage/nobody", undefined, "GET")).status, 404, "unknown tenant: 404");
});

test("reload answers status ok and the tenant count; unknown admin path is 404", async (t) => {
  const r = await admin(gw.url, "/gate/admin/reload");
  t.equal(r.status, 200);
  t.deepEqual(r.json, { status: "ok", tenants_loaded: (await gw.deps.registry.list()).length });
  t.equal((await admin(gw.url, "/gate/admin/nothing", undefined, "GET")).status, 404);
});

test("admin calls leave one audit record each, before the response, without a key", async (t) => {
  const before = gw.audit.records.length;
  const made = await admin(gw.url, "/gate/onboard/create", { tenant_id: "audited" });
  const rotated = await admin(gw.url, "/gate/onboard/rotate-key", { tenant_id: "audited" });
  const usage = await admin(gw.url, "/gate/admin/usage/audited", undefined, "GET");
  const dup = await admin(gw.url, "/gate/onboard/create", { tenant_id: "audited" });
  const bad = await admin(gw.url, "/gate/onboard/create", { tenant_id: "Not Valid" });
  const tenantKey = await fetch(`${gw.url}/gate/onboard/deactivate`, {
    method: "POST",
    headers: { authorization: `Bearer ${made.json.api_key}`, "content-type": "application/json" },
    body: JSON.stringify({ tenant_id: "audited" }),
  });
  const recs = gw.audit.records.slice(before);
  const want = [
    ["POST", "/gate/onboard/create", 201, "audited"],
    ["POST", "/gate/onboard/rotate-key", 200, "audited"],
    ["GET", "/gate/admin/usage/audited", 200, "audited"],
    ["POST", "/gate/onboard/create", 409, "audited"],
    ["POST", "/gate/onboard/create", 400, ""],
    ["POST", "/gate/onboard/deactivate", 401, ""], // refused before its body is read
  ];
  t.deepEqual(
    [made.status, rotated.status, usage.status, dup.status, bad.status, tenantKey.status],
    want.map((w) => w[2]),
    "the calls answered as expected",
  );
  t.deepEqual(
    recs.map((r) => [r.method, r.path, r.status, r.tenant_id]),
    want,
    "one record per call: method, path, status, the tenant acted on (an invalid id is not echoed)",
  );
  t.ok(
    recs.every((r) => r.namespace === "" && r.cus === 0 && r.latency_ms >= 0 && /^[0-9a-f-]{36}$/.test(r.request_id)),
    "no namespace, 0 CUs, latency and request id",
  );
  const text = JSON.stringify(recs);
  t.notOk(text.includes(made.json.api_key) || text.includes(rotated.json.api_key) || text.includes(SERVICE_KEY), "no key in the records");
  t.equal((await gw.deps.registry.get("audited"))!.active, true, "a tenant key on an admin endpoint changed nothing");
});

test("teardown", async () => {
  await gw.close();
  await engine.close();
});
