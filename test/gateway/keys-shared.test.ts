// Scoped keys across two gateway processes on one real Redis: a key made through one works on
// the other at once, its scopes hold there, and a revocation through either is refused at once
// on both, also where the key was just used (the record is cached per process).
import test from "tape";
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { admin, call, REDIS_URL, redisFor, SERVICE_KEY, startFakeEngine, uniquePrefix } from "./helpers.js";

interface Proc {
  url: string;
  child: ChildProcess;
}

async function spawnGateway(env: Record<string, string>): Promise<Proc> {
  const child = spawn(process.execPath, ["--import", "tsx", "test/gateway/fixtures/gateway-proc.ts"], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  const url = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    rl.once("line", (l) => resolve(JSON.parse(l).url as string));
    child.once("exit", (c) => reject(new Error(`gateway exited ${c}: ${err}`)));
  });
  return { url, child };
}

async function stop(p: Proc): Promise<number | null> {
  if (p.child.exitCode !== null) return p.child.exitCode;
  const done = new Promise<number | null>((r) => p.child.once("exit", (c) => r(c)));
  p.child.kill("SIGTERM");
  return done;
}

test("scoped keys on two gateways sharing Redis: created on one, revoked on the other, refused at once on both", async (t) => {
  const engine = await startFakeEngine();
  const prefix = uniquePrefix();
  const { redis, cleanup } = await redisFor(prefix);
  const dir = await mkdtemp(join(tmpdir(), "svc-keys-shared-"));
  const base = {
    SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
    SVC_GATE_HOST: "127.0.0.1",
    SVC_GATE_PORT: "0",
    SVC_GATE_ENGINE_URL: engine.url,
    SVC_GATE_REDIS_URL: REDIS_URL,
    SVC_GATE_REDIS_PREFIX: prefix,
  };
  const [a, b] = await Promise.all([
    spawnGateway({ ...base, SVC_GATE_DATA_DIR: join(dir, "a"), SVC_GATE_AUDIT_LOG_PATH: join(dir, "a.jsonl") }),
    spawnGateway({ ...base, SVC_GATE_DATA_DIR: join(dir, "b"), SVC_GATE_AUDIT_LOG_PATH: join(dir, "b.jsonl") }),
  ]);
  try {
    t.equal((await admin(a.url, "/gate/onboard/create", { tenant_id: "acme", namespaces: ["default", "team"] })).status, 201);
    const made = await admin(a.url, "/gate/admin/keys", { tenant_id: "acme", name: "team reader", scopes: ["read"], namespaces: ["team"] });
    t.equal(made.status, 201, "key created through A");
    const key = made.json.api_key as string;
    // Each gateway uses the key first, so each holds the record in its cache.
    t.equal((await call(a.url, "/v1/get/team/k", { key })).status, 200, "works on A");
    t.equal((await call(b.url, "/v1/get/team/k", { key })).status, 200, "works on B at once");
    const w = await call(b.url, "/v1/put", { key, body: { namespace: "team", key: "k", data_b64: "AAAA" } });
    t.equal(w.status, 403, "its scope holds on B");
    t.equal((await call(b.url, "/v1/get/default/k", { key })).status, 403, "its namespaces hold on B");

    const listed = await admin(b.url, "/gate/admin/keys/acme", undefined, "GET");
    t.deepEqual(
      listed.json.keys.map((k: { key_id: string }) => k.key_id),
      [made.json.key_id],
      "B lists the key made on A",
    );
    t.equal(typeof listed.json.keys[0].last_used_at, "string", "with B's own last use");

    const rv = await admin(b.url, "/gate/admin/keys/revoke", { key_id: made.json.key_id });
    t.equal(rv.status, 200, "revoked through B");
    t.equal((await call(a.url, "/v1/get/team/k", { key })).status, 401, "refused on A at once (its cached record is stale)");
    t.equal((await call(b.url, "/v1/get/team/k", { key })).status, 401, "and on B");
    t.equal((await admin(a.url, "/gate/admin/keys/revoke", { key_id: made.json.key_id })).status, 404, "A sees it revoked");

    // A second key, revoked through A while a refused request's cached record sits on B.
    const k2 = await admin(b.url, "/gate/admin/keys", { tenant_id: "acme", name: "writer", scopes: ["read", "write"] });
    t.equal(
      (await call(b.url, "/v1/put", { key: k2.json.api_key, body: { namespace: "default", key: "k", data_b64: "AAAA" } })).status,
      201,
      "the write key puts through B",
    );
    t.equal((await admin(a.url, "/gate/admin/keys/revoke", { key_id: k2.json.key_id })).status, 200);
    t.equal(
      (await call(b.url, "/v1/put", { key: k2.json.api_key, body: { namespace: "default", key: "k", data_b64: "AAAA" } })).status,
      401,
      "refused on B at once",
    );

    // The last use reaches Redis on shutdown (the batch written when the process closes).
    t.equal(await stop(a), 0);
    t.equal(await stop(b), 0);
    const reply = (await redis.sendCommand(["HGETALL", `${prefix}keyused:acme`])) as string[] | Record<string, string>;
    const used = Array.isArray(reply) ? reply : Object.keys(reply);
    t.ok(used.includes(made.json.key_id) && used.includes(k2.json.key_id), "both keys' last use written to Redis in the closing batch");
  } finally {
    await stop(a);
    await stop(b);
    await engine.close();
    await cleanup();
    await rm(dir, { recursive: true, force: true });
  }
});
