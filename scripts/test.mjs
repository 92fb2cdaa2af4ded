#!/usr/bin/env node
// Runs every test/**/*.test.ts in its own process (tape via tsx), two at a time,
// sums the TAP counts and ends with the line "N passed, N failed".
import { spawn } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { cpus } from "node:os";

const root = new URL("..", import.meta.url).pathname;
const filters = process.argv.slice(2);

function walk(dir) {
  const out = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...walk(p));
    else if (name.endsWith(".test.ts")) out.push(p);
  }
  return out;
}

const files = walk(join(root, "test")).filter(
  (f) => filters.length === 0 || filters.some((s) => relative(root, f).includes(s)),
);
const jobs = Math.max(1, Math.min(Number(process.env.SVC_TEST_JOBS) || 2, cpus().length));
const perFileTimeoutMs = Number(process.env.SVC_TEST_TIMEOUT_MS) || 300_000;

let passed = 0;
let failed = 0;
let skipped = 0;
const broken = [];

function runOne(file) {
  return new Promise((resolve) => {
    const rel = relative(root, file);
    const child = spawn(process.execPath, ["--import", "tsx", file], {
      cwd: root,
      env: { ...process.env, NODE_ENV: "test" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const timer = setTimeout(() => {
      out += `\n# ${rel}: killed after ${perFileTimeoutMs} ms\n`;
      child.kill("SIGKILL");
    }, perFileTimeoutMs);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      const pass = Number(/^# pass\s+(\d+)/m.exec(out)?.[1] ?? 0);
      const fail = Number(/^# fail\s+(\d+)/m.exec(out)?.[1] ?? 0);
      const skip = (out.match(/^ok \d+ .*# SKIP/gm) ?? []).length;
      passed += pass - skip;
      skipped += skip;
      failed += fail;
      const bad = code !== 0 || fail > 0 || pass === 0;
      if (bad) {
        if (fail === 0) failed += 1; // a crash, a timeout or a file that ran nothing counts as a failure
        broken.push(rel);
        process.stdout.write(`\n=== FAIL ${rel} (exit ${code ?? signal})\n${out}\n`);
      } else {
        process.stdout.write(`ok   ${rel}  (${pass - skip} passed${skip ? `, ${skip} skipped` : ""})\n`);
      }
      resolve();
    });
  });
}

const queue = [...files];
await Promise.all(
  Array.from({ length: jobs }, async () => {
    while (queue.length) await runOne(queue.shift());
  }),
);
if (broken.length) process.stdout.write(`\nfailing files:\n  ${broken.join("\n  ")}\n`);
process.stdout.write(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}\n`);
process.exit(failed > 0 || files.length === 0 ? 1 : 0);
