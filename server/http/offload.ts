// Large bodies are worked on off the event loop. Parsing and checking a JSON body, decoding or
// encoding its base64 and hashing it take time in proportion to its size (about 1.5 s for a
// 100 MiB JSON put on a 2-core machine), and a server's event loop serves every tenant: a body
// of OFFLOAD_MIN_BYTES or more is handed to a small pool of worker threads instead, its bytes
// moved there and back without a copy, and the loop goes on answering other requests. Smaller
// bodies are worked on in place, where a thread hop would cost more than the work. The same
// functions (server/http/body-prepare.ts) run either way, so the answer and any error are the same.
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { PayloadTooLargeError, SvcError, ValidationError, type ErrorCode } from "../../lib/errors.js";
import type { Operation } from "./operations.js";
import { prepareEngineJson, prepareGatewayJson, requestHash } from "./body-prepare.js";
import { workerCode } from "../../lib/worker-code.js";

/** Bodies (and JSON answers) of at least this many bytes are worked on in a worker thread. */
export const OFFLOAD_MIN_BYTES = 256 * 1024;

/** Worker threads of the pool: one per core but one, at least 2, at most 4. */
export const OFFLOAD_THREADS = Math.max(2, Math.min(4, availableParallelism() - 1));

/**
 * Heap of each worker, in MiB: a body that needs more to be read (a JSON text of millions of
 * small values) ends that worker alone, and its request gets a 413; the process and its
 * event loop go on. The largest upload (base64 of 100 MiB) needs about 300 MiB.
 */
export const OFFLOAD_HEAP_MIB = 1024;
let heapMib = OFFLOAD_HEAP_MIB;

/** The heap of workers started from now on (tests: a small one shows what a body too large to read gets). */
export function setOffloadHeap(mib: number): void {
  heapMib = mib;
}

/** A job for a worker: `path` is the route (engine-json) or operation (gateway-json); `prefix` that of a request hash. */
export interface OffloadJob {
  id: number;
  op: "engine-json" | "gateway-json" | "hash" | "base64";
  bytes: Uint8Array;
  path?: string;
  prefix?: string;
  /** The bytes come back with the answer (they were moved to the worker). */
  giveBack?: boolean;
}

export type OffloadReply =
  | { id: number; ok: true; value?: unknown; hash?: string; bytes?: Uint8Array }
  | { id: number; ok: false; error: { code: ErrorCode; message: string; extra: Record<string, unknown> }; bytes?: Uint8Array };

type JobInput = Omit<OffloadJob, "id">;

interface Slot {
  worker: Worker;
  pending: Map<number, (r: OffloadReply | Error) => void>;
  /** Whether the job it runs is a large one. */
  large: boolean;
}

/**
 * Jobs of at least this many bytes are large: at most LARGE_SLOTS workers run them at once, so
 * that a smaller body (another tenant's, say) never waits behind them, only behind other small
 * ones (a 4 MiB JSON body is read in tens of milliseconds, a 100 MiB one in about a second).
 */
export const OFFLOAD_LARGE_BYTES = 4 * 1024 * 1024;
const LARGE_SLOTS = Math.max(1, OFFLOAD_THREADS - 1);

/** A job waiting for a worker, with what settles its promise. */
interface Waiting {
  job: OffloadJob;
  move: boolean;
  done: (r: OffloadReply | Error) => void;
}

let nextId = 1;
const slots: Slot[] = [];
/** Jobs not yet handed to a worker, oldest first: a worker runs one job at a time. */
const waiting: Waiting[] = [];
/** Jobs run in a worker since the process started, and their bytes (svc_engine_offload_* and svc_gate_offload_* in /metrics). */
export const offloadStats = { jobs: 0, bytes: 0 };

function startWorker(): Slot {
  const worker = new Worker(workerCode(import.meta.url, "offload-worker"), { eval: true, resourceLimits: { maxOldGenerationSizeMb: heapMib } });
  const slot: Slot = { worker, pending: new Map(), large: false };
  const fail = (e?: unknown) => {
    const i = slots.indexOf(slot);
    if (i >= 0) slots.splice(i, 1); // the next job starts a new worker
    const err =
      (e as { code?: string } | undefined)?.code === "ERR_WORKER_OUT_OF_MEMORY"
        ? new PayloadTooLargeError(
            "The request body needs more memory to read than the server gives one body; send large payloads as base64 (data_b64, vector_b64) or as application/octet-stream.",
          )
        : new Error("The body worker stopped.");
    for (const done of slot.pending.values()) done(err);
    slot.pending.clear();
    dispatch();
  };
  worker.on("message", (m: OffloadReply | { ready: true }) => {
    if ("ready" in m) return;
    const done = slot.pending.get(m.id);
    if (!done) return;
    slot.pending.delete(m.id);
    if (slot.pending.size === 0) worker.unref();
    done(m);
    dispatch();
  });
  worker.on("error", (e) => fail(e));
  worker.on("exit", () => fail());
  worker.unref();
  return slot;
}

/** An idle worker; a new one while the pool is not full; else none. */
function idleSlot(): Slot | undefined {
  const idle = slots.find((s) => s.pending.size === 0);
  if (idle || slots.length >= OFFLOAD_THREADS) return idle;
  const s = startWorker();
  slots.push(s);
  return s;
}

/**
 * Hands waiting jobs to idle workers, oldest first, each to one worker at a time; a large job
 * waits while LARGE_SLOTS workers run large ones, and the small jobs behind it go ahead.
 */
function dispatch(): void {
  while (waiting.length > 0) {
    const largeBusy = slots.filter((s) => s.large && s.pending.size > 0).length;
    const i = waiting.findIndex((w) => w.job.bytes.byteLength < OFFLOAD_LARGE_BYTES || largeBusy < LARGE_SLOTS);
    if (i < 0) return;
    const slot = idleSlot();
    if (!slot) return;
    const [w] = waiting.splice(i, 1);
    const { job, move, done } = w!;
    slot.large = job.bytes.byteLength >= OFFLOAD_LARGE_BYTES;
    slot.pending.set(job.id, done);
    slot.worker.ref();
    slot.worker.postMessage(job, move ? [job.bytes.buffer as ArrayBuffer] : []);
  }
}

/** What the pool is doing: jobs running (of them large ones) and jobs waiting for a worker. */
export function offloadQueue(): { running: number; runningLarge: number; waiting: number; waitingLarge: number } {
  const busy = slots.filter((s) => s.pending.size > 0);
  return {
    running: busy.length,
    runningLarge: busy.filter((s) => s.large).length,
    waiting: waiting.length,
    waitingLarge: waiting.filter((w) => w.job.bytes.byteLength >= OFFLOAD_LARGE_BYTES).length,
  };
}

/** Starts the pool's first worker ahead of the first large body (a server calls it at start). */
export function warmOffload(): void {
  if (slots.length === 0) slots.push(startWorker());
}

/** Ends the pool's workers (tests; a server's process ends them with it). */
export async function closeOffload(): Promise<void> {
  const all = slots.splice(0);
  await Promise.all(all.map((s) => s.worker.terminate()));
}

/** Bytes that can be moved to another thread: their own, whole ArrayBuffer (else a copy that is). */
function movable(b: Uint8Array): Uint8Array {
  return b.byteOffset === 0 && b.buffer instanceof ArrayBuffer && b.byteLength === b.buffer.byteLength ? b : new Uint8Array(b);
}

/**
 * Runs a job in a worker; `move` moves the job's bytes there (they are unusable here until the
 * worker gives them back, with `giveBack`) instead of copying them.
 */
function runJob(input: JobInput, move: boolean): Promise<Extract<OffloadReply, { ok: true }>> {
  const id = nextId++;
  const job: OffloadJob = { ...input, id, bytes: move ? movable(input.bytes) : input.bytes };
  offloadStats.jobs++;
  offloadStats.bytes += job.bytes.byteLength;
  return new Promise((resolve, reject) => {
    const done = (r: OffloadReply | Error) => {
      if (r instanceof Error) return reject(r); // a PayloadTooLargeError when the worker ran out of heap
      if (r.ok) return resolve(r);
      const { code, message, extra } = r.error;
      reject(
        code === "bad_request" ? new ValidationError(message, typeof extra.field === "string" ? extra.field : undefined) : new SvcError(code, message, extra),
      );
    };
    waiting.push({ job, move, done });
    dispatch();
  });
}

/** A Buffer over the same memory (payloads given to the store as Buffers are raw bytes). */
export const asBuffer = (b: Uint8Array): Buffer => (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength));

/**
 * The engine's form of a JSON body (prepareEngineJson) and, with `prefix`, its request hash for
 * an idempotent write. The body's bytes are moved to the worker: the caller must not use `raw` after.
 * @example const { value, hash } = await prepareEngineBody("/v1/put", raw);
 */
export async function prepareEngineBody(path: string, raw: Uint8Array, prefix?: string): Promise<{ value: unknown; hash?: string }> {
  if (raw.byteLength < OFFLOAD_MIN_BYTES) return { value: prepareEngineJson(path, raw), hash: prefix === undefined ? undefined : requestHash(prefix, raw) };
  const r = await runJob({ op: "engine-json", path, bytes: raw, prefix }, true);
  return { value: r.value, hash: r.hash };
}

/**
 * The gateway's reading of a JSON body (prepareGatewayJson) and the body's bytes, which it
 * forwards: moved to the worker and back, so use the returned `bytes`, not `raw`.
 */
export async function prepareGatewayBody(op: Operation, raw: Buffer): Promise<{ namespaces: string[]; device?: string; bytes: Buffer }> {
  if (raw.byteLength < OFFLOAD_MIN_BYTES) return { ...prepareGatewayJson(op, raw), bytes: raw };
  const r = await runJob({ op: "gateway-json", path: op, bytes: raw, giveBack: true }, true);
  return { ...(r.value as { namespaces: string[]; device?: string }), bytes: asBuffer(r.bytes!) };
}

/**
 * The request hash of an idempotent write (requestHash) and the body, moved to the worker and
 * back when large: use the returned bytes, not `body`.
 */
export async function hashBody(prefix: string, body: Buffer): Promise<{ hash: string; bytes: Buffer }> {
  if (body.byteLength < OFFLOAD_MIN_BYTES) return { hash: requestHash(prefix, body), bytes: body };
  const r = await runJob({ op: "hash", prefix, bytes: body, giveBack: true }, true);
  return { hash: r.hash!, bytes: asBuffer(r.bytes!) };
}

/** The base64 text of `bytes` as ASCII bytes (copied to the worker when large; `bytes` stay usable). */
export async function base64Bytes(bytes: Uint8Array): Promise<Buffer> {
  if (bytes.byteLength < OFFLOAD_MIN_BYTES) return Buffer.from(asBuffer(bytes).toString("base64"), "latin1");
  const r = await runJob({ op: "base64", bytes }, false);
  return asBuffer(r.value as Uint8Array);
}
