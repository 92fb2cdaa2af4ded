// Starts the engine: opens the store (PostgreSQL at SVC_ENGINE_STORE_URL when set, else LMDB
// under SVC_ENGINE_DATA_DIR), listens on HOST:PORT
// (port 0: an ephemeral port), over https when the TLS paths are set.
import { readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { createStore, type Store } from "../../lib/store/index.js";
import { ValidationError } from "../../lib/errors.js";
import { requestEntry } from "../http/entry.js";
import { answerClientErrors } from "../http/client-error.js";
import { MAX_HEADER_BYTES } from "../http/limits.js";
import { createApp, jsonLogger, type Logger } from "./app.js";
import type { EngineConfig } from "./config.js";
import { createEngineMetrics } from "./metrics.js";
import { warmOffload } from "../http/offload.js";
import { listenUnix, unixUrl } from "../http/unix-socket.js";
import { capConnections } from "../http/connection-cap.js";
import { closeGracefully } from "../http/close.js";

export interface RunningEngine {
  url: string;
  port: number;
  /** The gateway's address of the engine's Unix socket (unix:PATH) when SVC_ENGINE_SOCKET is set, else null. */
  socketUrl: string | null;
  store: Store;
  close(): Promise<void>;
}

/**
 * @example const engine = await startEngine(loadEngineConfig()); console.log(engine.url); await engine.close();
 */
export async function startEngine(config: EngineConfig, opts: { logger?: Logger; closeGraceMs?: number } = {}): Promise<RunningEngine> {
  const logger = opts.logger ?? jsonLogger(config.log_level);
  let tls: { cert: Buffer; key: Buffer } | null = null;
  if (config.tls_cert_path && config.tls_key_path) {
    try {
      tls = { cert: readFileSync(config.tls_cert_path), key: readFileSync(config.tls_key_path) };
    } catch {
      throw new ValidationError("SVC_ENGINE_TLS_CERT_PATH or SVC_ENGINE_TLS_KEY_PATH cannot be read.", "SVC_ENGINE_TLS_CERT_PATH");
    }
  }
  const store = await createStore({
    // PostgreSQL not reachable yet: the engine starts and answers 503 store_unavailable until it is
    ...(config.store_url ? { url: config.store_url, timeout_ms: config.store_timeout_ms, lazy_connect: true } : { path: config.data_dir }),
    min_compress_bytes: config.min_compress_bytes,
    min_compression_ratio: config.min_compression_ratio,
    default_tolerance: config.compression_tol,
    default_max_rank: config.max_rank,
    payload_cache_bytes: config.payload_cache_bytes,
  });
  const metrics = createEngineMetrics(store, { defaultMetrics: true });
  const app = createApp({ store, config, logger, metrics });
  // X-SVC-Metadata may carry up to 64 KiB of metadata: above Node's 16 KiB header default.
  // Requests Node cannot parse get the JSON error body too (400, Connection: close).
  const maxHeaderSize = MAX_HEADER_BYTES;
  // Pipelined requests in turn and a missing Host in JSON (server/http/entry.ts).
  const entry = requestEntry(app);
  const serverOf = (withTls: typeof tls) => {
    const s = answerClientErrors(
      withTls
        ? https.createServer({ ...withTls, maxHeaderSize, requireHostHeader: false }, entry)
        : http.createServer({ maxHeaderSize, requireHostHeader: false }, entry),
      maxHeaderSize,
    );
    s.requestTimeout = 0; // large uploads are bounded by size, not time
    return s;
  };
  const server = serverOf(tls);
  // one client address may not hold every connection (the Unix socket's clients are this
  // machine's, let in by the socket file's mode)
  capConnections(server, config.max_connections_per_address, null, () => metrics.connectionRefused());
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(config.port, config.host, () => {
        server.off("error", reject);
        resolve();
      });
    });
  } catch (e) {
    await store.close();
    throw e;
  }
  // the same requests over a Unix socket, plain http, for a gateway on this machine
  let closeSocket: (() => Promise<void>) | null = null;
  if (config.socket_path !== null) {
    try {
      closeSocket = await listenUnix(serverOf(null), config.socket_path, "SVC_ENGINE_SOCKET", opts.closeGraceMs);
    } catch (e) {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await store.close();
      throw e;
    }
  }
  const port = (server.address() as AddressInfo).port;
  const host = config.host.includes(":") ? `[${config.host}]` : config.host;
  const url = `${tls ? "https" : "http"}://${host}:${port}`;
  logger.info({ msg: "engine listening", url, ...(config.socket_path !== null ? { socket: config.socket_path } : {}), storage: store.storage });
  warmOffload(); // the worker thread for large bodies, ready before the first one

  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    socketUrl: config.socket_path === null ? null : unixUrl(config.socket_path),
    store,
    close: () =>
      (closing ??= (async () => {
        // the requests under way are answered before the store closes
        await Promise.all([closeGracefully(server, opts.closeGraceMs), closeSocket?.()]);
        await store.close();
      })()),
  };
}
