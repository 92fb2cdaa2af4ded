// The main-thread side of receipt-worker.ts: a BatchBuilder for the chain that builds
// receipts in a worker thread.
import { Worker } from "node:worker_threads";
import type { BatchBuilder, BatchResult } from "./chain.js";
import { fingerprintOf, type BackendName, type KeyPair } from "./signer.js";
import { workerCode } from "../../lib/worker-code.js";

export interface ReceiptWorker {
  readonly fingerprint: string;
  /** Inputs are PreparedReceipt (receipt.ts); values are the receipts' JSON text. */
  readonly buildBatch: BatchBuilder;
  /** False once the worker has failed or exited. */
  readonly healthy: boolean;
  close(): Promise<void>;
}

/**
 * Starts the worker with a copy of `keyPair`. From the TypeScript sources (tsx) the worker
 * registers tsx itself; from dist/ it is plain JavaScript.
 */
export async function createReceiptWorker(backend: BackendName, keyPair: KeyPair): Promise<ReceiptWorker> {
  const worker = new Worker(workerCode(import.meta.url, "receipt-worker"), {
    eval: true,
    workerData: { backend, publicKey: keyPair.publicKey, secretKey: keyPair.secretKey },
  });
  const pending = new Map<number, { resolve: (r: BatchResult[]) => void; reject: (e: Error) => void }>();
  let nextId = 1;
  let failed: Error | null = null;
  const failAll = (e: Error): void => {
    failed ??= e;
    for (const p of pending.values()) p.reject(e);
    pending.clear();
  };
  let fingerprint: string;
  try {
    fingerprint = await new Promise<string>((resolve, reject) => {
      worker.once("error", () => reject(new Error("The receipt worker failed to start.")));
      worker.once("message", (m: { ready?: boolean; fingerprint?: string }) =>
        m.ready && m.fingerprint ? resolve(m.fingerprint) : reject(new Error("The receipt worker failed to start.")),
      );
    });
  } catch (e) {
    await worker.terminate();
    throw e;
  }
  if (fingerprint !== fingerprintOf(keyPair.publicKey)) {
    await worker.terminate();
    throw new Error("The receipt worker holds another key.");
  }
  worker.on("message", (m: { id: number; results: BatchResult[] }) => {
    const p = pending.get(m.id);
    if (!p) return;
    pending.delete(m.id);
    // inputs were validated and canonicalised before the queue: a receipt the worker cannot
    // build is an internal failure (500), and it took no serial
    p.resolve(m.results.map((r) => ("error" in r ? { error: new Error(String(r.error)) } : r)));
  });
  worker.on("error", () => failAll(new Error("The receipt worker failed.")));
  worker.on("exit", () => failAll(new Error("The receipt worker exited.")));
  worker.unref();
  return {
    fingerprint,
    get healthy() {
      return failed === null;
    },
    buildBatch(inputs, start) {
      if (failed) return Promise.reject(failed);
      const id = nextId++;
      return new Promise<BatchResult[]>((resolve, reject) => {
        pending.set(id, { resolve, reject });
        worker.postMessage({ id, start, items: inputs });
      });
    },
    async close() {
      await worker.terminate();
    },
  };
}
