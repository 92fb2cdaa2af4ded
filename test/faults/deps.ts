// Dependencies of their own for the fault tests and bench/faults.ts: a PostgreSQL cluster
// (initdb + pg_ctl as the postgres user) on a free port that can be restarted and killed, a
// redis-server on a free port that can be stopped (SIGSTOP), resumed and killed, and a small
// tmpfs that can be filled. Every wait is a condition with a deadline.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, chownSync, mkdirSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { createServer as createHttpServer, type Server as HttpServer } from "node:http";
import { createServer, connect, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway, type RunningGateway } from "../../server/gateway/server.js";
import { SERVICE_KEY } from "../gateway/helpers.js";

const run = promisify(execFile);

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

export async function waitFor(what: string, cond: () => Promise<boolean> | boolean, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (await cond()) return;
    } catch {
      // not yet
    }
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** True when something accepts TCP connections on 127.0.0.1:port. */
export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, "127.0.0.1");
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

const PG_BIN = ["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/14/bin"].find((d) => existsSync(join(d, "initdb")));

export interface PgCluster {
  port: number;
  url: string;
  start(): Promise<void>;
  /** Fast shutdown and start (what a planned restart does). */
  restart(): Promise<void>;
  /** SIGKILL of the postmaster and its children (a crash); start() brings it back. */
  kill(): Promise<void>;
  stop(): Promise<void>;
  destroy(): Promise<void>;
}

const asPostgres = (args: string[]) => run("runuser", ["-u", "postgres", "--", ...args], { timeout: 120_000 });

/** A PostgreSQL cluster of its own, or null (with why) when initdb or the postgres user is missing. */
export async function startPgCluster(): Promise<PgCluster | { skip: string }> {
  if (!PG_BIN) return { skip: "no PostgreSQL server binaries (initdb) on this machine" };
  if (process.getuid?.() !== 0) return { skip: "starting a PostgreSQL cluster of its own needs root (to run as the postgres user)" };
  const dir = mkdtempSync(join(tmpdir(), "svc-pg-"));
  chownSync(dir, Number((await run("id", ["-u", "postgres"])).stdout.trim()), Number((await run("id", ["-g", "postgres"])).stdout.trim()));
  const data = join(dir, "data");
  await asPostgres([join(PG_BIN, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"]);
  const port = await freePort();
  // fsync off: a killed process leaves its writes in the page cache, so an acknowledged commit
  // survives every fault simulated here (a machine crash is not one of them)
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off`;
  const ctl = (...args: string[]) => asPostgres([join(PG_BIN, "pg_ctl"), "-D", data, ...args]);
  const up = () =>
    waitFor(
      `PostgreSQL answers on ${port}`,
      async () =>
        await run(join(PG_BIN, "pg_isready"), ["-h", "127.0.0.1", "-p", String(port)]).then(
          () => true,
          () => false,
        ),
      60_000,
    );
  const cluster: PgCluster = {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async start() {
      await ctl("-l", join(dir, "log"), "-o", opts, "-w", "-t", "60", "start");
      await up();
    },
    async restart() {
      await ctl("-m", "fast", "-w", "-t", "60", "stop");
      await cluster.start();
    },
    async kill() {
      const pidFile = join(data, "postmaster.pid");
      if (!existsSync(pidFile)) return;
      const pid = Number(readFileSync(pidFile, "utf8").split("\n")[0]);
      // the postmaster's children too: a crash leaves no backend answering
      await run("pkill", ["-KILL", "-P", String(pid)]).catch(() => undefined);
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        /* gone */
      }
      await waitFor("the killed PostgreSQL stops answering", async () => !(await portOpen(port)), 30_000);
      // what a crash leaves behind and a start refuses to overwrite while it names a live pid
      rmSync(pidFile, { force: true });
      rmSync(join(dir, `.s.PGSQL.${port}.lock`), { force: true });
      rmSync(join(dir, `.s.PGSQL.${port}`), { force: true });
    },
    async stop() {
      await ctl("-m", "immediate", "-w", "-t", "60", "stop").catch(() => undefined);
    },
    async destroy() {
      await cluster.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await cluster.start();
  return cluster;
}

export interface RedisProc {
  port: number;
  url: string;
  child: ChildProcess;
  /** SIGSTOP: the server holds its connections and answers nothing. */
  pause(): void;
  resume(): void;
  kill(): Promise<void>;
  /** A new server on the same port (after kill). */
  start(): Promise<void>;
  destroy(): Promise<void>;
}

/** A redis-server of its own on a free port, or why not. */
export async function startRedisProc(): Promise<RedisProc | { skip: string }> {
  if (
    !(await run("redis-server", ["--version"]).then(
      () => true,
      () => false,
    ))
  )
    return { skip: "no redis-server binary on this machine" };
  const dir = mkdtempSync(join(tmpdir(), "svc-redis-"));
  const port = await freePort();
  const p: RedisProc = {
    port,
    url: `redis://127.0.0.1:${port}`,
    child: undefined as unknown as ChildProcess,
    pause: () => void p.child.kill("SIGSTOP"),
    resume: () => void p.child.kill("SIGCONT"),
    async kill() {
      if (p.child.exitCode !== null || p.child.signalCode !== null) return;
      const gone = new Promise<void>((r) => p.child.once("exit", () => r()));
      p.child.kill("SIGKILL");
      await gone;
    },
    async start() {
      // every write in the append-only file before its reply: a restart after a kill keeps it
      p.child = spawn(
        "redis-server",
        ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
        { stdio: "ignore" },
      );
      await waitFor(`redis-server on ${port} answers`, () => portOpen(port), 30_000);
    },
    async destroy() {
      p.resume();
      await p.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await p.start();
  return p;
}

export interface SmallDisk {
  dir: string;
  destroy(): Promise<void>;
}

/** A tmpfs of `mib` MiB mounted on a new directory, or why not (mount needs root and a kernel that allows it). */
export async function mountSmallDisk(mib: number): Promise<SmallDisk | { skip: string }> {
  const dir = mkdtempSync(join(tmpdir(), "svc-disk-"));
  try {
    await run("mount", ["-t", "tmpfs", "-o", `size=${mib}m,mode=0700`, "tmpfs", dir]);
  } catch {
    rmSync(dir, { recursive: true, force: true });
    return { skip: "a tmpfs cannot be mounted here (mount needs root and a kernel that allows it)" };
  }
  mkdirSync(join(dir, "store"), { mode: 0o700 });
  return {
    dir,
    async destroy() {
      await run("umount", ["-l", dir]).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Writes blocks of `chunk` bytes into `path` until its file system refuses one; the code of that refusal (ENOSPC on a full disk). */
export async function fillDisk(path: string, chunk = 64 * 1024): Promise<string | undefined> {
  const fh = await open(path, "w");
  const block = Buffer.alloc(chunk, 1);
  try {
    for (;;) await fh.write(block);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code;
  } finally {
    await fh.close();
  }
}

export interface Ext4Disk {
  dir: string;
  /**
   * Makes the file system read-only at once, files open for writing included, as ext4 does
   * itself after a disk error (mounted errors=remount-ro; the kernel's trigger_fs_error).
   */
  failToReadOnly(): void;
  destroy(): Promise<void>;
}

/**
 * An ext4 file system of `mib` MiB in a file of its own, mounted on a new directory through a
 * loop device with errors=remount-ro, or why not (it needs root, a loop device, mkfs.ext4 and
 * the kernel's ext4 test switch).
 */
export async function mountExt4(mib: number): Promise<Ext4Disk | { skip: string }> {
  const base = mkdtempSync(join(tmpdir(), "svc-ext4-"));
  const image = join(base, "disk.img");
  const dir = join(base, "mnt");
  mkdirSync(dir);
  const gone = () => rmSync(base, { recursive: true, force: true });
  try {
    await run("truncate", ["-s", `${mib}M`, image]);
    await run("mkfs.ext4", ["-q", "-F", image]);
    await run("mount", ["-o", "loop,errors=remount-ro", image, dir]);
  } catch {
    gone();
    return { skip: "an ext4 image cannot be mounted here (it needs root, a loop device and mkfs.ext4)" };
  }
  const line = readFileSync("/proc/mounts", "utf8")
    .split("\n")
    .find((l) => l.split(" ")[1] === dir);
  const device = line?.split(" ")[0]?.replace(/^\/dev\//, "") ?? "";
  const trigger = `/sys/fs/ext4/${device}/trigger_fs_error`;
  const destroy = async () => {
    await run("umount", ["-l", dir]).catch(() => undefined);
    gone();
  };
  if (!device || !existsSync(trigger)) {
    await destroy();
    return { skip: "this kernel has no ext4 trigger_fs_error switch" };
  }
  return { dir, failToReadOnly: () => writeFileSync(trigger, "1"), destroy };
}

/** The service key of the engines the fault tests start. */
export const ENGINE_KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);
const SVC = fileURLToPath(new URL("../../bin/svc.ts", import.meta.url));

/** `svc engine` as a process of its own on a free port, with `env` added; resolves once it prints its URL. */
export function startEngineProcess(env: Record<string, string>): Promise<{ url: string; child: ChildProcess; stderr: () => string }> {
  const child = spawn(process.execPath, ["--import", "tsx", SVC, "engine"], {
    env: { ...process.env, SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: ENGINE_KEY, SVC_ENGINE_LOG_LEVEL: "silent", SVC_ENGINE_DEVICE: "cpu", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (d) => {
      out += d;
      const m = /engine: (http:\/\/\S+)/.exec(out);
      if (m) resolve({ url: m[1]!, child, stderr: () => err });
    });
    child.on("exit", (code) => reject(new Error(`engine exited ${code}: ${err}`)));
  });
}

export interface GatewayOnRedis {
  gw: RunningGateway;
  /** Stops the gateway and the engine stand-in and removes the gateway's directory. */
  close(): Promise<void>;
}

/**
 * A gateway (data directory and audit log in a new temporary directory) on the Redis at
 * `redisUrl` under `prefix`, in front of an engine stand-in that answers every request 200
 * (its /health with store_connected true). `env` adds or overrides gateway variables.
 */
export async function gatewayOnRedis(redisUrl: string, prefix: string, env: Record<string, string> = {}): Promise<GatewayOnRedis> {
  const dir = mkdtempSync(join(tmpdir(), "svc-faults-gw-"));
  const engine: HttpServer = createHttpServer((req, res) => {
    req.resume();
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(req.url === "/health" ? { status: "ok", store_connected: true } : { ok: true }));
  });
  await new Promise<void>((r) => engine.listen(0, "127.0.0.1", r));
  const gw = await startGateway(
    loadGatewayConfig({
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: `http://127.0.0.1:${(engine.address() as AddressInfo).port}`,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      SVC_GATE_REDIS_URL: redisUrl,
      SVC_GATE_REDIS_PREFIX: prefix,
      ...env,
    }),
  );
  return {
    gw,
    async close() {
      await gw.close();
      await new Promise<void>((r) => {
        engine.closeAllConnections();
        engine.close(() => r());
      });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
