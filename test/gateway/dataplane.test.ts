// The data plane over real HTTP: every documented status, every header, the
// order of checks of docs/api.md (order of checks) (asserted on the engine side) and the audit records.
import test from "tape";
import { randomUUID } from "node:crypto";
import { request as httpRequest } from "node:http";
import { jsonBodyLimit } from "../../server/http/limits.js";
import { admin, call, createTenant, SERVICE_KEY, startFakeEngine, startTestGateway, type FakeEngine, type TestGateway } from "./helpers.js";

const AUDIT_FIELDS = ["ts", "tenant_id", "method", "path", "namespace", "status", "cus", "latency_ms", "request_id", "key_id"];

let engine: FakeEngine;
let gw: TestGateway;
let key: string;

test("setup: fake engine, gateway, tenant acme with namespaces default and ns2", async (t) => {
  engine = await startFakeEngine();
  gw = await startTestGateway(engine.url, { defaultRateLimit: { requests: 1000, window_s: 60 }, maxUploadBytes: 4096 });
  key = await createTenant(gw.url, { tenant_id: "acme", namespaces: ["default", "ns2"] });
  await createTenant(gw.url, { tenant_id: "other", namespaces: ["secret"] });
  t.match(key, /^svc_live_[A-Za-z0-9_-]{43}$/, "the key is svc_live_ + 43 random base64url characters");
});

test("health reports engine_reachable and store_connected truthfully, without authentication", async (t) => {
  for (const p of ["/health", "/gate/health"]) {
    const r = await call(gw.url, p);
    t.equal(r.status, 200, `${p} is 200`);
    t.deepEqual(Object.keys(r.json).sort(), ["engine_reachable", "status", "store_connected", "uptime_s"], `${p} has exactly the documented fields`);
    t.equal(r.json.status, "ok");
    t.equal(r.json.engine_reachable, true, "engine answers");
    t.equal(r.json.store_connected, true, "memory registry is connected");
    t.ok(Number.isInteger(r.json.uptime_s), "uptime_s is an integer");
  }
});

test("a get is forwarded with the service key, the tenant and the request id; a client's X-SVC-Tenant is discarded", async (t) => {
  engine.seen.length = 0;
  const rid = randomUUID();
  const r = await call(gw.url, "/v1/get/default/a/b.c", { key, headers: { "x-request-id": rid, "x-svc-tenant": "other" } });
  t.equal(r.status, 200, "200 from the engine");
  t.equal(engine.seen.length, 1, "the engine saw one request");
  const s = engine.seen[0]!;
  t.equal(s.url, "/v1/get/default/a/b.c", "same method and path");
  t.equal(s.headers["x-svc-tenant"], "acme", "X-SVC-Tenant is the authenticated tenant, not the client's");
  t.equal(s.headers["authorization"], `Bearer ${SERVICE_KEY}`, "the engine gets the service key");
  t.equal(s.headers["x-request-id"], rid, "the request id travels to the engine");
  t.equal(s.headers["x-api-key"], undefined, "the tenant key is not forwarded");
  t.equal(r.headers.get("x-request-id"), rid, "the request id is echoed");
  t.equal(r.headers.get("x-svc-cus"), "0.1", "a get costs 0.1 CU");
  t.equal(r.headers.get("x-ratelimit-limit"), "1000", "X-RateLimit-Limit is the default limit (billing off)");
  t.equal(r.headers.get("x-ratelimit-remaining"), "999", "one request used");
  t.ok(Number(r.headers.get("x-ratelimit-reset")) >= Math.floor(gw.clock.now() / 1000) + 60, "X-RateLimit-Reset is a Unix time a window ahead");
  const a = gw.audit.records.at(-1)!;
  t.deepEqual(Object.keys(a), AUDIT_FIELDS, "the audit record has exactly the documented audit fields");
  t.deepEqual(
    { ...a, latency_ms: 0 },
    {
      ts: new Date(gw.clock.now()).toISOString(),
      tenant_id: "acme",
      method: "GET",
      path: "/v1/get/default/a/b.c",
      namespace: "default",
      status: 200,
      cus: 0.1,
      latency_ms: 0,
      request_id: rid,
      key_id: "primary",
    },
    "the audit record describes the request",
  );
  t.ok(typeof a.latency_ms === "number" && a.latency_ms >= 0, "latency_ms is a number");
  t.notOk(JSON.stringify(gw.audit.records).includes(key), "the audit log never contains the key");
});

test("Authorization: Bearer works as well as X-Api-Key; a request without a UUID X-Request-Id gets one", async (t) => {
  const r = await call(gw.url, "/v1/list/default", { headers: { authorization: `Bearer ${key}`, "x-request-id": "not-a-uuid" } });
  t.equal(r.status, 200);
  t.match(r.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/, "a generated UUID");
  t.equal(r.headers.get("x-svc-cus"), "0.1", "list costs 0.1 CU");
});

test("401: missing, unknown and malformed keys never reach the engine and are audited", async (t) => {
  engine.seen.length = 0;
  const before = gw.audit.records.length;
  const cases: Array<[string, Record<string, string>]> = [
    ["no key", {}],
    ["unknown key", { "x-api-key": "svc_live_" + "x".repeat(43) }],
    ["not a svc key", { "x-api-key": "hello" }],
    ["service key as tenant key", { authorization: `Bearer ${SERVICE_KEY}` }],
  ];
  for (const [what, headers] of cases) {
    const r = await call(gw.url, "/v1/get/default/k", { headers });
    t.equal(r.status, 401, `${what}: 401`);
    t.equal(r.json.code, "unauthorized", `${what}: code unauthorized`);
    t.deepEqual(Object.keys(r.json).sort(), ["code", "detail", "request_id"], `${what}: the error body`);
    t.equal(r.json.request_id, r.headers.get("x-request-id"), `${what}: request_id matches the header`);
    t.equal(r.headers.get("x-svc-cus"), "0", `${what}: X-SVC-CUs 0`);
    t.equal(r.headers.get("x-ratelimit-limit"), null, `${what}: no rate-limit headers for an unauthenticated request`);
  }
  t.equal(engine.seen.length, 0, "the engine saw none of them");
  const recs = gw.audit.records.slice(before);
  t.equal(recs.length, cases.length, "one audit record each");
  t.ok(
    recs.every((a) => a.status === 401 && a.tenant_id === "" && a.cus === 0),
    "audited as 401 without a tenant",
  );
});

test("400: bad JSON, missing fields, invalid names; rate-limit headers present, engine not contacted", async (t) => {
  engine.seen.length = 0;
  const bad: Array<[string, Parameters<typeof call>[2], string]> = [
    ["/v1/put", { key, raw: "{not json", headers: { "content-type": "application/json" } }, "bad JSON"],
    ["/v1/put", { key, body: { namespace: "default", data_b64: "AA==" } }, "missing key"],
    ["/v1/put", { key, body: { namespace: "bad ns!", key: "k", data_b64: "AA==" } }, "invalid namespace in the body"],
    ["/v1/put", { key, body: [1, 2] }, "a body that is not an object"],
    ["/v1/serve", { key, body: { namespace: "default", key: "k", device: "tpu" } }, "bad device"],
    ["/v1/get/bad%20ns/k", { key }, "invalid namespace in the path"],
    ["/v1/get/default/a//b", { key }, "empty key segment"],
    ["/v1/get/default", { key }, "get without a key"],
    ["/v1/get/default/%E0%A4%A", { key }, "bad percent-encoding"],
    ["/v1/put?namespace=default", { key, raw: Buffer.from([1, 2, 3]), headers: { "content-type": "application/octet-stream" } }, "octet put without key"],
    ["/v1/query/similarity", { key, body: { namespace: "default", a: "x" } }, "similarity without b"],
    ["/v1/put", { key, body: { namespace: "default", key: "k", data_b64: "AAAA", colour: "red" } }, "an unknown field"],
    ["/v1/put", { key, body: { namespace: "default", key: "k", data_b64: "not base64!" } }, "data_b64 that is not Base64"],
    ["/v1/list/default?limit=5000", { key }, "list limit above 1000"],
    ["/v1/get/default/k?version=0", { key }, "version 0"],
    ["/v1/get/default/k?version=1&version=2", { key }, "version given twice"],
  ];
  for (const [path, init, what] of bad) {
    const r = await call(gw.url, path, init);
    t.equal(r.status, 400, `${what}: 400`);
    t.equal(r.json.code, "bad_request", `${what}: code bad_request`);
    t.ok(typeof r.json.detail === "string" && r.json.detail.endsWith("."), `${what}: a sentence (${r.json.detail})`);
    t.equal(r.headers.get("x-ratelimit-limit"), "1000", `${what}: X-RateLimit-Limit present`);
  }
  const dots = await rawRequest(gw.url, "GET", "/v1/get/default/a/../b", { "x-api-key": key }, []);
  t.equal(dots.status, 400, "a '..' key segment (sent unnormalised): 400");
  const dots2 = await rawRequest(gw.url, "GET", "/v1/get/default/a/%2E%2E/b", { "x-api-key": key }, []);
  t.equal(dots2.status, 400, "a percent-encoded '..' key segment: 400");
  t.equal(engine.seen.length, 0, "none reached the engine");
  t.ok(
    gw.audit.records.slice(-bad.length - 2).every((a) => a.status === 400 && a.tenant_id === "acme"),
    "each was audited as 400 for acme",
  );
});

test("415 for a body that is not JSON where JSON is required; 404 for an unknown route", async (t) => {
  const r = await call(gw.url, "/v1/search", { key, raw: "namespace=default", headers: { "content-type": "text/plain" } });
  t.equal(r.status, 415);
  t.equal(r.json.code, "unsupported_media_type");
  const r2 = await call(gw.url, "/v1/nope", { key });
  t.equal(r2.status, 404);
  t.equal(r2.json.code, "not_found");
  const r3 = await call(gw.url, "/v1/put", { key, method: "GET" });
  t.equal(r3.status, 404, "wrong method is no route");
});

test("403: every namespace named is ACL-checked (path, body, namespace_b); the engine is not contacted", async (t) => {
  engine.seen.length = 0;
  const cases: Array<[string, Parameters<typeof call>[2], string]> = [
    ["/v1/get/secret/k", { key }, "path"],
    ["/v1/list/secret", { key }, "list path"],
    ["/v1/delete/secret/k", { key, method: "DELETE" }, "delete path"],
    ["/v1/search", { key, body: { namespace: "secret" } }, "body"],
    ["/v1/query/similarity", { key, body: { namespace: "default", a: "x", b: "y", namespace_b: "secret" } }, "namespace_b"],
    ["/v1/put?namespace=secret&key=k", { key, raw: Buffer.from("abc"), headers: { "content-type": "application/octet-stream" } }, "octet query"],
  ];
  for (const [path, init, what] of cases) {
    const r = await call(gw.url, path, init);
    t.equal(r.status, 403, `${what}: 403`);
    t.equal(r.json.code, "forbidden", `${what}: code forbidden`);
    t.ok(r.headers.get("x-ratelimit-remaining") !== null, `${what}: rate-limit headers present`);
  }
  t.equal(engine.seen.length, 0, "no 403 request reached the engine");
  const recs = gw.audit.records.slice(-cases.length);
  t.ok(
    recs.every((a) => a.status === 403),
    "all audited as 403",
  );
  t.equal(recs[4]!.namespace, "default", "the audit namespace is the request's first namespace");
  const ok = await call(gw.url, "/v1/query/similarity", { key, body: { namespace: "default", a: "x", b: "y", namespace_b: "ns2" } });
  t.equal(ok.status, 200, "namespace_b inside the ACL passes");
  t.equal(ok.headers.get("x-svc-cus"), "1", "query_similarity costs 1 CU");
});

test("CUs per operation; serve gpu vs dense by the body's device; engine errors are passed through and not charged", async (t) => {
  const cases: Array<[string, Parameters<typeof call>[2], string]> = [
    ["/v1/put", { key, body: { namespace: "default", key: "k", data_b64: "AAAA" } }, "1"],
    ["/v1/put_cores", { key, body: { namespace: "default", key: "k", cores: [{ shape: [1, 2, 1], data_b64: "AAAAAAAAAAA=" }] } }, "1"],
    ["/v1/put_cores_batch", { key, body: { namespace: "default", items: [{}] } }, "2"],
    ["/v1/serve", { key, body: { namespace: "default", key: "k" } }, "0.5"],
    ["/v1/serve", { key, body: { namespace: "default", key: "k", device: "gpu" } }, "2"],
    ["/v1/search", { key, body: { namespace: "default" } }, "0.5"],
    ["/v1/delete/default/k", { key, method: "DELETE" }, "0.1"],
    ["/v1/query/topk", { key, body: { namespace: "default", key: "k" } }, "1"],
    ["/v1/query/vector", { key, body: { namespace: "default", vector: [1] } }, "1"],
  ];
  for (const [path, init, cus] of cases) {
    const r = await call(gw.url, path, init);
    t.ok(r.status === 200 || r.status === 201, `${path} succeeds`);
    t.equal(r.headers.get("x-svc-cus"), cus, `${path} ${JSON.stringify((init as { body?: unknown }).body ?? "")} costs ${cus} CU`);
  }
  engine.seen.length = 0;
  const r = await call(gw.url, "/v1/get/default/missing", { key });
  t.equal(r.status, 404, "the engine's 404 passes through");
  t.equal(r.json.code, "not_found");
  t.equal(r.headers.get("x-svc-cus"), "0", "nothing charged for a non-2xx answer");
  t.equal(gw.audit.records.at(-1)!.cus, 0);
  engine.respond = () => ({ status: 409, body: { detail: "Version conflict.", code: "version_conflict", request_id: "x" } });
  const c = await call(gw.url, "/v1/put", { key, body: { namespace: "default", key: "k", data_b64: "AAAA", if_version: 7 } });
  engine.respond = null;
  t.equal(c.status, 409, "409 version_conflict passes through");
  t.equal(c.headers.get("x-svc-cus"), "0");
});

test("usage sums are exact in milli-CUs: ten gets are exactly 1 CU", async (t) => {
  const u0 = (await admin(gw.url, "/gate/admin/usage/acme", undefined, "GET")).json;
  for (let i = 0; i < 10; i++) await call(gw.url, "/v1/get/default/k", { key });
  const u1 = (await admin(gw.url, "/gate/admin/usage/acme", undefined, "GET")).json;
  t.equal(u1.breakdown.get - u0.breakdown.get, 1, "exactly 1 CU more for get");
  t.equal(Math.round((u1.cus_used - u0.cus_used) * 1000), 1000);
  t.equal(u1.breakdown.get, 1.1, "1.1 CU of gets in total, no float drift");
});

test("the engine's own X-Request-Id and X-SVC-CUs never leak; the body is forwarded byte for byte", async (t) => {
  engine.seen.length = 0;
  const raw = '{"namespace":"default",  "key":"k2","data_b64":"AAAA" , "metadata":{"z":1,"a":2}}';
  const r = await call(gw.url, "/v1/put", { key, raw, headers: { "content-type": "application/json" } });
  t.equal(r.status, 201);
  t.equal(engine.seen[0]!.body.toString(), raw, "the JSON bytes are forwarded as sent (not re-serialised)");
  t.equal(r.headers.get("x-svc-cus"), "1", "the gateway's X-SVC-CUs, not the engine's");
  t.notEqual(r.headers.get("x-request-id"), "00000000-0000-4000-8000-000000000000", "the gateway's request id, not the engine's");
});

test("octet-stream put streams the raw payload through with its query string", async (t) => {
  engine.seen.length = 0;
  const payload = Buffer.alloc(3000, 7);
  const r = await call(gw.url, "/v1/put?namespace=default&key=blob&dtype=uint8&shape=3000", {
    key,
    raw: payload,
    headers: { "content-type": "application/octet-stream", "x-svc-metadata": '{"a":1}' },
  });
  t.equal(r.status, 201);
  const s = engine.seen[0]!;
  t.ok(s.body.equals(payload), "the engine received the exact bytes");
  t.equal(s.url, "/v1/put?namespace=default&key=blob&dtype=uint8&shape=3000", "the query string is kept");
  t.equal(s.headers["x-svc-metadata"], '{"a":1}', "X-SVC-Metadata is forwarded");
  t.equal(gw.audit.records.at(-1)!.path, "/v1/put", "the audit path has no query string");
});

function rawPost(url: string, path: string, headers: Record<string, string>, chunks: Buffer[]) {
  return rawRequest(url, "POST", path, headers, chunks);
}

function rawRequest(url: string, method: string, path: string, headers: Record<string, string>, chunks: Buffer[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = httpRequest({ host: u.hostname, port: u.port, path, method, headers }, (res) => {
      let b = "";
      res.on("data", (d) => (b += d));
      res.on("end", () => resolve({ status: res.statusCode!, body: b }));
    });
    req.on("error", (e) => ((e as NodeJS.ErrnoException).code === "EPIPE" || (e as NodeJS.ErrnoException).code === "ECONNRESET" ? undefined : reject(e)));
    for (const c of chunks) req.write(c);
    req.end();
  });
}

test("413: by Content-Length before reading, and while reading a chunked body; the engine is not contacted", async (t) => {
  engine.seen.length = 0;
  // JSON bodies carry the payload as base64: their limit is jsonBodyLimit(4096), as in the engine
  const bigJson = Buffer.alloc(jsonBodyLimit(4096) + 1, 65);
  const r1 = await rawPost(gw.url, "/v1/put", { "x-api-key": key, "content-type": "application/json", "content-length": String(bigJson.length) }, [bigJson]);
  t.equal(r1.status, 413, "Content-Length above the JSON limit: 413");
  t.equal(JSON.parse(r1.body).code, "payload_too_large");
  const half = bigJson.length >> 1;
  const r2 = await rawPost(gw.url, "/v1/put", { "x-api-key": key, "content-type": "application/json", "transfer-encoding": "chunked" }, [
    bigJson.subarray(0, half),
    bigJson.subarray(half),
  ]);
  t.equal(r2.status, 413, "chunked JSON above the limit: 413");
  const big = Buffer.alloc(5000, 65);
  t.equal(engine.seen.length, 0, "neither reached the engine");
  t.equal(gw.audit.records.at(-1)!.status, 413, "audited as 413");
  const r3 = await rawPost(
    gw.url,
    "/v1/put?namespace=default&key=big",
    { "x-api-key": key, "content-type": "application/octet-stream", "content-length": "5000" },
    [big],
  );
  t.equal(r3.status, 413, "octet-stream with Content-Length above the limit: 413");
  const r4 = await rawPost(
    gw.url,
    "/v1/put?namespace=default&key=big",
    { "x-api-key": key, "content-type": "application/octet-stream", "transfer-encoding": "chunked" },
    [big.subarray(0, 2000), big.subarray(2000)],
  );
  t.equal(r4.status, 413, "chunked octet-stream above the limit, counted while streaming: 413");
  t.equal(gw.audit.records.at(-1)!.status, 413, "audited as 413");
});

test("429: the sliding window refuses the request, Retry-After and detail, the engine never sees it; the window slides", async (t) => {
  const eng = await startFakeEngine();
  const g = await startTestGateway(eng.url, { defaultRateLimit: { requests: 3, window_s: 60 } });
  const k = await createTenant(g.url, { tenant_id: "acme" });
  const t0 = g.clock.now();
  for (let i = 0; i < 3; i++) {
    const r = await call(g.url, "/v1/get/default/k", { key: k });
    t.equal(r.status, 200, `request ${i + 1} admitted`);
    t.equal(r.headers.get("x-ratelimit-remaining"), String(2 - i), `remaining ${2 - i}`);
    g.clock.advance(10_000);
  }
  g.clock.set(t0 + 43_000);
  const r = await call(g.url, "/v1/get/default/k", { key: k });
  t.equal(r.status, 429, "fourth request inside 60 s: 429");
  t.equal(r.json.code, "rate_limited");
  t.equal(r.json.detail, "Rate limit exceeded for tenant acme; retry after 17 seconds.", "the detail sentence");
  t.equal(r.headers.get("retry-after"), "17", "Retry-After until the first request leaves the window");
  t.equal(r.headers.get("x-ratelimit-limit"), "3");
  t.equal(r.headers.get("x-ratelimit-remaining"), "0");
  t.equal(r.headers.get("x-ratelimit-reset"), String((t0 + 60_000) / 1000), "Reset is when the oldest request leaves");
  t.equal(r.headers.get("x-svc-cus"), "0");
  t.equal(eng.seen.length, 3, "the engine saw only the three admitted requests");
  t.equal(g.audit.records.at(-1)!.status, 429, "the 429 is audited");
  g.clock.set(t0 + 59_999);
  t.equal((await call(g.url, "/v1/get/default/k", { key: k })).status, 429, "1 ms before the edge: still refused");
  g.clock.set(t0 + 60_000);
  const ok = await call(g.url, "/v1/get/default/k", { key: k });
  t.equal(ok.status, 200, "at the edge the first request has left the window");
  t.equal(ok.headers.get("x-ratelimit-remaining"), "0", "the other two are still inside");
  t.equal((await call(g.url, "/v1/get/default/k", { key: k })).status, 429, "and the window is full again");
  g.clock.set(t0 + 70_000);
  t.equal((await call(g.url, "/v1/get/default/k", { key: k })).status, 200, "the second request left at +70 s");
  t.equal(eng.seen.length, 5, "only admitted requests reached the engine");
  await g.close();
  await eng.close();
});

test("order of checks (docs/api.md (order of checks)): a request failing two checks gets the earlier one's answer", async (t) => {
  const eng = await startFakeEngine();
  const g = await startTestGateway(eng.url, { billingEnabled: true });
  // enterprise terms: 2 requests per 60 s and a quota of 1 CU
  const k = await createTenant(g.url, {
    tenant_id: "acme",
    plan: "enterprise",
    namespaces: ["default"],
    rate_limit: { requests: 2, window_s: 60 },
    monthly_quota: 1,
  });
  const bad = "svc_live_" + "x".repeat(43);
  const expect = async (what: string, path: string, init: Parameters<typeof call>[2], status: number, code: string) => {
    const r = await call(g.url, path, init);
    t.deepEqual([r.status, r.json.code], [status, code], `${what}: ${status} ${code}`);
    t.equal(g.audit.records.at(-1)!.status, status, `${what}: audited as ${status}`);
    return r;
  };
  // 2 before 3: an unknown key with a malformed body, with an oversized body, outside the ACL
  await expect("bad key + bad JSON", "/v1/put", { key: bad, raw: "{not json", headers: { "content-type": "application/json" } }, 401, "unauthorized");
  await expect(
    "bad key + body over the limit",
    "/v1/put?namespace=default&key=k",
    { key: bad, raw: Buffer.alloc(2 * 1024 * 1024), headers: { "content-type": "application/octet-stream" } },
    401,
    "unauthorized",
  );
  await expect("bad key + namespace outside the ACL", "/v1/get/secret/k", { key: bad }, 401, "unauthorized");
  // 3 before 4: a malformed body that names a namespace outside the ACL
  await expect("bad body + namespace outside the ACL", "/v1/put", { key: k, body: { namespace: "secret", data_b64: "AAAA" } }, 400, "bad_request");
  // the 400 after authentication counted in the window (docs/api.md); one admitted get (0.1 CU,
  // under the 1 CU quota) fills it
  t.equal((await call(g.url, "/v1/get/default/k", { key: k })).status, 200, "get 1 admitted");
  // 4 before 5: outside the ACL while over the rate limit
  const r403 = await expect("namespace outside the ACL + over the rate limit", "/v1/get/secret/k", { key: k }, 403, "forbidden");
  t.equal(r403.headers.get("x-ratelimit-remaining"), "0", "the 403 reports the full window without counting itself");
  t.equal(r403.headers.get("retry-after"), null, "no Retry-After on the 403");
  // 5 before 6: over the rate limit with the quota exhausted
  await g.deps.usage.add("acme", "2026-01", "put", 1000);
  const r429 = await expect("over the rate limit + quota exhausted", "/v1/get/default/k", { key: k }, 429, "rate_limited");
  t.match(r429.json.detail, /^Rate limit exceeded for tenant acme; retry after \d+ seconds\.$/, "the 429 detail, not the quota's");
  // 6 before 7: quota exhausted while the engine is down
  g.clock.advance(60_000);
  await eng.close();
  const r503 = await expect("quota exhausted + engine down", "/v1/get/default/k", { key: k }, 503, "quota_exhausted");
  t.ok(Number(r503.headers.get("retry-after")) > 0, "Retry-After up to the month's end");
  t.equal(eng.seen.length, 1, "only the admitted get ever reached the engine");
  // 7: with the quota lifted, the same request reaches step 7 and gets the engine's 502
  t.equal((await admin(g.url, "/gate/onboard/update-tier", { tenant_id: "acme", plan: "enterprise", monthly_quota: null })).status, 200);
  await expect("engine down, nothing earlier failing", "/v1/get/default/k", { key: k }, 502, "engine_unreachable");
  await g.close();
});

test("502 when the engine is stopped, audited; health then reports engine_reachable false", async (t) => {
  const eng = await startFakeEngine();
  const g = await startTestGateway(eng.url);
  const k = await createTenant(g.url, { tenant_id: "acme" });
  t.equal((await call(g.url, "/v1/get/default/k", { key: k })).status, 200, "engine up: 200");
  await eng.close();
  const r = await call(g.url, "/v1/get/default/k", { key: k });
  t.equal(r.status, 502, "engine down: 502");
  t.equal(r.json.code, "engine_unreachable");
  t.equal(r.headers.get("x-svc-cus"), "0", "nothing charged");
  t.equal(g.audit.records.at(-1)!.status, 502, "the 502 is audited");
  const h = await call(g.url, "/health");
  t.equal(h.status, 200);
  t.equal(h.json.engine_reachable, false, "health tells the truth");
  const u = await admin(g.url, "/gate/admin/usage/acme", undefined, "GET");
  t.equal(u.json.breakdown.get, 0.1, "only the successful get was metered");
  await g.close();
});

test("501 gpu_unavailable from the engine passes through uncharged; X-SVC-CUs is on admin, health and 404 answers too", async (t) => {
  engine.respond = () => ({ status: 501, body: { detail: "No usable CUDA device.", code: "gpu_unavailable", request_id: "x" } });
  const r = await call(gw.url, "/v1/serve", { key, body: { namespace: "default", key: "k", device: "gpu" } });
  engine.respond = null;
  t.equal(r.status, 501);
  t.equal(r.json.code, "gpu_unavailable");
  t.equal(r.headers.get("x-svc-cus"), "0", "not charged");
  t.equal((await call(gw.url, "/health")).headers.get("x-svc-cus"), "0", "health");
  t.equal((await admin(gw.url, "/gate/admin/tenants", undefined, "GET")).headers.get("x-svc-cus"), "0", "admin");
  t.equal((await call(gw.url, "/nowhere")).headers.get("x-svc-cus"), "0", "404 outside /v1");
});

test("a client that aborts mid-upload neither crashes nor wedges the gateway, and nothing is charged", async (t) => {
  const before = (await admin(gw.url, "/gate/admin/usage/acme", undefined, "GET")).json.cus_used;
  await new Promise<void>((resolve) => {
    const u = new URL(gw.url);
    const req = httpRequest({
      host: u.hostname,
      port: u.port,
      path: "/v1/put?namespace=default&key=aborted",
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/octet-stream", "content-length": "3000" },
    });
    req.on("error", () => resolve());
    req.write(Buffer.alloc(1000, 1));
    setTimeout(() => {
      req.destroy();
      resolve();
    }, 100);
  });
  await new Promise((r) => setTimeout(r, 200));
  const h = await call(gw.url, "/v1/get/default/k", { key });
  t.equal(h.status, 200, "the gateway still serves");
  const after = (await admin(gw.url, "/gate/admin/usage/acme", undefined, "GET")).json.cus_used;
  t.equal(Math.round((after - before) * 1000), 100, "only the later get was charged");
  const aborted = gw.audit.records.find((a) => a.path === "/v1/put" && a.namespace === "default" && a.status === 400 && a.cus === 0);
  t.ok(aborted, "the aborted upload is audited as a 400, not as an engine failure");
  engine.seen.length = 0;
  const auditBefore = gw.audit.records.length;
  const usageBefore = (await admin(gw.url, "/gate/admin/usage/acme", undefined, "GET")).json.cus_used;
  await new Promise<void>((resolve) => {
    const u = new URL(gw.url);
    const req = httpRequest({
      host: u.hostname,
      port: u.port,
      path: "/v1/put",
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json", "content-length": "500" },
    });
    req.on("error", () => resolve());
    req.write('{"namespace":"default","key":"k","data_b64":"');
    setTimeout(() => {
      req.destroy();
      resolve();
    }, 100);
  });
  await new Promise((r) => setTimeout(r, 100));
  t.equal(engine.seen.length, 0, "the aborted JSON upload never reached the engine");
  const jsonAudit = gw.audit.records.slice(auditBefore).filter((a) => a.path.startsWith("/v1/")); // admin calls are audited too
  t.deepEqual(
    jsonAudit.map((a) => [a.path, a.namespace, a.status, a.cus, a.tenant_id]),
    [["/v1/put", "", 400, 0, "acme"]],
    "it is audited once, as a 400 of acme before its body named a namespace",
  );
  t.equal((await admin(gw.url, "/gate/admin/usage/acme", undefined, "GET")).json.cus_used, usageBefore, "nothing charged for it");
  t.equal((await call(gw.url, "/v1/get/default/k", { key })).status, 200, "still serving after an aborted JSON upload");
});

test("502 when the engine does not answer within SVC_GATE_ENGINE_TIMEOUT_MS", async (t) => {
  const express = (await import("express")).default;
  const { listen, closeServer } = await import("./helpers.js");
  const { UndiciEngineClient } = await import("../../server/gateway/proxy.js");
  const hung = express();
  let reached = 0;
  hung.use((_req, _res) => {
    reached++;
  }); // never answers
  const l = await listen(hung);
  const g = await startTestGateway(l.url, { engine: new UndiciEngineClient(l.url, SERVICE_KEY, 300, 4) });
  const k = await createTenant(g.url, { tenant_id: "slow" });
  const t0 = Date.now();
  const r = await call(g.url, "/v1/get/default/k", { key: k });
  t.equal(r.status, 502, "502 after the timeout");
  t.equal(r.json.code, "engine_unreachable");
  t.ok(Date.now() - t0 < 5000, "answered promptly");
  t.equal(reached, 1, "the request had reached the engine");
  t.equal(g.audit.records.at(-1)!.status, 502, "audited");
  await g.close();
  await closeServer(l.server);
});

test("the app used as a plain handler (express router path) behaves like app.listen (fast path)", async (t) => {
  const { createServer } = await import("node:http");
  const { createApp } = await import("../../server/gateway/app.js");
  const server = createServer(createApp(gw.deps));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  engine.seen.length = 0;
  const rid = randomUUID();
  const ok = await call(url, "/v1/get/default/k", { key, headers: { "x-request-id": rid, "x-svc-tenant": "other" } });
  t.equal(ok.status, 200);
  t.equal(ok.headers.get("x-request-id"), rid);
  t.equal(ok.headers.get("x-svc-cus"), "0.1");
  t.ok(ok.headers.get("x-ratelimit-limit"), "rate-limit headers");
  t.equal(engine.seen[0]!.headers["x-svc-tenant"], "acme", "the client's X-SVC-Tenant is discarded here too");
  const denied = await call(url, "/v1/get/secret/k", { key });
  t.equal(denied.status, 403);
  t.deepEqual(Object.keys(denied.json).sort(), ["code", "detail", "request_id"]);
  t.equal(gw.audit.records.at(-1)!.status, 403, "audited");
  const noKey = await call(url, "/v1/list/default");
  t.equal(noKey.status, 401);
  await new Promise<void>((r) => {
    server.close(() => r());
    server.closeAllConnections();
  });
});

test("teardown", async () => {
  await gw.close();
  await engine.close();
});
