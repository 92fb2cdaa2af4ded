// `svc up` (engine + gateway on an embedded store, one command), `svc engine` and
// `svc gateway` (one process each, configured by environment). All three run until
// SIGINT/SIGTERM, then close their listeners and the store and exit 0.
import { randomBytes } from "node:crypto";
import { createWriteStream, existsSync } from "node:fs";
import { chmod, lstat, mkdir, open, readFile, readlink, stat, symlink, unlink } from "node:fs/promises";
import { isIP } from "node:net";
import { join, resolve } from "node:path";
import { closeAll } from "../../lib/close-all.js";
import { isReadOnlyFs } from "../../lib/errors.js";
import { mkdirCause } from "../../lib/mkdir-cause.js";
import { processAlive } from "../../lib/process-alive.js";
import { socketPathProblem } from "../../server/http/unix-socket.js";
import { intFlag, parse, shown, UsageError, type Io } from "./common.js";
import { compactDaily, parseCompactAt, type TimeOfDay } from "./compact-daily.js";

const clock = (t: TimeOfDay): string => `${String(t.hour).padStart(2, "0")}:${String(t.minute).padStart(2, "0")}`;

// the servers are loaded only when a command runs them, so that --help and usage errors stay fast
const engineModules = async () => ({ ...(await import("../../server/engine/config.js")), ...(await import("../../server/engine/server.js")) });
const gatewayModules = async () => ({ ...(await import("../../server/gateway/config.js")), ...(await import("../../server/gateway/server.js")) });

export const UP_HELP = `Usage: svc up [--data DIR] [--port 8080] [--engine-port 8000] [--host 127.0.0.1] [--redis URL] [--store postgres://...] [--log-level LEVEL] [--compact-at HH:MM|off]

Runs an engine on its embedded store under DIR/engine (default ./svc-data) and a gateway in
front of it. --store keeps the tensors in that PostgreSQL database instead (tables created on
first connect), so that several engines can share them. DIR is created with mode 0700. On the first run that starts, a service key is
created, saved as DIR/service.key (mode 0600) and printed once as
SVC_GATE_ENGINE_SERVICE_KEY=<key>; later runs reuse it (a run that fails to start saves no key)
and warn when the file is readable by group or others. A key in the environment variable
SVC_GATE_ENGINE_SERVICE_KEY is used instead when set.

The gateway listens on 127.0.0.1 only; --host 0.0.0.0 (or another address) exposes it to other
machines, and says so at start-up. The engine always stays on 127.0.0.1 (SVC_ENGINE_HOST).
Port 0 picks free ports; the URLs actually bound are printed. --redis keeps tenants, usage and
rate-limit counters in Redis instead of DIR/gate.

The terminal shows the start-up lines, warnings and errors; the engine's JSON log (one line per
request) is appended to DIR/engine.log at --log-level (debug, info, warn, error or silent;
default SVC_ENGINE_LOG_LEVEL, else info). The gateway's audit log is DIR/audit.jsonl.

Every day at a random time within the hour after --compact-at (local time, default 03:00),
svc compact runs on the store in a process of its own: it purges the versions of deletes whose
30 days have passed and the payloads nothing names any more. Its outcome is a line of
DIR/engine.log (and of the terminal when it fails). --compact-at off leaves that to you.

With SVC_ENGINE_TLS_CERT_PATH and SVC_ENGINE_TLS_KEY_PATH the engine serves https and the
gateway trusts that certificate (or SVC_GATE_ENGINE_CA_PATH when set). Other SVC_ENGINE_* and
SVC_GATE_* variables apply as usual, except SVC_GATE_HOST (use --host). Ctrl-C (SIGINT) or
SIGTERM stops both cleanly.

One svc up per data directory: DIR/svc-up.pid names the process running there, and a second
svc up on the same DIR is refused.`;

export const ENGINE_HELP = `Usage: svc engine

Runs the storage engine alone, configured by the SVC_ENGINE_* variables (docs/engine.md; for
example SVC_ENGINE_HOST, default 127.0.0.1, SVC_ENGINE_PORT, SVC_ENGINE_DATA_DIR,
SVC_ENGINE_STORE_URL for a PostgreSQL store, SVC_ENGINE_API_KEYS). Logs one JSON line per request on standard output.
Stops on SIGINT/SIGTERM.`;

export const GATEWAY_HELP = `Usage: svc gateway

Runs the gateway alone, configured by the SVC_GATE_* variables (docs/gateway.md; for example
SVC_GATE_PORT, SVC_GATE_ENGINE_URL, SVC_GATE_ENGINE_SERVICE_KEY, SVC_GATE_REDIS_URL;
SVC_GATE_ENGINE_CA_PATH for an https engine whose certificate the system does not trust).
For deployments, SVC_GATE_HOST defaults to 0.0.0.0: the gateway is the public entry point,
usually behind a TLS reverse proxy; set SVC_GATE_HOST=127.0.0.1 to keep it local.
Stops on SIGINT/SIGTERM; SIGHUP reopens the audit and billing logs (after a log rotation moved them).`;

/**
 * The service key of `svc up`: env wins, else DIR/service.key, else a new one (created = true).
 * A new key is not saved here: `saveServiceKey` saves it once both servers are up, so a run that
 * fails to start leaves no key behind that was never printed.
 */
export async function serviceKeyFor(dir: string, env: NodeJS.ProcessEnv): Promise<{ key: string; created: boolean; source: string }> {
  if (env.SVC_GATE_ENGINE_SERVICE_KEY) return { key: env.SVC_GATE_ENGINE_SERVICE_KEY, created: false, source: "environment" };
  const file = join(dir, "service.key");
  try {
    const k = (await readFile(file, "utf8")).trim();
    if (k.length >= 32) return { key: k, created: false, source: file };
    throw new UsageError(`${file} does not hold a service key of at least 32 characters; remove it to create a new one.`);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
  }
  return { key: randomBytes(32).toString("hex"), created: true, source: file };
}

/** Saves a new key as DIR/service.key, mode 0600 from the start, never over an existing file. */
export async function saveServiceKey(dir: string, key: string): Promise<void> {
  const file = join(dir, "service.key");
  await mkdir(dir, { recursive: true });
  let fh;
  try {
    // 'wx': never overwrite a key another `svc up` created in the meantime
    fh = await open(file, "wx", 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST")
      throw new Error(`Another 'svc up' created ${file} while this one was starting; run it again to use that key.`);
    throw new Error(`The service key cannot be saved as ${file} (${(e as NodeJS.ErrnoException).code ?? "error"}).`);
  }
  try {
    await fh.writeFile(key + "\n");
    await fh.sync();
  } finally {
    await fh.close();
  }
}

const LOG_LEVELS = ["debug", "info", "warn", "error", "silent"];
const LEVEL_RANK: Record<string, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 99 };
/** How often engine.log is tried again after a write to it failed. */
const LOG_RETRY_MS = 5_000;

const isLoopback = (h: string): boolean => h === "localhost" || h === "::1" || /^127\./.test(h);

/** The admin command that works as typed after this start-up (defaults left out). */
export function readyHint(gatewayUrl: string, dir: string): string {
  const url = gatewayUrl === "http://127.0.0.1:8080" ? "" : `SVC_GATE_URL=${gatewayUrl} `;
  const data = dir === resolve("./svc-data") ? "" : ` --data ${/[\s'"$\\]/.test(dir) ? `'${dir.replace(/'/g, "'\\''")}'` : dir}`;
  return `${url}npx svc tenant create NAME${data}`;
}

/** DIR holds the service key and every store: created 0700; an existing one open to others is reported. */
async function prepareDataDir(dir: string, io: Io): Promise<void> {
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EEXIST" || code === "ENOTDIR" || code === "ENOENT") {
      // what is in the way: a file at DIR or above it, or a link to nothing
      const link = await lstat(dir).catch(() => null);
      if (link?.isSymbolicLink() && (await stat(dir).catch(() => null)) === null)
        throw new UsageError(`--data ${dir} is a symbolic link to nothing (its target does not exist).`);
      const cause = mkdirCause(dir, e);
      if (isReadOnlyFs(cause)) throw new UsageError(`--data ${dir} cannot be created: its file system is read-only.`);
      if (cause !== e) throw cause;
      throw new UsageError(`--data ${dir} is not a directory (${code === "EEXIST" ? "a file is there" : "a file is in its path"}).`);
    }
    throw e;
  }
  const st = await stat(dir);
  if (!st.isDirectory()) throw new UsageError(`--data ${dir} is not a directory.`);
  if (st.mode & 0o077) {
    io.err(`svc up: warning: the data directory ${dir} is accessible to group or others (mode ${(st.mode & 0o777).toString(8)}); run 'chmod 700 ${dir}'.\n`);
  }
}

/**
 * One `svc up` per data directory: DIR/svc-up.pid is a symbolic link whose target is the process
 * id of the one running there (made whole in one step, and with no data block, so that it can
 * be made on a full disk). A link whose process is gone (a run that was killed), or that is not
 * such a link, is taken over. Resolves to the release, which removes the link if it is still
 * this process's.
 */
export async function lockDataDir(dir: string): Promise<() => Promise<void>> {
  const file = join(dir, "svc-up.pid");
  const mine = String(process.pid);
  for (let attempt = 0; ; attempt++) {
    try {
      await symlink(mine, file);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST" || attempt >= 3) throw e;
    }
    const held = await readlink(file).catch(() => "");
    const pid = /^\d+$/.test(held) ? Number(held) : 0;
    if (pid > 0 && pid !== process.pid && processAlive(pid))
      throw new Error(`Another 'svc up' (process ${pid}) is using the data directory ${dir}; stop it first, or pass another --data DIR.`);
    // left by a run that is gone; one that cannot be removed (a read-only file system) is the error
    await unlink(file).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== "ENOENT") throw err;
    });
  }
  return async () => {
    if ((await readlink(file).catch(() => "")) === mine) await unlink(file).catch(() => undefined);
  };
}

/** Warns when a secret file can be read by group or others. */
export async function warnIfReadable(file: string, what: string, io: Io): Promise<void> {
  const st = await stat(file);
  if (st.mode & 0o044) {
    io.err(`svc up: warning: ${what} ${file} is readable by group or others (mode ${(st.mode & 0o777).toString(8)}); run 'chmod 600 ${file}'.\n`);
  }
}

/**
 * The engine's logger under \`svc up\`: every line at \`level\` is appended to \`file\` (mode 0600),
 * and warnings and errors also go to the terminal, so per-request lines never flood it. While
 * the file cannot be written (a full disk), its lines are dropped, the terminal keeps its
 * warnings and errors, and a line is tried on a fresh stream at most every LOG_RETRY_MS.
 */
async function openEngineLog(file: string, level: string, io: Io): Promise<{ logger: import("../../server/engine/app.js").Logger; close(): Promise<void> }> {
  const { jsonLogger } = await import("../../server/engine/app.js");
  let stream = createWriteStream(file, { flags: "a", mode: 0o600 });
  await new Promise<void>((res, rej) => {
    stream.once("open", () => res());
    stream.once("error", rej);
  });
  await chmod(file, 0o600); // a file from an older run keeps its mode otherwise
  let failedAt = 0; // when the file last failed; 0 while it is written
  let retrying = false;
  const watch = (s: typeof stream) =>
    s.on("error", (e) => {
      if (s !== stream || failedAt !== 0) return;
      failedAt = Date.now();
      const code = (e as NodeJS.ErrnoException).code ?? "error";
      io.err(`svc up: the log ${file} cannot be written (${code}); its lines are dropped until it can, and warnings and errors go on in the terminal.\n`);
    });
  watch(stream);
  // a line written through a fresh stream; the file counts as written again once one lands
  const retry = (line: string) => {
    if (retrying || Date.now() - failedAt < LOG_RETRY_MS) return;
    retrying = true;
    const next = createWriteStream(file, { flags: "a", mode: 0o600 });
    next.on("error", () => undefined);
    next.write(line, (err) => {
      retrying = false;
      if (err) {
        failedAt = Date.now();
        next.destroy();
        return;
      }
      stream.destroy();
      stream = next;
      watch(next);
      failedAt = 0;
      io.err(`svc up: the log ${file} is written again.\n`);
    });
  };
  const toFile = jsonLogger(level as "info", (l) => {
    if (failedAt === 0 && stream.writable) stream.write(l);
    else retry(l);
  });
  // the terminal gets warnings and errors, or less when the level asks for less (error, silent)
  const terminalLevel = (LEVEL_RANK[level] ?? 0) > LEVEL_RANK.warn! ? level : "warn";
  const toTerminal = jsonLogger(terminalLevel as "warn", io.err);
  const both = (lv: "debug" | "info" | "warn" | "error") => (f: Record<string, unknown>) => {
    toFile[lv](f);
    toTerminal[lv](f);
  };
  return {
    logger: { debug: both("debug"), info: both("info"), warn: both("warn"), error: both("error") },
    close: () => new Promise<void>((res) => (stream.writable ? stream.end(() => res()) : (stream.destroy(), res()))),
  };
}

/** A connection URL without its password, for output. */
function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(the --store URL)";
  }
}

function waitForStop(io: Io): Promise<string> {
  if (io.stopSignal) return io.stopSignal;
  return new Promise((res) => {
    const on = (sig: string) => {
      process.off("SIGINT", on);
      process.off("SIGTERM", on);
      // a second Ctrl-C while closing stops at once
      process.once("SIGINT", () => process.exit(130));
      res(sig);
    };
    process.on("SIGINT", on);
    process.on("SIGTERM", on);
  });
}

export async function upCommand(argv: string[], io: Io): Promise<number> {
  const { values, help } = parse(
    argv,
    {
      data: { type: "string" },
      port: { type: "string" },
      "engine-port": { type: "string" },
      redis: { type: "string" },
      store: { type: "string" },
      host: { type: "string" },
      "log-level": { type: "string" },
      "compact-at": { type: "string" },
    },
    { min: 0, max: 0, names: "no arguments" },
  );
  if (help) {
    io.out(UP_HELP + "\n");
    return 0;
  }
  if (values.data === "") throw new UsageError("--data must name a directory.");
  const dir = resolve((values.data as string | undefined) ?? "./svc-data");
  const host = (values.host as string | undefined) ?? "127.0.0.1";
  if (isIP(host) === 0 && host !== "localhost") throw new UsageError(`--host must be an IP address such as 127.0.0.1 or 0.0.0.0, not ${shown(host)}.`);
  const logLevel = values["log-level"] as string | undefined;
  if (logLevel !== undefined && !LOG_LEVELS.includes(logLevel)) throw new UsageError(`--log-level must be one of ${LOG_LEVELS.join(", ")}.`);
  const port = intFlag(values.port as string | undefined, "port", 0, 65535) ?? 8080;
  const enginePort = intFlag(values["engine-port"] as string | undefined, "engine-port", 0, 65535) ?? 8000;
  const redis = values.redis as string | undefined;
  if (redis !== undefined && !/^rediss?:\/\//.test(redis)) throw new UsageError("--redis must be a redis:// or rediss:// URL.");
  const storeUrl = values.store as string | undefined;
  if (storeUrl !== undefined && !/^postgres(ql)?:\/\/\S+$/.test(storeUrl)) throw new UsageError("--store must be a postgres:// or postgresql:// URL.");
  const compactAt = parseCompactAt((values["compact-at"] as string | undefined) ?? "03:00");

  const { loadEngineConfig, startEngine } = await engineModules();
  const { loadGatewayConfig, startGateway } = await gatewayModules();
  const stop = waitForStop(io); // before anything starts, so that an early Ctrl-C also shuts down cleanly
  await prepareDataDir(dir, io);
  const unlock = await lockDataDir(dir);
  try {
    return await runUp();
  } finally {
    await unlock();
  }

  async function runUp(): Promise<number> {
    const { key, created, source } = await serviceKeyFor(dir, io.env);
    if (!created && source !== "environment") await warnIfReadable(source, "the service key file", io);
    // flags and DIR decide the layout; other variables of the environment pass through
    // the gateway reaches the engine over a Unix socket in DIR (plain http; not with the engine's own TLS)
    const socketPath = join(dir, "engine.sock");
    const useSocket = !io.env.SVC_ENGINE_TLS_CERT_PATH && socketPathProblem(socketPath) === null;
    const engineEnv: NodeJS.ProcessEnv = {
      ...io.env,
      SVC_ENGINE_HOST: io.env.SVC_ENGINE_HOST || "127.0.0.1",
      SVC_ENGINE_PORT: String(enginePort),
      SVC_ENGINE_SOCKET: io.env.SVC_ENGINE_SOCKET || (useSocket ? socketPath : ""),
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      ...(storeUrl ? { SVC_ENGINE_STORE_URL: storeUrl } : {}),
      SVC_ENGINE_API_KEYS: key,
      SVC_ENGINE_REQUIRE_AUTH: "true",
      ...(logLevel ? { SVC_ENGINE_LOG_LEVEL: logLevel } : {}),
    };
    const engineCfg = loadEngineConfig(engineEnv);
    const log = await openEngineLog(join(dir, "engine.log"), engineCfg.log_level, io);
    let engine;
    try {
      engine = await startEngine(engineCfg, { logger: log.logger });
    } catch (e) {
      await log.close();
      throw e;
    }
    let gateway;
    try {
      const gateEnv: NodeJS.ProcessEnv = {
        ...io.env,
        SVC_GATE_HOST: host,
        SVC_GATE_PORT: String(port),
        // https when the engine has its own certificate (SVC_ENGINE_TLS_*): the gateway trusts that
        // certificate unless SVC_GATE_ENGINE_CA_PATH names other CAs
        SVC_GATE_ENGINE_URL: (!engineCfg.tls_cert_path && engine.socketUrl) || engine.url,
        ...(engineCfg.tls_cert_path ? { SVC_GATE_ENGINE_CA_PATH: io.env.SVC_GATE_ENGINE_CA_PATH || engineCfg.tls_cert_path } : {}),
        SVC_GATE_ENGINE_SERVICE_KEY: key,
        SVC_GATE_DATA_DIR: join(dir, "gate"),
        SVC_GATE_AUDIT_LOG_PATH: io.env.SVC_GATE_AUDIT_LOG_PATH || join(dir, "audit.jsonl"),
        ...(redis ? { SVC_GATE_REDIS_URL: redis } : {}),
      };
      gateway = await startGateway(loadGatewayConfig(gateEnv));
    } catch (e) {
      await closeAll(
        () => engine.close(),
        () => log.close(),
      ).catch(() => undefined);
      throw e;
    }
    if (created) {
      // saved only now that both servers are up, and printed right after: a failed start-up
      // leaves no file, and the next run creates (and prints) a key of its own
      try {
        await saveServiceKey(dir, key);
      } catch (e) {
        await closeAll(
          () => gateway.close(),
          () => engine.close(),
          () => log.close(),
        ).catch(() => undefined);
        throw e;
      }
    }
    // the console is served by the gateway at /console/ once `npm run build` has bundled it
    const { consoleDir } = await import("../../server/gateway/console.js");
    const consoleLine = existsSync(join(consoleDir(), "index.html")) ? `${gateway.url}/console/` : "not built (run 'npm run build' to serve it at /console/)";
    io.out(`engine:  ${engine.url}\ngateway: ${gateway.url}\nconsole: ${consoleLine}\ndata:    ${dir}\nlog:     ${join(dir, "engine.log")}\n`);
    // the engine's own store: --store, else SVC_ENGINE_STORE_URL from the environment, else DIR/engine
    const daily = compactAt ? compactDaily({ at: compactAt, store: engineCfg.store_url ?? engineCfg.data_dir, env: io.env, log: log.logger }) : null;
    io.out(`compact: ${compactAt ? `daily, within the hour after ${clock(compactAt)}` : "off"}\n`);
    if (!isLoopback(host)) {
      io.out(
        `The gateway is exposed: it listens on ${host}:${gateway.port}, reachable from other machines; put a TLS proxy in front before API keys travel over a network.\n`,
      );
    }
    if (storeUrl) io.out(`store:   PostgreSQL at ${redactUrl(storeUrl)}\n`);
    if (created) {
      io.out(`A service key was created and saved in ${join(dir, "service.key")}; it is printed only this once:\n`);
      io.out(`SVC_GATE_ENGINE_SERVICE_KEY=${key}\n`);
    }
    io.out(`Ready. Create a tenant with: ${readyHint(gateway.url, dir)}\n`);
    const sig = await stop;
    io.err(`svc up: ${sig} received, stopping.\n`);
    // the engine and the log close even when the gateway fails to (its data directory removed,
    // a full disk): the failure is then reported and svc up exits 1 rather than staying up
    await closeAll(
      async () => daily?.close(),
      () => gateway.close(),
      () => engine.close(),
      () => log.close(),
    );
    io.err("svc up: stopped.\n");
    return 0;
  }
}

export async function engineCommand(argv: string[], io: Io): Promise<number> {
  const { help } = parse(argv, {}, { min: 0, max: 0, names: "no arguments" });
  if (help) {
    io.out(ENGINE_HELP + "\n");
    return 0;
  }
  const { loadEngineConfig, startEngine } = await engineModules();
  const stop = waitForStop(io);
  const engine = await startEngine(loadEngineConfig(io.env));
  io.out(`engine: ${engine.url}\n`);
  const sig = await stop;
  io.err(`svc engine: ${sig} received, stopping.\n`);
  await engine.close();
  return 0;
}

export async function gatewayCommand(argv: string[], io: Io): Promise<number> {
  const { help } = parse(argv, {}, { min: 0, max: 0, names: "no arguments" });
  if (help) {
    io.out(GATEWAY_HELP + "\n");
    return 0;
  }
  const { loadGatewayConfig, startGateway } = await gatewayModules();
  const stop = waitForStop(io);
  const gateway = await startGateway(loadGatewayConfig(io.env));
  // SIGHUP (systemctl reload, logrotate's postrotate): reopen the audit and billing logs
  const reopen = () => {
    gateway.reopenLogs().then(
      () => io.err("svc gateway: SIGHUP received, logs reopened.\n"),
      (e: unknown) => io.err(`svc gateway: the logs cannot be reopened (${(e as NodeJS.ErrnoException).code ?? "error"}); writing to the files open before.\n`),
    );
  };
  process.on("SIGHUP", reopen);
  io.out(`gateway: ${gateway.url}\n`);
  const sig = await stop;
  process.off("SIGHUP", reopen);
  io.err(`svc gateway: ${sig} received, stopping.\n`);
  await gateway.close();
  return 0;
}
