// `svc migrate --from SRC --to DST`: copies a whole store (every tenant) between an LMDB
// directory and a PostgreSQL database, in either direction, with a progress bar; resumable
// (lib/store/migrate.ts).
import type { StorageBackend } from "../../lib/store/backend.js";
import { copyStore, countHeads } from "../../lib/store/migrate.js";
import { Progress } from "./progress.js";
import { fmtBytes, parse, UsageError, type Io } from "./common.js";
import { describe, isPg, requirePgStore, requireStoreDir } from "./store-location.js";

export const MIGRATE_HELP = `Usage: svc migrate --from SRC --to DST [--json]

Copies a store, every tenant, from SRC to DST: each an LMDB store directory (as under
svc up's DIR/engine) or a PostgreSQL URL (postgres://user@host:port/database; tables are
created on first connect). Every version, tombstone, fingerprint and payload is copied as it
is, one key per transaction. Interrupted, it can be run again: keys already copied and
unchanged are skipped. Stop the engines writing to SRC first, or run it again afterwards to
pick up what changed. Progress on standard error, a summary on standard output.`;

async function openBackend(where: string, mustExist: boolean): Promise<StorageBackend> {
  if (isPg(where)) {
    if (mustExist) await requirePgStore(where);
    return (await import("../../lib/store/postgres.js")).PostgresBackend.open(where);
  }
  if (mustExist) requireStoreDir(where);
  return new (await import("../../lib/store/lmdb.js")).LmdbBackend(where);
}

export async function migrateCommand(argv: string[], io: Io): Promise<number> {
  const { values, help } = parse(
    argv,
    { from: { type: "string" }, to: { type: "string" }, json: { type: "boolean" } },
    { min: 0, max: 0, names: "no arguments" },
  );
  if (help) {
    io.out(MIGRATE_HELP + "\n");
    return 0;
  }
  const from = values.from as string | undefined;
  const to = values.to as string | undefined;
  if (!from || !to) throw new UsageError("--from and --to are both required.");
  if (from === to) throw new UsageError("--from and --to name the same store.");
  const src = await openBackend(from, true);
  let dst: StorageBackend | undefined;
  try {
    dst = await openBackend(to, false);
    const t0 = performance.now();
    const total = await countHeads(src);
    const progress = new Progress({
      write: io.err,
      isTTY: io.errIsTTY,
      totalItems: total,
      totalBytes: 0,
      unit: "keys",
      columns: process.stderr.columns || 100,
    });
    const r = await copyStore(src, dst, { key: (name, copied, bytes) => progress.done(name, bytes, true, copied ? "copied" : "already there") });
    progress.finish();
    const seconds = (performance.now() - t0) / 1000;
    if (values.json) io.out(JSON.stringify({ ...r, seconds }, null, 2) + "\n");
    else
      io.out(
        `Copied ${r.copied} of ${r.keys} keys (${r.skipped} already there) from ${describe(from)} to ${describe(to)} in ${seconds.toFixed(1)} s: ` +
          `${r.versions} versions, ${fmtBytes(r.payload_bytes)} of payloads, ${r.idempotency_records} idempotency records.\n`,
      );
    return 0;
  } finally {
    await dst?.close();
    await src.close();
  }
}
