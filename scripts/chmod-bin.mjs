// tsc writes dist/bin/*.js without the executable bit that npx needs for the package's bins.
import { readFileSync, chmodSync, existsSync } from "node:fs";

const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
for (const rel of Object.values(pkg.bin ?? {})) {
  const p = new URL(`../${rel}`, import.meta.url);
  if (existsSync(p)) chmodSync(p, 0o755);
}
