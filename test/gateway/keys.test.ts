// Scoped API keys: the registry side on every registry (memory, local file, real Redis), and
// the admin API and the data plane's step 4 over real HTTP (validation with hostile inputs,
// scopes, namespace subsets, expiry, revocation, audit key_id, batched last_used_at).
import test from "tape";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sha256Hex } from "../../lib/sha256.js";
import { KeyUsageTracker, LocalFileKeyUsageStore, MemoryKeyUsageStore, RedisKeyUsageStore } from "../../server/gateway/key-usage.js";
import { createScopedKey, MAX_KEYS_PER_TENANT, revokeScopedKey } from "../../server/gateway/keys.js";
import { LocalFileTenantRegistry, MemoryTenantRegistry, RedisTenantRegistry, type TenantRecord, type TenantRegistry } from "../../server/gateway/tenants.js";
import { admin, call, createTenant, redisFor, startFakeEngine, startTestGateway, uniquePrefix } from "./helpers.js";
import { startBillingGateway } from "./billing-env.js";
import { startFakeStripe } from "./fixtures/billing-fake-stripe.js";

const NOW = Date.UTC(2026, 0, 15, 12, 0, 0);

const rec = (id: string, key: string): TenantRecord => ({
  tenant_id: id,
  plan: "starter",
  namespaces: ["default", "team"],
  email: null,
  key_hash: sha256Hex(key),
  active: true,
  status: "active",
  monthly_quota: 1000,
  rate_limit: { requests: 10, window_s: 60 },
  custom_rate_limit: false,
  created_at: "2026-01-01T00:00:00.000Z",
  updated_at: "2026-01-01T00:00:00.000Z",
});

async function contract(t: test.Test, r: TenantRegistry, label: string) {
  await r.create(rec("acme", "svc_live_primary"));
  const a = await createScopedKey(r, { tenant_id: "acme", name: "reader", scopes: ["read"], namespaces: ["team"] }, NOW);
  const b = await createScopedKey(r, { tenant_id: "acme", name: "writer", scopes: ["write", "read"], expires_at: "2027-01-01T00:00:00Z" }, NOW);
  t.match(a.key.key_id, /^key_[A-Za-z0-9_-]{16}$/, `${label}: a key id`);
  t.notEqual(a.key.key_id, b.key.key_id, `${label}: ids differ`);
  t.deepEqual(b.key.scopes, ["read", "write"], `${label}: scopes in canonical order`);
  t.equal(b.key.expires_at, "2027-01-01T00:00:00.000Z", `${label}: expiry normalised`);
  t.equal((await r.findByKeyHash(sha256Hex(a.apiKey)))?.tenant_id, "acme", `${label}: a scoped key finds its tenant`);
  t.equal((await r.findByKeyId(b.key.key_id))?.tenant_id, "acme", `${label}: found by key id`);
  const stored = await r.get("acme");
  t.notOk(JSON.stringify(stored).includes(a.apiKey), `${label}: the key itself is not stored`);
  t.equal(stored!.keys!.length, 2, `${label}: two scoped keys in the record`);

  // Rotation keeps the scoped keys; the primary changes alone.
  await r.update("acme", (c) => ({ ...c, key_hash: sha256Hex("svc_live_rotated") }));
  t.equal(await r.findByKeyHash(sha256Hex("svc_live_primary")), null, `${label}: the rotated-away key is gone`);
  t.equal((await r.findByKeyHash(sha256Hex(a.apiKey)))?.tenant_id, "acme", `${label}: a scoped key survives the rotation`);

  await revokeScopedKey(r, { key_id: a.key.key_id }, NOW);
  t.equal(await r.findByKeyHash(sha256Hex(a.apiKey)), null, `${label}: a revoked key finds nothing`);
  t.equal(await r.findByKeyId(a.key.key_id), null, `${label}: nor does its id`);
  t.equal((await r.findByKeyHash(sha256Hex(b.apiKey)))?.tenant_id, "acme", `${label}: the other key still works`);
  try {
    await revokeScopedKey(r, { key_id: a.key.key_id }, NOW);
    t.fail(`${label}: revoked twice`);
  } catch (e) {
    t.equal((e as { code?: string }).code, "not_found", `${label}: a second revoke is not_found`);
  }

  // Deactivation: no key of the tenant authenticates; the key can still be found by id (and revoked).
  await r.update("acme", (c) => ({ ...c, active: false, status: "deactivated", key_hash: "" }));
  t.equal(await r.findByKeyHash(sha256Hex(b.apiKey)), null, `${label}: deactivation stops scoped keys too`);
  t.equal((await r.findByKeyId(b.key.key_id))?.tenant_id, "acme", `${label}: the key id still names the tenant`);
  try {
    await createScopedKey(r, { tenant_id: "acme", name: "late", scopes: ["read"] }, NOW);
    t.fail(`${label}: key created on a deactivated tenant`);
  } catch (e) {
    t.equal((e as { code?: string }).code, "version_conflict", `${label}: no new key for a deactivated tenant`);
  }

  // The limit per tenant.
  await r.create(rec("many", "svc_live_many"));
  for (let i = 0; i < MAX_KEYS_PER_TENANT; i++) await createScopedKey(r, { tenant_id: "many", name: `k${i}`, scopes: ["read"] }, NOW);
  try {
    await createScopedKey(r, { tenant_id: "many", name: "one-too-many", scopes: ["read"] }, NOW);
    t.fail(`${label}: past the limit`);
  } catch (e) {
    t.match((e as Error).message, new RegExp(`already holds ${MAX_KEYS_PER_TENANT} keys`), `${label}: the limit of ${MAX_KEYS_PER_TENANT} is enforced`);
  }
}

test("scoped keys on the memory registry", async (t) => {
  await contract(t, new MemoryTenantRegistry(), "memory");
});

test("scoped keys on the local-file registry, and they survive a reopen", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-keys-"));
  try {
    const r = await LocalFileTenantRegistry.open(dir);
    await contract(t, r, "local");
    const again = await LocalFileTenantRegistry.open(dir);
    t.equal((await again.get("many"))!.keys!.length, MAX_KEYS_PER_TENANT, "the keys are on disk and read back");
    t.notOk((await readFile(join(dir, "tenants.json"), "utf8")).includes("svc_live_"), "no key on disk, only hashes");
    // A registry file whose key entry was tampered with (not a SHA-256, an unknown scope) is refused whole.
    const file = JSON.parse(await readFile(join(dir, "tenants.json"), "utf8"));
    for (const tamper of [
      (k: { key_hash: string }) => {
        k.key_hash = "svc_live_plaintext";
      },
      (k: { scopes: string[] }) => {
        k.scopes = ["admin"];
      },
    ]) {
      const copy = structuredClone(file);
      tamper(copy.tenants.find((x: TenantRecord) => x.tenant_id === "many").keys[0]);
      await writeFile(join(dir, "tenants.json"), JSON.stringify(copy));
      try {
        await again.reload();
        t.fail("a tampered registry file was read");
      } catch (e) {
        t.match((e as Error).message, /not a valid registry/, "a tampered key entry: the file is refused with a sentence");
      }
    }
    t.equal((await again.get("many"))!.keys!.length, MAX_KEYS_PER_TENANT, "and the registry in memory is unchanged");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("scoped keys on the Redis registry (real Redis): indexes follow the record", async (t) => {
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  try {
    const r = new RedisTenantRegistry(redis, prefix);
    await contract(t, r, "redis");
    const keys = ((await redis.sendCommand(["KEYS", `${prefix}*`])) as string[]).sort();
    // acme (deactivated, one key left) and many (primary + 20 keys): 21 hash indexes, 21 id indexes.
    t.equal(keys.filter((k) => k.startsWith(`${prefix}key:`)).length, 1 + MAX_KEYS_PER_TENANT, "hash indexes: only those of active keys");
    t.equal(keys.filter((k) => k.startsWith(`${prefix}keyid:`)).length, 1 + MAX_KEYS_PER_TENANT, "id indexes: one per key left, none for revoked ones");
  } finally {
    await cleanup();
  }
});

test("key usage stores: later instants win; the tracker writes in batches", async (t) => {
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  const dir = await mkdtemp(join(tmpdir(), "svc-keyuse-"));
  try {
    const stores = { memory: new MemoryKeyUsageStore(), local: await LocalFileKeyUsageStore.open(dir), redis: new RedisKeyUsageStore(redis, prefix) };
    for (const [label, s] of Object.entries(stores)) {
      await s.record([
        { tenant_id: "acme", key_id: "key_a", at_ms: 2000 },
        { tenant_id: "beta", key_id: "key_b", at_ms: 5 },
      ]);
      await s.record([{ tenant_id: "acme", key_id: "key_a", at_ms: 1000 }]);
      t.deepEqual([...(await s.lastUsed("acme"))], [["key_a", 2000]], `${label}: an older instant does not replace a newer one`);
      t.deepEqual([...(await s.lastUsed("ghost"))], [], `${label}: none for an unknown tenant`);
    }
    t.deepEqual([...(await (await LocalFileKeyUsageStore.open(dir)).lastUsed("beta"))], [["key_b", 5]], "local: read back from the file");
    t.equal((await stat(join(dir, "key-usage.json"))).mode & 0o777, 0o600, "local: the file is 0600");
    for (const bad of ["{ broken", "[1,2]", JSON.stringify({ acme: { key_a: "yesterday", key_b: 5 }, beta: 7 })]) {
      await writeFile(join(dir, "key-usage.json"), bad);
      const reopened = await LocalFileKeyUsageStore.open(dir);
      t.deepEqual(
        [...(await reopened.lastUsed("acme"))],
        bad.includes("key_b") ? [["key_b", 5]] : [],
        `local: a damaged file (${bad.slice(0, 12)}) keeps only valid instants`,
      );
      await reopened.record([{ tenant_id: "acme", key_id: "key_c", at_ms: 9 }]);
      t.ok(JSON.parse(await readFile(join(dir, "key-usage.json"), "utf8")).acme.key_c === 9, "local: and is rewritten whole at the next batch");
    }

    const m = new MemoryKeyUsageStore();
    const tr = new KeyUsageTracker(m, 3_600_000);
    for (let i = 0; i < 1000; i++) tr.touch("acme", "key_a", NOW + i);
    t.equal(m.writes, 0, "1,000 uses: nothing written yet");
    t.equal((await tr.lastUsed("acme")).get("key_a"), NOW + 999, "the tracker answers with its unwritten note");
    await tr.flush();
    t.equal(m.writes, 1, "one batch written");
    t.equal((await m.lastUsed("acme")).get("key_a"), NOW + 999, "with the last instant");
    await tr.close();
    t.equal(m.writes, 1, "nothing more to write on close");
  } finally {
    await cleanup();
    await rm(dir, { recursive: true, force: true });
  }
});

test("admin API and data plane: create, scopes, namespaces, expiry, revoke, audit, last_used_at", async (t) => {
  const engine = await startFakeEngine();
  const store = new MemoryKeyUsageStore();
  const gw = await startTestGateway(engine.url, { keyUsage: new KeyUsageTracker(store, 3_600_000) });
  try {
    const primary = await createTenant(gw.url, { tenant_id: "acme", namespaces: ["default", "team", "other"] });
    const made = await admin(gw.url, "/gate/admin/keys", {
      tenant_id: "acme",
      name: "ci reader",
      scopes: ["read"],
      namespaces: ["team"],
      expires_at: "2026-01-16T12:00:00Z",
    });
    t.equal(made.status, 201, "created");
    t.deepEqual(Object.keys(made.json).sort(), ["api_key", "expires_at", "key_id", "name", "namespaces", "scopes", "tenant_id"], "the documented fields");
    t.match(made.json.api_key, /^svc_live_[A-Za-z0-9_-]{43}$/, "a key of the usual form");
    t.deepEqual([made.json.scopes, made.json.namespaces, made.json.expires_at], [["read"], ["team"], "2026-01-16T12:00:00.000Z"]);
    const reader = made.json.api_key as string;
    const full = await admin(gw.url, "/gate/admin/keys", { tenant_id: "acme", name: "writer", scopes: ["read", "write"] });
    t.equal(full.status, 201);
    t.equal(full.json.namespaces, null, "no namespaces: every namespace of the tenant");
    t.equal(full.json.expires_at, null, "no expiry");
    const writer = full.json.api_key as string;

    // Step 4: scopes and namespaces.
    t.equal((await call(gw.url, "/v1/get/team/k", { key: reader })).status, 200, "read in its namespace");
    t.equal((await call(gw.url, "/v1/list/team", { key: reader })).status, 200, "list in its namespace");
    const put = await call(gw.url, "/v1/put", { key: reader, body: { namespace: "team", key: "k", data_b64: "AAAA" } });
    t.equal(put.status, 403, "a read key cannot put");
    t.equal(put.json.code, "forbidden");
    t.match(put.json.detail, /lacks scope write, which put needs/, "the detail names the scope");
    const octet = await call(gw.url, "/v1/put?namespace=team&key=k&dtype=bytes", {
      key: reader,
      raw: Buffer.from("abcd"),
      headers: { "content-type": "application/octet-stream" },
    });
    t.equal(octet.status, 403, "nor an octet-stream put");
    const del = await call(gw.url, "/v1/delete/team/k", { key: reader, method: "DELETE" });
    t.equal(del.status, 403, "nor a delete");
    const outside = await call(gw.url, "/v1/get/default/k", { key: reader });
    t.equal(outside.status, 403, "a namespace of the tenant outside the key's subset");
    t.equal(outside.json.code, "forbidden");
    t.match(outside.json.detail, /not allowed namespace default/, "the detail names the namespace");
    const pair = await call(gw.url, "/v1/query/similarity", { key: reader, body: { namespace: "team", a: "a", b: "b", namespace_b: "other" } });
    t.equal(pair.status, 403, "the second namespace of a pairwise query is checked too");
    const foreign = await call(gw.url, "/v1/get/elsewhere/k", { key: reader });
    t.match(foreign.json.detail, /Tenant acme is not allowed/, "outside the tenant's ACL: the tenant's refusal comes first");
    t.equal(
      (await call(gw.url, "/v1/put", { key: writer, body: { namespace: "other", key: "k", data_b64: "AAAA" } })).status,
      201,
      "a write key puts anywhere in the tenant's ACL",
    );
    t.equal(
      (await call(gw.url, "/v1/put", { key: primary, body: { namespace: "other", key: "k", data_b64: "AAAA" } })).status,
      201,
      "the primary key keeps full access",
    );
    const engineSeen = engine.seen.filter((s) => s.method === "POST" && s.url.startsWith("/v1/put")).length;
    t.equal(engineSeen, 2, "refused writes never reached the engine");

    // Audit records carry key_id.
    const recs = gw.audit.records;
    const refused = recs.find((r) => r.status === 403 && r.path === "/v1/put");
    t.equal(refused?.key_id, made.json.key_id, "a refused request's record names its key");
    t.equal(recs.filter((r) => r.key_id === "primary" && r.path === "/v1/put").length, 1, "the primary key is key_id primary");
    t.ok(
      recs.filter((r) => r.path.startsWith("/gate/")).every((r) => r.key_id === ""),
      "admin records have an empty key_id",
    );

    // The account view takes any valid key; a purchase would need a full one (billing.ts).
    t.equal((await call(gw.url, "/gate/account", { key: reader })).status, 200, "the account view with a scoped key");
    t.equal(gw.audit.records.at(-1)?.key_id, made.json.key_id, "its audit record names the key");

    // List: no secrets, created_at and last_used_at.
    const listed = await admin(gw.url, "/gate/admin/keys/acme", undefined, "GET");
    t.equal(listed.status, 200);
    t.equal(listed.json.keys.length, 2);
    const lr = listed.json.keys.find((k: { key_id: string }) => k.key_id === made.json.key_id);
    t.deepEqual(
      Object.keys(lr).sort(),
      ["created_at", "expired", "expires_at", "key_id", "last_used_at", "name", "namespaces", "scopes", "tenant_id"],
      "listed fields",
    );
    t.equal(lr.last_used_at, new Date(NOW).toISOString(), "last_used_at of the reader");
    t.equal(lr.created_at, new Date(NOW).toISOString());
    t.notOk(JSON.stringify(listed.json).includes("svc_live_") || JSON.stringify(listed.json).includes(sha256Hex(reader)), "neither keys nor hashes listed");
    t.equal(store.writes, 0, "a dozen uses wrote nothing: last use is noted in memory");

    // Expiry: 401 from the instant on, with the instant named.
    gw.clock.advance(24 * 3600_000);
    const late = await call(gw.url, "/v1/get/team/k", { key: reader });
    t.equal(late.status, 401, "an expired key is 401");
    t.equal(late.json.detail, "This API key expired at 2026-01-16T12:00:00.000Z.");
    t.equal(
      (await admin(gw.url, "/gate/admin/keys/acme", undefined, "GET")).json.keys.find((k: { key_id: string }) => k.key_id === made.json.key_id).expired,
      true,
      "listed as expired",
    );

    // Revoke: refused at once; a second revoke is 404.
    const rv = await admin(gw.url, "/gate/admin/keys/revoke", { key_id: full.json.key_id });
    t.deepEqual(rv.json, { key_id: full.json.key_id, tenant_id: "acme", status: "revoked" }, "revoked");
    t.equal((await call(gw.url, "/v1/get/team/k", { key: writer })).status, 401, "the revoked key is refused");
    t.equal((await call(gw.url, "/v1/get/team/k", { key: primary })).status, 200, "the primary key is untouched");
    const again = await admin(gw.url, "/gate/admin/keys/revoke", { key_id: full.json.key_id });
    t.equal(again.status, 404, "revoking twice: 404");
    t.match(again.json.detail, /does not exist or was already revoked/);
    const revAudit = gw.audit.records.find((r) => r.path === "/gate/admin/keys/revoke" && r.status === 200);
    t.equal(revAudit?.tenant_id, "acme", "the revoke's audit record names the tenant");

    // A tenant key on the admin API is 401.
    const asTenant = await fetch(gw.url + "/gate/admin/keys/acme", { headers: { authorization: `Bearer ${primary}` } });
    t.equal(asTenant.status, 401, "a tenant key cannot list keys");
  } finally {
    await gw.close();
    await engine.close();
  }
});

test("admin API: hostile and invalid inputs are 400/404 with one sentence", async (t) => {
  const engine = await startFakeEngine();
  const gw = await startTestGateway(engine.url);
  try {
    await createTenant(gw.url, { tenant_id: "acme", namespaces: ["default", "team"] });
    await createTenant(gw.url, { tenant_id: "gone" });
    await admin(gw.url, "/gate/onboard/deactivate", { tenant_id: "gone" });
    const base = { tenant_id: "acme", name: "k", scopes: ["read"] };
    const cases: Array<[string, unknown, number, RegExp]> = [
      ["name empty", { ...base, name: "" }, 400, /name must not be empty/],
      ["name too long", { ...base, name: "a".repeat(65) }, 400, /at most 64/],
      ["name with a slash", { ...base, name: "a/b" }, 400, /name may contain only/],
      ["name with a leading space", { ...base, name: " a" }, 400, /name may contain only/],
      ["name with a NUL", { ...base, name: "a\u0000b" }, 400, /name may contain only/],
      ["name not a string", { ...base, name: 7 }, 400, /name/],
      ["name missing", { tenant_id: "acme", scopes: ["read"] }, 400, /^name is required\.$/],
      ["scopes empty", { ...base, scopes: [] }, 400, /scopes must not be empty/],
      ["scope unknown", { ...base, scopes: ["admin"] }, 400, /unknown scope "admin"/],
      ["scope duplicated", { ...base, scopes: ["read", "read"] }, 400, /must not name a scope twice/],
      ["write without read", { ...base, scopes: ["write"] }, 400, /write needs read/],
      ["scopes a string", { ...base, scopes: "read" }, 400, /scopes/],
      ["scopes of numbers", { ...base, scopes: [1] }, 400, /scopes/],
      ["scopes huge", { ...base, scopes: Array(5000).fill("read") }, 400, /at most 2/],
      ["scopes missing", { tenant_id: "acme", name: "k" }, 400, /^scopes is required\.$/],
      ["namespaces empty", { ...base, namespaces: [] }, 400, /namespaces must not be empty/],
      ["namespace outside the ACL", { ...base, namespaces: ["team", "nope"] }, 400, /nope is not a namespace of tenant acme/],
      ["namespace invalid", { ...base, namespaces: ["bad ns"] }, 400, /namespace may contain only/],
      ["namespace repeated", { ...base, namespaces: ["team", "team"] }, 400, /twice/],
      ["namespaces a string", { ...base, namespaces: "team" }, 400, /namespaces/],
      ["expires_at past", { ...base, expires_at: "2020-01-01T00:00:00Z" }, 400, /is not in the future/],
      ["expires_at now", { ...base, expires_at: "2026-01-15T12:00:00Z" }, 400, /is not in the future/],
      ["expires_at a date only", { ...base, expires_at: "2027-01-01" }, 400, /ISO 8601 UTC/],
      ["expires_at with an offset", { ...base, expires_at: "2027-01-01T00:00:00+02:00" }, 400, /ISO 8601 UTC/],
      ["expires_at impossible day", { ...base, expires_at: "2027-02-30T00:00:00Z" }, 400, /ISO 8601 UTC/],
      ["expires_at hour 25", { ...base, expires_at: "2027-01-01T25:00:00Z" }, 400, /ISO 8601 UTC/],
      ["expires_at words", { ...base, expires_at: "tomorrow" }, 400, /ISO 8601 UTC/],
      ["expires_at a number", { ...base, expires_at: 1893456000 }, 400, /expires_at/],
      ["unknown field", { ...base, admin: true }, 400, /unknown field 'admin'/],
      ["tenant unknown", { ...base, tenant_id: "ghost" }, 404, /Tenant ghost does not exist/],
      ["tenant id invalid", { ...base, tenant_id: "../etc" }, 400, /tenant_id may contain only/],
      ["tenant deactivated", { ...base, tenant_id: "gone" }, 409, /deactivated/],
      ["body an array", [base], 400, /./],
      ["body null", null, 400, /./],
    ];
    for (const [what, body, status, detail] of cases) {
      const r = await admin(gw.url, "/gate/admin/keys", body);
      t.equal(r.status, status, `${what}: ${status}`);
      t.match(String(r.json?.detail), detail, `${what}: detail`);
      t.ok(/^[^\n]+\.$/.test(String(r.json?.detail)) && !String(r.json?.detail).includes("    at "), `${what}: one sentence, no stack`);
    }
    const dup = await admin(gw.url, "/gate/admin/keys", base);
    t.equal(dup.status, 201);
    t.equal((await admin(gw.url, "/gate/admin/keys", base)).status, 409, "a second key of the same name: 409");
    const bad = await fetch(gw.url + "/gate/admin/keys", {
      method: "POST",
      headers: { authorization: `Bearer ${(await import("./helpers.js")).SERVICE_KEY}`, "content-type": "application/json" },
      body: '{"tenant_id": ',
    });
    t.equal(bad.status, 400, "malformed JSON: 400");

    const revokes: Array<[string, unknown, number, RegExp]> = [
      ["key_id unknown", { key_id: "key_AAAAAAAAAAAAAAAA" }, 404, /does not exist or was already revoked/],
      ["key_id primary", { key_id: "primary" }, 400, /rotate it/],
      ["key_id malformed", { key_id: "key_../../x" }, 400, /key_id must be a key id/],
      ["key_id huge", { key_id: "k".repeat(10_000) }, 400, /at most 64/],
      ["key_id a number", { key_id: 12 }, 400, /key_id/],
      ["key_id missing", {}, 400, /^key_id is required\.$/],
      ["extra field", { key_id: dup.json.key_id, tenant_id: "acme" }, 400, /unknown field/],
    ];
    for (const [what, body, status, detail] of revokes) {
      const r = await admin(gw.url, "/gate/admin/keys/revoke", body);
      t.equal(r.status, status, `revoke, ${what}: ${status}`);
      t.match(String(r.json?.detail), detail, `revoke, ${what}: detail`);
    }
    t.equal((await admin(gw.url, "/gate/admin/keys/ghost", undefined, "GET")).status, 404, "list of an unknown tenant: 404");
    t.equal((await admin(gw.url, "/gate/admin/keys/BAD", undefined, "GET")).status, 400, "list with an invalid tenant id: 400");
    t.equal((await admin(gw.url, "/gate/admin/keys/acme", undefined, "GET")).json.keys.length, 1, "only the one valid key was made");
  } finally {
    await gw.close();
    await engine.close();
  }
});

test("checkout (billing on) needs the tenant's own key or a write key on every namespace", async (t) => {
  const engine = await startFakeEngine();
  const stripe = await startFakeStripe();
  const env = await startBillingGateway(engine, stripe);
  try {
    const own = await createTenant(env.gw.url, { tenant_id: "acme", namespaces: ["default", "team"] });
    const mk = async (body: Record<string, unknown>) =>
      (await admin(env.gw.url, "/gate/admin/keys", { tenant_id: "acme", ...body })).json as { api_key: string; key_id: string };
    const reader = await mk({ name: "reader", scopes: ["read"] });
    const teamWriter = await mk({ name: "team-writer", scopes: ["read", "write"], namespaces: ["team"] });
    const writer = await mk({ name: "writer", scopes: ["read", "write"] });
    const body = { plan: "builder", success_url: "https://app.example/ok", cancel_url: "https://app.example/cancel" };
    for (const [what, k] of [
      ["a read key", reader],
      ["a write key on some namespaces", teamWriter],
    ] as const) {
      const r = await call(env.gw.url, "/gate/checkout", { key: k.api_key, body });
      t.equal(r.status, 403, `${what}: 403`);
      t.equal(r.json.code, "forbidden");
      t.match(r.json.detail, /is a scoped key; this call needs the tenant's own key/, `${what}: the detail says what is needed`);
      t.equal(env.gw.audit.records.at(-1)?.key_id, k.key_id, `${what}: the audit record names the key`);
    }
    t.equal(stripe.requests.length, 0, "nothing reached the payment provider");
    t.equal((await call(env.gw.url, "/gate/checkout", { key: writer.api_key, body })).status, 200, "a write key on every namespace may buy");
    t.equal((await call(env.gw.url, "/gate/checkout", { key: own, body })).status, 200, "and so may the tenant's own key");
  } finally {
    await env.gw.close();
    await stripe.close();
    await engine.close();
  }
});
