// Reads of large LMDB payloads off the event loop: one worker thread per store
// (lib/store/lmdb-reader-worker.ts), started at the first large read, copies a value of
// payload_large out of the environment and moves the copy here. The caller falls back to a
// read on the event loop when the worker cannot answer (it failed, or the store is closing).
import { Worker } from "node:worker_threads";
import { workerCode } from "../worker-code.js";

/** Reads answered by reader threads since the process started (tests check the thread did the work). */
export const largeReaderStats = { answered: 0 };

export class LargeReader {
  readonly #path: string;
  #worker: Worker | null = null;
  #pending = new Map<number, (bytes: Uint8Array | undefined) => void>();
  #next = 1;
  #closed = false;

  constructor(path: string) {
    this.#path = path;
  }

  #start(): Worker {
    const w = new Worker(workerCode(import.meta.url, "lmdb-reader-worker"), { eval: true, workerData: { path: this.#path } });
    const fail = () => {
      if (this.#worker === w) this.#worker = null; // the next read starts another
      for (const done of this.#pending.values()) done(undefined);
      this.#pending.clear();
    };
    w.on("message", (m: { id: number; bytes?: Uint8Array } | { ready: true }) => {
      if ("ready" in m) return;
      const done = this.#pending.get(m.id);
      this.#pending.delete(m.id);
      if (this.#pending.size === 0) w.unref();
      done?.(m.bytes);
    });
    w.on("error", fail);
    w.on("exit", fail);
    w.unref();
    return w;
  }

  /** The value of payload_large under `key` as a Buffer of its own; undefined when absent or when the worker could not answer. */
  read(key: Buffer): Promise<Buffer | undefined> {
    if (this.#closed) return Promise.resolve(undefined);
    const w = (this.#worker ??= this.#start());
    const id = this.#next++;
    return new Promise((resolve) => {
      this.#pending.set(id, (b) => {
        if (b) largeReaderStats.answered++;
        resolve(b ? Buffer.from(b.buffer, b.byteOffset, b.byteLength) : undefined);
      });
      w.ref();
      w.postMessage({ id, key });
    });
  }

  /** Ends the worker (it closes its handle on the environment first). */
  async close(): Promise<void> {
    this.#closed = true;
    const w = this.#worker;
    this.#worker = null;
    if (!w) return;
    const exited = new Promise<void>((resolve) => w.once("exit", () => resolve()));
    w.postMessage({ close: true });
    const timer = setTimeout(() => void w.terminate(), 5_000);
    await exited;
    clearTimeout(timer);
  }
}
