// The LMDB store's files are its tenants' data: data.mdb and lock.mdb 0600 and the directories
// the store creates 0700, whatever the umask (checked with umask 000). Store-only: the files
// of the embedded store.
import test from "tape";
import { chmodSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore } from "../../lib/store/index.js";

const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);

test("lmdb: 0600 files in 0700 directories under a permissive umask", async (t) => {
  const root = mkdtempSync(join(tmpdir(), "svc-perm-"));
  chmodSync(root, 0o755);
  const old = process.umask(0);
  try {
    const dir = join(root, "a", "b");
    const s = await createStore({ path: dir });
    await s.put("ns", "k", new Int32Array(4096).fill(3), { shape: [4096] });
    await s.close();
    t.equal(mode(join(root, "a")), "700", "a created parent: 0700");
    t.equal(mode(dir), "700", "the store directory: 0700");
    t.equal(mode(join(dir, "data.mdb")), "600", "data.mdb: 0600");
    t.equal(mode(join(dir, "lock.mdb")), "600", "lock.mdb: 0600");
    t.equal(mode(root), "755", "a directory the caller made is left as it was");
    // a store written by an older version with 0644/0755 is tightened when opened
    chmodSync(dir, 0o755);
    chmodSync(join(dir, "data.mdb"), 0o644);
    const s2 = await createStore({ path: dir });
    t.equal((await s2.get("ns", "k")).version, 1, "reopened");
    await s2.close();
    t.deepEqual([mode(dir), mode(join(dir, "data.mdb"))], ["700", "600"], "an existing store is tightened to 0700/0600");
  } finally {
    process.umask(old);
    rmSync(root, { recursive: true, force: true });
  }
});

test("lmdb: a relative store path changes only the directories it creates", async (t) => {
  const root = mkdtempSync(join(tmpdir(), "svc-perm-rel-"));
  chmodSync(root, 0o755);
  const cwd = process.cwd();
  const before = { root: mode(root), tmp: mode(tmpdir()), top: mode("/") };
  try {
    process.chdir(root);
    const s = await createStore({ path: "./svc-data/local" });
    await s.close();
    t.equal(mode(join(root, "svc-data")), "700", "the created parent: 0700");
    t.equal(mode(join(root, "svc-data", "local")), "700", "the store directory: 0700");
    t.deepEqual({ root: mode(root), tmp: mode(tmpdir()), top: mode("/") }, before, "the working directory and every directory above it keep their modes");
  } finally {
    process.chdir(cwd);
    rmSync(root, { recursive: true, force: true });
  }
});
