// `svc up` as a real process on ephemeral ports, for the tests of test/cli/up*.test.ts: spawned
// without the caller's service key, audit path and log level (the tests set what they need),
// its output collected, started when it prints "Ready.".
import { spawn, type ChildProcess } from "node:child_process";

const root = new URL("../..", import.meta.url).pathname;

export interface Up {
  child: ChildProcess;
  out: string;
  err: string;
  exited: Promise<number | null>;
  /** The gateway's and the engine's URLs and the printed service key, once started. */
  gateway: string;
  engine: string;
  key: string | null;
}

/** `svc up --port 0 --engine-port 0 ...args`, not waited for. */
export function spawnUp(args: string[], env: NodeJS.ProcessEnv = {}): Up {
  const base = { ...process.env };
  delete base.SVC_GATE_ENGINE_SERVICE_KEY;
  delete base.SVC_GATE_AUDIT_LOG_PATH;
  delete base.SVC_ENGINE_LOG_LEVEL;
  const child = spawn(process.execPath, ["--import", "tsx", "bin/svc.ts", "up", "--port", "0", "--engine-port", "0", ...args], {
    cwd: root,
    env: { ...base, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const up = { child, out: "", err: "", gateway: "", engine: "", key: null } as unknown as Up;
  up.exited = new Promise((r) => child.on("exit", (code) => r(code)));
  child.stdout!.on("data", (d) => {
    up.out += d;
  });
  child.stderr!.on("data", (d) => {
    up.err += d;
  });
  return up;
}

/** `svc up` started (it printed "Ready." within two minutes), with its URLs and printed key. */
export async function startUp(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Up> {
  const up = spawnUp(args, env);
  const deadline = Date.now() + 120_000;
  while (!/^Ready\./m.test(up.out)) {
    if (up.child.exitCode !== null || Date.now() > deadline) throw new Error(`svc up did not start: ${up.out}\n${up.err}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  up.gateway = /^gateway: (\S+)$/m.exec(up.out)![1]!;
  up.engine = /^engine:  (\S+)$/m.exec(up.out)![1]!;
  up.key = /^SVC_GATE_ENGINE_SERVICE_KEY=(\S+)$/m.exec(up.out)?.[1] ?? null;
  return up;
}

/** SIGINT, then its exit code. */
export async function stopUp(up: Up): Promise<number | null> {
  up.child.kill("SIGINT");
  return up.exited;
}

/** Kills a `svc up` still running (SIGKILL) and waits for its exit; for a test's clean-up. */
export async function killUp(up: Up | null): Promise<void> {
  if (up && up.child.exitCode === null && up.child.signalCode === null) {
    up.child.kill("SIGKILL");
    await up.exited;
  }
}
