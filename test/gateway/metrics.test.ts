// GET /metrics of the gateway: who may read it (the service key or SVC_GATE_METRICS_TOKEN,
// which opens nothing else), and after a few requests every metric with the values those
// requests imply: requests and latency by route template and status, CUs charged, rate-limit
// and quota rejections; hostile paths add no route label. Then the real server (startGateway)
// with its process metrics and the token from the environment.
import test from "tape";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { milliCusOf } from "../../server/gateway/meter.js";
import { startGateway } from "../../server/gateway/server.js";
import { labelValues, parseProm, valueOf } from "../http/prom.js";
import { admin, call, createTenant, SERVICE_KEY, startFakeEngine, startTestGateway } from "./helpers.js";

const TOKEN = "gate-metrics-token-" + "0123456789abcdef".repeat(2);

async function scrape(url: string, auth: string | null, extra: Record<string, string> = {}) {
  const res = await fetch(url + "/metrics", { headers: { ...(auth === null ? {} : { authorization: `Bearer ${auth}` }), ...extra } });
  return { status: res.status, type: res.headers.get("content-type"), text: await res.text() };
}

test("gateway metrics: access, and every metric after a few requests", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url, { billingEnabled: true, metricsToken: TOKEN });
  const key = await createTenant(g.url, { tenant_id: "acme" }); // starter: 10 requests a minute, 1,000 CUs a month
  const full = await createTenant(g.url, { tenant_id: "full" });
  await g.deps.usage.add("full", "2026-01", "put", 1_000_000);

  // who may read
  t.equal((await scrape(g.url, null)).status, 401, "no credential: 401");
  const byTenant = await scrape(g.url, key);
  t.equal(byTenant.status, 401, "a tenant key: 401");
  t.notOk(byTenant.text.includes("svc_gate_"), "no metrics in the refusal");
  t.equal((await scrape(g.url, null, { "x-api-key": SERVICE_KEY })).status, 401, "only Authorization: Bearer");
  const byKey = await scrape(g.url, SERVICE_KEY);
  t.equal(byKey.status, 200, "the service key reads it");
  t.match(byKey.type ?? "", /^text\/plain/);
  t.equal((await scrape(g.url, TOKEN)).status, 200, "the metrics token reads it");
  const adm = await fetch(g.url + "/gate/admin/tenants", { headers: { authorization: `Bearer ${TOKEN}` } });
  t.equal(adm.status, 401, "the metrics token is not the service key");

  // traffic: 3 puts and a missing get (4 of acme's 10), 6 more gets, then 2 refused by the rate limit
  for (let i = 0; i < 3; i++) t.equal((await call(g.url, "/v1/put", { key, body: { namespace: "default", key: `k${i}`, data_b64: "AAAA" } })).status, 201);
  t.equal((await call(g.url, "/v1/get/default/missing", { key })).status, 404);
  for (let i = 0; i < 6; i++) t.equal((await call(g.url, `/v1/get/default/k${i}`, { key })).status, 200);
  for (let i = 0; i < 2; i++) t.equal((await call(g.url, "/v1/get/default/k0", { key })).status, 429);
  t.equal((await call(g.url, "/v1/get/default/k0", { key: full })).status, 503, "quota used up");
  t.equal((await call(g.url, "/v1/get/default/k0")).status, 401, "no key");
  // hostile paths, each distinct, in and out of the data plane
  for (let i = 0; i < 15; i++) t.equal((await call(g.url, `/zz${i}/${"%2e".repeat(i)}?q=${i}`)).status, 404);
  for (let i = 0; i < 5; i++) t.equal((await call(g.url, `/v1/nope-${i}/x`, { key: full })).status, 404);
  t.equal((await admin(g.url, "/gate/admin/usage/acme", undefined, "GET")).status, 200);
  t.equal((await admin(g.url, "/gate/admin/usage/full", undefined, "GET")).status, 200);

  const m = await scrape(g.url, TOKEN);
  t.equal(m.status, 200);
  const s = parseProm(m.text);
  const req = (method: string, route: string, status: number) => valueOf(s, "svc_gate_http_requests_total", { method, route, status: String(status) });
  t.equal(req("POST", "/v1/put", 201), 3, "3 puts");
  t.equal(req("GET", "/v1/get/:namespace/:key*", 200), 6, "6 gets, one template for every key");
  t.equal(req("GET", "/v1/get/:namespace/:key*", 404), 1);
  t.equal(req("GET", "/v1/get/:namespace/:key*", 429), 2);
  t.equal(req("GET", "/v1/get/:namespace/:key*", 503), 1);
  t.equal(req("GET", "/v1/get/:namespace/:key*", 401), 1);
  t.equal(req("GET", "other", 404), 20, "unknown paths in and out of /v1 share the label other");
  t.equal(req("GET", "/gate/admin/usage/:tenant_id", 200), 2, "admin route by its template");
  t.equal(req("POST", "/gate/onboard/create", 201), 2);
  t.equal(req("GET", "/metrics", 401), 3);
  t.equal(req("GET", "/gate/admin/tenants", 401), 1);
  t.deepEqual(
    labelValues(s, "svc_gate_http_requests_total", "route"),
    ["/gate/admin/tenants", "/gate/admin/usage/:tenant_id", "/gate/onboard/create", "/metrics", "/v1/get/:namespace/:key*", "/v1/put", "other"],
    "route labels are templates only",
  );
  t.equal(valueOf(s, "svc_gate_http_request_duration_seconds_count", { method: "POST", route: "/v1/put", status: "201" }), 3);
  const sum = valueOf(s, "svc_gate_http_request_duration_seconds_sum", { method: "GET", route: "/v1/get/:namespace/:key*", status: "200" })!;
  t.ok(sum > 0 && sum < 60, `get latency sum ${sum} s`);
  t.equal(valueOf(s, "svc_gate_http_request_duration_seconds_bucket", { method: "GET", route: "/v1/get/:namespace/:key*", status: "200", le: "+Inf" }), 6);

  t.equal(valueOf(s, "svc_gate_cus_charged_total", { op: "put" }), (3 * milliCusOf("put")) / 1000, "CUs of the 3 puts");
  t.equal(valueOf(s, "svc_gate_cus_charged_total", { op: "get" }), (6 * milliCusOf("get")) / 1000, "CUs of the 6 answered gets, none for 404/429/503");
  const usage = (await admin(g.url, "/gate/admin/usage/acme", undefined, "GET")).json;
  t.equal(usage.cus_used, (3 * milliCusOf("put") + 6 * milliCusOf("get")) / 1000, "the same total as the usage meter");
  t.equal(valueOf(s, "svc_gate_rate_limit_rejections_total"), 2);
  t.equal(valueOf(s, "svc_gate_quota_rejections_total"), 1);
  t.equal(valueOf(s, "svc_gate_process_resident_memory_bytes"), undefined, "no process metrics in an app built for tests");
  await g.close();
  await engine.close();
});

test("gateway metrics: SVC_GATE_METRICS_TOKEN from the environment, process metrics on the real server", async (t) => {
  t.throws(
    () => loadGatewayConfig({ SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY, SVC_GATE_METRICS_TOKEN: "short" }),
    /^ConfigError: SVC_GATE_METRICS_TOKEN must be at least 16 characters\.$/,
  );
  const engine = await startFakeEngine();
  const dir = mkdtempSync(join(tmpdir(), "svc-gate-metrics-"));
  const gw = await startGateway(
    loadGatewayConfig({
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      SVC_GATE_METRICS_TOKEN: TOKEN,
    }),
  );
  t.equal((await fetch(gw.url + "/health")).status, 200);
  const m = await scrape(gw.url, TOKEN);
  t.equal(m.status, 200);
  const s = parseProm(m.text);
  t.ok(valueOf(s, "svc_gate_process_resident_memory_bytes")! > 0, "process metrics");
  t.equal(valueOf(s, "svc_gate_http_requests_total", { method: "GET", route: "/health", status: "200" }), 1);
  t.equal((await scrape(gw.url, "wrong-token-0123456789")).status, 401);
  await gw.close();
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});
