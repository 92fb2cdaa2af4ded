// Runs the benchmarks named on the command line (default: all), each in its own process:
//   npm run bench -- tt store
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const here = dirname(fileURLToPath(import.meta.url));
const all = readdirSync(here)
  .filter((f) => f.endsWith(".ts") && f !== "run.ts")
  .map((f) => f.slice(0, -3))
  .sort();
const wanted = process.argv.slice(2);
const unknown = wanted.filter((w) => !all.includes(w));
if (unknown.length) {
  console.error(`Unknown benchmark ${unknown.join(", ")}; available: ${all.join(", ")}.`);
  process.exit(2);
}
let failed = 0;
for (const name of wanted.length ? wanted : all) {
  if (name === "gpu") {
    // the GPU benchmark measures a CUDA device; without one it is skipped here, not failed
    const { backend } = await import("../lib/tt.js");
    const b = backend();
    if (b.cuda_device === null) {
      console.log(`bench/gpu skipped: no CUDA device on this machine (${b.reason}).`);
      continue;
    }
  }
  const r = spawnSync(process.execPath, ["--import", "tsx", join(here, `${name}.ts`)], { stdio: "inherit" });
  if (r.status !== 0) failed++;
}
process.exit(failed ? 1 : 0);
