// `svc up` over its life on a real process: one `svc up` per data directory (a second one on the
// same DIR is refused before it starts anything, a lock left by a killed run is taken over), a
// shutdown whose gateway fails to close still closes the engine and exits, and an empty --data
// is a usage error rather than the current directory. The gateway reaches the engine over a Unix
// socket in DIR (0600), removed at a stop; one left by a killed run is replaced.
import test from "tape";
import { spawn } from "node:child_process";
import { existsSync, lstatSync, readFileSync } from "node:fs";
import { mkdtemp, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { killUp, spawnUp, startUp, type Up } from "./up-process.js";

const root = new URL("../..", import.meta.url).pathname;

/** Its exit code, or null when it has not exited within two minutes (it is then killed). */
async function exitOf(up: Up): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((r) => {
    timer = setTimeout(() => r("late"), 120_000);
  });
  const code = await Promise.race([up.exited, late]);
  clearTimeout(timer);
  if (code === "late") {
    up.child.kill("SIGKILL");
    await up.exited;
    return null;
  }
  return code;
}

/** Whether anything listens on `port` (read from /proc/net/tcp{,6}). */
function listening(port: number): boolean {
  for (const f of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!existsSync(f)) continue;
    for (const line of readFileSync(f, "utf8").split("\n").slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length >= 4 && cols[3] === "0A" && parseInt(cols[1]!.split(":")[1]!, 16) === port) return true;
    }
  }
  return false;
}

test("svc up: a second svc up on the same data directory is refused while the first runs; the directory is free again after it stops", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-lock-"));
  const data = join(dir, "d");
  let first: Up | null = null;
  let second: Up | null = null;
  let third: Up | null = null;
  try {
    first = await startUp(["--data", data]);
    const gateway = first.gateway;
    second = spawnUp(["--data", data]);
    t.equal(await exitOf(second), 1, "the second exits 1");
    t.match(
      second.err,
      new RegExp(
        `^svc: Another 'svc up' \\(process ${first.child.pid}\\) is using the data directory ${data.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}; stop it first, or pass another --data DIR\\.\\n$`,
      ),
      second.err.trim(),
    );
    t.doesNotMatch(second.out, /^Ready\.|SVC_GATE_ENGINE_SERVICE_KEY/m, "the second starts nothing and prints no key");
    t.equal((await fetch(`${gateway}/health`)).status, 200, "the first still serves");
    const sock = lstatSync(join(data, "engine.sock"), { throwIfNoEntry: false });
    t.ok(sock?.isSocket() && (sock.mode & 0o777) === 0o600, "the engine's Unix socket, which the gateway uses, is DIR/engine.sock, mode 0600");
    first.child.kill("SIGINT");
    t.equal(await exitOf(first), 0, "the first stops with exit 0");
    first = null;
    t.notOk(existsSync(join(data, "engine.sock")), "the socket is removed when svc up stops");
    third = await startUp(["--data", data]);
    t.pass("a svc up after the first stopped starts on the same directory");
    third.child.kill("SIGTERM");
    t.equal(await exitOf(third), 0, "exit 0");
    third = null;
  } finally {
    await killUp(first);
    await killUp(second);
    await killUp(third);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up: the lock of a svc up that was killed (its process gone) does not keep the directory", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-lock-"));
  const data = join(dir, "d");
  let a: Up | null = null;
  let b: Up | null = null;
  try {
    a = await startUp(["--data", data]);
    a.child.kill("SIGKILL");
    await a.exited;
    a = null;
    t.ok(lstatSync(join(data, "engine.sock")).isSocket(), "the killed one left its engine socket");
    b = await startUp(["--data", data]);
    t.doesNotMatch(b.err, /Another 'svc up'/, "no refusal");
    const gateway = b.gateway;
    const health = (await (await fetch(`${gateway}/health`)).json()) as { engine_reachable: boolean };
    t.equal(health.engine_reachable, true, "the stale socket was replaced: the gateway reaches the engine over it");
    b.child.kill("SIGINT");
    t.equal(await exitOf(b), 0, "exit 0");
    b = null;
  } finally {
    await killUp(a);
    await killUp(b);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up: a gateway that fails to close (its directory removed) still lets the engine close and svc up exit with one sentence", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-close-"));
  const data = join(dir, "d");
  let up: Up | null = null;
  try {
    up = await startUp(["--data", data]);
    const enginePort = Number(new URL(up.engine).port);
    await rm(join(data, "gate"), { recursive: true, force: true });
    up.child.kill("SIGTERM");
    const code = await exitOf(up);
    t.equal(code, 1, "exit 1 (not left running)");
    t.match(up.err, /^svc: .*\.$/m, "one sentence");
    t.doesNotMatch(up.err, /\n\s+at /, "no stack trace");
    if (existsSync("/proc/net/tcp")) t.notOk(listening(enginePort), "the engine's port is closed");
    up = null;
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up --data '' is a usage error (exit 2), not the current directory", async (t) => {
  const cwd = await mkdtemp(join(tmpdir(), "svc-up-empty-"));
  // run from a directory of its own, so that the code before this rule starts there, not in the checkout
  const child = spawn(
    process.execPath,
    ["--import", join(root, "node_modules/tsx/dist/loader.mjs"), join(root, "bin/svc.ts"), "up", "--data", "", "--port", "0", "--engine-port", "0"],
    {
      cwd,
      env: { ...process.env, SVC_GATE_ENGINE_SERVICE_KEY: "" },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const up: Up = { child, out: "", err: "", gateway: "", engine: "", key: null, exited: new Promise((r) => child.on("exit", (code) => r(code))) };
  child.stdout!.on("data", (d) => {
    up.out += d;
  });
  child.stderr!.on("data", (d) => {
    up.err += d;
  });
  try {
    const deadline = Date.now() + 120_000;
    while (up.child.exitCode === null && !/^Ready\./m.test(up.out) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    if (up.child.exitCode === null) up.child.kill("SIGINT");
    t.equal(await exitOf(up), 2, "exit 2");
    t.match(up.err, /^svc: --data must name a directory\.\n/, up.err.trim());
    t.notOk(existsSync(join(cwd, "service.key")), "no service key in the current directory");
  } finally {
    await killUp(up);
    await rm(cwd, { recursive: true, force: true });
  }
});

test("svc up: a lock file that is not a link to a process id is replaced", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-lock-"));
  const data = join(dir, "d");
  let up: Up | null = null;
  try {
    const { mkdir } = await import("node:fs/promises");
    await mkdir(data, { recursive: true, mode: 0o700 });
    await writeFile(join(data, "svc-up.pid"), "not a pid\n", { mode: 0o600 });
    up = await startUp(["--data", data]);
    t.equal(await readlink(join(data, "svc-up.pid")), String(up.child.pid), "the lock names the running process");
    up.child.kill("SIGINT");
    t.equal(await exitOf(up), 0, "exit 0");
    up = null;
    t.notOk(existsSync(join(data, "svc-up.pid")), "the lock is removed at exit");
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up --data at a file, under a file or at a dangling link: exit 2, one sentence naming DIR", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-notdir-"));
  try {
    const { symlink } = await import("node:fs/promises");
    await writeFile(join(dir, "file"), "x");
    await symlink(join(dir, "gone"), join(dir, "dangling"));
    const cases: Array<[string, RegExp]> = [
      [join(dir, "file"), /is not a directory/],
      [join(dir, "file", "sub"), /is not a directory/],
      [join(dir, "dangling"), /is a symbolic link to nothing/],
    ];
    for (const [data, why] of cases) {
      const up = spawnUp(["--data", data]);
      const code = await exitOf(up);
      t.equal(code, 2, `${data}: exit 2`);
      t.match(up.err, /^svc: --data .*\.\nRun 'svc up --help' for usage\.\n$/, up.err.trim().split("\n")[0]);
      t.match(up.err, why, "says what it is");
      t.doesNotMatch(up.err, /EEXIST|ENOTDIR|mkdir/, "not the system call's words");
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("svc up on a full disk: starts, and a stop whose usage snapshot cannot be written closes everything and exits 1", async (t) => {
  const { fillDisk, mountSmallDisk } = await import("../faults/deps.js");
  const disk = await mountSmallDisk(8);
  if ("skip" in disk) {
    t.skip(disk.skip);
    return;
  }
  const data = join(disk.dir, "d");
  let up: Up | null = null;
  try {
    up = await startUp(["--data", data]);
    up.child.kill("SIGINT");
    t.equal(await exitOf(up), 0, "a first run on the empty disk: exit 0");
    t.equal(await fillDisk(join(disk.dir, "fill"), 1 << 20), "ENOSPC", "the disk is full");
    up = await startUp(["--data", data]);
    t.doesNotMatch(up.err, /Another 'svc up'/, "the lock is taken on the full disk");
    const enginePort = Number(new URL(up.engine).port);
    up.child.kill("SIGINT");
    t.equal(await exitOf(up), 1, "exit 1, not left running");
    t.match(up.err, /^svc: write failed \(ENOSPC\)\.$/m, "the failure in one sentence");
    t.doesNotMatch(up.err, /\n\s+at /, "no stack trace");
    if (existsSync("/proc/net/tcp")) t.notOk(listening(enginePort), "the engine's port is closed");
    t.notOk(existsSync(join(data, "svc-up.pid")), "the lock is removed");
    up = null;
  } finally {
    await killUp(up);
    await disk.destroy();
  }
});

test("svc up whose engine.log fills its disk: request lines are dropped, not printed, and the log is written again once there is room", async (t) => {
  const { fillDisk, mountSmallDisk } = await import("../faults/deps.js");
  const disk = await mountSmallDisk(8);
  if ("skip" in disk) {
    t.skip(disk.skip);
    return;
  }
  const data = join(disk.dir, "d");
  const log = join(data, "engine.log");
  let up: Up | null = null;
  const requestLine = /"msg":"request"/;
  try {
    up = await startUp(["--data", data]);
    t.equal(await fillDisk(join(disk.dir, "fill")), "ENOSPC", "the disk is full");
    const until = async (what: string, ok: () => Promise<boolean> | boolean) => {
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        if (await ok()) return true;
        t.equal((await fetch(`${up!.engine}/health`)).status, 200, `the engine serves while waiting for ${what}`);
        await new Promise((res) => setTimeout(res, 200));
      }
      return false;
    };
    t.ok(await until("the log's failure", () => /cannot be written \(ENOSPC\)/.test(up!.err)), "the terminal says the log cannot be written");
    for (let i = 0; i < 50; i++) t.equal((await fetch(`${up.engine}/health`)).status, 200, "served on the full disk");
    t.equal(up.err.match(/cannot be written/g)?.length, 1, "said once");
    t.match(up.err, /its lines are dropped until it can, and warnings and errors go on in the terminal\.\n/, "in one sentence");
    t.doesNotMatch(up.err, requestLine, "no request line on the terminal");
    await rm(join(disk.dir, "fill"));
    t.ok(await until("the log to recover", () => /is written again\./.test(up!.err)), "the terminal says the log is written again");
    t.ok(
      await until("a request line in the file", async () => (await readFile(log, "utf8")).split("\n").some((l) => requestLine.test(l))),
      "request lines reach engine.log again",
    );
    t.doesNotMatch(up.err, requestLine, "still none on the terminal");
    up.child.kill("SIGINT");
    t.equal(await exitOf(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    await disk.destroy();
  }
});

test("svc up in a directory whose socket path would pass 107 bytes: the gateway reaches the engine over TCP", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "svc-up-long-"));
  const data = join(dir, "d".repeat(Math.max(1, 110 - dir.length)));
  let up: Up | null = null;
  try {
    up = await startUp(["--data", data]);
    t.ok(Buffer.byteLength(join(data, "engine.sock")) > 107, "the socket path would be too long");
    t.notOk(existsSync(join(data, "engine.sock")), "no socket is made");
    const gateway = up.gateway;
    const health = (await (await fetch(`${gateway}/health`)).json()) as { engine_reachable: boolean };
    t.equal(health.engine_reachable, true, "the gateway reaches the engine");
    up.child.kill("SIGINT");
    t.equal(await exitOf(up), 0, "exit 0");
    up = null;
  } finally {
    await killUp(up);
    await rm(dir, { recursive: true, force: true });
  }
});
