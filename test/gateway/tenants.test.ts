// Tenant registries: the local file (atomic writes, reload, refusal of a corrupt file) and
// Redis (create-if-absent, compare-and-set updates that move the key index in one step).
import test from "tape";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConflictError, NotFoundError } from "../../lib/errors.js";
import { sha256Hex } from "../../lib/sha256.js";
import { LocalFileTenantRegistry, RedisTenantRegistry, type TenantRecord, type TenantRegistry } from "../../server/gateway/tenants.js";
import { redisFor, uniquePrefix } from "./helpers.js";

const rec = (id: string, key: string): TenantRecord => ({
  tenant_id: id,
  plan: "starter",
  namespaces: ["default"],
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
  await r.create(rec("acme", "svc_live_k1"));
  try {
    await r.create(rec("acme", "svc_live_k2"));
    t.fail(`${label}: duplicate accepted`);
  } catch (e) {
    t.ok(e instanceof ConflictError, `${label}: duplicate create is a ConflictError`);
  }
  t.equal((await r.findByKeyHash(sha256Hex("svc_live_k1")))?.tenant_id, "acme", `${label}: found by key hash`);
  t.equal(await r.findByKeyHash(sha256Hex("svc_live_k2")), null, `${label}: the refused duplicate's key does nothing`);
  await r.update("acme", (c) => ({ ...c, key_hash: sha256Hex("svc_live_k3") }));
  t.equal(await r.findByKeyHash(sha256Hex("svc_live_k1")), null, `${label}: the rotated-away key is gone`);
  t.equal((await r.findByKeyHash(sha256Hex("svc_live_k3")))?.tenant_id, "acme", `${label}: the new key works`);
  await r.update("acme", (c) => ({ ...c, active: false, status: "deactivated", key_hash: "" }));
  t.equal(await r.findByKeyHash(sha256Hex("svc_live_k3")), null, `${label}: deactivation removes the key`);
  try {
    await r.update("ghost", (c) => c);
    t.fail(`${label}: update of a missing tenant`);
  } catch (e) {
    t.ok(e instanceof NotFoundError, `${label}: update of a missing tenant is a NotFoundError`);
  }
  await r.create(rec("beta", "svc_live_b"));
  t.deepEqual(
    (await r.list()).map((x) => [x.tenant_id, x.active]),
    [
      ["acme", false],
      ["beta", true],
    ],
    `${label}: list in id order`,
  );
  t.equal(await r.reload(), 2, `${label}: reload counts the tenants`);
  t.equal(await r.ping(), true, `${label}: ping`);
}

test("local-file registry: contract, atomic file, reload picks up an edited file", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-reg-"));
  const r = await LocalFileTenantRegistry.open(dir);
  await contract(t, r, "local");
  const names = await readdir(dir);
  t.deepEqual(names, ["tenants.json"], "only the registry file, no temp files left behind");
  const file = JSON.parse(await readFile(join(dir, "tenants.json"), "utf8"));
  t.equal(file.tenants.length, 2, "both tenants on disk");
  t.notOk(JSON.stringify(file).includes("svc_live_"), "no key on disk, only hashes");
  const r2 = await LocalFileTenantRegistry.open(dir);
  t.equal((await r2.findByKeyHash(sha256Hex("svc_live_b")))?.tenant_id, "beta", "a second instance reads the file");
  await r2.create(rec("gamma", "svc_live_g"));
  t.equal(await r.findByKeyHash(sha256Hex("svc_live_g")), null, "the first does not see it before reload");
  t.equal(await r.reload(), 3, "reload reads the file again");
  t.equal((await r.findByKeyHash(sha256Hex("svc_live_g")))?.tenant_id, "gamma", "after reload it does");
  await writeFile(join(dir, "tenants.json"), "{ broken");
  try {
    await r.reload();
    t.fail("reloaded a corrupt file");
  } catch (e) {
    t.match((e as Error).message, /not a valid registry/, "a corrupt file is refused with a sentence");
  }
  t.equal((await r.list()).length, 3, "and the registry in memory is unchanged");
  await r.close();
  await rm(dir, { recursive: true, force: true });
});

test("local-file registry: a failed write leaves memory unchanged (nothing half-written)", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-gate-reg-"));
  const r = await LocalFileTenantRegistry.open(dir);
  await r.create(rec("acme", "svc_live_k1"));
  await rm(dir, { recursive: true, force: true }); // the directory disappears: the next write fails
  try {
    await r.create(rec("beta", "svc_live_b"));
    t.fail("write into a missing directory succeeded");
  } catch {
    t.pass("the write failed");
  }
  t.equal(await r.get("beta"), null, "the failed tenant is not visible");
  t.equal(await r.ping(), false, "ping reports the store is gone");
});

test("redis registry: contract, and concurrent updates are not lost", async (t) => {
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  const r = new RedisTenantRegistry(redis, prefix);
  await contract(t, r, "redis");
  await Promise.all(Array.from({ length: 20 }, (_, i) => r.update("beta", (c) => ({ ...c, namespaces: [...c.namespaces, `n${i}`] }))));
  t.equal((await r.get("beta"))!.namespaces.length, 21, "20 concurrent appends all landed (compare-and-set)");
  t.equal(await redis.get(`${prefix}key:${sha256Hex("svc_live_k1")}`), null, "no stale key index entry");
  await cleanup();
});
