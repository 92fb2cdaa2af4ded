// Starts the appliance: backend, first boot, chain, app, listener.
import { existsSync, readFileSync } from "node:fs";
import { open, readFile, unlink } from "node:fs/promises";
import { createServer, maxHeaderSize as NODE_HEADER_BYTES, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import net, { type AddressInfo } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { answerClientErrors } from "../http/client-error.js";
import { requestEntry } from "../http/entry.js";
import { createApp, type LogFn } from "./app.js";
import { LogChainStore, ReceiptChain } from "./chain.js";
import { ConfigError, type ProvenanceConfig } from "./config.js";
import { bootstrap, hashSecret, paths, type BootResult } from "./keys.js";
import { createMetrics } from "./metrics.js";
import { createBackend, createSigner, selfTest } from "./signer.js";
import { createReceiptWorker, type ReceiptWorker } from "./worker.js";
import { processAlive } from "../../lib/process-alive.js";
import { CLOSE_GRACE_MS } from "../http/close.js";

/** The package version, for bundles and /health (found by walking up to package.json). */
export function applianceVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const p = join(dir, "package.json");
    if (existsSync(p)) {
      try {
        const pkg = JSON.parse(readFileSync(p, "utf8")) as { name?: string; version?: string };
        if (pkg.name === "svc-tensor" && pkg.version) return pkg.version;
      } catch {
        /* keep looking */
      }
    }
    dir = dirname(dir);
  }
  return "unknown";
}

/**
 * Takes the state directory for this process: two appliances on one home would hand out
 * the same serials. A lock left by a process that no longer runs is taken over.
 */
const heldHere = new Set<string>();

export async function lockHome(home: string): Promise<() => Promise<void>> {
  const path = join(home, "serve.lock");
  if (heldHere.has(path)) throw new ConfigError(`Another svc-provenance process (pid ${process.pid}) is serving this state directory.`);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fh = await open(path, "wx", 0o600);
      await fh.chmod(0o600); // exact, whatever the umask
      await fh.writeFile(`${process.pid}\n`);
      await fh.close();
      heldHere.add(path);
      return async () => {
        heldHere.delete(path);
        await unlink(path).catch(() => undefined);
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw new ConfigError("The state directory cannot be locked.");
    }
    const pid = Number((await readFile(path, "utf8").catch(() => "")).trim());
    if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && processAlive(pid)) {
      throw new ConfigError(`Another svc-provenance process (pid ${pid}) is serving this state directory.`);
    }
    await unlink(path).catch(() => undefined); // stale: its process is gone
  }
  throw new ConfigError("The state directory cannot be locked.");
}

export interface RunningProvenance {
  url: string;
  port: number;
  boot: BootResult;
  server: Server;
  close(): Promise<void>;
}

/** Stderr JSON lines; callers pass their own sink in tests. */
export const stderrLog: LogFn = (entry) => {
  process.stderr.write(JSON.stringify({ ts: new Date().toISOString(), service: "svc-provenance", ...entry }) + "\n");
};

export async function startProvenance(
  config: ProvenanceConfig,
  opts: {
    log?: LogFn;
    clock?: () => Date;
    /** Called with a newly created admin key right after first boot, before anything can fail. */
    onAdminKey?: (key: string) => void;
  } = {},
): Promise<RunningProvenance> {
  const log = opts.log ?? stderrLog;
  const backend = await createBackend(config.backend);
  const boot = await bootstrap(config, backend);
  for (const w of boot.warnings) log({ msg: "warning", detail: w });
  // shown at once: a later failure (a busy port) must not lose the only copy of the key
  if (boot.adminKey) opts.onAdminKey?.(boot.adminKey);
  const unlock = await lockHome(config.home);
  let chain: ReceiptChain;
  let worker: ReceiptWorker;
  let store: LogChainStore;
  try {
    // receipts are built and signed in a worker thread, a batch at a time, so that HTTP
    // work overlaps with ML-DSA
    worker = await createReceiptWorker(config.backend, boot.keyring.active);
    store = new LogChainStore(paths(config.home).chain);
    chain = await ReceiptChain.open(store, worker.buildBatch).catch(async (e) => {
      await worker.close();
      throw e;
    });
    if (store.lines === 0) {
      // a key is made with the log's genesis line: a log missing or emptied since may have
      // held receipts, and starting again at serial 1 would fork the chain under this key
      await worker.close();
      throw new ConfigError(
        `The receipt chain log ${store.path} is missing or empty while the signing key ${boot.keyring.active.fingerprint} already exists, so receipts may have been issued under that key: restore chain.log from this appliance's last state, or run svc-provenance rotate-key to start a new chain under a new key.`,
      );
    }
  } catch (e) {
    await unlock();
    throw e;
  }
  const signer = createSigner(backend, boot.keyring.active);
  const app = createApp({
    keyring: boot.keyring,
    signer,
    backend,
    // the start-up self-test, and whether the receipt worker still runs
    backendStatus: ((selfTestResult) => () => (selfTestResult === "ok" && worker.healthy ? "ok" : "failing"))(selfTest(backend)),
    chain,
    adminKeySha256: boot.adminKeySha256,
    metricsTokenSha256: config.metricsToken ? hashSecret(config.metricsToken) : null,
    metrics: createMetrics({ defaultMetrics: true }),
    clock: opts.clock ?? (() => new Date()),
    version: applianceVersion(),
    log,
    maxBodyBytes: config.maxBodyBytes,
    maxReceiptBodyBytes: config.maxReceiptBodyBytes,
    bodyBudgetBytes: config.bodyBudgetBytes,
    bodyRate: { minBytesPerS: config.bodyMinBytesPerS, graceMs: config.bodyGraceS * 1000 },
  });
  let server: Server;
  try {
    server = await new Promise<Server>((resolve, reject) => {
      // pipelined requests in turn, and what Node answers bare (a missing Host, a request it
      // cannot parse, an unknown Expect, CONNECT) with the JSON error body, as the engine does
      const s = answerClientErrors(createServer({ requireHostHeader: false }, requestEntry(app)), NODE_HEADER_BYTES);
      s.once("error", reject); // EADDRINUSE, EACCES
      s.listen(config.port, config.host, () => {
        s.off("error", reject);
        resolve(s);
      });
    });
  } catch (e) {
    await worker.close();
    store.close();
    await unlock();
    const code = (e as NodeJS.ErrnoException).code;
    throw new ConfigError(
      code === "EADDRINUSE"
        ? `Port ${config.port} on ${config.host} is in use (SVC_PROVENANCE_HOST, SVC_PROVENANCE_PORT).`
        : `Cannot listen on ${config.host}:${config.port} (SVC_PROVENANCE_HOST, SVC_PROVENANCE_PORT).`,
    );
  }
  let closing = false;
  server.prependListener("request", (_req: IncomingMessage, res: ServerResponse) => {
    if (closing) res.shouldKeepAlive = false;
  });
  const port = (server.address() as AddressInfo).port;
  const host = config.host.includes(":") ? `[${config.host}]` : config.host;
  log({ msg: "listening", host: config.host, port, backend: backend.name, fingerprint: signer.fingerprint, serial: chain.head.serial });
  return {
    url: `http://${host}:${port}`,
    port,
    boot,
    server,
    close: async () => {
      // Requests in flight, and those whose bytes have arrived, are answered (their receipts
      // written and sent) before the worker and the chain close: new connections are refused,
      // every answer from now on closes its connection, and a connection left idle goes at the
      // keep-alive timeout; one still open after CLOSE_GRACE_MS is cut. (http.Server's close()
      // would end every connection without a parsed request at once, one whose request is
      // still unread in its buffer included.)
      closing = true;
      await new Promise<void>((resolve) => {
        const cut = setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS);
        net.Server.prototype.close.call(server, () => {
          clearTimeout(cut);
          resolve();
        });
      });
      await worker.close();
      store.close();
      await unlock();
    },
  };
}
