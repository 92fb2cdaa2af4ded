// GET /openapi.json: a valid-looking OpenAPI 3.1 document whose operations are exactly the
// routes the gateway serves: every documented operation answers on the live gateway (not the
// catch-all 404), every route registered in the app and its admin router is documented, the
// routes of the real billing router (billingRouter, introspected) are exactly the billing
// operations, the data-plane operations are exactly the gateway's metered OPERATIONS, and the
// request schemas are the zod schemas' JSON Schema (a field the engine requires is required here).
import test from "tape";
import { request } from "undici";
import { z } from "zod";
import { startStack } from "../cli/stack.js";
import { openApiDocument } from "../../server/gateway/openapi.js";
import { accountRouter } from "../../server/gateway/account.js";
import { adminRouter } from "../../server/gateway/admin.js";
import { billingRouter, MemoryBillingLog } from "../../server/gateway/billing.js";
import { StripePaymentProvider } from "../../server/gateway/stripe-client.js";
import { createApp } from "../../server/gateway/app.js";
import { OPERATIONS, MemoryUsageStore } from "../../server/gateway/meter.js";
import { MemoryTenantRegistry } from "../../server/gateway/tenants.js";
import { MemoryRateLimiter } from "../../server/gateway/ratelimit.js";
import { MemoryAuditSink } from "../../server/gateway/audit.js";
import { UndiciEngineClient } from "../../server/gateway/proxy.js";
import { FakeClock, systemClock } from "../../server/gateway/clock.js";
import { putBodySchema, topkBodySchema } from "../../lib/schemas.js";

type Doc = {
  openapi: string;
  info: { version: string };
  paths: Record<
    string,
    Record<
      string,
      {
        operationId: string;
        security: unknown[];
        requestBody?: { content: Record<string, { schema: Record<string, unknown> }> };
        responses: Record<string, unknown>;
        tags: string[];
      }
    >
  >;
};

type Layer = { route?: { path: string | string[]; methods: Record<string, boolean> } };
const routesOf = (stack: Layer[]) =>
  stack
    .filter((l) => l.route)
    .flatMap((l) => [l.route!.path].flat().flatMap((p) => Object.keys(l.route!.methods).map((m) => `${m.toUpperCase()} ${p.replace(/:([a-z_]+)/g, "{$1}")}`)));

const documented = (doc: Doc) => Object.entries(doc.paths).flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`));

test("openapi: served on the live gateway; every documented operation is a live route", async (t) => {
  const stack = await startStack(["ns"]);
  try {
    const res = await request(`${stack.gateway}/openapi.json`);
    t.equal(res.statusCode, 200, "200 without authentication");
    t.match(String(res.headers["content-type"]), /^application\/json/, "JSON");
    const doc = (await res.body.json()) as Doc;
    t.equal(doc.openapi, "3.1.0", "OpenAPI 3.1");
    t.equal(doc.info.version, "0.1.0", "package version");
    const ops = documented(doc);
    t.ok(ops.length >= 23, `${ops.length} operations documented`);

    const fill = (p: string) => p.replace("{namespace}", "ns").replace("{key}", "some/key").replace("{tenant_id}", "t1");
    for (const op of ops) {
      const [method, path] = op.split(" ") as [string, string];
      const o = doc.paths[path]![method.toLowerCase()]!;
      const tag = o.tags[0];
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (tag === "data plane" || tag === "account") headers["x-api-key"] = stack.apiKey;
      if (tag === "admin") headers.authorization = `Bearer ${stack.serviceKey}`;
      // an empty object is never a valid body for a mutating call, so nothing changes
      const r = await request(`${stack.gateway}${fill(path)}`, { method: method as "GET", headers, body: method === "POST" ? "{}" : undefined });
      const text = await r.body.text();
      const notRouted = r.statusCode === 404 && /No endpoint/.test(text);
      t.notOk(notRouted, `${op} is served (HTTP ${r.statusCode})`);
      t.notEqual(r.statusCode, 401, `${op}: the documented security scheme is the one it accepts`);
    }
    const bogus = await request(`${stack.gateway}/v1/nothing`, { headers: { "x-api-key": stack.apiKey } });
    t.match(await bogus.body.text(), /No endpoint/, "the probe can tell an unserved route");
    const wrongMethod = await request(`${stack.gateway}/gate/admin/tenants`, { method: "DELETE", headers: { authorization: `Bearer ${stack.serviceKey}` } });
    t.equal(wrongMethod.statusCode, 404, "an undocumented method on a documented path is not served");
    await wrongMethod.body.text();
  } finally {
    await stack.close();
  }
});

test("openapi: every route registered in the app, the admin router and the billing router is documented; data-plane operations are the metered OPERATIONS", async (t) => {
  const doc = openApiDocument() as unknown as Doc;
  const ops = new Set(documented(doc));
  const app = createApp({
    registry: new MemoryTenantRegistry(),
    limiter: new MemoryRateLimiter(systemClock),
    usage: new MemoryUsageStore(),
    audit: new MemoryAuditSink(),
    engine: new UndiciEngineClient("http://127.0.0.1:9", "k".repeat(32), 1000),
    clock: systemClock,
    serviceKey: "k".repeat(32),
    billingEnabled: false,
    defaultRateLimit: { requests: 100, window_s: 60 },
    maxUploadBytes: 1024,
  });
  const appRoutes = routesOf((app as unknown as { router: { stack: Layer[] } }).router.stack);
  const adminRoutes = routesOf((adminRouter({} as never) as unknown as { stack: Layer[] }).stack);
  const accountRoutes = routesOf((accountRouter({} as never) as unknown as { stack: Layer[] }).stack);
  t.ok(
    appRoutes.length >= 3 && adminRoutes.length >= 10 && accountRoutes.length >= 1,
    `introspected ${appRoutes.length} app, ${adminRoutes.length} admin and ${accountRoutes.length} account routes`,
  );
  for (const r of [...appRoutes, ...adminRoutes, ...accountRoutes]) t.ok(ops.has(r), `${r} is documented`);
  const dataOps = Object.values(doc.paths)
    .flatMap((p) => Object.values(p))
    .filter((o) => o.tags[0] === "data plane")
    .map((o) => o.operationId)
    .sort();
  t.deepEqual(dataOps, [...OPERATIONS].sort(), "data-plane operationIds = the gateway's OPERATIONS");

  // billing: the real router, built with fakes as test/gateway/billing.test.ts builds it (the
  // provider points at a closed port; no probe below reaches it), so a route added to it
  // must be documented, and a documented billing operation must be one of its routes
  const clock = new FakeClock(Date.UTC(2026, 0, 15));
  const billing = billingRouter({
    registry: new MemoryTenantRegistry(),
    clock,
    audit: new MemoryAuditSink(),
    limiter: new MemoryRateLimiter(clock),
    log: new MemoryBillingLog(),
    provider: new StripePaymentProvider({
      secretKey: "sk_test_openapi_0123456789abcdef",
      webhookSecret: "whsec_openapi_0123456789abcdef",
      apiBase: "http://127.0.0.1:9",
      timeoutMs: 1000,
    }),
    prices: { builder: "price_builder_test", pro: "price_pro_test" },
    policy: { billingEnabled: true, defaultRateLimit: { requests: 100, window_s: 60 } },
  });
  const billingRoutes = routesOf((billing as unknown as { stack: Layer[] }).stack).sort();
  const withBilling = openApiDocument({ billing: {} }) as unknown as Doc;
  const billingOps = documented(withBilling)
    .filter((op) => !ops.has(op))
    .sort();
  t.ok(billingRoutes.length >= 2, `introspected ${billingRoutes.length} billing routes: ${billingRoutes.join(", ")}`);
  t.deepEqual(billingRoutes, billingOps, "the billing router's routes are exactly the operations the document adds for billing");
  t.notOk(doc.paths["/gate/checkout"] || doc.paths["/webhooks/payment"], "and they are absent when the router is not mounted");
  const billingApp = createApp({
    registry: new MemoryTenantRegistry(),
    limiter: new MemoryRateLimiter(systemClock),
    usage: new MemoryUsageStore(),
    audit: new MemoryAuditSink(),
    engine: new UndiciEngineClient("http://127.0.0.1:9", "k".repeat(32), 1000),
    clock: systemClock,
    serviceKey: "k".repeat(32),
    billingEnabled: true,
    defaultRateLimit: { requests: 100, window_s: 60 },
    maxUploadBytes: 1024,
    billing,
  });
  const srv = billingApp.listen(0, "127.0.0.1");
  await new Promise<void>((resolve) => srv.once("listening", () => resolve()));
  try {
    const base = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
    const served = (await (await request(`${base}/openapi.json`)).body.json()) as Doc;
    t.deepEqual(
      documented(served)
        .filter((op) => !ops.has(op))
        .sort(),
      billingRoutes,
      "the app with the billing router documents its routes in the document it serves",
    );
    for (const op of billingRoutes) {
      const [method, path] = op.split(" ") as [string, string];
      // no key, no signature: 401 or 400 from the router, never the catch-all 404
      const r = await request(`${base}${path}`, { method: method as "POST", headers: { "content-type": "application/json" }, body: "{}" });
      const text = await r.body.text();
      t.ok(r.statusCode !== 404 && !/No endpoint/.test(text), `${op} is served by the mounted router (HTTP ${r.statusCode})`);
    }
  } finally {
    await new Promise<void>((resolve) => srv.close(() => resolve()));
  }
  t.end();
});

test("openapi: request schemas are the zod schemas' JSON Schema", (t) => {
  const doc = openApiDocument() as unknown as Doc;
  const put = doc.paths["/v1/put"]!.post!;
  const putSchema = put.requestBody!.content["application/json"]!.schema;
  const fromZod = z.toJSONSchema(putBodySchema, { io: "input", unrepresentable: "any" }) as Record<string, unknown>;
  delete fromZod.$schema;
  t.deepEqual(putSchema, fromZod, "put body = z.toJSONSchema(putBodySchema)");
  t.deepEqual(putSchema.required, ["namespace", "key", "data_b64"], "required fields of put");
  t.ok(put.requestBody!.content["application/octet-stream"], "put also takes application/octet-stream");
  const topk = doc.paths["/v1/query/topk"]!.post!.requestBody!.content["application/json"]!.schema as {
    properties: Record<string, { default?: unknown; maximum?: number }>;
  };
  const tk = z.toJSONSchema(topkBodySchema, { io: "input", unrepresentable: "any" }) as { properties: Record<string, { maximum?: number }> };
  t.equal(topk.properties.k!.maximum, tk.properties.k!.maximum, "k's bound comes from the schema");
  t.equal(topk.properties.k!.default, 10, "k's default from the schema");
  t.ok(doc.paths["/v1/put"]!.post!.responses["429"] && doc.paths["/gate/admin/tenants"]!.get!.responses["401"], "error responses documented");
  t.deepEqual(doc.paths["/gate/admin/tenants"]!.get!.security, [{ ServiceKey: [] }], "admin endpoints use the service key");
  t.deepEqual(doc.paths["/health"]!.get!.security, [], "health needs no key");
  t.end();
});

test("openapi: the success body of every operation on the live gateway matches its documented response schema", async (t) => {
  const { RESPONSE_SCHEMAS } = await import("../../server/gateway/openapi.js");
  const stack = await startStack(["ns"]);
  try {
    const doc = (await (await request(`${stack.gateway}/openapi.json`)).body.json()) as Doc;
    const ids = new Map<string, { method: string; path: string }>();
    for (const [p, ops] of Object.entries(doc.paths)) for (const [m, o] of Object.entries(ops)) ids.set(o.operationId, { method: m.toUpperCase(), path: p });
    const seen = new Set<string>();
    const call = async (id: keyof typeof RESPONSE_SCHEMAS, path: string, body?: unknown, key = stack.apiKey, extra: Record<string, string> = {}) => {
      const op = ids.get(id)!;
      const auth = doc.paths[op.path]![op.method.toLowerCase()]!.tags[0] === "admin" ? { authorization: `Bearer ${stack.serviceKey}` } : { "x-api-key": key };
      const r = await request(`${stack.gateway}${path}`, {
        method: op.method as "GET",
        headers: { ...auth, ...(body !== undefined ? { "content-type": "application/json" } : {}), ...extra },
        body: body === undefined ? undefined : typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body),
      });
      const json = (await r.body.json()) as unknown;
      t.ok(r.statusCode >= 200 && r.statusCode < 300, `${id}: HTTP ${r.statusCode}`);
      const parsed = RESPONSE_SCHEMAS[id].safeParse(json);
      t.ok(parsed.success, `${id}: body matches the documented schema${parsed.success ? "" : ` (${JSON.stringify(parsed.error.issues[0])})`}`);
      seen.add(id);
      return json as Record<string, unknown>;
    };
    const b64 = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("base64");
    const field = Float32Array.from({ length: 4096 }, (_, i) => Math.sin(i / 30));
    await call("put", "/v1/put", { namespace: "ns", key: "a", data_b64: b64(field), dtype: "float32", shape: [64, 64], metadata: { k: 1 } });
    await call(
      "put",
      "/v1/put?namespace=ns&key=b&dtype=int32&shape=64,64",
      Buffer.from(Int32Array.from({ length: 4096 }, (_, i) => i % 9).buffer),
      stack.apiKey,
      { "content-type": "application/octet-stream" },
    );
    await call("put_cores", "/v1/put_cores", {
      namespace: "ns",
      key: "c",
      cores: [
        { shape: [1, 64, 1], data_b64: b64(new Float32Array(64).fill(1)) },
        { shape: [1, 64, 1], data_b64: b64(new Float32Array(64).fill(2)) },
      ],
      shape: [64, 64],
    });
    await call("put_cores_batch", "/v1/put_cores_batch", {
      namespace: "ns",
      items: [{ key: "d", cores: [{ shape: [1, 4, 1], data_b64: b64(new Float32Array(4)) }] }],
    });
    await call("get", "/v1/get/ns/a");
    await call("list", "/v1/list/ns?limit=2");
    await call("search", "/v1/search", { namespace: "ns", filter: { k: 1 } });
    await call("serve", "/v1/serve", {
      namespace: "ns",
      key: "a",
      slice: [
        [0, 2],
        [0, 2],
      ],
    });
    await call("query_similarity", "/v1/query/similarity", { namespace: "ns", a: "a", b: "c" });
    await call("query_topk", "/v1/query/topk", { namespace: "ns", key: "a", k: 3 });
    await call("query_vector", "/v1/query/vector", { namespace: "ns", vector: Array.from(field), shape: [64, 64], k: 2 });
    await call("delete", "/v1/delete/ns/d");
    await call("tenant_create", "/gate/onboard/create", {
      tenant_id: "t2",
      plan: "enterprise",
      monthly_quota: null,
      rate_limit: { requests: 10, window_s: 1 },
    });
    await call("tenant_rotate_key", "/gate/onboard/rotate-key", { tenant_id: "t2" });
    await call("tenant_add_namespace", "/gate/onboard/add-namespace", { tenant_id: "t2", namespace: "more" });
    await call("tenant_update_tier", "/gate/onboard/update-tier", { tenant_id: "t2", plan: "pro" });
    await call("tenants_list", "/gate/admin/tenants");
    await call("usage_all", "/gate/admin/usage");
    await call("usage_tenant", "/gate/admin/usage/t1?period=2026-01");
    await call("registry_reload", "/gate/admin/reload");
    await call("account", "/gate/account");
    const made = await call("key_create", "/gate/admin/keys", {
      tenant_id: "t1",
      name: "reader",
      scopes: ["read"],
      namespaces: ["ns"],
      expires_at: "2099-01-01T00:00:00Z",
    });
    await call("get", "/v1/get/ns/a", undefined, made.api_key as string);
    await call("keys_list", "/gate/admin/keys/t1");
    await call("key_revoke", "/gate/admin/keys/revoke", { key_id: made.key_id });
    await call("audit_tail", "/gate/admin/audit?limit=5");
    await call("tenant_deactivate", "/gate/onboard/deactivate", { tenant_id: "t2" });
    await call("health", "/health");
    await call("gate_health", "/gate/health");
    const documentedIds = Object.keys(RESPONSE_SCHEMAS).sort();
    t.deepEqual([...seen].sort(), documentedIds, "every operation with a response schema was exercised");
    const withSchema = [...ids.keys()].filter((id) => id !== "openapi" && id !== "metrics");
    t.deepEqual(withSchema.sort(), documentedIds, "every operation but /openapi.json and /metrics (text) has a JSON response schema");
  } finally {
    await stack.close();
  }
});
