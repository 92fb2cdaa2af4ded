// test-timeout-s: 1800
// A user's first contact: the committed HEAD cloned into an empty temporary directory (nothing
// beside it, so no file outside the repository can be read), `npm ci` (which builds the native
// addon and dist/), then a handful of test files that need no service, run by the project's
// own runner inside the clone. npm ci takes about 75 s of CPU; on a busy machine several
// minutes, hence the long limit above.
import test from "tape";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
// no Redis, no PostgreSQL, no GPU; together they touch the fixtures, the addon, the CLI and .gitignore
const FILES = ["test/provenance/signer.test.ts", "test/npy/npy.test.ts", "test/tt/compress.test.ts", "test/cli/args.test.ts", "test/scripts/gitignore.test.ts"];

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("close", (code) => resolve({ code, out }));
  });
}

test("a fresh clone installs with npm ci and its service-free tests pass, with nothing beside it", async (t) => {
  if (!existsSync(join(root, ".git"))) {
    t.skip("not a git checkout: nothing to clone");
    return;
  }
  const head = spawnSync("git", ["rev-parse", "HEAD"], { cwd: root, encoding: "utf8" }).stdout.trim();
  t.match(head, /^[0-9a-f]{40}$/, `HEAD is ${head.slice(0, 12)}`);
  const dir = await mkdtemp(join(tmpdir(), "svc-clone-"));
  try {
    const repo = join(dir, "svc-tensor");
    const clone = await run("git", ["clone", "--quiet", "--no-hardlinks", root, repo], dir);
    t.equal(clone.code, 0, `git clone ${clone.out.trim()}`);
    const co = await run("git", ["checkout", "--quiet", "--detach", head], repo);
    t.equal(co.code, 0, `checked out HEAD ${co.out.trim()}`);
    t.deepEqual(readdirSync(dir), ["svc-tensor"], "nothing beside the clone");
    const outside = spawnSync("git", ["grep", "-n", "-I", "-E", "\\.\\./shared|shared/spec|spec/api\\.md", "--", ".", ":!test/scripts/clone.test.ts"], {
      cwd: repo,
      encoding: "utf8",
    });
    t.equal(outside.stdout, "", "no tracked file names a path outside the repository");

    // npm ci as a user runs it: the install script builds the addon, prepare builds dist/
    const env = { ...process.env };
    for (const k of Object.keys(env)) if (k.startsWith("npm_")) delete env[k]; // not the outer npm's settings
    delete env.SVC_TEST_COVERAGE; // the outer run's coverage is of this checkout, not of the clone
    delete env.NODE_V8_COVERAGE;
    const ci = await run("npm", ["ci", "--prefer-offline", "--no-audit", "--no-fund"], repo, env);
    t.equal(ci.code, 0, ci.code === 0 ? "npm ci exits 0" : `npm ci failed:\n${ci.out.slice(-4000)}`);
    if (ci.code !== 0) return;
    t.ok(existsSync(join(repo, "build", "Release", "svc_tensor.node")), "the native addon was built");
    t.ok(existsSync(join(repo, "dist", "bin", "svc.js")), "dist/ was built");

    const r = await run(process.execPath, ["scripts/test.mjs", ...FILES], repo, { ...env, SVC_TEST_JOBS: "1" });
    const summary = /^(\d+) passed, (\d+) failed/m.exec(r.out);
    t.equal(r.code, 0, r.code === 0 ? "the test files pass in the clone" : `tests failed in the clone:\n${r.out.slice(-6000)}`);
    t.ok(summary && Number(summary[1]) > 100 && summary[2] === "0", `summary: ${summary?.[0]}`);
    for (const f of FILES) t.match(r.out, new RegExp(`^ok\\s+${f.replace(/[.]/g, "\\.")}`, "m"), `${f} ran and passed`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
