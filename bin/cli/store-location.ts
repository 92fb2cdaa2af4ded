// The store a maintenance command works on: an LMDB store directory or a PostgreSQL URL, named
// in output without a password; a directory with no store in it is refused rather than made.
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
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
