// Files that must never be seen half-written (a tenant registry, a usage snapshot, a receipt
// chain head, a key): written to a temp file in the same directory, fsynced, renamed over the
// old one, and the directory fsynced so the rename itself survives a crash.
import { mkdir, open, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { randomBytes } from "node:crypto";

/**
 * Writes `data` to `path` atomically, the file private by default (mode 0600). With `createDir`
 * a missing directory is made (0700); without it a write into a directory that is gone fails,
 * as a store whose data directory was removed must.
 */
export async function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o600, { createDir = false } = {}): Promise<void> {
  const dir = dirname(path);
  if (createDir) await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  const fh = await open(tmp, "wx", mode);
  try {
    await fh.writeFile(data);
    await fh.chmod(mode); // the umask may have narrowed it; make it exact
    await fh.sync();
  } catch (e) {
    // a full disk, say: no temp file is left behind, one per failed write
    await fh.close();
    await rm(tmp, { force: true });
    throw e;
  }
  await fh.close();
  try {
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  const dh = await open(dir, "r");
  try {
    await dh.sync();
  } finally {
    await dh.close();
  }
}

/**
 * Whether `dir` takes a write right now: a temp file of `bytes` random bytes (incompressible, so
 * a file system that stores zeros as holes still has to find room) is created, written,
 * fsynced and removed. False on any failure (a full disk, a read-only or missing directory);
 * the temp file never outlives the call.
 */
export async function probeWritable(dir: string, bytes = 4096): Promise<boolean> {
  const tmp = join(dir, `.probe.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  let fh: Awaited<ReturnType<typeof open>> | null = null;
  try {
    fh = await open(tmp, "wx", 0o600);
    await fh.writeFile(randomBytes(bytes));
    await fh.sync();
    return true;
  } catch {
    return false;
  } finally {
    if (fh) {
      await fh.close().catch(() => {});
      await rm(tmp, { force: true }).catch(() => {});
    }
  }
}
