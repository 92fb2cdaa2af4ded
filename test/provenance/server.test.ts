// startProvenance end to end: first boot through the real server, one process per state
// directory, a busy port, restart.
import test from "tape";
import { spawn } from "node:child_process";
import { readFile, stat, truncate, unlink, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { bootstrap, rotateKey } from "../../server/provenance/keys.js";
import { startProvenance } from "../../server/provenance/server.js";
import { createBackend } from "../../server/provenance/signer.js";
import { configFor, get, post, sampleArtifact, tempDir } from "./helpers.js";

const quiet = () => undefined;

test("startProvenance serves with the worker signer, keeps one process per home, restarts cleanly", async (t) => {
  const { dir, cleanup } = await tempDir();
  const config = configFor(dir);
  const a = await startProvenance(config, { log: quiet });
  t.ok(a.boot.adminKey, "first boot made an admin key");
  const h = await get(`${a.url}/health`);
  t.equal(h.json.backend.name, "liboqs");
  const r = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.boot.adminKey!);
  t.equal(r.status, 201, "issues a receipt");
  t.equal((await post(`${a.url}/v1/provenance/verify`, { receipt: r.json })).status, 200, "which verifies");
  try {
    await startProvenance(config, { log: quiet });
    t.fail("a second process on the same home started");
  } catch (e) {
    t.match(
      (e as Error).message,
      /Another svc-provenance process \(pid \d+\) is serving this state directory/,
      "a second appliance on the same home is refused",
    );
  }
  await a.close();
  const b = await startProvenance(config, { log: quiet });
  t.equal(b.boot.adminKey, null, "a restart prints no key");
  const r2 = await post(`${b.url}/v1/provenance/exact`, { artifact: sampleArtifact }, a.boot.adminKey!);
  t.equal(r2.json.serial, 2, "the chain continues");
  await b.close();
  await writeFile(join(config.home, "serve.lock"), "999999999\n");
  const c = await startProvenance(config, { log: quiet });
  t.pass("a stale lock of a process that is gone is taken over");
  await c.close();
  await cleanup();
});

test("a chain log missing or emptied next to a used key stops the start; rotate-key starts a new chain under a new key", async (t) => {
  const { dir, cleanup } = await tempDir();
  const config = configFor(dir);
  const log = join(config.home, "chain.log");
  const genesis = '{"serial":0,"last_receipt_sha256":null}\n';
  // init, then serve: the key was made with the log's genesis line, so the first start is fine
  const adminKey = (await bootstrap(config, await createBackend(config.backend))).adminKey!;
  t.equal(await readFile(log, "utf8"), genesis, "making the key wrote the log's genesis line");
  t.equal((await stat(log)).mode & 0o777, 0o600, "the log is private");
  const a = await startProvenance(config, { log: quiet });
  const first = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, adminKey);
  const second = await post(`${a.url}/v1/provenance/exact`, { artifact: sampleArtifact }, adminKey);
  t.deepEqual([first.json.serial, second.json.serial], [1, 2], "serials 1 and 2 after the genesis line");
  const fp = first.json.signer.public_key_sha256 as string;
  await a.close();
  const refused = async (what: string) => {
    try {
      const x = await startProvenance(config, { log: quiet });
      await x.close();
      t.fail(`${what}: started`);
    } catch (e) {
      const m = (e as Error).message;
      t.ok(
        m.includes(log) && m.includes(fp) && /is missing or empty while the signing key .* already exists.*svc-provenance rotate-key/.test(m),
        `${what}: refused, naming the log, the key and the ways out`,
      );
    }
  };
  await unlink(log);
  await refused("log missing");
  await writeFile(log, "");
  await refused("log emptied");
  await writeFile(log, '{"serial":2,"last_recei');
  await refused("only a torn line left");
  t.equal(
    await stat(join(config.home, "serve.lock")).then(
      () => "locked",
      () => "free",
    ),
    "free",
    "a refused start leaves the home unlocked",
  );
  await rotateKey(config.home, await createBackend(config.backend));
  const b = await startProvenance(config, { log: quiet });
  const next = await post(`${b.url}/v1/provenance/exact`, { artifact: sampleArtifact }, adminKey);
  t.equal(next.json.serial, 1, "after rotate-key the new chain starts at serial 1");
  t.notEqual(next.json.signer.public_key_sha256, fp, "under the new key");
  t.equal((await post(`${b.url}/v1/provenance/verify`, { receipt: first.json })).status, 200, "a receipt of the old chain still verifies (retired key)");
  await b.close();
  const c = await startProvenance(config, { log: quiet });
  t.equal((await post(`${c.url}/v1/provenance/exact`, { artifact: sampleArtifact }, adminKey)).json.serial, 2, "the new chain continues after a restart");
  await c.close();
  await truncate(log, 0);
  await rotateKey(config.home, await createBackend(config.backend));
  t.equal(await readFile(log, "utf8"), genesis, "rotate-key writes the genesis line into an emptied log");
  await cleanup();
});

test("a busy port stops the start with a sentence naming the variables, and frees the home", async (t) => {
  const { dir, cleanup } = await tempDir();
  const blocker = createServer();
  await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", () => r()));
  const port = (blocker.address() as { port: number }).port;
  const config = configFor(dir, { SVC_PROVENANCE_PORT: String(port) });
  let shown: string | null = null;
  try {
    await startProvenance(config, { log: quiet, onAdminKey: (k) => (shown = k) });
    t.fail("started on a busy port");
  } catch (e) {
    t.match((e as Error).message, /in use \(SVC_PROVENANCE_HOST, SVC_PROVENANCE_PORT\)/);
  }
  t.ok(shown !== null && (shown as string).startsWith("svcp_"), "the first-boot admin key was shown before the listen failed");
  await new Promise<void>((r) => blocker.close(() => r()));
  const ok = await startProvenance(configFor(dir), { log: quiet });
  t.pass("the home is not left locked");
  await ok.close();
  await cleanup();
});

test("svc-provenance serve: prints the admin key once, logs JSON lines without secrets, stops on SIGTERM", async (t) => {
  const { dir, cleanup } = await tempDir();
  const env = { ...process.env, SVC_PROVENANCE_HOME: join(dir, "home"), SVC_PROVENANCE_CONFIG: join(dir, "etc", "service.env"), SVC_PROVENANCE_PORT: "0" };
  const child = spawn(process.execPath, ["--import", "tsx", "bin/svc-provenance.ts", "serve"], { env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no listening line in 30 s")), 30_000);
    child.stderr.on("data", (d) => {
      stderr += d;
      const m = /"msg":"listening".*"port":(\d+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
  });
  // the key line is written before listening, but stdout and stderr are separate pipes: waited for
  const keyLine = /^SVC_PROVENANCE_ADMIN_KEY=(\S+)$/m;
  for (const end = Date.now() + 30_000; !keyLine.test(stdout) && Date.now() < end;) await new Promise((r) => setTimeout(r, 20));
  const key = keyLine.exec(stdout)?.[1];
  t.ok(key, "the admin key line is on stdout");
  const url = `http://127.0.0.1:${port}`;
  const r = await post(`${url}/v1/provenance/exact`, { artifact: sampleArtifact }, key);
  t.equal(r.status, 201, "serves receipts");
  await post(`${url}/v1/provenance/exact`, { artifact: sampleArtifact }, "wrong-key");
  const exit = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  child.kill("SIGTERM");
  t.equal(await exit, 0, "SIGTERM: exit 0");
  const lines = stderr.trim().split("\n");
  t.ok(
    lines.length >= 3 &&
      lines.every((l) => {
        try {
          return typeof JSON.parse(l).msg === "string";
        } catch {
          return false;
        }
      }),
    "stderr is JSON lines",
  );
  const { readFile } = await import("node:fs/promises");
  const sk = JSON.parse(await readFile(join(dir, "home", "keys", "signing-key.json"), "utf8")).secret_key as string;
  t.notOk(stderr.includes(sk.slice(172, 236)), "no secret key in the log");
  t.notOk(stderr.includes(key!), "no admin key in the log");
  t.notOk(stderr.includes("wrong-key"), "no presented key in the log");
  t.equal(stdout.trim().split("\n").length, 1, "stdout holds only the key line");
  await cleanup();
});
