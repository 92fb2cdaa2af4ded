// scripts/test.mjs checks the services the selected files need before running any:
// with nothing on the Redis URL it starts a throwaway redis-server when the binary is
// installed, and without the binary it ends at once with one sentence.
import test from "tape";
import { spawn } from "node:child_process";
import { mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const dead = "redis://127.0.0.1:1"; // port 1: nothing listens there

function run(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; out: string; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["scripts/test.mjs", ...args], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("close", (code) => resolve({ code, out, ms: Date.now() - t0 }));
  });
}

test("no Redis and no redis-server binary: one sentence and exit 1 before any file runs", async (t) => {
  const bin = await mkdtemp(join(tmpdir(), "svc-runner-bin-"));
  try {
    await symlink(process.execPath, join(bin, "node")); // a PATH with node and nothing else
    const r = await run(["test/gateway/resp.test.ts", "test/npy"], { ...process.env, PATH: bin, SVC_TEST_REDIS_URL: dead, SVC_TEST_JOBS: "1" });
    t.equal(r.code, 1, "exit 1");
    t.match(
      r.out,
      /^1 test file\(s\) need Redis and nothing answers at 127\.0\.0\.1:1: start one with `redis-server`/m,
      "names what is missing and how to start it",
    );
    t.doesNotMatch(r.out, /^ok\s/m, "no test file ran");
    t.ok(r.ms < 20_000, `ended at once (${r.ms} ms; a hung Redis test would take minutes)`);
  } finally {
    await rm(bin, { recursive: true, force: true });
  }
});

test("files that need no service run without any check", async (t) => {
  const bin = await mkdtemp(join(tmpdir(), "svc-runner-bin-"));
  try {
    await symlink(process.execPath, join(bin, "node"));
    const r = await run(["test/npy"], { ...process.env, PATH: bin, SVC_TEST_REDIS_URL: dead, SVC_TEST_JOBS: "1" });
    t.equal(r.code, 0, "exit 0");
    t.match(r.out, /^ok\s+test\/npy\/npy\.test\.ts/m, "the file ran");
  } finally {
    await rm(bin, { recursive: true, force: true });
  }
});

test("nothing on the Redis URL but redis-server installed: a throwaway server on a free port serves the run", async (t) => {
  const r = await run(["test/gateway/resp.test.ts"], { ...process.env, SVC_TEST_REDIS_URL: dead, SVC_TEST_JOBS: "1" });
  const m = /^# redis: nothing answers at redis:\/\/127\.0\.0\.1:1; started a throwaway one at (redis:\/\/127\.0\.0\.1:(\d+))$/m.exec(r.out);
  if (!m) {
    t.fail(`no throwaway redis-server (is redis-server installed?):\n${r.out}`);
    return;
  }
  t.notEqual(m[2], "1", "on another port");
  t.match(r.out, /^ok\s+test\/gateway\/resp\.test\.ts/m, "the Redis test file passed against it");
  t.equal(r.code, 0, "exit 0");
  // stopped at the end: its port no longer answers
  const net = await import("node:net");
  const open = await new Promise<boolean>((resolve) => {
    const s = net.connect({ host: "127.0.0.1", port: Number(m[2]) });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
  t.notOk(open, "the throwaway server was stopped");
});
