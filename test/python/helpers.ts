// Shared by the Python tests: finding a Python 3.11+ (and one that imports numpy), running
// the package from python/ without installing it, and turning the results of the Python
// unittest runner (python/tests/run.py, one JSON line per test) into tape assertions.
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import type { Test } from "tape";

export const PY_ROOT = new URL("../../python/", import.meta.url).pathname;
export const IN_CI = process.env.CI === "true";

/**
 * The interpreter `exe` runs as (its sys.executable) when `code` exits 0 under it, else null.
 * The tests spawn that path: a version manager's shim in front of python3 (pyenv's is a shell
 * script) costs more than the interpreter's own start, on each of hundreds of runs.
 */
function probe(exe: string, code: string): string | null {
  const r = spawnSync(exe, ["-c", `${code}\nimport sys; print(sys.executable)`], { encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) return null;
  const real = r.stdout.trim().split("\n").at(-1) ?? "";
  return real !== "" && existsSync(real) ? real : exe;
}

const candidates = (): string[] => [...new Set([process.env.SVC_TEST_PYTHON, "python3", "/usr/bin/python3"].filter((x): x is string => !!x))];
const V311 = "import sys\nif sys.version_info < (3, 11): sys.exit(1)";

const first = (code: string): string | null => {
  for (const exe of candidates()) {
    const real = probe(exe, code);
    if (real !== null) return real;
  }
  return null;
};

/** A python3 of 3.11 or later (the interpreter itself, past any shim), or null. */
export function findPython(): string | null {
  return first(V311);
}

/** A python3 of 3.11 or later that imports numpy, or null. */
export function findNumpyPython(): string | null {
  return first(`${V311}\nimport numpy`);
}

/**
 * Skips (locally) or fails (CI=true) when `exe` is null: a missing Python is a skip with a
 * sentence on a developer's machine and an error where CI installs it.
 */
export function requirePython(t: Test, exe: string | null, what: string): exe is string {
  if (exe !== null) return true;
  if (IN_CI) t.fail(`${what} is not installed; .ci/run installs it (apt-get install python3 python3-numpy)`);
  else t.skip(`${what} is not installed, so these Python tests are skipped (CI installs it)`);
  return false;
}

export interface PyRun {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Runs `exe args` in python/ with a generous ceiling (the machine may be shared). */
export function runPy(exe: string, args: string[], env: Record<string, string> = {}, timeoutMs = 300_000): Promise<PyRun> {
  return new Promise((resolve) => {
    const started = Date.now();
    const c = spawn(exe, args, { cwd: PY_ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1", ...env } });
    let stdout = "";
    let stderr = "";
    c.stdout.on("data", (d) => (stdout += d));
    c.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => c.kill("SIGKILL"), timeoutMs);
    c.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/**
 * Runs python/tests/run.py on the given test modules and makes one tape assertion per
 * Python test (a skipped Python test is a tape skip with its reason).
 */
export async function runPythonTests(t: Test, exe: string, pyArgs: string[], modules: string[], env: Record<string, string> = {}): Promise<void> {
  const r = await runPy(exe, [...pyArgs, "tests/run.py", ...modules], env);
  let seen = 0;
  for (const line of r.stdout.split("\n")) {
    if (!line.startsWith("{")) continue;
    const rec = JSON.parse(line) as { test: string; outcome: "pass" | "fail" | "error" | "skip"; detail: string };
    seen++;
    if (rec.outcome === "skip") t.skip(`${rec.test}: ${rec.detail}`);
    else t.ok(rec.outcome === "pass", `${rec.test}${rec.outcome === "pass" ? "" : `: ${rec.outcome}: ${rec.detail}`}`);
  }
  t.ok(seen > 0, `the Python tests ran (${modules.join(", ")})${seen === 0 ? `: exit ${r.code}, ${r.stderr.slice(-2000)}` : ""}`);
  t.equal(r.code, 0, `the Python test runner exits 0${r.code !== 0 ? `: ${r.stderr.slice(-2000)}` : ""}`);
}
