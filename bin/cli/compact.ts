// `svc compact [--store PATH|URL] [--json]`: purges what deletes left behind, in every tenant,
// on an LMDB store directory or a PostgreSQL store, while engines serve it (lib/store/maintenance.ts).
import { performance } from "node:perf_hooks";
import { parse, type Io } from "./common.js";
import { describe, isPg, requirePgStore, requireStoreDir } from "./store-location.js";

export const COMPACT_HELP = `Usage: svc compact [--store PATH|URL] [--json]

Purges, in every tenant, what deletes left behind: the versions under tombstones whose 30
days have passed, keys deleted for good, payloads no kept version names, and the stored
answers of idempotent writes older than 24 hours. The store is PATH (an LMDB store directory,
as under svc up's DIR/engine) or a PostgreSQL URL (postgres://user@host:port/database);
default: SVC_ENGINE_STORE_URL, else SVC_ENGINE_DATA_DIR, else ./svc-data/engine (the store
of svc up). Engines may serve the store meanwhile: reads go on, and a write waits at most
for one of its short steps.
A summary on standard output (--json for a JSON one).`;

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

export async function compactCommand(argv: string[], io: Io): Promise<number> {
  const { values, help } = parse(argv, { store: { type: "string" }, json: { type: "boolean" } }, { min: 0, max: 0, names: "no arguments" });
  if (help) {
    io.out(COMPACT_HELP + "\n");
    return 0;
  }
  const where = (values.store as string | undefined) || io.env.SVC_ENGINE_STORE_URL || io.env.SVC_ENGINE_DATA_DIR || "./svc-data/engine";
  if (isPg(where)) await requirePgStore(where);
  else requireStoreDir(where);
  const { createStore } = await import("../../lib/store/index.js");
  const store = await createStore(isPg(where) ? { url: where } : { path: where });
  try {
    const t0 = performance.now();
    const r = await store.compact();
    const seconds = (performance.now() - t0) / 1000;
    if (values.json) io.out(JSON.stringify({ ...r, seconds }, null, 2) + "\n");
    else
      io.out(
        `Compacted ${describe(where)} in ${seconds.toFixed(2)} s: ${plural(r.versions_purged, "version", "versions")}, ` +
          `${plural(r.keys_purged, "key", "keys")} and ${plural(r.payloads_purged, "payload", "payloads")} purged.\n`,
      );
    return 0;
  } finally {
    await store.close();
  }
}
