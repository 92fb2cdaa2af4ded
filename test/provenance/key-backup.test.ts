// The key backup and restore of docs/operations.md, on the real svc-provenance program: an
// archive of keys/ and the configuration file, unpacked into an empty home, gives the same
// signing key, retired keys and admin key (init keeps them all and prints no secret); a key
// file left readable by others is refused.
import test from "tape";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const ROOT = new URL("../../", import.meta.url).pathname;
const prov = (home: string, ...args: string[]) =>
  spawnSync(process.execPath, ["--import", "tsx", join(ROOT, "bin/svc-provenance.ts"), ...args], {
    cwd: ROOT,
    encoding: "utf8",
    env: { PATH: process.env.PATH, SVC_PROVENANCE_HOME: home, SVC_PROVENANCE_CONFIG: join(home, "service.env"), SVC_PROVENANCE_BACKEND: "noble" },
  });

test("provenance keys: tar of keys/ and service.env restored into an empty home is the same appliance", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "svc-keys-"));
  try {
    const a = join(dir, "a");
    const first = prov(a, "init");
    t.equal(first.status, 0, `init (${first.stderr.trim()})`);
    t.match(first.stdout, /^SVC_PROVENANCE_ADMIN_KEY=svcp_/, "the admin key is printed once");
    const rot = prov(a, "rotate-key");
    t.equal(rot.status, 0, "a rotation, so there is a retired key to keep");
    const before = JSON.parse(prov(a, "public-key").stdout) as { fingerprint: string; retired: unknown[] };
    t.equal(before.retired.length, 1);

    const archive = join(dir, "keys.tar");
    t.equal(spawnSync("tar", ["-C", a, "-cf", archive, "keys", "service.env"]).status, 0, "tar -C HOME -cf keys.tar keys service.env");
    const b = join(dir, "b");
    mkdirSync(b, { mode: 0o700 });
    t.equal(spawnSync("tar", ["-C", b, "-xpf", archive]).status, 0, "unpacked into an empty home");
    t.equal(statSync(join(b, "keys", "signing-key.json")).mode & 0o777, 0o600, "the secret key is still 0600");
    const after = JSON.parse(prov(b, "public-key").stdout) as { fingerprint: string; retired: unknown[] };
    t.deepEqual(after, before, "the same active and retired keys");
    const again = prov(b, "init");
    t.equal(again.status, 0);
    t.equal(again.stdout, "", "no new admin key: the restored one is kept");
    t.match(again.stderr, new RegExp(`Kept the signing key ${before.fingerprint}; the admin API key already exists\\.`));

    chmodSync(join(b, "keys", "signing-key.json"), 0o644);
    const loose = prov(b, "init");
    t.notEqual(loose.status, 0, "a signing key readable by others is refused");
    t.match(loose.stderr, /open to group or others \(mode 0644\); its mode must be 0600/, `with a sentence (${loose.stderr.trim()})`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
