// `svc backup` and `svc restore`: a consistent copy of an engine's LMDB store taken while it
// runs, and a backup restored as a new store directory (lib/store/backup.ts).
import { fmtBytes, parse, UsageError, type Io } from "./common.js";

export const BACKUP_HELP = `Usage: svc backup --to DIR [--store PATH] [--compact]

Copies the store at PATH (default: SVC_ENGINE_DATA_DIR, else ./svc-data/engine, the store of
'svc up') to the new directory DIR as DIR/data.mdb, while engines keep serving: the copy is one
consistent snapshot. DIR must not exist (or be empty); nothing is overwritten. --compact leaves
out free pages (smaller, slower). The copy is then opened and its records counted.`;

export const RESTORE_HELP = `Usage: svc restore --from DIR --to PATH

Restores the backup DIR (made by 'svc backup') as a new store directory PATH, which must not
exist (or be empty). Point SVC_ENGINE_DATA_DIR at PATH, or stop the engine and swap the
directories; the running store is never written.`;

function report(io: Io, what: string, r: { path: string; bytes: number; records: number; payloads: number; seconds: number }): void {
  io.out(`${what} ${r.path}: ${fmtBytes(r.bytes)}, ${r.records} records, ${r.payloads} payloads, in ${r.seconds.toFixed(2)} s.\n`);
}

export async function backupCommand(argv: string[], io: Io): Promise<number> {
  const { values, help } = parse(
    argv,
    { to: { type: "string" }, store: { type: "string" }, compact: { type: "boolean" } },
    { min: 0, max: 0, names: "no arguments" },
  );
  if (help) {
    io.out(BACKUP_HELP + "\n");
    return 0;
  }
  const to = values.to as string | undefined;
  if (!to) throw new UsageError("--to DIR is required: the new directory the backup is written to.");
  const store = (values.store as string | undefined) || io.env.SVC_ENGINE_DATA_DIR || "./svc-data/engine";
  const { backupStore } = await import("../../lib/store/backup.js");
  report(io, "Backed up to", await backupStore(store, to, { compact: values.compact === true }));
  return 0;
}

export async function restoreCommand(argv: string[], io: Io): Promise<number> {
  const { values, help } = parse(argv, { from: { type: "string" }, to: { type: "string" } }, { min: 0, max: 0, names: "no arguments" });
  if (help) {
    io.out(RESTORE_HELP + "\n");
    return 0;
  }
  const from = values.from as string | undefined;
  const to = values.to as string | undefined;
  if (!from) throw new UsageError("--from DIR is required: the backup directory to restore.");
  if (!to) throw new UsageError("--to PATH is required: the new store directory to create.");
  const { restoreStore } = await import("../../lib/store/backup.js");
  report(io, "Restored to", await restoreStore(from, to));
  return 0;
}
