// Why a recursive mkdir failed. Node's recursive mkdir reports ENOENT when the directory it
// tried to create could not be made for another reason (a read-only file system, no
// permission), since it then looks for the path and finds nothing.
import { mkdirSync, rmdirSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";

/**
 * The error that creating the first missing directory of `path` on its own gives, or `e` when
 * `e` is not a recursive mkdir's ENOENT or the cause cannot be found that way. A directory made
 * while looking is removed again.
 */
export function mkdirCause(path: string, e: unknown): unknown {
  if ((e as NodeJS.ErrnoException | null)?.code !== "ENOENT") return e;
  let missing = resolve(path);
  for (let up = dirname(missing); up !== missing; missing = up, up = dirname(up)) {
    const st = statSync(up, { throwIfNoEntry: false });
    if (st === undefined) continue;
    if (!st.isDirectory()) return e;
    try {
      mkdirSync(missing);
      rmdirSync(missing);
      return e;
    } catch (cause) {
      return cause;
    }
  }
  return e;
}
