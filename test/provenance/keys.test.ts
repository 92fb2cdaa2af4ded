// First boot, restart, rotation, file modes, and configuration parsing.
import test from "tape";
import { chmod, readFile, readdir, stat, unlink, writeFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { ConfigError, loadConfig } from "../../server/provenance/config.js";
import { bootstrap, hashSecret, loadKeyring, paths, publicKeyDocument, rotateKey, secretMatches } from "../../server/provenance/keys.js";
import { createBackend } from "../../server/provenance/signer.js";
import { configFor, tempDir } from "./helpers.js";

const mode = async (p: string): Promise<number> => (await stat(p)).mode & 0o777;

test("first boot creates the keypair and admin key with modes 0700/0600 and stores only the key's hash", async (t) => {
  const { dir, cleanup } = await tempDir();
  const config = configFor(dir);
  const backend = await createBackend("liboqs");
  const boot = await bootstrap(config, backend);
  t.equal(boot.createdKeypair, true);
  t.ok(boot.adminKey && /^svcp_[A-Za-z0-9_-]{43}$/.test(boot.adminKey), "an admin key of 43 random base64url characters");
  t.equal(boot.adminKeySha256, hashSecret(boot.adminKey!));
  t.equal(await mode(config.home), 0o700, "home 0700");
  t.equal(await mode(paths(config.home).keys), 0o700, "keys/ 0700");
  t.equal(await mode(paths(config.home).active), 0o600, "secret key file 0600");
  t.equal(await mode(config.configPath), 0o600, "configuration 0600");
  const conf = await readFile(config.configPath, "utf8");
  t.ok(conf.includes(`SVC_PROVENANCE_ADMIN_KEY_SHA256=${boot.adminKeySha256}`), "the hash is in the configuration");
  t.notOk(conf.includes(boot.adminKey!), "the key itself is not");
  t.equal(boot.keyring.active.publicKey.length, 1952);
  t.equal(boot.keyring.active.secretKey.length, 4032);
  t.equal(secretMatches(boot.adminKey!, boot.adminKeySha256), true, "the key matches its hash");
  t.equal(secretMatches(boot.adminKey! + "x", boot.adminKeySha256), false, "another key does not");
  t.equal(secretMatches("", boot.adminKeySha256), false, "an empty key does not");

  const again = await bootstrap(config, backend);
  t.equal(again.adminKey, null, "a second start prints no secret");
  t.equal(again.createdKeypair, false, "and regenerates nothing");
  t.equal(again.keyring.active.fingerprint, boot.keyring.active.fingerprint, "same key");
  t.equal(again.adminKeySha256, boot.adminKeySha256, "same admin key hash");
  t.equal(await readFile(config.configPath, "utf8"), conf, "configuration unchanged");
  const doc = publicKeyDocument(again.keyring);
  // sk begins with rho, which the public key shares: look for the secret vectors (byte 129 on)
  t.notOk(
    JSON.stringify(doc).includes(Buffer.from(boot.keyring.active.secretKey.subarray(129, 177)).toString("base64")),
    "no secret in the public-key document",
  );
  await cleanup();
});

test("a configuration file without the admin hash gets one; existing lines are kept", async (t) => {
  const { dir, cleanup } = await tempDir();
  await mkdir(join(dir, "etc"), { recursive: true });
  await writeFile(join(dir, "etc", "service.env"), "# operator notes\nSVC_PROVENANCE_BACKEND=noble\n");
  const config = configFor(dir);
  t.equal(config.backend, "noble", "the backend comes from the configuration file");
  const boot = await bootstrap(config, await createBackend(config.backend));
  const text = await readFile(config.configPath, "utf8");
  t.ok(text.startsWith("# operator notes\nSVC_PROVENANCE_BACKEND=noble\n"), "existing lines kept");
  t.ok(text.includes(boot.adminKeySha256));
  t.equal(configFor(dir, { SVC_PROVENANCE_BACKEND: "liboqs" }).backend, "liboqs", "the environment wins over the file");
  await cleanup();
});

test("a secret key file readable by others, or a malformed one, stops the start with a sentence", async (t) => {
  const { dir, cleanup } = await tempDir();
  const config = configFor(dir);
  const backend = await createBackend("noble");
  await bootstrap(config, backend);
  await chmod(paths(config.home).active, 0o644);
  try {
    await bootstrap(config, backend);
    t.fail("should refuse");
  } catch (e) {
    t.ok(e instanceof ConfigError, "ConfigError");
    t.match((e as Error).message, /mode must be 0600/);
  }
  await chmod(paths(config.home).active, 0o600);
  await writeFile(paths(config.home).active, '{"nope":1}', { mode: 0o600 });
  try {
    await bootstrap(config, backend);
    t.fail("should refuse");
  } catch (e) {
    t.match((e as Error).message, /malformed/, "a malformed key file is refused, not replaced");
  }
  await writeFile(paths(config.home).active, Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x7d]), { mode: 0o600 });
  try {
    await bootstrap(config, backend);
    t.fail("should refuse");
  } catch (e) {
    t.ok(e instanceof ConfigError, "ConfigError");
    t.match((e as Error).message, /^The .* is not valid UTF-8\.$/, `a key file that is not UTF-8: ${(e as Error).message}`);
  }
  await cleanup();
});

test("a configuration file whose bytes are not UTF-8 stops the start instead of yielding a different path", async (t) => {
  const { dir, cleanup } = await tempDir();
  const file = join(dir, "service.env");
  // SVC_PROVENANCE_HOME=/srv/prov<0xff>: read leniently, the home would be /srv/prov\ufffd
  await writeFile(file, Buffer.concat([Buffer.from("SVC_PROVENANCE_HOME=/srv/prov"), Buffer.from([0xff]), Buffer.from("\n")]), { mode: 0o600 });
  try {
    loadConfig({ SVC_PROVENANCE_CONFIG: file });
    t.fail("accepted");
  } catch (e) {
    t.ok(e instanceof ConfigError, "ConfigError");
    t.equal((e as Error).message, "The configuration file named by SVC_PROVENANCE_CONFIG is not valid UTF-8.");
  }
  // the boot's own read of it (the admin key's hash) refuses it too
  const config = { ...configFor(dir), configPath: file };
  try {
    await bootstrap(config, await createBackend("noble"));
    t.fail("the boot accepted it");
  } catch (e) {
    t.equal((e as Error).message, "The configuration file named by SVC_PROVENANCE_CONFIG is not valid UTF-8.", "bootstrap: the same sentence");
  }
  await cleanup();
});

test("rotation retires the old public key (no secret kept) and makes a new active key", async (t) => {
  const { dir, cleanup } = await tempDir();
  const config = configFor(dir);
  const backend = await createBackend("liboqs");
  const boot = await bootstrap(config, backend);
  const k1 = await rotateKey(config.home, backend, new Date("2026-11-22T05:00:00.000Z"));
  const k2 = await rotateKey(config.home, backend, new Date("2026-11-22T06:00:00.000Z"));
  t.notEqual(k1.active.fingerprint, boot.keyring.active.fingerprint);
  t.deepEqual(
    k2.retired.map((r) => r.fingerprint),
    [boot.keyring.active.fingerprint, k1.active.fingerprint],
    "both earlier keys retired, oldest first",
  );
  t.deepEqual(
    k2.retired.map((r) => r.retired_at),
    ["2026-11-22T05:00:00.000Z", "2026-11-22T06:00:00.000Z"],
  );
  const files = await readdir(paths(config.home).retired);
  t.equal(files.length, 2);
  for (const f of files) {
    const text = await readFile(join(paths(config.home).retired, f), "utf8");
    t.notOk(text.includes("secret"), `${f}: no secret key in a retired file`);
    t.equal(await mode(join(paths(config.home).retired, f)), 0o600);
  }
  t.equal(await mode(paths(config.home).retired), 0o700, "retired/ 0700");
  const loaded = await loadKeyring(config.home);
  t.equal(loaded.active.fingerprint, k2.active.fingerprint, "the keyring loads the new active key");
  const doc = publicKeyDocument(loaded);
  t.equal(doc.retired.length, 2, "public-key document lists the retired keys");
  await cleanup();
});

test("configuration: defaults, and a bad value stops with a sentence naming the variable", (t) => {
  const c = loadConfig({ SVC_PROVENANCE_CONFIG: "/nonexistent/svc-provenance/service.env" });
  t.deepEqual(
    { ...c },
    {
      home: "/var/lib/svc-provenance",
      configPath: "/nonexistent/svc-provenance/service.env",
      backend: "liboqs",
      host: "127.0.0.1",
      port: 8001,
      metricsToken: null,
      maxBodyBytes: 32 * 1024 * 1024,
      maxReceiptBodyBytes: 4 * 1024 * 1024,
      bodyBudgetBytes: 64 * 1024 * 1024,
      bodyMinBytesPerS: 16 * 1024,
      bodyGraceS: 10,
    },
    "defaults",
  );
  t.ok(Object.isFrozen(c), "frozen");
  const bad: Array<[Record<string, string>, string]> = [
    [{ SVC_PROVENANCE_BACKEND: "openssl" }, "SVC_PROVENANCE_BACKEND"],
    [{ SVC_PROVENANCE_PORT: "80a" }, "SVC_PROVENANCE_PORT"],
    [{ SVC_PROVENANCE_PORT: "70000" }, "SVC_PROVENANCE_PORT"],
    [{ SVC_PROVENANCE_HOME: "relative/dir" }, "SVC_PROVENANCE_HOME"],
    [{ SVC_PROVENANCE_HOST: "" }, "SVC_PROVENANCE_HOST"],
    [{ SVC_PROVENANCE_METRICS_TOKEN: "short" }, "SVC_PROVENANCE_METRICS_TOKEN"],
    [{ SVC_PROVENANCE_CONFIG: "rel.env" }, "SVC_PROVENANCE_CONFIG"],
  ];
  for (const [env, name] of bad) {
    try {
      loadConfig({ SVC_PROVENANCE_CONFIG: "/nonexistent/x.env", ...env });
      t.fail(`${name} accepted`);
    } catch (e) {
      t.ok(e instanceof ConfigError && e.message.includes(name) && e.message.endsWith("."), `${name}: ${(e as Error).message}`);
    }
  }
  t.end();
});

test("svc-provenance init prints the admin key once; a second run prints no secret", async (t) => {
  const { dir, cleanup } = await tempDir();
  const env = { ...process.env, SVC_PROVENANCE_HOME: join(dir, "home"), SVC_PROVENANCE_CONFIG: join(dir, "etc", "service.env") };
  const run = (args: string[], extra: Record<string, string> = {}) =>
    spawnSync(process.execPath, ["--import", "tsx", "bin/svc-provenance.ts", ...args], { env: { ...env, ...extra }, encoding: "utf8", timeout: 30_000 });
  const first = run(["init"]);
  t.equal(first.status, 0, "init exits 0");
  const lines = first.stdout.split("\n").filter((l) => l.startsWith("SVC_PROVENANCE_ADMIN_KEY="));
  t.equal(lines.length, 1, "one SVC_PROVENANCE_ADMIN_KEY= line on stdout");
  const key = lines[0]!.slice("SVC_PROVENANCE_ADMIN_KEY=".length);
  t.ok(key.length >= 32, "the key has at least 32 characters");
  const second = run(["init"]);
  t.equal(second.status, 0);
  t.notOk(second.stdout.includes("SVC_PROVENANCE_ADMIN_KEY"), "no key printed the second time");
  t.notOk((second.stdout + second.stderr).includes(key), "nor anywhere");
  const pk = run(["public-key"]);
  t.equal(pk.status, 0);
  t.equal(JSON.parse(pk.stdout).algorithm, "ML-DSA-65", "public-key prints the JSON");
  // while an appliance serves this home (its lock names a live process), rotation is refused
  const lock = join(dir, "home", "serve.lock");
  await writeFile(lock, `${process.pid}\n`);
  const refused = run(["rotate-key"]);
  t.notEqual(refused.status, 0, "rotate-key while the home is being served: refused");
  t.match(refused.stderr, new RegExp(`pid ${process.pid}\\) is serving this state directory`), "and says which process serves it");
  t.equal(JSON.parse(run(["public-key"]).stdout).fingerprint, JSON.parse(pk.stdout).fingerprint, "the active key is unchanged");
  await unlink(lock);
  const rot = run(["rotate-key"]);
  t.equal(rot.status, 0, "rotate-key exits 0");
  t.equal(JSON.parse(rot.stdout).retired[0], JSON.parse(pk.stdout).fingerprint, "and reports the retired fingerprint");
  const bad = run(["init"], { SVC_PROVENANCE_PORT: "x" });
  t.equal(bad.status, 2, "a bad variable: exit 2");
  t.equal(bad.stderr.trim().split("\n").length, 1, "one line");
  t.match(bad.stderr, /SVC_PROVENANCE_PORT/);
  t.notOk(bad.stderr.includes("    at "), "no stack trace");
  const unknown = run(["frobnicate"]);
  t.equal(unknown.status, 2, "an unknown command: exit 2");
  const help = run(["--help"]);
  t.equal(help.status, 0);
  t.match(help.stdout, /rotate-key/);
  await cleanup();
});
