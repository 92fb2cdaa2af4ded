// `svc up` end to end: spawned as a real process on ephemeral ports; the first run creates
// and prints the service key (DIR/service.key, mode 0600); admin and data commands work
// against it; SIGINT exits 0; a second run reuses the key without printing it and keeps
// the tenants and data; an environment key wins over the file; a run that fails to start saves
// no key, so the first run that starts prints it; with SVC_ENGINE_TLS_* the engine is https.
import test from "tape";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, stat, writeFile, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { svc } from "./helpers.js";
import { startUp as startProcess, stopUp, type Up, killUp } from "./up-process.js";
import { writeNpy, readNpy, npyTypedArray } from "../../lib/npy.js";
import { createClient } from "../../lib/client.js";
import { selfSignedCert } from "../lib/self-signed.js";

const root = new URL("../..", import.meta.url).pathname;

/** `svc up --data dir` with engine logs at warn. */
const startUp = (dir: string, env: NodeJS.ProcessEnv = {}): Promise<Up> => startProcess(["--data", dir], { SVC_ENGINE_LOG_LEVEL: "warn", ...env });

test("svc up: first run prints the key and URLs, serves admin and data commands, SIGINT exits 0; second run reuses the key", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-"));
  const data = join(dir, "data");
  let up: Up | null = null;
  try {
    up = await startUp(data);
    t.match(up.gateway, /^http:\/\/127\.0\.0\.1:\d+$/, `gateway URL printed with its real port: ${up.gateway}`);
    t.match(up.engine, /^http:\/\/127\.0\.0\.1:\d+$/, "engine URL printed");
    t.notEqual(up.gateway, "http://127.0.0.1:0", "not port 0");
    t.match(String(up.key), /^[0-9a-f]{64}$/, "service key printed on its own line");
    const keyFile = join(data, "service.key");
    t.equal((await readFile(keyFile, "utf8")).trim(), up.key, "DIR/service.key holds the printed key");
    t.equal((await stat(keyFile)).mode & 0o777, 0o600, "service.key has mode 0600");

    // admin: the key comes from --data DIR
    const admin = { SVC_GATE_URL: up.gateway };
    const created = await svc(["tenant", "create", "acme", "--namespace", "default", "--namespace", "sims", "--data", data], admin);
    t.equal(created.code, 0, `tenant create exits 0 ${created.err}`);
    const apiKey = /^SVC_API_KEY=(svc_live_\S+)$/m.exec(created.out)?.[1];
    t.ok(apiKey && apiKey.length >= 32, "the tenant key is printed once as SVC_API_KEY=");
    const dup = await svc(["tenant", "create", "acme", "--data", data], admin);
    t.equal(dup.code, 1, "creating it again exits 1");
    t.match(dup.err, /^svc: .*acme.*\n$/, `one sentence: ${dup.err.trim()}`);

    // data commands with SVC_API_KEY
    const env = { SVC_GATE_URL: up.gateway, SVC_API_KEY: apiKey! };
    const f = join(dir, "a.npy");
    const ints = Int32Array.from({ length: 4096 }, (_, i) => (i * 7) % 13);
    await writeFile(f, writeNpy({ dtype: "int32", shape: [16, 256], data: ints }));
    const put = await svc(["put", "sims", "run/a", f, "--meta", '{"seed": 1}'], env);
    t.equal(put.code, 0, `put exits 0 ${put.err}`);
    t.match(put.out, /^sims\/run\/a version 1: lossless/, `put summary: ${put.out.trim()}`);
    const ints2 = Int32Array.from({ length: 4096 }, (_, i) => (i * 5) % 11);
    await writeFile(join(dir, "b.npy"), writeNpy({ dtype: "int32", shape: [16, 256], data: ints2 }));
    t.equal((await svc(["put", "sims", "run/b", join(dir, "b.npy")], env)).code, 0, "second put");
    const got = await svc(["get", "sims", "run/a"], env);
    t.equal(got.code, 0, "get exits 0");
    const info = JSON.parse(got.out);
    t.deepEqual([info.dtype, info.shape, info.metadata, info.version], ["int32", [16, 256], { seed: 1 }, 1], "get shows dtype, shape, metadata, version");
    const ls = await svc(["ls", "sims", "--prefix", "run/"], env);
    t.deepEqual(
      ls.out
        .trim()
        .split("\n")
        .map((l) => l.split("\t")[0]),
      ["run/a", "run/b"],
      "ls lists both keys",
    );
    const outFile = join(dir, "out.npy");
    const served = await svc(["serve", "sims", "run/a", "-o", outFile, "--slice", "2:4,-3:"], env);
    t.equal(served.code, 0, `serve exits 0 ${served.err}`);
    const back = readNpy(await readFile(outFile));
    t.deepEqual([back.dtype, back.shape], ["int32", [2, 3]], "served block shape");
    const want = [2, 3].flatMap((r) => [253, 254, 255].map((c) => ints[r * 256 + c]!));
    t.deepEqual(Array.from(npyTypedArray(back.dtype, back.data) as ArrayLike<number>), want, "served block values are exact");

    // query top-k through the client, then usage through the CLI
    const client = createClient({ baseUrl: up.gateway, apiKey: apiKey! });
    const top = await client.query.topk("sims", { key: "run/a", k: 5, include_self: true });
    t.equal(top.results[0]?.key, "run/a", "top-1 of a query with include_self is itself");
    t.equal(top.results.length, 2, "both entries ranked");
    t.equal(client.lastResponse?.cus, 1, "query_topk charged 1 CU (X-SVC-CUs)");
    await client.close();
    const usage = await svc(["usage", "acme", "--data", data, "--json"], admin);
    t.equal(usage.code, 0, "usage exits 0");
    const u = JSON.parse(usage.out);
    t.equal(u.breakdown.put, 2, "two puts metered");
    t.equal(u.breakdown.query_topk, 1, "one query metered");
    const table = await svc(["usage", "--data", data], admin);
    t.match(table.out, /^acme\s+/m, "usage table lists acme");
    const rmr = await svc(["rm", "sims", "run/b"], env);
    t.match(rmr.out, /^Deleted sims\/run\/b \(last version 1\)/, "rm");
    const forbidden = await svc(["ls", "other"], env);
    t.equal(forbidden.code, 1, "namespace outside the ACL exits 1");
    t.match(forbidden.err, /^svc: .*\(request [0-9a-f-]{36}\)\n$/, `403 sentence with request id: ${forbidden.err.trim()}`);
    const reload = await svc(["reload", "--data", data], admin);
    t.match(reload.out, /Reloaded the tenant registry: 1 tenants/, "reload");

    t.equal(await stopUp(up), 0, "SIGINT: exit code 0");
    t.match(up.err, /stopped\./, "reports a clean stop");
    up = null;

    // second run: same key, not printed; tenants and data kept
    up = await startUp(data);
    t.equal(up.key, null, "second run prints no key");
    t.notOk(up.out.includes("SVC_GATE_ENGINE_SERVICE_KEY="), "no key line at all");
    const again = await svc(["get", "sims", "run/a"], { SVC_GATE_URL: up.gateway, SVC_API_KEY: apiKey! });
    t.equal(JSON.parse(again.out).version, 1, "tenant key and data survive the restart");
    const list = await svc(["tenant", "list", "--data", data], { SVC_GATE_URL: up.gateway });
    t.match(list.out, /^acme\s+starter\s+yes\s+default,sims$/m, "the file key still authorises admin calls");
    up.child.kill("SIGTERM");
    t.equal(await up.exited, 0, "SIGTERM: exit code 0");
    up = null;

    // an environment key wins over the file
    const envKey = "e".repeat(64);
    up = await startUp(data, { SVC_GATE_ENGINE_SERVICE_KEY: envKey });
    t.equal(up.key, null, "no key printed with an environment key");
    const withFile = await svc(["tenant", "list", "--data", join(dir, "nowhere")], { SVC_GATE_URL: up.gateway, SVC_GATE_ENGINE_SERVICE_KEY: envKey });
    t.equal(withFile.code, 0, "the environment key authorises admin calls");
    const old = await svc(["tenant", "list", "--data", data], { SVC_GATE_URL: up.gateway });
    t.equal(old.code, 1, "the file's key does not, while the environment's is in force");
    t.equal(await stopUp(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up: a port in use is a one-sentence failure with exit 1, nothing is left running, and no unprinted key is saved", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-"));
  const { createServer } = await import("node:net");
  const blocker = createServer();
  await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", r));
  const port = (blocker.address() as { port: number }).port;
  let up: Up | null = null;
  try {
    const data = join(dir, "d");
    await mkdir(data);
    // the engine's port, then the gateway's: each failure comes after the key was generated
    for (const [what, flags] of [
      ["engine port", ["--port", "0", "--engine-port", String(port)]],
      ["gateway port", ["--port", String(port), "--engine-port", "0"]],
    ] as const) {
      const child = spawn(process.execPath, ["--import", "tsx", "bin/svc.ts", "up", "--data", data, ...flags], {
        cwd: root,
        env: { ...process.env, SVC_GATE_ENGINE_SERVICE_KEY: "", SVC_ENGINE_LOG_LEVEL: "warn" },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      child.stdout.on("data", (d) => {
        out += d;
      });
      child.stderr.on("data", (d) => {
        err += d;
      });
      const code = await new Promise((r) => child.on("exit", r));
      t.equal(code, 1, `${what} in use: exit 1`);
      t.match(err, new RegExp(`^svc: Port ${port} is already in use, perhaps by a 'svc up' still running`, "m"), `${what}: ${err.trim()}`);
      t.notOk(/\n\s+at /.test(err), `${what}: no stack trace`);
      t.notOk(out.includes("SVC_GATE_ENGINE_SERVICE_KEY="), `${what}: no key printed`);
      t.notOk(existsSync(join(data, "service.key")), `${what}: and none saved, so the next run that starts creates and prints one`);
    }
    up = await startUp(data);
    t.match(String(up.key), /^[0-9a-f]{64}$/, "the first run that starts prints the key");
    t.equal((await readFile(join(data, "service.key"), "utf8")).trim(), up.key, "and saves that key");
    t.equal((await stat(join(data, "service.key"))).mode & 0o777, 0o600, "mode 0600");
    t.equal(await stopUp(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    blocker.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up with SVC_ENGINE_TLS_*: the engine serves https and the gateway reaches it, trusting the engine's certificate", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-tls-"));
  const made = selfSignedCert(dir);
  let up: Up | null = null;
  try {
    if (!made) {
      t.skip("openssl is not available to make a test certificate");
      return;
    }
    const { cert, key } = made;
    up = await startUp(join(dir, "data"), { SVC_ENGINE_TLS_CERT_PATH: cert, SVC_ENGINE_TLS_KEY_PATH: key });
    t.match(up.engine, /^https:\/\/127\.0\.0\.1:\d+$/, `the engine URL is https: ${up.engine}`);
    const health = await fetch(`${up.gateway}/health`).then((r) => r.json() as Promise<{ engine_reachable: boolean }>);
    t.equal(health.engine_reachable, true, "the gateway reaches the engine over TLS");
    const admin = { SVC_GATE_URL: up.gateway, SVC_GATE_ENGINE_SERVICE_KEY: up.key! };
    const created = await svc(["tenant", "create", "tls"], admin);
    const apiKey = /^SVC_API_KEY=(svc_live_\S+)$/m.exec(created.out)?.[1];
    t.ok(apiKey, "tenant created");
    const f = join(dir, "blob.bin");
    await writeFile(f, Buffer.from("through tls"));
    const put = await svc(["put", "default", "blob", f, "--bytes"], { SVC_GATE_URL: up.gateway, SVC_API_KEY: apiKey! });
    t.equal(put.code, 0, `a data call through the gateway to the TLS engine: ${put.err.trim() || put.out.trim()}`);
    t.equal(await stopUp(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up --redis: tenants live in Redis under the configured prefix and survive a restart with a fresh data dir", async (t) => {
  const { createClient: createRedis } = await import("redis");
  const { randomUUID } = await import("node:crypto");
  const prefix = `svc-test-up-${randomUUID()}:`;
  const redisUrl = process.env.SVC_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
  const redis = createRedis({ url: redisUrl });
  await redis.connect();
  const dir = await mkdtemp(join(tmpdir(), "svc-up-redis-"));
  let up: Up | null = null;
  try {
    const spawnRedis = async (data: string) => {
      const base = { ...process.env };
      delete base.SVC_GATE_ENGINE_SERVICE_KEY;
      const child = spawn(process.execPath, ["--import", "tsx", "bin/svc.ts", "up", "--data", data, "--port", "0", "--engine-port", "0", "--redis", redisUrl], {
        cwd: root,
        env: { ...base, SVC_GATE_REDIS_PREFIX: prefix, SVC_GATE_ENGINE_SERVICE_KEY: "r".repeat(64), SVC_ENGINE_LOG_LEVEL: "warn" },
        stdio: ["ignore", "pipe", "pipe"],
      });
      const u = { child, out: "", err: "" } as Up;
      u.exited = new Promise((r) => child.on("exit", (code) => r(code)));
      child.stdout!.on("data", (d) => {
        u.out += d;
      });
      child.stderr!.on("data", (d) => {
        u.err += d;
      });
      const deadline = Date.now() + 120_000;
      while (!/^Ready\./m.test(u.out)) {
        if (child.exitCode !== null || Date.now() > deadline) throw new Error(`svc up --redis did not start: ${u.out}\n${u.err}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      u.gateway = /^gateway: (\S+)$/m.exec(u.out)![1]!;
      return u;
    };
    up = await spawnRedis(join(dir, "a"));
    const admin = { SVC_GATE_URL: up.gateway, SVC_GATE_ENGINE_SERVICE_KEY: "r".repeat(64) };
    t.equal((await svc(["tenant", "create", "redis-tenant"], admin)).code, 0, "tenant created");
    t.ok(await redis.exists(`${prefix}tenant:redis-tenant`), "the tenant record is in Redis under the prefix");
    t.equal(await stopUp(up), 0, "SIGINT: exit 0");
    up = await spawnRedis(join(dir, "b"));
    const list = await svc(["tenant", "list"], { ...admin, SVC_GATE_URL: up.gateway });
    t.match(list.out, /^redis-tenant\s+starter\s+yes/m, "a second svc up with another data dir sees the tenant through Redis");
    t.equal(await stopUp(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    for await (const keys of redis.scanIterator({ MATCH: `${prefix}*`, COUNT: 100 })) {
      const list = ([] as string[]).concat(keys as string | string[]);
      if (list.length) await redis.del(list);
    }
    await redis.quit();
    await rm(dir, { recursive: true, force: true });
  }
});
