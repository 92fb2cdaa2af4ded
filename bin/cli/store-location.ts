// The store a maintenance command works on: an LMDB store directory or a PostgreSQL URL, named
// in output without a password; a directory with no store in it is refused rather than made.
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { ValidationError } from "../../lib/errors.js";
import { UsageError } from "./common.js";

export const isPg = (s: string): boolean => /^postgres(ql)?:\/\//.test(s);

/** Where a URL or directory points, for output (never a password). */
export function describe(s: string): string {
  if (!isPg(s)) return s;
  try {
    const u = new URL(s);
    return `postgres://${u.hostname}:${u.port || 5432}${u.pathname}`;
  } catch {
    return "the PostgreSQL URL";
  }
}

/** A UsageError unless `dir` is an LMDB store directory (data.mdb in it). */
export function requireStoreDir(dir: string): void {
  if (!(existsSync(dir) && statSync(dir).isDirectory() && existsSync(join(dir, "data.mdb"))))
    throw new UsageError(`${dir} is not a store directory (no data.mdb in it).`);
}

/**
 * A UsageError unless the PostgreSQL database at `url` holds a store (its svc_schema table in
 * the URL's search path): a command that maintains a store never creates one by mistake.
 */
export async function requirePgStore(url: string): Promise<void> {
  const pg = (await import("pg")).default;
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  c.on("error", () => undefined); // a connection ended by the server is this call's error
  try {
    await c.connect();
  } catch (e) {
    throw new ValidationError(`Cannot connect to PostgreSQL at ${describe(url)}: ${(e as Error).message}.`, "store");
  }
  try {
    const r = await c.query<{ ok: boolean }>("SELECT to_regclass('svc_schema') IS NOT NULL AS ok");
    if (r.rows[0]?.ok !== true) throw new UsageError(`${describe(url)} holds no store (no svc_schema table where it points).`);
  } finally {
    await c.end().catch(() => undefined);
  }
}
