// What the console stands on, over HTTP: GET /gate/admin/audit (filters, order, limits, the file
// reader across chunk boundaries and a torn last line), GET /gate/account (tenant key, rate limit,
// 0 CUs, audited) and the static console route (CSP, redirects, no path escape).
import test from "tape";
import { appendFileSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { auditLine, type AuditRecord } from "../../server/gateway/audit.js";
import { fileAuditTail } from "../../server/gateway/audit-tail.js";
import { CONSOLE_CSP } from "../../server/gateway/console.js";
import { admin, call, createTenant, SERVICE_KEY, startFakeEngine, startTestGateway } from "./helpers.js";

const rec = (i: number, over: Partial<AuditRecord> = {}): AuditRecord => ({
  ts: new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString(),
  tenant_id: i % 3 === 0 ? "acme" : "beta",
  method: "GET",
  path: `/v1/get/default/k${i}`,
  namespace: "default",
  status: i % 5 === 0 ? 404 : 200,
  cus: 0.1,
  latency_ms: 1.5,
  request_id: `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`,
  ...over,
});

test("file audit tail: newest first, filters, chunk boundaries, torn line, scan bound", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-audit-tail-"));
  try {
    const path = join(dir, "audit.jsonl");
    const all: AuditRecord[] = [];
    // Records of varied length so lines straddle the reader's 256 KiB chunks.
    let text = "";
    for (let i = 0; i < 6000; i++) {
      const r = rec(i, { path: `/v1/get/default/${"k".repeat(1 + ((i * 37) % 400))}${i}` });
      all.push(r);
      text += auditLine(r);
    }
    writeFileSync(path, text);
    const tail = fileAuditTail(path);
    const newest = await tail({ limit: 1000 });
    t.equal(newest!.records.length, 1000, "limit 1000: 1000 records");
    t.deepEqual(
      newest!.records.map((r) => r.request_id),
      all
        .slice(-1000)
        .reverse()
        .map((r) => r.request_id),
      "newest first, every record whole across chunk boundaries",
    );
    t.equal(newest!.complete, false, "not complete: older records remain");

    const acme404 = await tail({ tenant_id: "acme", status: 404, limit: 1000 });
    const want = all.filter((r) => r.tenant_id === "acme" && r.status === 404).reverse();
    t.equal(acme404!.records.length, want.length, `tenant and status filter: ${want.length} records`);
    t.deepEqual(
      acme404!.records.map((r) => r.request_id),
      want.map((r) => r.request_id),
      "filtered records, newest first",
    );
    t.equal(acme404!.complete, true, "the whole log was read");

    appendFileSync(path, '{"ts":"2026-01-02T00:00:00.000Z","tenant_id":"acme","meth'); // a torn last line
    const torn = await tail({ limit: 3 });
    t.deepEqual(
      torn!.records.map((r) => r.request_id),
      all
        .slice(-3)
        .reverse()
        .map((r) => r.request_id),
      "a torn last line is skipped",
    );

    const bounded = await fileAuditTail(path, 300_000)({ tenant_id: "nobody", limit: 10 });
    t.equal(bounded!.records.length, 0, "no match");
    t.ok(bounded!.scanned_bytes <= 300_000, "the scan stops at its byte bound");
    t.equal(bounded!.complete, false, "and says it did not reach the start");

    const missing = await fileAuditTail(join(dir, "none.jsonl"))({ limit: 5 });
    t.deepEqual(missing, { records: [], complete: true, scanned_bytes: 0 }, "a log not written yet is empty");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("GET /gate/admin/audit and GET /gate/account over HTTP", async (t) => {
  const engine = await startFakeEngine();
  const gw = await startTestGateway(engine.url, { defaultRateLimit: { requests: 5, window_s: 60 } });
  try {
    const acme = await createTenant(gw.url, { tenant_id: "acme", namespaces: ["default", "fields"] });
    await createTenant(gw.url, { tenant_id: "beta" });
    for (let i = 0; i < 3; i++) t.equal((await call(gw.url, `/v1/get/default/k${i}`, { key: acme })).status, 200, "a get through the gateway");
    t.equal((await call(gw.url, "/v1/get/default/k0", { key: "svc_live_wrong" })).status, 401, "a wrong key: 401");

    const acc = await call(gw.url, "/gate/account", { key: acme });
    t.equal(acc.status, 200, "account: 200 with the tenant key");
    t.equal(acc.json.tenant_id, "acme");
    t.deepEqual(acc.json.namespaces, ["default", "fields"], "its namespaces");
    t.equal(acc.json.plan, "starter");
    t.equal(acc.json.usage.cus_used, 0.3, "three gets: 0.3 CUs this month");
    t.equal(acc.json.usage.breakdown.get, 0.3, "breakdown by operation");
    t.equal(acc.headers.get("x-svc-cus"), "0", "the account view costs 0 CUs");
    t.equal(acc.headers.get("x-ratelimit-limit"), "5", "rate-limit headers");
    t.equal(acc.headers.get("x-ratelimit-remaining"), "1", "it counts against the window (3 gets + this call)");
    const over = await call(gw.url, "/gate/account", { key: acme });
    t.equal(over.status, 200, "the fifth request of the window is still admitted");
    const limited = await call(gw.url, "/gate/account", { key: acme });
    t.equal(limited.status, 429, "past the window: 429");
    t.match(limited.json.detail, /^Rate limit exceeded for tenant acme; retry after \d+ seconds\.$/, "with the API's sentence");
    t.equal((await call(gw.url, "/gate/account")).status, 401, "no key: 401");
    t.equal(
      (await call(gw.url, "/gate/account", { headers: { authorization: `Bearer ${SERVICE_KEY}` } })).status,
      401,
      "the service key is no tenant key: 401",
    );
    const beta = await call(gw.url, "/gate/admin/tenants", {});
    t.equal(beta.status, 401, "admin without a key: 401");

    const tail = await admin(gw.url, "/gate/admin/audit?tenant_id=acme&status=200", undefined, "GET");
    t.equal(tail.status, 200, "audit tail: 200");
    t.ok(tail.json.records.length >= 5, "acme's 200s: the gets and account views");
    t.ok(
      tail.json.records.every((r: AuditRecord) => r.tenant_id === "acme" && r.status === 200),
      "only acme's 200s",
    );
    const ts = tail.json.records.map((r: AuditRecord) => r.ts);
    t.deepEqual(ts, [...ts].sort().reverse(), "newest first");
    t.equal(tail.json.records[0].path, "/gate/account", "the newest is the last account view");
    const unauth = await admin(gw.url, "/gate/admin/audit?status=401&limit=2", undefined, "GET");
    t.equal(unauth.json.records.length, 2, "limit 2");
    t.ok(
      unauth.json.records.every((r: AuditRecord) => r.status === 401),
      "status filter 401",
    );
    for (const [q, why] of [
      ["limit=0", "limit 0"],
      ["limit=1001", "limit above 1000"],
      ["limit=1e3", "limit written 1e3"],
      ["limit=abc", "limit not a number"],
      ["status=99", "status of two digits"],
      ["status=600", "status 600"],
      ["tenant_id=ACME!", "a malformed tenant id"],
      ["since=1", "an unknown parameter"],
      ["limit=5&limit=6", "a repeated parameter"],
    ] as const) {
      const r = await admin(gw.url, `/gate/admin/audit?${q}`, undefined, "GET");
      t.equal(r.status, 400, `${why}: 400`);
      t.equal(typeof r.json.detail, "string", "with a detail sentence");
    }
    const asTenant = await call(gw.url, "/gate/admin/audit", { headers: { authorization: `Bearer ${acme}` } });
    t.equal(asTenant.status, 401, "a tenant key on the audit tail: 401");
    t.notOk(JSON.stringify(tail.json).includes(acme), "no key in the audit tail");
  } finally {
    await gw.close();
    await engine.close();
  }
});

test("static console: CSP, redirects, no escape from its folder", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-console-static-"));
  mkdirSync(join(dir, "console"));
  writeFileSync(join(dir, "console", "index.html"), "<!doctype html><title>console</title>");
  writeFileSync(join(dir, "console", "app.js"), "export {};");
  writeFileSync(join(dir, "secret.txt"), "not served");
  const engine = await startFakeEngine();
  const gw = await startTestGateway(engine.url, { consoleDir: join(dir, "console") });
  try {
    const index = await fetch(`${gw.url}/console/`);
    t.equal(index.status, 200, "/console/: 200");
    t.equal(index.headers.get("content-security-policy"), CONSOLE_CSP, "the strict CSP");
    t.ok(CONSOLE_CSP.includes("script-src 'self'") && !CONSOLE_CSP.includes("unsafe"), "scripts from the origin only, nothing unsafe");
    t.equal(index.headers.get("x-content-type-options"), "nosniff");
    t.equal(index.headers.get("x-frame-options"), "DENY");
    t.match(await index.text(), /<title>console/, "the built index");
    const js = await fetch(`${gw.url}/console/app.js`);
    t.equal(js.status, 200, "an asset: 200");
    t.match(js.headers.get("content-type") ?? "", /javascript/, "served as JavaScript");
    const bare = await fetch(`${gw.url}/console`, { redirect: "manual" });
    t.equal(bare.status, 301, "/console redirects");
    t.equal(bare.headers.get("location"), "/console/");
    const browser = await fetch(`${gw.url}/`, { redirect: "manual", headers: { accept: "text/html,application/xhtml+xml" } });
    t.equal(browser.status, 302, "a browser asking for / is sent to the console");
    t.equal(browser.headers.get("location"), "/console/");
    const apiRoot = await fetch(`${gw.url}/`, { headers: { accept: "application/json" } });
    t.equal(apiRoot.status, 404, "an API client asking for / keeps the JSON 404");
    t.equal(((await apiRoot.json()) as { code: string }).code, "not_found");
    for (const p of ["/console/../secret.txt", "/console/%2e%2e/secret.txt", "/console/..%2fsecret.txt", "/console/missing.js", "/console/.hidden"]) {
      const r = await fetch(`${gw.url}${p}`);
      t.equal(r.status, 404, `${p}: 404`);
      t.notOk((await r.text()).includes("not served"), "nothing outside the folder");
    }
    const post = await fetch(`${gw.url}/console/`, { method: "POST" });
    t.equal(post.status, 404, "POST /console/: 404");
  } finally {
    await gw.close();
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const empty = mkdtempSync(join(tmpdir(), "svc-console-empty-"));
  const engine2 = await startFakeEngine();
  const gw2 = await startTestGateway(engine2.url, { consoleDir: join(empty, "console") });
  try {
    const r = await fetch(`${gw2.url}/console/`);
    t.equal(r.status, 404, "an unbuilt console: 404");
    t.match(((await r.json()) as { detail: string }).detail, /not built; run `npm run build`/, "saying how to build it");
  } finally {
    await gw2.close();
    await engine2.close();
    rmSync(empty, { recursive: true, force: true });
  }
});
