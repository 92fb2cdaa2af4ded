// Whether the compiled package in dist/ is current: tests that run what users run (the CLIs as
// npm links them, the documentation's blocks) use it when it is, so that an edit to a source
// is never tested through a stale build.
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

/** The newest modification time of the TypeScript under bin/, server/ and lib/ (what dist/ is built from). */
export function newestSourceMs(): number {
  const newest = (dir: string): number =>
    readdirSync(dir, { withFileTypes: true }).reduce((m, e) => {
      const p = join(dir, e.name);
      return Math.max(m, e.isDirectory() ? newest(p) : e.name.endsWith(".ts") ? statSync(p).mtimeMs : 0);
    }, 0);
  return Math.max(newest(join(root, "lib")), newest(join(root, "bin")), newest(join(root, "server")));
}

/** Whether `file` (relative to the repository, under dist/) exists and is no older than every source. */
export function distIsCurrent(file: string, newestSource = newestSourceMs()): boolean {
  const built = join(root, file);
  return existsSync(built) && statSync(built).mtimeMs >= newestSource;
}
