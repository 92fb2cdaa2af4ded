// Starts the appliance: backend, first boot, chain, app, listener.
import { existsSync, readFileSync } from "node:fs";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createApp, type LogFn } from "./app.js";
import { FileChainStore, ReceiptChain } from "./chain.js";
import type { ProvenanceConfig } from "./config.js";
import { bootstrap, hashSecret, paths, type BootResult } from "./keys.js";
import { createMetrics } from "./metrics.js";
import { createBackend, createSigner, createWorkerSigner, selfTest } from "./signer.js";

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
  opts: { log?: LogFn; clock?: () => Date } = {},
): Promise<RunningProvenance> {
  const log = opts.log ?? stderrLog;
  const backend = await createBackend(config.backend);
  const boot = await bootstrap(config, backend);
  const chain = await ReceiptChain.open(new FileChainStore(paths(config.home).chain));
  const signer = createSigner(backend, boot.keyring.active);
  // receipts are signed in a worker thread so that HTTP work overlaps with ML-DSA
  const asyncSigner = await createWorkerSigner(config.backend, boot.keyring.active);
  const app = createApp({
    keyring: boot.keyring,
    signer,
    asyncSigner,
    backend,
    backendStatus: selfTest(backend),
    chain,
    adminKeySha256: boot.adminKeySha256,
    metricsTokenSha256: config.metricsToken ? hashSecret(config.metricsToken) : null,
    metrics: createMetrics({ defaultMetrics: true }),
    clock: opts.clock ?? (() => new Date()),
    version: applianceVersion(),
    log,
  });
  const server = await new Promise<Server>((resolve, reject) => {
    // express 5 hands listen errors (EADDRINUSE, EACCES) to the callback
    const s = app.listen(config.port, config.host, (err?: Error) => (err ? reject(err) : resolve(s)));
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
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await asyncSigner.close();
    },
  };
}
