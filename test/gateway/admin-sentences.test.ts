// Refusals of the admin API's hostile values over HTTP: each detail is one sentence in the
// product's words naming the field ("key_id must be a string.", "limit must be given once."),
// never zod's own English ("Invalid input: expected string, received array").
import test from "tape";
import { admin, startFakeEngine, startTestGateway, type FakeEngine, type TestGateway } from "./helpers.js";

const ZOD_PHRASES = /Invalid input|Invalid option|expected|received|Too big|Too small|<=|>=/;
const oneSentence = (s: string): boolean => /^[^\n]+\.$/.test(s) && !/\.\s+[A-Z]/.test(s);

let engine: FakeEngine;
let gw: TestGateway;

test("setup", async () => {
  engine = await startFakeEngine();
  gw = await startTestGateway(engine.url);
  await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" });
});

test("admin refusals: one product sentence naming the field", async (t) => {
  const cases: [what: string, path: string, body: unknown, method: string, field: string, exact: string | null][] = [
    ["revoke, key_id a number", "/gate/admin/keys/revoke", { key_id: 12 }, "POST", "key_id", "key_id must be a string."],
    ["revoke, key_id a list", "/gate/admin/keys/revoke", { key_id: ["key_AAAAAAAAAAAAAAAA"] }, "POST", "key_id", "key_id must be a string."],
    ["revoke, key_id null", "/gate/admin/keys/revoke", { key_id: null }, "POST", "key_id", "key_id must be a string, not null."],
    ["revoke, key_id missing", "/gate/admin/keys/revoke", {}, "POST", "key_id", "key_id is required."],
    ["keys, name a number", "/gate/admin/keys", { tenant_id: "acme", name: 5, scopes: ["read"] }, "POST", "name", "name must be a string."],
    ["keys, tenant_id a number", "/gate/admin/keys", { tenant_id: 5, name: "k", scopes: ["read"] }, "POST", "tenant_id", "tenant_id must be a string."],
    ["keys, name missing", "/gate/admin/keys", { tenant_id: "acme", scopes: ["read"] }, "POST", "name", "name is required."],
    ["create, tenant_id true", "/gate/onboard/create", { tenant_id: true }, "POST", "tenant_id", "tenant_id must be a string."],
    ["audit, limit twice", "/gate/admin/audit?limit=1&limit=2", undefined, "GET", "limit", "limit must be given once."],
    ["audit, status twice", "/gate/admin/audit?status=200&status=404", undefined, "GET", "status", "status must be given once."],
    ["audit, tenant_id twice", "/gate/admin/audit?tenant_id=a&tenant_id=b", undefined, "GET", "tenant_id", "tenant_id must be given once."],
  ];
  for (const [what, path, body, method, field, exact] of cases) {
    const r = await admin(gw.url, path, body, method);
    const detail = String(r.json?.detail);
    t.equal(r.status, 400, `${what}: 400`);
    t.ok(oneSentence(detail), `${what}: one sentence: ${detail}`);
    t.ok(detail.includes(field), `${what}: names ${field}`);
    t.notOk(ZOD_PHRASES.test(detail), `${what}: no zod wording`);
    if (exact !== null) t.equal(detail, exact, `${what}: the sentence`);
  }
});

test("teardown", async () => {
  await gw.close();
  await engine.close();
});
