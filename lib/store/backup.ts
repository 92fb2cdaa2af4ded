// Backup and restore of an LMDB store (docs/operations.md). A backup is a consistent snapshot
// taken while engines keep reading and writing (LMDB's copy runs in one read transaction, and
// LMDB environments are shared between processes), written as DIR/data.mdb in a new directory
// and then opened and counted. A restore copies a backup into a new store directory, never
// over an existing store: the engine is then pointed at it (or the directories are swapped
// while it is stopped).
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { isNoSpace, ValidationError } from "../errors.js";
import { LmdbBackend } from "./lmdb.js";

export interface BackupResult {
  /** The directory written (holding data.mdb). */
  path: string;
  /** Bytes of the copy's data.mdb. */
  bytes: number;
  /** Records (heads and versions) in the copy, counted on the copy itself. */
  records: number;
  /** Payloads in the copy. */
  payloads: number;
  seconds: number;
}

/** A store directory: it exists and holds data.mdb (no store is created by mistake). */
function existingStore(path: string, what: string): string {
  const p = resolve(path);
  if (!existsSync(join(p, "data.mdb"))) throw new ValidationError(`${what} ${p} is not a store: it holds no data.mdb.`, what);
  return p;
}

/** A target that does not exist yet (or is an empty directory); its parent is created 0700. */
function freshTarget(path: string, what: string): string {
  const p = resolve(path);
  if (existsSync(p)) {
    if (!statSync(p).isDirectory() || readdirSync(p).length > 0)
      throw new ValidationError(`${what} ${p} already exists and is not an empty directory; nothing is overwritten.`, what);
  }
  mkdirSync(dirname(p), { recursive: true, mode: 0o700 });
  return p;
}

const MIB = 1024 * 1024;

/**
 * A copy that failed, in one sentence: where to, why (no space names the size of the store
 * copied), and that nothing was kept.
 */
function copyFailed(what: "backup" | "restore", dst: string, e: unknown, sourceBytes: number): Error {
  const message = e instanceof Error ? e.message : String(e);
  const why = isNoSpace(e)
    ? `the file system of ${dirname(dst)} has no space left for a copy of a data.mdb of ${(sourceBytes / MIB).toFixed(1)} MiB`
    : message.split("\n")[0]!.replace(/[.\s]+$/, "");
  return new Error(`The ${what} to ${dst} failed: ${why}; nothing was kept.`);
}

/** Opens the store at `dir` and counts what it holds. */
async function census(dir: string): Promise<{ records: number; payloads: number }> {
  const b = new LmdbBackend(dir);
  try {
    const s = b.stats().dbs;
    return { records: s.records!.entries, payloads: (s.payload_index?.entries ?? 0) + (s.payloads?.entries ?? 0) };
  } finally {
    await b.close();
  }
}

/**
 * Copies the store at `from` (an engine's SVC_ENGINE_DATA_DIR, in use or not) to the new
 * directory `to` (mode 0700, data.mdb 0600), then opens the copy and counts its records.
 * @example const r = await backupStore("/var/lib/svc-engine", "/backup/svc-2026-01-31");
 */
export async function backupStore(from: string, to: string, opts: { compact?: boolean } = {}): Promise<BackupResult> {
  const src = existingStore(from, "store");
  const dst = freshTarget(to, "backup");
  // written under a temporary name and renamed when complete: a failed backup leaves no
  // directory that looks like a good one
  const tmp = `${dst}.partial-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { mode: 0o700 });
  const t0 = process.hrtime.bigint();
  const backend = new LmdbBackend(src);
  try {
    await backend.backup(tmp, opts.compact ?? false);
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw copyFailed("backup", dst, e, statSync(join(src, "data.mdb")).size);
  } finally {
    await backend.close();
  }
  chmodSync(join(tmp, "data.mdb"), 0o600);
  if (existsSync(dst)) rmSync(dst, { recursive: true }); // the empty directory checked above
  renameSync(tmp, dst);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const { records, payloads } = await census(dst);
  // census opened the copy, which adds LMDB's lock file beside it: not part of the backup
  rmSync(join(dst, "lock.mdb"), { force: true });
  return { path: dst, bytes: statSync(join(dst, "data.mdb")).size, records, payloads, seconds };
}

/**
 * Restores the backup directory `from` as a new store directory `to` (which must not exist or
 * be empty): data.mdb is copied (0600 in a 0700 directory) and the result opened and counted.
 * @example await restoreStore("/backup/svc-2026-01-31", "/var/lib/svc-engine.restored");
 */
export async function restoreStore(from: string, to: string): Promise<BackupResult> {
  const src = existingStore(from, "backup");
  const dst = freshTarget(to, "store");
  const t0 = process.hrtime.bigint();
  const tmp = `${dst}.partial-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { mode: 0o700 });
  try {
    copyFileSync(join(src, "data.mdb"), join(tmp, "data.mdb"));
    chmodSync(join(tmp, "data.mdb"), 0o600);
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw copyFailed("restore", dst, e, statSync(join(src, "data.mdb")).size);
  }
  if (existsSync(dst)) rmSync(dst, { recursive: true });
  renameSync(tmp, dst);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const { records, payloads } = await census(dst);
  return { path: dst, bytes: statSync(join(dst, "data.mdb")).size, records, payloads, seconds };
}
