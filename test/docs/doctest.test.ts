// Doc tests: every code block of README.md and docs/*.md that is meant to run is extracted and
// run, so that no example can rot.
//
// Which blocks run (the convention for anyone writing docs):
//   ```ts / ```typescript / ```js / ```javascript   run, always, unless an HTML comment on the line
//        just before the fence opts out with a reason:  <!-- doctest: skip (why it cannot run) -->
//   ```sh / ```bash   run only when the line before the fence says so:
//        <!-- doctest: run -->      a self-contained script
//        <!-- doctest: svc-up -->   a script run against a fresh `svc up` (see below)
//   any other fence (json, text, none)   never runs.
// A TS/JS block may also be marked <!-- doctest: svc-up -->. After the mode, `; expect: TEXT`
// (repeatable) names text the block's output (standard output or error) must contain.
//
// How they run: each block in its own fresh temporary directory, as its own process, with a
// time limit. TS/JS blocks import the built package ("svc-tensor" resolves to this checkout's
// dist/, rebuilt first when lib/ is newer); a block that imports "./server/..." or "./lib/..."
// (repository-internal examples) gets those paths resolved against the checkout's sources.
// The environment keeps every server on free ports and every file inside the temporary
// directory (SVC_ENGINE_PORT=0, SVC_GATE_PORT=0, one service key in SVC_GATE_ENGINE_SERVICE_KEY and
// SVC_ENGINE_API_KEYS, the audit log in the directory).
// Shell blocks run under `bash -euo pipefail` where `curl` fails on an HTTP error status.
// svc-up blocks: `svc up --port 0 --engine-port 0` is started in the temporary directory (so
// ./svc-data/service.key exists as the README says), every http://127.0.0.1:8080 in the block
// is replaced by the gateway's real address, and SVC_API_KEY holds the key of a tenant with
// namespace "default" (for blocks that need one without creating it), SVC_GATE_URL names the
// gateway for the CLI, and `npx svc` runs this checkout's built CLI (node_modules/.bin/svc).
//
// The quick start (SESSION: README.md, then the pages it sends a new user to first) runs as one
// session instead, in reading order, as a user at one terminal would run it: one directory,
// one `svc up` started in it before the first block (as the README's first lines say), each
// shell block starting in the directory and with the exported variables the block before it
// left (a `cd` or an `export` carries on), TS/JS blocks run in that directory with those
// variables, and every block must do what it says in the state the blocks before it left: a
// tenant created twice, a key overwritten, a file missing fails the session.
import test from "tape";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { distIsCurrent } from "../dist.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const BLOCK_TIMEOUT_MS = 120_000;

interface Block {
  file: string;
  line: number;
  lang: string;
  code: string;
  mode: "run" | "svc-up" | "skip" | "none";
  expect: string[];
  reason?: string;
}

/** Every fenced block of a markdown file with the doctest marker on the line before it. */
export function extractBlocks(file: string, text: string): Block[] {
  const lines = text.split("\n");
  const out: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = /^```(\S*)\s*$/.exec(lines[i]!);
    if (!m) continue;
    const lang = m[1]!.toLowerCase();
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    const marker = /^<!--\s*doctest:\s*(.*?)\s*-->\s*$/.exec(lines[start - 1] ?? "");
    const block: Block = { file, line: start + 1, lang, code: body.join("\n") + "\n", mode: "none", expect: [] };
    const isScript = ["ts", "typescript", "js", "javascript"].includes(lang);
    if (marker) {
      const [mode, ...opts] = marker[1]!.split(";").map((s) => s.trim());
      const skip = /^skip\s*\((.+)\)$/.exec(mode!);
      if (skip) {
        block.mode = "skip";
        block.reason = skip[1];
      } else if (mode === "run" || mode === "svc-up") block.mode = mode;
      else throw new Error(`${file}:${start}: unknown doctest marker '${marker[1]}' (run, svc-up or skip (reason))`);
      for (const o of opts) {
        const e = /^expect:\s*(.+)$/.exec(o);
        if (!e) throw new Error(`${file}:${start}: unknown doctest option '${o}'`);
        block.expect.push(e[1]!);
      }
    } else if (isScript) {
      block.mode = "run";
    }
    if (block.mode !== "none" && block.mode !== "skip" && !isScript && !["sh", "bash"].includes(lang)) {
      throw new Error(`${file}:${start}: a doctest marker on a \`\`\`${lang} block, which cannot run`);
    }
    out.push(block);
  }
  return out;
}

/** The quick start, in the order a new user reads it: run as one session (see above). */
const SESSION = ["README.md", "docs/cli.md", "docs/client.md", "docs/store.md"];

function docFiles(): string[] {
  const docs = readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md"))
    .sort()
    .map((f) => join("docs", f));
  return ["README.md", ...docs];
}

/** Rebuilds dist/ when a source file of the package is newer than it (the blocks run the built package). */
function ensureBuilt(): void {
  if (distIsCurrent("dist/lib/index.js")) return;
  const r = spawnSync(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"], { cwd: root, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`building dist/ failed:\n${r.stdout}${r.stderr}`);
}

interface Sandbox {
  dir: string;
  env: NodeJS.ProcessEnv;
}

async function sandbox(): Promise<Sandbox> {
  const dir = await mkdtemp(join(tmpdir(), "svc-doctest-"));
  await mkdir(join(dir, "node_modules"));
  // the package as a user has it, plus tsx to run TypeScript blocks
  await symlink(root, join(dir, "node_modules", "svc-tensor"), "dir");
  await symlink(join(root, "node_modules", "tsx"), join(dir, "node_modules", "tsx"), "dir");
  // `npx svc` finds the package's bin here, as in a project that installed svc-tensor (never a download)
  await mkdir(join(dir, "node_modules", ".bin"));
  // a launcher rather than a link: a rebuilt dist/bin/svc.js may lack its executable bit
  await writeFile(join(dir, "node_modules", ".bin", "svc"), `#!/bin/sh\nexec "${process.execPath}" "${join(root, "dist", "bin", "svc.js")}" "$@"\n`, {
    mode: 0o755,
  });
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) if (/^SVC_(ENGINE|GATE|API|PROVENANCE)_/.test(k) || k === "SVC_API_KEY") delete env[k];
  Object.assign(env, {
    SVC_ENGINE_PORT: "0",
    SVC_GATE_PORT: "0",
    SVC_GATE_HOST: "127.0.0.1",
    SVC_ENGINE_LOG_LEVEL: "warn",
    SVC_GATE_ENGINE_SERVICE_KEY: "d".repeat(64),
    SVC_ENGINE_API_KEYS: "d".repeat(64),
    SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
  });
  return { dir, env };
}

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const timer = setTimeout(() => {
      err += `\n(killed after ${BLOCK_TIMEOUT_MS} ms)`;
      child.kill("SIGKILL");
    }, BLOCK_TIMEOUT_MS);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

interface Up {
  child: ChildProcess;
  gateway: string;
  apiKey: string;
  exited: Promise<unknown>;
}

async function startUp(sb: Sandbox): Promise<Up> {
  const env = { ...sb.env };
  delete env.SVC_GATE_ENGINE_SERVICE_KEY; // svc up creates and saves its own, as for a user
  delete env.SVC_GATE_HOST;
  const child = spawn(process.execPath, [join(root, "dist/bin/svc.js"), "up", "--port", "0", "--engine-port", "0"], {
    cwd: sb.dir,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise((r) => child.on("exit", r));
  let out = "";
  let err = "";
  child.stdout!.on("data", (d) => (out += d));
  child.stderr!.on("data", (d) => (err += d));
  const deadline = Date.now() + 120_000;
  while (!/^Ready\./m.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`svc up did not start:\n${out}\n${err}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const gateway = /^gateway: (\S+)$/m.exec(out)![1]!;
  const key = readFileSync(join(sb.dir, "svc-data", "service.key"), "utf8").trim();
  const res = await fetch(`${gateway}/gate/onboard/create`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ tenant_id: "doctest", namespaces: ["default"] }),
  });
  if (res.status !== 201) throw new Error(`creating the doctest tenant answered ${res.status}`);
  const { api_key } = (await res.json()) as { api_key: string };
  return { child, gateway, apiKey: api_key, exited };
}

async function runBlock(b: Block): Promise<{ ok: boolean; why: string }> {
  const sb = await sandbox();
  let up: Up | null = null;
  try {
    let code = b.code;
    const env = { ...sb.env };
    if (b.mode === "svc-up") {
      up = await startUp(sb);
      code = code.replaceAll("http://127.0.0.1:8080", up.gateway);
      env.SVC_API_KEY = up.apiKey;
      env.SVC_GATE_URL = up.gateway;
      delete env.SVC_GATE_ENGINE_SERVICE_KEY;
    }
    let r;
    if (["sh", "bash"].includes(b.lang)) {
      const script = `curl() { command curl --fail-with-body "$@"; }\n${code}`;
      await writeFile(join(sb.dir, "block.sh"), script);
      r = await run("bash", ["-euo", "pipefail", "block.sh"], sb.dir, env);
    } else {
      // repository-internal examples import the checkout's sources
      code = code.replace(/(from\s+["'])\.\/((?:server|lib|bin)\/[^"']+)(["'])/g, (_m, a, p, c) => `${a}${pathToFileURL(join(root, p)).href}${c}`);
      const file = join(sb.dir, b.lang.startsWith("j") ? "block.mjs" : "block.mts");
      await writeFile(file, code);
      r = await run(process.execPath, ["--import", "tsx", file], sb.dir, env);
    }
    if (r.code !== 0) return { ok: false, why: `exit ${r.code}\n--- stdout\n${r.out}\n--- stderr\n${r.err}` };
    const missing = b.expect.filter((e) => !r.out.includes(e) && !r.err.includes(e));
    if (missing.length)
      return { ok: false, why: `the output lacks ${missing.map((m) => JSON.stringify(m)).join(", ")}\n--- stdout\n${r.out}\n--- stderr\n${r.err}` };
    return { ok: true, why: "" };
  } finally {
    if (up) {
      up.child.kill("SIGINT");
      await up.exited;
    }
    await rm(sb.dir, { recursive: true, force: true });
  }
}

test("doctest markers: every block parses; TS/JS blocks run unless skipped with a reason", (t) => {
  const bad = `<!-- doctest: later -->\n\`\`\`ts\nx\n\`\`\`\n`;
  t.throws(() => extractBlocks("x.md", bad), /unknown doctest marker 'later'/, "an unknown marker is an error");
  const blocks = extractBlocks(
    "x.md",
    "```ts\na\n```\n<!-- doctest: skip (needs a GPU) -->\n```ts\nb\n```\n```sh\nc\n```\n<!-- doctest: svc-up; expect: ok -->\n```sh\nd\n```\n```json\n{}\n```\n",
  );
  t.deepEqual(
    blocks.map((b) => [b.lang, b.mode, b.reason ?? null, b.expect]),
    [
      ["ts", "run", null, []],
      ["ts", "skip", "needs a GPU", []],
      ["sh", "none", null, []],
      ["sh", "svc-up", null, ["ok"]],
      ["json", "none", null, []],
    ],
    "modes, reasons and expectations",
  );
  t.throws(() => extractBlocks("x.md", "<!-- doctest: run -->\n```json\n{}\n```\n"), /cannot run/, "a marker on a json block is an error");
  t.end();
});

const all = docFiles().flatMap((f) => extractBlocks(f, readFileSync(join(root, f), "utf8")));

test("doc blocks: the README's in-process example and its curl walk-through are among the blocks that run", (t) => {
  const readme = all.filter((b) => b.file === "README.md");
  t.ok(
    readme.some((b) => b.lang === "ts" && b.mode === "run"),
    "README's TypeScript example runs",
  );
  t.ok(
    readme.some((b) => b.lang === "sh" && b.mode === "svc-up" && b.code.includes("/v1/query/topk")),
    "README's curl block runs against svc up",
  );
  for (const b of all.filter((x) => x.mode === "skip")) t.ok(b.reason!.length >= 8, `${b.file}:${b.line} skipped: ${b.reason}`);
  t.end();
});

test("doc blocks run", async (t) => {
  ensureBuilt();
  for (const b of all.filter((x) => (x.mode === "run" || x.mode === "svc-up") && !SESSION.includes(x.file))) {
    const r = await runBlock(b);
    t.ok(r.ok, `${b.file}:${b.line} (${b.lang}${b.mode === "svc-up" ? ", against svc up" : ""})${r.ok ? "" : `\n${r.why}`}`);
  }
});

/** The variables a shell block left exported (`env -0` output), without the shell's own. */
function parseEnv(raw: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const entry of raw.split("\0")) {
    const i = entry.indexOf("=");
    if (i > 0) env[entry.slice(0, i)] = entry.slice(i + 1);
  }
  for (const k of ["_", "SHLVL", "OLDPWD"]) delete env[k];
  return env;
}

test("doc blocks: the quick start, in reading order, as one session at one terminal", async (t) => {
  ensureBuilt();
  const blocks = SESSION.flatMap((f) => all.filter((b) => b.file === f && (b.mode === "run" || b.mode === "svc-up")));
  t.ok(blocks.some((b) => b.file === "docs/cli.md") && blocks.some((b) => b.file === "docs/client.md"), `${blocks.length} blocks of ${SESSION.join(", ")}`);
  const sb = await sandbox();
  const state = await mkdtemp(join(tmpdir(), "svc-doctest-session-"));
  let up: Up | null = null;
  try {
    up = await startUp(sb);
    // the terminal of the walk-through: svc up's address as SVC_GATE_URL, no key until a block exports one
    let env: NodeJS.ProcessEnv = { ...sb.env, SVC_GATE_URL: up.gateway };
    delete env.SVC_GATE_ENGINE_SERVICE_KEY;
    let cwd = sb.dir;
    for (const [i, b] of blocks.entries()) {
      const code = b.code.replaceAll("http://127.0.0.1:8080", up.gateway);
      let r;
      if (["sh", "bash"].includes(b.lang)) {
        const script = `curl() { command curl --fail-with-body "$@"; }\n${code}\nenv -0 > ${JSON.stringify(join(state, "env"))}; pwd > ${JSON.stringify(join(state, "cwd"))}\n`;
        await writeFile(join(state, "block.sh"), script);
        await rm(join(state, "env"), { force: true });
        r = await run("bash", ["-euo", "pipefail", join(state, "block.sh")], cwd, env);
        if (r.code === 0) {
          env = parseEnv(readFileSync(join(state, "env"), "utf8"));
          cwd = readFileSync(join(state, "cwd"), "utf8").trim();
        }
      } else {
        // written where the user is (so that "svc-tensor" resolves as in their project), then removed
        const file = join(cwd, `.doctest-block-${i}${b.lang.startsWith("j") ? ".mjs" : ".mts"}`);
        await writeFile(file, code);
        r = await run(process.execPath, ["--import", "tsx", file], cwd, env);
        await rm(file, { force: true });
      }
      const missing = b.expect.filter((e) => !r.out.includes(e) && !r.err.includes(e));
      const ok = r.code === 0 && missing.length === 0;
      const why = r.code !== 0 ? `exit ${r.code}` : `the output lacks ${missing.map((m) => JSON.stringify(m)).join(", ")}`;
      t.ok(
        ok,
        `${b.file}:${b.line} (${b.lang}, block ${i + 1} of ${blocks.length}, in ${cwd.slice(sb.dir.length) || "."})${ok ? "" : `\n${why}\n--- stdout\n${r.out}\n--- stderr\n${r.err}`}`,
      );
    }
  } finally {
    if (up) {
      up.child.kill("SIGINT");
      await up.exited;
    }
    await rm(sb.dir, { recursive: true, force: true });
    await rm(state, { recursive: true, force: true });
  }
});
