// The gateway on Redis with high availability, against real servers started here from
// redis-server on free local ports in temp directories and torn down at the end: a master, a
// replica and a Sentinel (kill -9 of the master: the gateway follows the promoted replica),
// and a three-master cluster with a replica each (every key of one tenant in one slot; the
// gateway finds every node from one seed; kill -9 of a master: its replica takes over and the
// gateway follows, while a tenant on another master is served throughout). Every wait is a
// condition with a deadline.
import test from "tape";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { keySlot, openRedis, routingKey } from "../../server/gateway/redis-ha.js";
import { RespConnection } from "../../server/gateway/resp.js";
import { startGateway, type RunningGateway } from "../../server/gateway/server.js";
import { admin, call, SERVICE_KEY, startFakeEngine, type FakeEngine } from "./helpers.js";

const run = promisify(execFile);

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

async function waitFor(what: string, cond: () => Promise<boolean> | boolean, ms = 40_000): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (await cond()) return;
    } catch {
      // not yet
    }
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface RedisProc {
  port: number;
  child: ChildProcess;
}

async function cmd(port: number, args: string[]): Promise<unknown> {
  const c = await RespConnection.open(`redis://127.0.0.1:${port}`, { connectTimeoutMs: 1000 });
  try {
    return await c.sendCommand(args);
  } finally {
    c.destroy();
  }
}

async function startRedis(dir: string, args: string[], fixedPort?: number): Promise<RedisProc> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // a port found free may be taken by another test's process before redis-server binds it: a
  // server that exits before it answers is started again on another port
  for (let attempt = 1; ; attempt++) {
    const port = fixedPort ?? (await freePort());
    const child = spawn(
      "redis-server",
      [...args, "--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no", "--logfile", join(dir, "log")],
      { stdio: "ignore" },
    );
    let exited = false;
    child.once("exit", () => (exited = true));
    await waitFor(`redis-server on ${port} answers or exits`, async () => exited || (await cmd(port, ["PING"])) === "PONG", 60_000);
    if (!exited) return { port, child };
    if (fixedPort !== undefined || attempt >= 5) throw new Error(`redis-server exited before answering on ${port}`);
  }
}

function kill9(p: RedisProc): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return Promise.resolve();
  const gone = new Promise<void>((r) => p.child.once("exit", () => r()));
  p.child.kill("SIGKILL");
  return gone;
}

const have = await run("redis-server", ["--version"]).then(
  () => true,
  () => false,
);

async function gatewayOn(env: Record<string, string>, dir: string, engine: FakeEngine): Promise<RunningGateway> {
  return startGateway(
    loadGatewayConfig({
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      SVC_GATE_REDIS_PREFIX: "svc-ha:",
      ...env,
    }),
  );
}

const usageOf = async (url: string, id: string) => (await admin(url, `/gate/admin/usage/${id}`, undefined, "GET")).json.cus_used as number;

test("cluster routing: slots of hash tags and routing keys", (t) => {
  t.equal(keySlot("123456789"), 12739, "CRC16/XMODEM of the reference string: slot 12739");
  t.equal(keySlot("svc:tenant:{acme}"), keySlot("acme"), "a hash tag: only the tag is hashed");
  t.equal(keySlot("svc:rl:{acme}"), keySlot("svc:usage:2026-01:{acme}"), "one tenant's keys share a slot");
  t.equal(keySlot("a{}b"), keySlot("a{}b"), "an empty tag hashes the whole key");
  t.notEqual(keySlot("{}x"), keySlot("x"), "an empty tag is not a tag");
  t.equal(routingKey(["EVALSHA", "abc", "2", "k1", "k2", "a"]), "k1", "a script: its first key");
  t.equal(routingKey(["EVAL", "return 1", "0"]), null, "a script without keys: any node");
  t.equal(routingKey(["GET", "k"]), "k");
  t.equal(routingKey(["PING"]), null);
  t.end();
});

test("Sentinel: the gateway follows the master when the old one is killed", { skip: !have }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-ha-sentinel-"));
  const procs: RedisProc[] = [];
  const engine = await startFakeEngine();
  let gw: RunningGateway | null = null;
  try {
    const master = await startRedis(join(dir, "m"), []);
    procs.push(master);
    const replica = await startRedis(join(dir, "r"), ["--replicaof", "127.0.0.1", String(master.port)]);
    procs.push(replica);
    await waitFor("the replica is in sync", async () => /master_link_status:up/.test(String(await cmd(replica.port, ["INFO", "replication"]))));
    const sport = await freePort();
    await mkdir(join(dir, "s"), { mode: 0o700 });
    await writeFile(
      join(dir, "s", "sentinel.conf"),
      [
        `sentinel monitor mymaster 127.0.0.1 ${master.port} 1`,
        "sentinel down-after-milliseconds mymaster 1000",
        "sentinel failover-timeout mymaster 10000",
        "",
      ].join("\n"),
      { mode: 0o600 },
    );
    const sentinel = await startRedis(join(dir, "s"), [join(dir, "s", "sentinel.conf"), "--sentinel"], sport);
    procs.push(sentinel);
    await waitFor("the sentinel knows the replica", async () => {
      const rs = (await cmd(sentinel.port, ["SENTINEL", "replicas", "mymaster"])) as string[][];
      return rs.some((r) => r[r.indexOf("port") + 1] === String(replica.port) && r[r.indexOf("flags") + 1] === "slave");
    });

    gw = await gatewayOn({ SVC_GATE_REDIS_SENTINELS: `redis://127.0.0.1:${sentinel.port}`, SVC_GATE_REDIS_SENTINEL_MASTER: "mymaster" }, dir, engine);
    const created = await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" });
    t.equal(created.status, 201, "tenant created through the sentinel's master");
    const key = created.json.api_key as string;
    t.equal(await cmd(master.port, ["EXISTS", "svc-ha:tenant:acme"]), 1, "on the master, without hash tags");
    for (let i = 0; i < 3; i++) t.equal((await call(gw.url, "/v1/get/default/k", { key })).status, 200, `get ${i}: 200`);
    t.equal(await usageOf(gw.url, "acme"), 0.3, "usage 0.3 CU before the failover");
    let acked = 0;
    await waitFor("the replica acknowledges every write", async () => (acked = Number(await cmd(master.port, ["WAIT", "1", "2000"]))) === 1);
    t.equal(acked, 1, "the replica has every write");

    await kill9(master);
    await waitFor("a get succeeds after the failover", async () => (await call(gw!.url, "/v1/get/default/k", { key })).status === 200);
    const role = (await cmd(replica.port, ["ROLE"])) as unknown[];
    t.equal(role[0], "master", "the replica was promoted");
    const u1 = await usageOf(gw.url, "acme");
    t.ok(u1 >= 0.4, `the usage written before the failover is there (${u1} CU)`);
    for (let i = 0; i < 2; i++) t.equal((await call(gw.url, "/v1/get/default/k", { key })).status, 200);
    t.equal(Math.round((await usageOf(gw.url, "acme")) * 10), Math.round(u1 * 10) + 2, "and it keeps counting on the new master");
    const rot = await admin(gw.url, "/gate/onboard/rotate-key", { tenant_id: "acme" });
    t.equal(rot.status, 200, "a write (rotate-key) on the new master");
    t.equal((await call(gw.url, "/v1/get/default/k", { key })).status, 401, "the old key fails");
    t.equal((await call(gw.url, "/v1/get/default/k", { key: rot.json.api_key })).status, 200, "the new key works");
    const h = await call(gw.url, "/health");
    t.equal(h.json.store_connected, true, "/health: store connected");
  } finally {
    await gw?.close();
    await engine.close();
    for (const p of procs) await kill9(p);
    await rm(dir, { recursive: true, force: true });
  }
});

test("Cluster: a tenant's keys in one slot, every node found from one seed, kill -9 of a master", { skip: !have }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-ha-cluster-"));
  const procs: RedisProc[] = [];
  const engine = await startFakeEngine();
  let gw: RunningGateway | null = null;
  try {
    for (let i = 0; i < 6; i++) {
      procs.push(
        await startRedis(join(dir, `n${i}`), [
          "--cluster-enabled",
          "yes",
          "--cluster-config-file",
          join(dir, `n${i}`, "nodes.conf"),
          "--cluster-node-timeout",
          "1000",
          // Slots of a failed master stop only its own keys, not the whole cluster.
          "--cluster-require-full-coverage",
          "no",
        ]),
      );
    }
    await run("redis-cli", ["--cluster", "create", ...procs.map((p) => `127.0.0.1:${p.port}`), "--cluster-replicas", "1", "--cluster-yes"], {
      timeout: 60_000,
    });
    await waitFor("every node says cluster_state:ok", async () => {
      for (const p of procs) if (!/cluster_state:ok/.test(String(await cmd(p.port, ["CLUSTER", "INFO"])))) return false;
      return true;
    });
    const slots = (await cmd(procs[0]!.port, ["CLUSTER", "SLOTS"])) as Array<[number, number, [string, number]]>;
    const ownerOf = (slot: number) => slots.find(([a, b]) => slot >= a && slot <= b)![2][1];
    const masters = [...new Set(slots.map((s) => s[2][1]))];
    t.equal(masters.length, 3, "three masters");
    // One tenant per master: ids picked by their slot.
    const ids: string[] = [];
    for (let i = 0; ids.length < 3; i++) {
      const id = `t${i}`;
      if (!ids.some((x) => ownerOf(keySlot(x)) === ownerOf(keySlot(id)))) ids.push(id);
    }
    const [victim, bystander] = ids as [string, string, string];

    gw = await gatewayOn({ SVC_GATE_REDIS_CLUSTER_NODES: `redis://127.0.0.1:${procs[0]!.port}` }, dir, engine);
    const keys = new Map<string, string>();
    for (const id of ids) {
      const r = await admin(gw.url, "/gate/onboard/create", { tenant_id: id });
      t.equal(r.status, 201, `tenant ${id} created`);
      keys.set(id, r.json.api_key);
      for (let i = 0; i < 3; i++) t.equal((await call(gw.url, "/v1/get/default/k", { key: r.json.api_key })).status, 200, `${id}: get ${i}`);
      t.equal(await usageOf(gw.url, id), 0.3, `${id}: 0.3 CU`);
      const owner = ownerOf(keySlot(id));
      const period = new Date().toISOString().slice(0, 7);
      const names = [`svc-ha:tenant:{${id}}`, `svc-ha:rl:{${id}}`, `svc-ha:usage:${period}:{${id}}`];
      const there = await Promise.all(names.map((n) => cmd(owner, ["EXISTS", n])));
      t.deepEqual(there, [1, 1, 1], `${id}: record, window and usage on the master of slot ${keySlot(id)} (port ${owner})`);
    }
    const listed = await admin(gw.url, "/gate/admin/tenants", undefined, "GET");
    t.deepEqual(
      listed.json.tenants.map((x: { tenant_id: string }) => x.tenant_id),
      [...ids].sort(),
      "the tenant list reads records on every master",
    );

    // Move the third tenant's slot to another master behind the gateway's back: its next
    // request meets MOVED at the old owner and follows it.
    const moved = ids[2]!;
    const slot = keySlot(moved);
    const src = ownerOf(slot);
    const dst = masters.find((m) => m !== src && m !== ownerOf(keySlot(victim)))!;
    const idOf = async (port: number) => String(await cmd(port, ["CLUSTER", "MYID"]));
    const [srcId, dstId] = [await idOf(src), await idOf(dst)];
    await cmd(dst, ["CLUSTER", "SETSLOT", String(slot), "IMPORTING", srcId]);
    await cmd(src, ["CLUSTER", "SETSLOT", String(slot), "MIGRATING", dstId]);
    const inSlot = (await cmd(src, ["CLUSTER", "GETKEYSINSLOT", String(slot), "100"])) as string[];
    t.ok(inSlot.length >= 3, `${inSlot.length} keys in slot ${slot}`);
    await cmd(src, ["MIGRATE", "127.0.0.1", String(dst), "", "0", "5000", "KEYS", ...inSlot]);
    for (const m of masters) await cmd(m, ["CLUSTER", "SETSLOT", String(slot), "NODE", dstId]);
    const afterMove = await call(gw.url, "/v1/get/default/k", { key: keys.get(moved)! });
    t.equal(afterMove.status, 200, `${moved}: served after its slot moved (MOVED followed)`);
    t.equal(await usageOf(gw.url, moved), 0.4, `${moved}: its usage moved with it and counts on`);
    const period = new Date().toISOString().slice(0, 7);
    t.equal(await cmd(dst, ["EXISTS", `svc-ha:usage:${period}:{${moved}}`]), 1, "the usage key is on the new owner");

    // Read the owners again: on a busy machine the cluster may have failed a slow master over.
    const now = (await cmd(dst, ["CLUSTER", "SLOTS"])) as Array<[number, number, [string, number]]>;
    const victimPort = now.find(([a, b]) => keySlot(victim) >= a && keySlot(victim) <= b)![2][1];
    // A replica of a new cluster may still be in its first full sync: wait for its link, then
    // for its acknowledgement of every write.
    await waitFor("the victim's replica is online", async () => /slave\d+:[^\r\n]*state=online/.test(String(await cmd(victimPort, ["INFO", "replication"]))));
    let acked = 0;
    await waitFor("the victim's replica acknowledges every write", async () => (acked = Number(await cmd(victimPort, ["WAIT", "1", "2000"]))) === 1);
    t.equal(acked, 1, "the victim's replica has every write");
    await kill9(procs.find((p) => p.port === victimPort)!);
    const during = await call(gw.url, "/v1/get/default/k", { key: keys.get(bystander)! });
    t.equal(during.status, 200, "a tenant on another master is served at once");
    await waitFor(`${victim} is served again`, async () => (await call(gw!.url, "/v1/get/default/k", { key: keys.get(victim)! })).status === 200);
    const u = await usageOf(gw.url, victim);
    t.ok(u >= 0.4, `${victim}'s usage survived the failover (${u} CU)`);
    const rot = await admin(gw.url, "/gate/onboard/rotate-key", { tenant_id: victim });
    t.equal(rot.status, 200, "rotate-key on the promoted replica");
    t.equal((await call(gw.url, "/v1/get/default/k", { key: keys.get(victim)! })).status, 401, "the old key fails");
    t.equal((await call(gw.url, "/v1/get/default/k", { key: rot.json.api_key })).status, 200, "the new key works");
    t.equal((await call(gw.url, "/health")).json.store_connected, true, "/health: store connected");
  } finally {
    await gw?.close();
    await engine.close();
    for (const p of procs) await kill9(p);
    await rm(dir, { recursive: true, force: true });
  }
});

test("Sentinel and Cluster: nothing answering stops start-up with a sentence that shows no password", async (t) => {
  const port = await freePort(); // nothing listens there
  for (const [name, open] of [
    ["sentinel", () => openRedis({ kind: "sentinel", sentinels: [`redis://:s3cret@127.0.0.1:${port}`], masterName: "mymaster", password: "m4ster" })],
    ["cluster", () => openRedis({ kind: "cluster", nodes: [`redis://:s3cret@127.0.0.1:${port}`] })],
  ] as const) {
    const e = await open().then(
      () => null,
      (x: Error) => x,
    );
    t.ok(e instanceof Error, `${name}: refused`);
    t.match(e?.message ?? "", name === "sentinel" ? /SVC_GATE_REDIS_SENTINELS/ : /SVC_GATE_REDIS_CLUSTER_NODES/, `${name}: names the variable (${e?.message})`);
    t.notOk(/s3cret|m4ster/.test(e?.message ?? ""), `${name}: no password in the message`);
  }
});
