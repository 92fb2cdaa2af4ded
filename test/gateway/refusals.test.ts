// What a tenant sends counts against that tenant: requests the gateway refuses after
// authentication (404, 400, 403) count in its rate-limit window (docs/api.md, order of checks),
// a tenant over its window is answered 429 at once, and the audit records one tenant can cause
// are bounded by its rate limit whatever it sends. Pipelined requests are answered in order,
// also when the gateway refuses one of them itself.
import test from "tape";
import { connect } from "node:net";
import { call, createTenant, SERVICE_KEY, startFakeEngine, startTestGateway } from "./helpers.js";

async function pool(n: number, width: number, one: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) await one(next++);
    }),
  );
}

test("refusals after authentication count against the window; the audit volume of a flood of refusals is bounded", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url);
  const key = await createTenant(g.url, { tenant_id: "acme", plan: "enterprise", namespaces: ["default"], rate_limit: { requests: 10, window_s: 60 } });
  const other = await createTenant(g.url, { tenant_id: "other" });
  const before = g.audit.records.length;
  const first = await call(g.url, "/v1/nope", { key });
  t.equal(first.status, 404, "a refusal keeps its own status");
  t.equal(first.headers.get("x-ratelimit-remaining"), "9", "and counts one request of the window");
  const statuses: number[] = [];
  // 3,000 requests of three refused kinds: unknown route, malformed JSON, a foreign namespace.
  const kinds = [
    () => call(g.url, "/v1/nope", { key }),
    () => call(g.url, "/v1/search", { key, raw: "{not json", headers: { "content-type": "application/json" } }),
    () => call(g.url, "/v1/get/secret/k", { key }),
  ];
  await pool(3000, 8, async (i) => void statuses.push((await kinds[i % 3]!()).status));
  const by = (s: number) => statuses.filter((x) => x === s).length;
  // Nine fill the window (10 per minute); those that find it full keep their own status (the
  // order of checks is unchanged) and mark the tenant: at most the 8 sent at once do.
  const refused = by(404) + by(400) + by(403);
  t.ok(refused >= 10 && refused <= 17, `${refused} refusals answered with their own status`);
  t.equal(by(429), 3000 - refused, "every later request is 429");
  const recs = g.audit.records.slice(before).filter((r) => r.tenant_id === "acme");
  t.ok(recs.length <= refused + 2, `${recs.length} audit records for 3,001 requests: those refusals, the first one and the first 429`);
  const valid = await call(g.url, "/v1/get/default/k", { key });
  t.equal(valid.status, 429, "a valid request of the tenant waits for its window");
  t.match(valid.json.detail, /^Rate limit exceeded for tenant acme; retry after \d+ seconds\.$/, "with the 429 detail");
  t.equal(valid.headers.get("x-ratelimit-remaining"), "0", "and the rate-limit headers");
  t.equal(engine.seen.filter((s) => s.url.startsWith("/v1/")).length, 0, "nothing reached the engine");
  t.equal((await call(g.url, "/v1/get/default/k", { key: other })).status, 200, "another tenant is served");
  g.clock.advance(61_000);
  t.equal((await call(g.url, "/v1/get/default/k", { key })).status, 200, "the window over, the tenant is served again");
  await g.close();
  await engine.close();
});

/** Sends `text` on one connection and collects the status lines until `n` responses arrived or the connection closed. */
function pipelined(url: string, text: string, n: number): Promise<{ statuses: number[]; closed: boolean }> {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = connect(Number(u.port), u.hostname);
    let got = "";
    const statuses = () => [...got.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
    s.on("data", (d) => {
      got += d;
      if (statuses().length >= n) {
        s.destroy();
        resolve({ statuses: statuses(), closed: false });
      }
    });
    s.on("error", () => undefined);
    s.on("close", () => resolve({ statuses: statuses(), closed: true }));
    s.once("connect", () => s.write(text));
  });
}

test("pipelined requests are answered in order, also when the gateway refuses one of them itself", async (t) => {
  const engine = await startFakeEngine();
  const g = await startTestGateway(engine.url);
  const key = await createTenant(g.url, { tenant_id: "acme" });
  const get = (path: string, k = key) => `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${k}\r\n\r\n`;
  const cases: Array<[string, string, number]> = [
    ["an unknown route", get("/v1/nope"), 404],
    ["an unknown key", get("/v1/get/default/k", `svc_live_${"z".repeat(43)}`), 401],
    ["a foreign namespace", get("/v1/get/secret/k"), 403],
    ["malformed JSON", `POST /v1/search HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{"a":`, 400],
    ["a body on a GET", `GET /v1/get/default/k HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Length: 3\r\n\r\nabc`, 400],
    ["an admin call without the service key", "GET /gate/admin/tenants HTTP/1.1\r\nHost: x\r\n\r\n", 401],
  ];
  for (const [what, middle, status] of cases) {
    const r = await pipelined(g.url, get("/v1/get/default/a") + middle + get("/v1/get/default/b"), 3);
    t.deepEqual(r.statuses, [200, status, 200], `${what}: the three answers, in order`);
  }
  await g.close();
  await engine.close();
});

test("a 404 names a long path by its first 200 characters and its length, on every router of the gateway", async (t) => {
  const engine = await startFakeEngine();
  const gw = await startTestGateway(engine.url);
  try {
    const key = await createTenant(gw.url, { tenant_id: "longpath" });
    const tail = "a".repeat(6000);
    // [path, headers, the sentence's start, the path as the sentence names it]
    const cases: Array<[string, Record<string, string>, string, string]> = [
      [`/v1/${tail}`, { "x-api-key": key }, "No endpoint GET ", `/v1/${tail}`],
      [`/gate/${tail}`, {}, "No endpoint GET ", `/gate/${tail}`],
      [`/gate/admin/${tail}`, { authorization: `Bearer ${SERVICE_KEY}` }, "No admin endpoint GET ", `/gate/admin/${tail}`],
      [`/console/${tail}`, {}, "No console file ", `/${tail}`],
    ];
    for (const [path, headers, start, named] of cases) {
      const r = await call(gw.url, path, { method: "GET", headers });
      const detail = String(r.json?.detail);
      t.equal(r.status, 404, `${start}...: 404`);
      t.equal(detail, `${start}${named.slice(0, 200)}... (${named.length} characters).`, `${start}...: the first 200 characters and the length`);
    }
  } finally {
    await gw.close();
    await engine.close();
  }
});
