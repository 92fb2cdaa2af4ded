// `npm run bench` on a machine without a CUDA device skips the GPU benchmark with a sentence
// and exits 0, instead of failing; an unknown benchmark name is still a usage error.
import test from "tape";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { backend } from "../../lib/tt.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const bench = (args: string[]) => spawnSync(process.execPath, ["--import", "tsx", "bench/run.ts", ...args], { cwd: root, encoding: "utf8", timeout: 120_000 });

test("bench/run.ts gpu without a device: one sentence, exit 0", (t) => {
  const b = backend();
  if (b.cuda_device !== null) {
    t.skip(`a CUDA device is present (${b.cuda_device}): the GPU benchmark runs instead`);
    t.end();
    return;
  }
  const r = bench(["gpu"]);
  t.equal(r.status, 0, "exit 0");
  t.equal(r.stdout, `bench/gpu skipped: no CUDA device on this machine (${b.reason}).\n`, r.stdout.trim());
  t.end();
});

test("bench/run.ts with an unknown name: exit 2 with the list", (t) => {
  const r = bench(["nonesuch"]);
  t.equal(r.status, 2, "exit 2");
  t.match(r.stderr, /^Unknown benchmark nonesuch; available: .*gpu.*\.\n$/, r.stderr.trim());
  t.end();
});
