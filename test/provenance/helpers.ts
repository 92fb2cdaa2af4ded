// Shared by the provenance tests: a temporary home, an app on an ephemeral port.
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../../server/provenance/app.js";
import { LogChainStore, ReceiptChain } from "../../server/provenance/chain.js";
import { loadConfig, type ProvenanceConfig } from "../../server/provenance/config.js";
import { bootstrap, hashSecret, paths, type BootResult } from "../../server/provenance/keys.js";
import { createMetrics } from "../../server/provenance/metrics.js";
import { createBackend, createSigner, selfTest, type BackendName, type MlDsaBackend } from "../../server/provenance/signer.js";
import { createReceiptWorker, type ReceiptWorker } from "../../server/provenance/worker.js";

export async function tempDir(): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), "svc-prov-"));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export function configFor(dir: string, extra: Record<string, string> = {}): ProvenanceConfig {
  return loadConfig({ SVC_PROVENANCE_HOME: join(dir, "home"), SVC_PROVENANCE_CONFIG: join(dir, "etc", "service.env"), SVC_PROVENANCE_PORT: "0", ...extra });
}

export interface TestApp {
  url: string;
  boot: BootResult;
  adminKey: string;
  logs: string[];
  backend: MlDsaBackend;
  chain: ReceiptChain;
  worker: ReceiptWorker | undefined;
  close: () => Promise<void>;
}

/** Boots a home (or reuses it) and serves createApp on 127.0.0.1:0. */
export async function startApp(
  dir: string,
  opts: {
    backend?: BackendName;
    adminKey?: string;
    metricsToken?: string;
    clock?: () => Date;
    maxBodyBytes?: number;
    maxReceiptBodyBytes?: number;
    bodyBudgetBytes?: number;
    worker?: boolean;
  } = {},
): Promise<TestApp> {
  const config = configFor(dir, opts.backend ? { SVC_PROVENANCE_BACKEND: opts.backend } : {});
  const backend = await createBackend(config.backend);
  const boot = await bootstrap(config, backend);
  const adminKey = boot.adminKey ?? opts.adminKey ?? "";
  const worker = opts.worker ? await createReceiptWorker(config.backend, boot.keyring.active) : undefined;
  const store = new LogChainStore(paths(config.home).chain);
  const chain = await ReceiptChain.open(store, worker?.buildBatch);
  const logs: string[] = [];
  const app = createApp({
    keyring: boot.keyring,
    signer: createSigner(backend, boot.keyring.active),
    backend,
    backendStatus: ((st) => () => (st === "ok" && (worker?.healthy ?? true) ? "ok" : "failing"))(selfTest(backend)),
    chain,
    adminKeySha256: boot.adminKeySha256,
    metricsTokenSha256: opts.metricsToken ? hashSecret(opts.metricsToken) : null,
    metrics: createMetrics(),
    clock: opts.clock ?? (() => new Date()),
    version: "0.1.0-test",
    log: (e) => logs.push(JSON.stringify(e)),
    maxBodyBytes: opts.maxBodyBytes,
    maxReceiptBodyBytes: opts.maxReceiptBodyBytes,
    bodyBudgetBytes: opts.bodyBudgetBytes,
  });
  const server = await new Promise<Server>((resolve) => {
    const s = createServer(app).listen(0, "127.0.0.1", () => resolve(s));
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    boot,
    adminKey,
    logs,
    backend,
    chain,
    worker,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await worker?.close();
      store.close();
    },
  };
}

export async function post(
  url: string,
  body: unknown,
  token?: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: any; headers: Headers; buf: Buffer }> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const buf = Buffer.from(await res.arrayBuffer());
  let json: any = null;
  try {
    json = JSON.parse(buf.toString("utf8"));
  } catch {
    /* not JSON */
  }
  return { status: res.status, json, headers: res.headers, buf };
}

export async function get(url: string, token?: string): Promise<{ status: number; json: any; text: string }> {
  const res = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, json, text };
}

export const sampleArtifact = {
  name: "model.safetensors",
  sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
  size_bytes: 4,
  media_type: "application/octet-stream",
};
