// State and key files are 0600 in 0700 directories whatever the umask, and a start-up with a
// configuration file or state directory open to others says so in one line, without secrets.
import test from "tape";
import { spawn } from "node:child_process";
import { chmod, mkdir, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { LogChainStore } from "../../server/provenance/chain.js";
import { bootstrap, paths, rotateKey } from "../../server/provenance/keys.js";
import { lockHome, startProvenance } from "../../server/provenance/server.js";
import { createBackend } from "../../server/provenance/signer.js";
import { configFor, tempDir } from "./helpers.js";

const mode = async (p: string): Promise<number> => (await stat(p)).mode & 0o777;
const octal = (m: number): string => `0${m.toString(8)}`;

test("every file and directory the appliance creates has its exact mode under any umask", async (t) => {
  const backend = await createBackend("noble");
  for (const mask of [0o000, 0o022, 0o077, 0o777]) {
    const { dir, cleanup } = await tempDir();
    const old = process.umask(mask);
    try {
      // the configuration's directory and the home's parent do not exist yet
      const config = configFor(join(dir, "deep"), {});
      await bootstrap(config, backend);
      await rotateKey(config.home, backend);
      const store = new LogChainStore(paths(config.home).chain);
      await store.load();
      await store.save({ serial: 1, last_receipt_sha256: "a".repeat(64) });
      store.close();
      const unlock = await lockHome(config.home);
      const expected: Array<[string, number]> = [
        [join(dir, "deep"), 0o700],
        [config.home, 0o700],
        [paths(config.home).keys, 0o700],
        [paths(config.home).active, 0o600],
        [paths(config.home).retired, 0o700],
        [paths(config.home).chain, 0o600],
        [join(config.home, "serve.lock"), 0o600],
        [join(dir, "deep", "etc"), 0o700],
        [config.configPath, 0o600],
      ];
      for (const [p, m] of expected) t.equal(octal(await mode(p)), octal(m), `umask ${octal(mask)}: ${p.slice(dir.length)} ${octal(m)}`);
      await unlock();
    } finally {
      process.umask(old);
      await cleanup();
    }
  }
  t.end();
});

test("a configuration file or state directory open to others: one warning line each at start-up, no secret in it", async (t) => {
  const { dir, cleanup } = await tempDir();
  const backend = await createBackend("noble");
  const token = "metrics-token-0123456789abcdef";
  await mkdir(join(dir, "etc"), { recursive: true });
  await writeFile(join(dir, "etc", "service.env"), `SVC_PROVENANCE_METRICS_TOKEN=${token}\n`);
  const config = configFor(dir, { SVC_PROVENANCE_BACKEND: "noble" });
  const first = await bootstrap(config, backend);
  t.deepEqual(first.warnings, [], "first boot: the file was rewritten 0600, nothing to say");
  t.equal(await mode(config.configPath), 0o600);

  await chmod(config.configPath, 0o644);
  await chmod(config.home, 0o755);
  await chmod(paths(config.home).retired, 0o777);
  const logs: Array<Record<string, unknown>> = [];
  const running = await startProvenance(config, { log: (e) => logs.push(e) });
  await running.close();
  const warnings = logs.filter((l) => l.msg === "warning");
  t.equal(warnings.length, 3, "three warnings: the home directory, keys/retired and the configuration file");
  t.match(String(warnings[0]?.detail), /^The directory .*home was open to group or others \(mode 0755\); it is now 0700\.$/, String(warnings[0]?.detail));
  t.match(String(warnings[1]?.detail), /^The directory .*retired was open to group or others \(mode 0777\); it is now 0700\.$/, String(warnings[1]?.detail));
  t.match(
    String(warnings[2]?.detail),
    /^The configuration file .*service\.env is open to group or others \(mode 0644\); .*make it 0600\.$/,
    String(warnings[2]?.detail),
  );
  t.equal(await mode(config.home), 0o700, "the directory was set back to 0700");
  t.equal(await mode(paths(config.home).retired), 0o700, "and keys/retired");
  t.equal(await mode(config.configPath), 0o644, "the operator's file is left as it is");
  const text = JSON.stringify(warnings);
  t.notOk(text.includes(token), "no metrics token");
  t.notOk(text.includes(first.adminKeySha256), "no admin key hash");
  t.notOk(text.includes(Buffer.from(first.keyring.active.secretKey.subarray(129, 177)).toString("base64")), "no secret key");

  // svc-provenance init as a child: the same warning as one line on stderr
  const child = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const c = spawn(process.execPath, ["--import", "tsx", "bin/svc-provenance.ts", "init"], {
      env: { ...process.env, SVC_PROVENANCE_HOME: config.home, SVC_PROVENANCE_CONFIG: config.configPath, SVC_PROVENANCE_BACKEND: "noble" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    c.stdout.on("data", (d) => (stdout += d));
    c.stderr.on("data", (d) => (stderr += d));
    c.on("close", (code) => resolve({ code, stdout, stderr }));
  });
  t.equal(child.code, 0, "init: exit 0");
  const lines = child.stderr
    .trim()
    .split("\n")
    .filter((l) => l.startsWith("Warning:"));
  t.equal(lines.length, 1, `init: one warning line (${lines[0]})`);
  t.match(lines[0] ?? "", /configuration file .* is open to group or others \(mode 0644\)/);
  t.notOk(child.stderr.includes(token) || child.stdout.includes(token), "init: no metrics token printed");

  await chmod(paths(config.home).active, 0o640);
  try {
    await bootstrap(config, backend);
    t.fail("a secret key file open to the group was accepted");
  } catch (e) {
    t.match(
      (e as Error).message,
      /^The signing key file is open to group or others \(mode 0640\); its mode must be 0600\.$/,
      "a secret key file open to others stops the start",
    );
  }
  await cleanup();
  t.end();
});
