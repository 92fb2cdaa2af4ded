// The receipt chain: serial and previous-receipt hash. Issuance is serialised in-process
// through one queue; the head is made durable (an fdatasync'd line of an append-only log,
// or an atomically replaced file) before any receipt of a batch is handed out. Requests that arrive while
// a batch is being written are signed and committed together (group commit), so one
// fsync covers many receipts without ever returning a receipt whose serial could be
// handed out again after a crash.
import {
  closeSync,
  fchmodSync,
  fdatasync,
  fsyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  truncateSync,
  writeSync,
} from "node:fs";
import { dirname, basename } from "node:path";
import { z } from "zod";
import { writeFileAtomic } from "../../lib/atomic-file.js";
import { isNoSpace, isReadOnlyFs, StorageFullError, StoreUnavailableError, SvcError, systemCode } from "../../lib/errors.js";
import { NotUtf8Error, readUtf8File, utf8Of } from "./text-file.js";

export interface ChainHead {
  /** Serial of the last committed receipt (0 before the first). */
  serial: number;
  /** Hash of the last committed receipt, null before the first. */
  last_receipt_sha256: string | null;
}

/** Where the head lives. */
export interface ChainStore {
  load(): Promise<ChainHead>;
  save(head: ChainHead): Promise<void>;
}

const headSchema = z.strictObject({
  serial: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  last_receipt_sha256: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .nullable(),
});

/** Durable head in one JSON file, replaced atomically. */
export class FileChainStore implements ChainStore {
  readonly path: string;
  constructor(path: string) {
    this.path = path;
  }

  async load(): Promise<ChainHead> {
    let text: string;
    try {
      text = await readUtf8File(this.path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return { serial: 0, last_receipt_sha256: null };
      if (e instanceof NotUtf8Error) throw new Error(`the receipt chain file ${basename(this.path)} is not valid UTF-8`);
      throw new Error(`the receipt chain file ${basename(this.path)} cannot be read`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new Error(`the receipt chain file ${basename(this.path)} is not valid JSON`);
    }
    const r = headSchema.safeParse(parsed);
    if (!r.success) throw new Error(`the receipt chain file ${basename(this.path)} is malformed`);
    if ((r.data.serial === 0) !== (r.data.last_receipt_sha256 === null)) {
      throw new Error(`the receipt chain file ${basename(this.path)} is inconsistent`);
    }
    return r.data;
  }

  async save(head: ChainHead): Promise<void> {
    await writeFileAtomic(this.path, JSON.stringify(head) + "\n", 0o600, { createDir: true });
  }
}

/** The first line of a chain log: the head before any receipt (see writeGenesis). */
const GENESIS_LINE = JSON.stringify({ serial: 0, last_receipt_sha256: null }) + "\n";

/**
 * Starts the chain log at `path` with its genesis line (the head at serial 0), durably, where
 * the log is missing or empty; a log that holds anything is left as it is. Written when a
 * signing key is made, so that a log later found missing or emptied next to that key is told
 * from one that never held a receipt (the appliance then refuses to start rather than hand out
 * serial 1 again under the same key).
 */
export async function writeGenesis(path: string): Promise<void> {
  let size: number;
  try {
    size = statSync(path).size;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    size = 0;
  }
  if (size === 0) await writeFileAtomic(path, GENESIS_LINE, 0o600, { createDir: true });
}

/**
 * Durable head as an append-only log of JSON lines, one per committed batch: a batch costs
 * one write (synchronous, into the page cache) and one fdatasync (on the thread pool), so
 * that a commit is one event-loop hop, not the ten of temp file + rename on a busy server. A torn last line (a crash during
 * the write of a batch that was therefore never answered) is dropped on load; any other bad
 * line stops the start. The first line may be the genesis line (serial 0, written with the
 * key). Past `compactBytes` the log is replaced, atomically, by its last line.
 */
export class LogChainStore implements ChainStore {
  readonly path: string;
  readonly #compactBytes: number;
  #fd: number | null = null;
  #size = 0;
  /** Whole lines found by the last load(): 0 where the log was missing or held none. */
  lines = 0;

  constructor(path: string, opts: { compactBytes?: number } = {}) {
    this.path = path;
    this.#compactBytes = opts.compactBytes ?? 4 * 1024 * 1024;
  }

  async load(): Promise<ChainHead> {
    const name = basename(this.path);
    let bytes: Buffer;
    try {
      bytes = readFileSync(this.path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") {
        this.lines = 0;
        return { serial: 0, last_receipt_sha256: null };
      }
      throw new Error(`the receipt chain log ${name} cannot be read`);
    }
    // the whole lines; a torn last line's bytes are dropped below, whatever they are
    const end = bytes.lastIndexOf(0x0a) + 1;
    let complete: string;
    try {
      complete = utf8Of(bytes.subarray(0, end));
    } catch {
      throw new Error(`the receipt chain log ${name} is not valid UTF-8`);
    }
    let head: ChainHead = { serial: 0, last_receipt_sha256: null };
    const lines = complete.split("\n").slice(0, -1);
    lines.forEach((line, i) => {
      if (i === 0 && line === GENESIS_LINE.slice(0, -1)) return;
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        throw new Error(`line ${i + 1} of the receipt chain log ${name} is not valid JSON`);
      }
      const r = headSchema.safeParse(parsed);
      if (!r.success || r.data.serial === 0 || r.data.last_receipt_sha256 === null) {
        throw new Error(`line ${i + 1} of the receipt chain log ${name} is malformed`);
      }
      if (r.data.serial <= head.serial) throw new Error(`line ${i + 1} of the receipt chain log ${name} is inconsistent: serials must increase`);
      head = r.data;
    });
    if (end < bytes.byteLength) {
      // a torn last line: its batch was never answered; cut it off before appending
      truncateSync(this.path, end);
    }
    this.#size = end;
    this.lines = lines.length;
    return head;
  }

  async save(head: ChainHead): Promise<void> {
    if (this.#fd === null) this.#open();
    const line = Buffer.from(JSON.stringify(head) + "\n", "utf8");
    const fd = this.#fd!;
    try {
      // the write lands in the page cache at once; the flush waits on the thread pool,
      // one event-loop hop, so the main thread keeps serving meanwhile
      let off = 0;
      while (off < line.length) off += writeSync(fd, line, off, line.length - off);
      await new Promise<void>((resolve, reject) => fdatasync(fd, (err) => (err ? reject(err) : resolve())));
    } catch (e) {
      // leave no partial line behind the last good one
      try {
        ftruncateSync(fd, this.#size);
      } catch {
        /* the load will drop a torn last line anyway */
      }
      throw e;
    }
    this.#size += line.length;
    if (this.#size > this.#compactBytes) this.#compact(line);
  }

  /** Closes the log file. */
  close(): void {
    if (this.#fd !== null) closeSync(this.#fd);
    this.#fd = null;
  }

  #open(): void {
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    this.#fd = openSync(this.path, "a", 0o600);
    fchmodSync(this.#fd, 0o600);
  }

  /**
   * Replaces the log by its last line. The head is durable in the log already: a compaction
   * that fails (no space for the new file, say) leaves the log as it is, appended to as before,
   * and is tried again after the next save.
   */
  #compact(lastLine: Buffer): void {
    const tmp = `${this.path}.compact.tmp`;
    try {
      const fd = openSync(tmp, "w", 0o600);
      try {
        for (let off = 0; off < lastLine.length;) off += writeSync(fd, lastLine, off, lastLine.length - off);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, this.path);
    } catch {
      try {
        rmSync(tmp, { force: true });
      } catch {
        /* a file left behind is replaced by the next compaction */
      }
      return;
    }
    // the path names the new file from here: the next line goes there, whatever else fails
    this.close();
    this.#size = lastLine.length;
    try {
      const dfd = openSync(dirname(this.path), "r");
      try {
        fsyncSync(dfd);
      } finally {
        closeSync(dfd);
      }
      this.#open();
    } catch {
      /* the rename may not be durable yet: either file holds this head; the next save opens the log */
    }
  }
}

/** Volatile head, for tests and benchmarks of everything but persistence. */
export class MemoryChainStore implements ChainStore {
  #head: ChainHead;
  saves = 0;
  constructor(head: ChainHead = { serial: 0, last_receipt_sha256: null }) {
    this.#head = { ...head };
  }
  async load(): Promise<ChainHead> {
    return { ...this.#head };
  }
  async save(head: ChainHead): Promise<void> {
    this.saves++;
    this.#head = { ...head };
  }
}

export interface Position {
  serial: number;
  previous: string | null;
}

type Built<T> = { value: T; hash: string };

/** One entry built by a BatchBuilder, or why it could not be (it then takes no serial). */
export type BatchResult = { serial: number; value: unknown; hash: string } | { error: unknown };

/**
 * Builds a whole batch at once, in order, from `start` (for example in a worker thread,
 * so that no round trip per entry is needed): entry i that succeeds gets the next serial
 * and chains to the previous success.
 */
export type BatchBuilder = (inputs: unknown[], start: Position) => Promise<BatchResult[]>;

interface Job<T> {
  build?: (pos: Position) => Built<T> | Promise<Built<T>>;
  input?: unknown;
  resolve: (v: T) => void;
  reject: (e: unknown) => void;
}

const MAX_BATCH = 64;

/** A receipt built on top of a head whose write failed: it was never handed out. */
export class ChainWriteError extends StoreUnavailableError {
  constructor() {
    super("An earlier write of the receipt chain failed, so the receipt was not issued; retry after 1 second.", 1);
    this.name = "ChainWriteError";
  }
}

/**
 * The answer to a failed write of the chain's head: 507 storage_full where the disk has no space
 * (ENOSPC, EDQUOT), 503 store_unavailable for another failure of the file system (EIO, EROFS,
 * ...; a read-only one says so), both with Retry-After; any other error as it is. No receipt of the batch was issued.
 */
export function chainWriteFailure(e: unknown): unknown {
  if (e instanceof SvcError) return e;
  if (isNoSpace(e)) {
    return new StorageFullError("The receipt chain has no disk space left, so no receipt was issued; retry after space is freed.", 30);
  }
  if (isReadOnlyFs(e)) {
    return new StoreUnavailableError("The receipt chain's file system is read-only, so no receipt was issued; retry once it is writable again.", 30);
  }
  if (systemCode(e) !== undefined) {
    return new StoreUnavailableError("The receipt chain could not be written, so no receipt was issued; retry later.", 5);
  }
  return e;
}

/**
 * Hands out positions in the chain one at a time and commits them in batches. While one
 * batch is being written (fsync), the next is built on top of it; it is handed out only
 * after its own write, which follows the first. If a write fails, that batch and every
 * batch built on it are refused and the next batch starts again from the durable head.
 */
export class ReceiptChain {
  #store: ChainStore;
  /** Durable head: every receipt up to here was handed out. */
  #head: ChainHead;
  /** Head including built batches whose write is pending. */
  #tentative: ChainHead;
  /** Bumped on a failed write, so that batches built on the lost state are refused. */
  #generation = 0;
  #queue: Job<unknown>[] = [];
  #draining = false;
  /** Wakes the drain loop when a request arrives while it waits for a write. */
  #wake: (() => void) | null = null;
  #builder: BatchBuilder | null;

  private constructor(store: ChainStore, head: ChainHead, builder: BatchBuilder | null) {
    this.#builder = builder;
    this.#store = store;
    this.#head = head;
    this.#tentative = { ...head };
  }

  /** Opens the chain; with `builder`, entries are added with appendInput and built in batches. */
  static async open(store: ChainStore, builder?: BatchBuilder): Promise<ReceiptChain> {
    return new ReceiptChain(store, await store.load(), builder ?? null);
  }

  /** True when entries are built by a BatchBuilder (use appendInput). */
  get batched(): boolean {
    return this.#builder !== null;
  }

  /** The committed head. */
  get head(): ChainHead {
    return { ...this.#head };
  }

  /**
   * Builds the next entry with `build(position)`, which returns (or resolves to) the value
   * and its hash; resolves once the new head is durable. A build that throws consumes no
   * serial. Builds run one at a time, in order.
   */
  append<T>(build: (pos: Position) => Built<T> | Promise<Built<T>>): Promise<T> {
    if (this.#builder) return Promise.reject(new Error("this chain builds entries in batches: use appendInput"));
    return this.#enqueue<T>({ build });
  }

  /** Adds an entry built from `input` by the chain's BatchBuilder; resolves once durable. */
  appendInput<T>(input: unknown): Promise<T> {
    if (!this.#builder) return Promise.reject(new Error("this chain has no batch builder: use append"));
    return this.#enqueue<T>({ input });
  }

  #enqueue<T>(job: Pick<Job<T>, "build" | "input">): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#queue.push({ ...job, resolve: resolve as (v: unknown) => void, reject } as Job<unknown>);
      if (!this.#draining) void this.#drain();
      else this.#wake?.();
    });
  }

  /** Builds one batch; returns the new tentative head and what was built. */
  async #build(batch: Job<unknown>[]): Promise<{ head: ChainHead; built: Array<[Job<unknown>, unknown]> }> {
    let head = { ...this.#tentative };
    const built: Array<[Job<unknown>, unknown]> = [];
    if (!this.#builder) {
      for (const job of batch) {
        try {
          const { value, hash } = await job.build!({ serial: head.serial + 1, previous: head.last_receipt_sha256 });
          head = { serial: head.serial + 1, last_receipt_sha256: hash };
          built.push([job, value]);
        } catch (e) {
          job.reject(e);
        }
      }
      return { head, built };
    }
    let results: BatchResult[];
    try {
      results = await this.#builder(
        batch.map((j) => j.input),
        { serial: head.serial + 1, previous: head.last_receipt_sha256 },
      );
      if (results.length !== batch.length) throw new Error("the batch builder returned another number of entries");
    } catch (e) {
      for (const job of batch) job.reject(e);
      return { head, built };
    }
    let broken = false;
    batch.forEach((job, i) => {
      const r = results[i]!;
      if (broken) return job.reject(new Error("the batch builder broke the chain"));
      if ("error" in r) return job.reject(r.error);
      if (r.serial !== head.serial + 1) {
        broken = true;
        return job.reject(new Error("the batch builder broke the chain"));
      }
      head = { serial: r.serial, last_receipt_sha256: r.hash };
      built.push([job, r.value]);
    });
    return { head, built };
  }

  async #drain(): Promise<void> {
    this.#draining = true;
    let last: Promise<void> = Promise.resolve();
    let lastDone = true;
    try {
      for (;;) {
        if (this.#queue.length === 0) {
          if (lastDone) break;
          // wait for the pending write, or build the next batch as soon as a request comes
          await Promise.race([last, new Promise<void>((r) => (this.#wake = r))]);
          this.#wake = null;
          continue;
        }
        const batch = this.#queue.splice(0, MAX_BATCH);
        const generation = this.#generation;
        const { head, built } = await this.#build(batch);
        if (built.length === 0) continue;
        if (generation !== this.#generation) {
          // a write failed while this batch was being built on top of it
          for (const [job] of built) job.reject(new ChainWriteError());
          continue;
        }
        this.#tentative = head;
        const prev = last;
        const current = this.#commit(prev, head, generation, built);
        last = current;
        lastDone = false;
        void current.then(() => {
          if (last === current) lastDone = true;
        });
        // at most two batches in flight: the one being written and the one just built
        await prev;
      }
    } finally {
      this.#draining = false;
    }
  }

  async #commit(prev: Promise<void>, head: ChainHead, generation: number, built: Array<[Job<unknown>, unknown]>): Promise<void> {
    await prev;
    if (generation !== this.#generation) {
      for (const [job] of built) job.reject(new ChainWriteError());
      return;
    }
    try {
      await this.#store.save(head);
    } catch (e) {
      // nothing of this batch left the process: start again from the durable head
      this.#generation++;
      this.#tentative = { ...this.#head };
      const failure = chainWriteFailure(e);
      for (const [job] of built) job.reject(failure);
      return;
    }
    this.#head = head;
    for (const [job, value] of built) job.resolve(value);
  }
}
