// Batched log lines (server/http/log-batch.ts): the lines of one turn reach the writer in one
// call and in order, 64 KiB of lines go at once, and a process that exits (normally or with
// process.exit right after logging) loses none.
import test from "tape";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { batchLines } from "../../server/http/log-batch.js";

test("log batch: one write per turn, in order", async (t) => {
  const writes: string[] = [];
  const line = batchLines((s) => writes.push(s));
  line("a\n");
  line("b\n");
  line("c\n");
  t.equal(writes.length, 0, "nothing written within the turn");
  await new Promise((r) => setImmediate(r));
  t.deepEqual(writes, ["a\nb\nc\n"], "one write with the three lines in order");
  line("d\n");
  await new Promise((r) => setImmediate(r));
  t.deepEqual(writes, ["a\nb\nc\n", "d\n"], "the next turn's line in a write of its own");
  await new Promise((r) => setImmediate(r));
  t.equal(writes.length, 2, "no empty write when nothing was logged");
  const big = "x".repeat(40 * 1024) + "\n";
  line(big);
  line(big);
  t.equal(writes.length, 3, "past 64 KiB the lines are written at once");
  t.equal(writes[2], big + big, "both lines");
  t.end();
});

test("log batch: no line lost at exit", (t) => {
  const mod = fileURLToPath(new URL("../../server/http/log-batch.ts", import.meta.url));
  const script = `import { stdoutLines } from ${JSON.stringify(mod)};
const line = stdoutLines();
for (let i = 0; i < 1000; i++) line(JSON.stringify({ i }) + "\\n");
if (process.argv.includes("--exit")) process.exit(3);`;
  for (const how of ["--exit", "--normal"]) {
    const r = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script, "--", how], { encoding: "utf8", timeout: 120_000 });
    const lines = r.stdout.trim().split("\n");
    t.equal(lines.length, 1000, `${how}: 1000 lines`);
    t.equal(lines[999], JSON.stringify({ i: 999 }), `${how}: the last line whole`);
  }
  t.end();
});
