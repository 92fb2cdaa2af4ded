#!/usr/bin/env node
// Runs every test/**/*.test.ts in its own process (tape via tsx), two at a time,
// sums the TAP counts and ends with the line "N passed, N failed".
//
// Services: a test file needs Redis when its text names REDIS_URL / SVC_TEST_REDIS_URL or
// carries the line `// test-needs: redis`; PostgreSQL likewise with PG_URL /
// SVC_TEST_PG_URL or `// test-needs: postgres`. Before any file runs, the runner connects
// once to each service the selected files need (SVC_TEST_REDIS_URL, default
// redis://127.0.0.1:6379; SVC_TEST_PG_URL, default postgres://postgres@127.0.0.1:5432/postgres).
// When one does not answer it starts a throwaway server on a free loopback port if the
// binary is installed (redis-server; initdb + postgres when not running as root), passes
// its URL to the tests and stops it at the end; otherwise it ends at once with one
// sentence saying what is missing and how to start it.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { cpus, tmpdir } from "node:os";
import net from "node:net";

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

const files = walk(join(root, "test")).filter((f) => filters.length === 0 || filters.some((s) => relative(root, f).includes(s)));
const SERVICES = {
  redis: {
    env: "SVC_TEST_REDIS_URL",
    fallback: "redis://127.0.0.1:6379",
    needed: /\bREDIS_URL\b|\bSVC_TEST_REDIS_URL\b|^\/\/ test-needs:.*\bredis\b/m,
    howto: "start one with `redis-server` (apt-get install redis-server) or point SVC_TEST_REDIS_URL at one",
  },
  postgres: {
    env: "SVC_TEST_PG_URL",
    fallback: "postgres://postgres@127.0.0.1:5432/postgres",
    needed: /\bPG_URL\b|\bSVC_TEST_PG_URL\b|^\/\/ test-needs:.*\bpostgres\b/m,
    howto: "start one (trust auth for user postgres, e.g. `pg_ctl -D DIR start`) or point SVC_TEST_PG_URL at one",
  },
};

/** Resolves true when a TCP connection to the URL's host and port opens within 2 s. */
function reachable(url) {
  const u = new URL(url);
  const port = Number(u.port) || (u.protocol.startsWith("redis") ? 6379 : 5432);
  return new Promise((resolve) => {
    const sock = net.connect({ host: u.hostname || "127.0.0.1", port });
    const done = (ok) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(2000, () => done(false));
    sock.once("connect", () => done(true));
    sock.once("error", () => done(false));
  });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const onPath = (bin) => spawnSync("sh", ["-c", `command -v ${bin}`], { stdio: "ignore" }).status === 0;
const throwaway = []; // { child, dir } of servers this run started, stopped at exit

async function waitFor(url, child, what) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) break;
    if (await reachable(url)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`the throwaway ${what} did not start`);
}

async function startRedis() {
  const port = await freePort();
  const child = spawn("redis-server", ["--bind", "127.0.0.1", "--port", String(port), "--save", "", "--appendonly", "no"], { stdio: "ignore" });
  throwaway.push({ child });
  const url = `redis://127.0.0.1:${port}`;
  await waitFor(url, child, "redis-server");
  return url;
}

async function startPostgres() {
  const dir = mkdtempSync(join(tmpdir(), "svc-test-pg-"));
  const init = spawnSync("initdb", ["-D", join(dir, "data"), "-U", "postgres", "-A", "trust"], { stdio: "ignore" });
  if (init.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error("initdb failed");
  }
  const port = await freePort();
  const child = spawn("postgres", ["-D", join(dir, "data"), "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"], {
    stdio: "ignore",
  });
  throwaway.push({ child, dir });
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  await waitFor(url, child, "PostgreSQL");
  return url;
}

async function stopThrowaways() {
  await Promise.all(
    throwaway.map(async ({ child, dir }) => {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
      if (dir) rmSync(dir, { recursive: true, force: true });
    }),
  );
}

/** Makes every service the selected files need reachable, or ends the run with one sentence. */
async function ensureServices(selected) {
  const env = {};
  for (const [name, svc] of Object.entries(SERVICES)) {
    const users = selected.filter((f) => svc.needed.test(readFileSync(f, "utf8")));
    if (users.length === 0) continue;
    const url = process.env[svc.env] || svc.fallback;
    if (await reachable(url)) {
      env[svc.env] = url;
      continue;
    }
    const canStart = name === "redis" ? onPath("redis-server") : onPath("initdb") && onPath("postgres") && process.getuid?.() !== 0;
    if (canStart) {
      try {
        env[svc.env] = name === "redis" ? await startRedis() : await startPostgres();
        process.stdout.write(`# ${name}: nothing answers at ${url}; started a throwaway one at ${env[svc.env]}\n`);
        continue;
      } catch {
        /* fall through to the refusal */
      }
    }
    const u = new URL(url);
    await stopThrowaways();
    process.stdout.write(`${users.length} test file(s) need ${name === "redis" ? "Redis" : "PostgreSQL"} and nothing answers at ${u.host}: ${svc.howto}.\n`);
    process.stdout.write("0 passed, 1 failed\n");
    process.exit(1);
  }
  return env;
}

const serviceEnv = await ensureServices(files);

// SVC_TEST_COVERAGE=1 (CI sets it): every process the tests start, servers and CLIs included,
// writes V8 coverage into one directory; c8 maps it to the TypeScript sources at the end and the
// run of the whole suite fails when covered lines fall below the floor in .c8rc.json.
const coverageDir = process.env.SVC_TEST_COVERAGE === "1" ? mkdtempSync(join(tmpdir(), "svc-cov-")) : null;
if (coverageDir) serviceEnv.NODE_V8_COVERAGE = coverageDir;
const jobs = Math.max(1, Math.min(Number(process.env.SVC_TEST_JOBS) || 2, cpus().length));
const perFileTimeoutMs = Number(process.env.SVC_TEST_TIMEOUT_MS) || 300_000;

let passed = 0;
let failed = 0;
let skipped = 0;
const broken = [];

/** A file may ask for a longer limit with a line `// test-timeout-s: N` (a clone and npm ci, say). */
function timeoutOf(file) {
  const m = /^\/\/ test-timeout-s: (\d+)\s*$/m.exec(readFileSync(file, "utf8"));
  return m ? Math.max(perFileTimeoutMs, Number(m[1]) * 1000) : perFileTimeoutMs;
}

function runOne(file) {
  return new Promise((resolve) => {
    const rel = relative(root, file);
    const limitMs = timeoutOf(file);
    const t0 = performance.now();
    const child = spawn(process.execPath, ["--import", "tsx", file], {
      cwd: root,
      env: { ...process.env, ...serviceEnv, NODE_ENV: "test" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const timer = setTimeout(() => {
      out += `\n# ${rel}: killed after ${limitMs} ms\n`;
      child.kill("SIGKILL");
    }, limitMs);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      const seconds = ((performance.now() - t0) / 1000).toFixed(1);
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
        process.stdout.write(`\n=== FAIL ${rel} (exit ${code ?? signal}, ${seconds} s)\n${out}\n`);
      } else {
        process.stdout.write(`ok   ${rel}  (${pass - skip} passed${skip ? `, ${skip} skipped` : ""}, ${seconds} s)\n`);
      }
      resolve();
    });
  });
}

const started = performance.now();
const queue = [...files];
await Promise.all(
  Array.from({ length: jobs }, async () => {
    while (queue.length) await runOne(queue.shift());
  }),
);
await stopThrowaways();
process.stdout.write(`# ${files.length} files in ${((performance.now() - started) / 1000).toFixed(0)} s\n`);
if (coverageDir) {
  const reportStarted = performance.now();
  const c8 = join(root, "node_modules", "c8", "bin", "c8.js");
  // the floor is for the whole suite; a run of some files only prints what it covered
  const check = filters.length === 0 ? ["--check-coverage"] : [];
  const r = spawnSync(process.execPath, [c8, "report", "--temp-directory", coverageDir, "--reporter", "text-summary", ...check], {
    cwd: root,
    encoding: "utf8",
  });
  process.stdout.write(
    `\ncoverage of lib/, server/ and bin/ (floor in .c8rc.json), reported in ${((performance.now() - reportStarted) / 1000).toFixed(0)} s:${r.stdout}${r.stderr}`,
  );
  if (r.status !== 0) {
    failed += 1;
    broken.push("coverage below the floor in .c8rc.json");
  }
  rmSync(coverageDir, { recursive: true, force: true });
}
if (broken.length) process.stdout.write(`\nfailing files:\n  ${broken.join("\n  ")}\n`);
process.stdout.write(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}\n`);
process.exit(failed > 0 || files.length === 0 ? 1 : 0);
