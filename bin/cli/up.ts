// `svc up` (engine + gateway on an embedded store, one command), `svc engine` and
// `svc gateway` (one process each, configured by environment). All three run until
// SIGINT/SIGTERM, then close their listeners and the store and exit 0.
import { randomBytes } from "node:crypto";
import { mkdir, open, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { intFlag, parse, UsageError, type Io } from "./common.js";

// the servers are loaded only when a command runs them, so that --help and usage errors stay fast
const engineModules = async () => ({ ...(await import("../../server/engine/config.js")), ...(await import("../../server/engine/server.js")) });
const gatewayModules = async () => ({ ...(await import("../../server/gateway/config.js")), ...(await import("../../server/gateway/server.js")) });

export const UP_HELP = `Usage: svc up [--data DIR] [--port 8080] [--engine-port 8000] [--redis URL] [--store postgres://...]

Runs an engine on its embedded store under DIR/engine (default ./svc-data) and a gateway in
front of it. --store keeps the tensors in that PostgreSQL database instead (tables created on
first connect), so that several engines can share them. On the first run that starts, a service key is created, saved as DIR/service.key
(mode 0600) and printed once as SVC_GATE_ENGINE_SERVICE_KEY=<key>; later runs reuse it (a run
that fails to start saves no key). A key in the environment variable
SVC_GATE_ENGINE_SERVICE_KEY is used instead when set. Port 0 picks free ports; the URLs
actually bound are printed. --redis keeps tenants, usage and rate-limit counters in Redis
instead of DIR/gate. With SVC_ENGINE_TLS_CERT_PATH and SVC_ENGINE_TLS_KEY_PATH the engine
serves https and the gateway trusts that certificate (or SVC_GATE_ENGINE_CA_PATH when set).
Other SVC_ENGINE_* and SVC_GATE_* variables apply as usual. Ctrl-C (SIGINT) or SIGTERM stops
both cleanly.`;

export const ENGINE_HELP = `Usage: svc engine

Runs the storage engine alone, configured by the SVC_ENGINE_* variables (spec/api.md section 1;
for example SVC_ENGINE_PORT, SVC_ENGINE_DATA_DIR or SVC_ENGINE_STORE_URL, SVC_ENGINE_API_KEYS). Stops on SIGINT/SIGTERM.`;

export const GATEWAY_HELP = `Usage: svc gateway

Runs the gateway alone, configured by the SVC_GATE_* variables (for example SVC_GATE_PORT,
SVC_GATE_ENGINE_URL, SVC_GATE_ENGINE_SERVICE_KEY, SVC_GATE_REDIS_URL; SVC_GATE_ENGINE_CA_PATH
for an https engine whose certificate the system does not trust). Stops on SIGINT/SIGTERM.`;

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
  const { values, help } = parse(argv, {
    data: { type: "string" }, port: { type: "string" }, "engine-port": { type: "string" }, redis: { type: "string" }, store: { type: "string" },
  }, { min: 0, max: 0, names: "no arguments" });
  if (help) { io.out(UP_HELP + "\n"); return 0; }
  const dir = resolve((values.data as string | undefined) ?? "./svc-data");
  const port = intFlag(values.port as string | undefined, "port", 0, 65535) ?? 8080;
  const enginePort = intFlag(values["engine-port"] as string | undefined, "engine-port", 0, 65535) ?? 8000;
  const redis = values.redis as string | undefined;
  if (redis !== undefined && !/^rediss?:\/\//.test(redis)) throw new UsageError("--redis must be a redis:// or rediss:// URL.");
  const storeUrl = values.store as string | undefined;
  if (storeUrl !== undefined && !/^postgres(ql)?:\/\/\S+$/.test(storeUrl)) throw new UsageError("--store must be a postgres:// or postgresql:// URL.");

  const { loadEngineConfig, startEngine } = await engineModules();
  const { loadGatewayConfig, startGateway } = await gatewayModules();
  const stop = waitForStop(io); // before anything starts, so that an early Ctrl-C also shuts down cleanly
  const { key, created } = await serviceKeyFor(dir, io.env);
  // flags and DIR decide the layout; other variables of the environment pass through
  const engineEnv: NodeJS.ProcessEnv = {
    ...io.env,
    SVC_ENGINE_HOST: io.env.SVC_ENGINE_HOST || "127.0.0.1",
    SVC_ENGINE_PORT: String(enginePort),
    SVC_ENGINE_DATA_DIR: join(dir, "engine"),
    ...(storeUrl ? { SVC_ENGINE_STORE_URL: storeUrl } : {}),
    SVC_ENGINE_API_KEYS: key,
    SVC_ENGINE_REQUIRE_AUTH: "true",
  };
  const engineCfg = loadEngineConfig(engineEnv);
  const engine = await startEngine(engineCfg);
  let gateway;
  try {
    const gateEnv: NodeJS.ProcessEnv = {
      ...io.env,
      SVC_GATE_PORT: String(port),
      // https when the engine has its own certificate (SVC_ENGINE_TLS_*): the gateway trusts that
      // certificate unless SVC_GATE_ENGINE_CA_PATH names other CAs
      SVC_GATE_ENGINE_URL: engine.url,
      ...(engineCfg.tls_cert_path ? { SVC_GATE_ENGINE_CA_PATH: io.env.SVC_GATE_ENGINE_CA_PATH || engineCfg.tls_cert_path } : {}),
      SVC_GATE_ENGINE_SERVICE_KEY: key,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: io.env.SVC_GATE_AUDIT_LOG_PATH || join(dir, "audit.jsonl"),
      ...(redis ? { SVC_GATE_REDIS_URL: redis } : {}),
    };
    gateway = await startGateway(loadGatewayConfig(gateEnv));
  } catch (e) {
    await engine.close();
    throw e;
  }
  if (created) {
    // saved only now that both servers are up, and printed right after: a failed start-up
    // leaves no file, and the next run creates (and prints) a key of its own
    try {
      await saveServiceKey(dir, key);
    } catch (e) {
      await gateway.close();
      await engine.close();
      throw e;
    }
  }
  io.out(`engine:  ${engine.url}\ngateway: ${gateway.url}\ndata:    ${dir}\n`);
  if (storeUrl) io.out(`store:   PostgreSQL at ${redactUrl(storeUrl)}\n`);
  if (created) {
    io.out(`A service key was created and saved in ${join(dir, "service.key")}; it is printed only this once:\n`);
    io.out(`SVC_GATE_ENGINE_SERVICE_KEY=${key}\n`);
  }
  io.out(`Ready. Create a tenant with: SVC_GATE_URL=${gateway.url} svc tenant create NAME\n`);
  const sig = await stop;
  io.err(`svc up: ${sig} received, stopping.\n`);
  await gateway.close();
  await engine.close();
  io.err("svc up: stopped.\n");
  return 0;
}

export async function engineCommand(argv: string[], io: Io): Promise<number> {
  const { help } = parse(argv, {}, { min: 0, max: 0, names: "no arguments" });
  if (help) { io.out(ENGINE_HELP + "\n"); return 0; }
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
  if (help) { io.out(GATEWAY_HELP + "\n"); return 0; }
  const { loadGatewayConfig, startGateway } = await gatewayModules();
  const stop = waitForStop(io);
  const gateway = await startGateway(loadGatewayConfig(io.env));
  io.out(`gateway: ${gateway.url}\n`);
  const sig = await stop;
  io.err(`svc gateway: ${sig} received, stopping.\n`);
  await gateway.close();
  return 0;
}
