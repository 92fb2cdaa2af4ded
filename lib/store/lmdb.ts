// LMDB implementation of the storage interface: one environment under `path` with named
// databases: `records` (msgpack: heads and version records) and the payload databases
// below, so reading metadata never touches payloads.
//
// Payload layout (format 2; docs/store.md "Storage layout"). LMDB keeps a value larger than
// about half a page in whole overflow pages of its own, and B-tree pages filled by random
// keys (payload hashes) are about half full; payloads of a few KB lost 15-20% that way. So:
//   - `payload_bodies`: the largest prefix of a payload that fills whole overflow pages
//     exactly (k * pageSize - PAGE_HEADER bytes), under an append-ordered 6-byte id.
//   - `payload_stream`: the rest of every payload (less than a page; small payloads whole),
//     appended to a byte stream cut into segments of exactly one overflow page each,
//     under append-ordered 6-byte segment numbers. A tail may span two segments.
//   - `payload_index`: payload id (SHA-256, 32 bytes binary) -> where its body and tail are.
//   - `payload_large`: payloads of LARGE_BYTES or more, whole, under a key of their own
//     (8-byte time written, 8 random bytes); the index entry (format 3) names the key.
// Everything a put writes is in the same LMDB write transaction as its records, so
// atomicity, durability (fsync before the commit resolves) and cross-process serialisation
// are LMDB's, as before; except a large payload, which is written before that transaction by
// lmdb-js's write thread (copying it into LMDB's pages on the event loop would hold the loop
// for milliseconds per MiB), and only then named by the index in the transaction. A large
// value no index entry names (its put failed, lost a race to the same payload, or the process
// died between the two commits) is removed by the put itself, or by compact once it is an
// hour old. Removing payloads (compact) leaves dead bytes in stream segments; at the end of
// its removals compact drops segments with nothing live and moves the live tails out of
// segments less than RELOCATE_BELOW full, so dead space stays bounded.
//
// Stores written before format 2 kept each payload whole in `payloads` (keyed by the hex
// hash). That database is still read (and cleaned by compact), never written: old stores
// open and read as they are, with no migration step, and new payloads go to the new layout.
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, statSync, statfsSync, unlinkSync } from "node:fs";
import { createHash, randomFillSync } from "node:crypto";
import { dirname, join, resolve } from "node:path";
import { open, type Database, type Key, type RootDatabase } from "lmdb";
import { isNoSpace, isReadOnlyFs, StorageFullError, StoreUnavailableError, SvcError, ValidationError } from "../errors.js";
import { mkdirCause } from "../mkdir-cause.js";
import { processAlive } from "../process-alive.js";
import { LargeReader } from "./lmdb-reader.js";
import { Pace } from "./pace.js";
import { END, idempotencyKey, storeClosed, versionKey } from "./context.js";
import type { CompactResult } from "./types.js";
import {
  checkDeclared,
  checkDeclaredRange,
  lowerBound,
  type CompactHooks,
  type CompactRules,
  type PayloadRef,
  type RecordEntry,
  type RecordKey,
  type StorageBackend,
  type TxReads,
  type WriteTx,
} from "./backend.js";

const k = (key: RecordKey): Key => key as unknown as Key;

/** Page header bytes of lmdb-js 3.x's LMDB: a value of k * pageSize - PAGE_HEADER bytes fills k overflow pages exactly. */
export const PAGE_HEADER = 24;
/** compact moves the live tails out of stream segments whose live bytes are below this share. */
export const RELOCATE_BELOW = 0.75;
/** Format byte of a payload_index entry: body and tail (2), or a value of payload_large (3). */
const INDEX_FORMAT = 2;
const LARGE_FORMAT = 3;
const ENTRY_BYTES = 25;
const LARGE_ENTRY_BYTES = 23;
/** Payloads of at least this many bytes are written whole to payload_large, off the event loop. */
export const LARGE_BYTES = 1024 * 1024;
/** compact removes values of payload_large that no index entry names once they are this old. */
export const LARGE_ORPHAN_MS = 60 * 60 * 1000;
/** Records compact reads per page (heads carry up to 64 KiB of metadata each), and decides per write transaction. */
export const COMPACT_PAGE = 256;
/** Heads or payloads compact removes per write transaction, at most (each commit is an fsync). */
const COMPACT_REMOVALS = 1024;
/** The record of a compaction under way: { at, pid, host }; puts then mark the payloads they name again. */
const GC_MARK: Key = ["gc"] as unknown as Key;
/** A payload a put named while a compaction was under way: that compaction keeps it. */
const touchKey = (id: string): Key => ["gt", id] as unknown as Key;
/** A compaction's record older than this is taken for one that died (its process id may be reused). */
const GC_MARK_MAX_AGE_MS = 24 * 60 * 60 * 1000;
/** Tokens of the compactions this process is running (a record of this process with another token is left over). */
const compactionsHere = new Set<string>();

/**
 * Where a payload lives: `bodyLen` bytes in body `bodyId` (0: none), then `tailLen` bytes of
 * the stream from (`seg`, `off`); or, with `large`, all of its `bodyLen` bytes in that value
 * of payload_large.
 */
interface Entry {
  bodyId: number;
  bodyLen: number;
  seg: number;
  off: number;
  tailLen: number;
  large: Buffer | null;
}

/** A new payload_large key: the time in ms (8 bytes, big-endian), then 8 random bytes. */
function largeKey(now = Date.now()): Buffer {
  const b = Buffer.allocUnsafe(16);
  b.writeBigUInt64BE(BigInt(now), 0);
  randomFillSync(b, 8, 8);
  return b;
}
const largeKeyTime = (key: Buffer): number => Number(key.readBigUInt64BE(0));

function encodeLarge(key: Buffer, len: number): Buffer {
  const b = Buffer.allocUnsafe(LARGE_ENTRY_BYTES);
  b[0] = LARGE_FORMAT;
  key.copy(b, 1, 0, 16);
  b.writeUIntBE(len, 17, 6);
  return b;
}

const HEX64 = /^[0-9a-f]{64}$/;
/** Index keys: a lowercase hex SHA-256 as its 32 bytes (tag 0), any other id as UTF-8 (tag 1). */
function indexKey(id: string): Buffer {
  if (id.length === 64 && HEX64.test(id)) {
    const b = Buffer.allocUnsafe(33);
    b[0] = 0;
    b.write(id, 1, "hex");
    return b;
  }
  return Buffer.concat([Buffer.from([1]), Buffer.from(id, "utf8")]);
}
const idOf = (key: Buffer): string => (key[0] === 0 ? key.toString("hex", 1) : key.toString("utf8", 1));

/** The first 48 bits of a payload id's SHA-256 (the id itself, when it is one) as a number. */
function prefixOf(id: string): number {
  return id.length === 64 && HEX64.test(id) ? parseInt(id.slice(0, 12), 16) : createHash("sha256").update(id).digest().readUIntBE(0, 6);
}

/** Whether the sorted `prefixes` hold `p`. */
function hasPrefix(prefixes: Float64Array, p: number): boolean {
  const at = lowerBound(prefixes, p);
  return at < prefixes.length && prefixes[at] === p;
}

/** Up to COMPACT_REMOVALS keys of `db` after `after` (all from one snapshot). */
function keysAfter(db: Database<unknown, Key>, after: Key | null): Key[] {
  const out: Key[] = [];
  for (const key of db.getKeys(after === null ? { limit: COMPACT_REMOVALS } : { start: after, limit: COMPACT_REMOVALS + 1 }))
    if (after === null || !keyEquals(key, after)) out.push(Buffer.isBuffer(key) ? Buffer.from(key) : key); // lmdb-js may reuse a key's memory
  return out.slice(0, COMPACT_REMOVALS);
}
const keyEquals = (a: Key, b: Key): boolean => (Buffer.isBuffer(a) && Buffer.isBuffer(b) ? a.equals(b) : a === b);

/** 6-byte big-endian ids: byte order is numeric order, so new ids append. */
function numKey(n: number): Buffer {
  const b = Buffer.allocUnsafe(6);
  b.writeUIntBE(n, 0, 6);
  return b;
}
const numOf = (key: Buffer): number => key.readUIntBE(0, 6);

function encodeEntry(e: Omit<Entry, "large">): Buffer {
  const b = Buffer.allocUnsafe(ENTRY_BYTES);
  b[0] = INDEX_FORMAT;
  b.writeUIntBE(e.bodyId, 1, 6);
  b.writeUIntBE(e.bodyLen, 7, 6);
  b.writeUIntBE(e.seg, 13, 6);
  b.writeUInt16BE(e.off, 19);
  b.writeUInt32BE(e.tailLen, 21);
  return b;
}
function decodeEntry(b: Uint8Array): Entry {
  const v = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  if (v.byteLength === LARGE_ENTRY_BYTES && v[0] === LARGE_FORMAT)
    return { bodyId: 0, bodyLen: v.readUIntBE(17, 6), seg: 0, off: 0, tailLen: 0, large: Buffer.from(v.subarray(1, 17)) };
  if (v.byteLength !== ENTRY_BYTES || v[0] !== INDEX_FORMAT)
    throw new Error(`Unknown payload index entry (format ${v[0]}, ${v.byteLength} bytes): this store was written by a newer version.`);
  return {
    bodyId: v.readUIntBE(1, 6),
    bodyLen: v.readUIntBE(7, 6),
    seg: v.readUIntBE(13, 6),
    off: v.readUInt16BE(19),
    tailLen: v.readUInt32BE(21),
    large: null,
  };
}

type Bin = Database<Buffer, Buffer>;

/**
 * Creates the store's directory if absent (0700, whatever the umask); a file in the way is a
 * ValidationError, not a raw EEXIST. Returns whether it was created.
 */
function storeDirectory(path: string): boolean {
  try {
    const created = mkdirSync(path, { recursive: true, mode: 0o700 });
    if (created === undefined) return false;
    // every directory the call created, from the first up to `path`: 0700 even under a umask
    // that removes owner bits (mode is masked by the umask)
    // (absolute paths: mkdirSync reports the first one it created resolved, and a relative
    // path never reaches its root by joining "..")
    const first = resolve(created);
    for (let d = resolve(path); ; d = dirname(d)) {
      chmodSync(d, 0o700);
      if (d === first || dirname(d) === d) break;
    }
    return true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    // recursive mkdir: EEXIST only when `path` itself is not a directory, ENOTDIR when a parent is not
    if (code === "EEXIST") throw new ValidationError(`path ${path} is a file, not a directory: a store needs a directory (created if absent).`, "path");
    if (code === "ENOTDIR")
      throw new ValidationError(`path ${path} lies under a file, not a directory: a store needs a directory (created if absent).`, "path");
    const cause = mkdirCause(path, e);
    if (isReadOnlyFs(cause)) throw readOnlyStore(path);
    throw cause;
  }
}

/** A store on a read-only file system (mounted so, or remounted so after a disk error) cannot open. */
const readOnlyStore = (path: string) =>
  new StoreUnavailableError(
    `The store at ${path} is on a read-only file system, where LMDB cannot keep its files; it opens once the file system is writable again.`,
  );

/** A value through lmdb-js's reused read buffer (valid until the next read): copy out at once. */
function peek(db: Bin, key: Buffer): Buffer | undefined {
  const b = db.getBinaryFast(key);
  return b === undefined ? undefined : b.subarray(0, (db as unknown as { lastSize: number }).lastSize);
}

/** Free bytes below which a failed commit is taken for a full disk rather than a broken one. */
const FULL_BELOW_BYTES = 64 * 1024 * 1024;
/** Free bytes a write needs besides its payloads (pages, the map's growth) before it is tried. */
export const WRITE_RESERVE_BYTES = 8 * 1024 * 1024;

/** Bytes an unprivileged writer may still use on the file system holding `path` (Infinity when unknown). */
function freeBytes(path: string): number {
  try {
    const s = statfsSync(path);
    return s.bavail * s.bsize;
  } catch {
    return Infinity;
  }
}

/**
 * Whether `path` is on a read-only file system: an empty file made there and removed again is
 * the one test that also sees ext4's emergency read-only state after a disk error, which leaves
 * the mount marked read-write.
 */
function readOnly(path: string): boolean {
  const probe = join(path, `.write-probe-${process.pid}`);
  try {
    closeSync(openSync(probe, "w", 0o600));
    unlinkSync(probe);
    return false;
  } catch (e) {
    return isReadOnlyFs(e);
  }
}

/**
 * The store error a failed LMDB write is: storage_full for no space (ENOSPC, the map full, or
 * EIO on a file system with almost nothing free, as a full tmpfs or disk answers), otherwise
 * store_unavailable (with its own sentence when the file system is read-only); undefined for an error that is not LMDB's (a bug, a conflict).
 */
export function lmdbFailure(e: unknown, path: string): SvcError | undefined {
  if (e instanceof SvcError) return undefined;
  const err = e as { code?: unknown; message?: unknown; commitError?: Promise<unknown> } | null;
  const message = typeof err?.message === "string" ? err.message : "";
  const code = err?.code;
  const noSpace = isNoSpace(e) || code === -30792 || /MDB_MAP_FULL/.test(message);
  const io = noSpace || code === 5 || code === "EIO" || /Commit failed|Input\/output error/i.test(message);
  if (!io) return undefined;
  if (readOnly(path))
    return new StoreUnavailableError("The store's file system is read-only: writes are refused until it is writable again, and reads go on.", 30);
  if (noSpace || freeBytes(path) < FULL_BELOW_BYTES) return new StorageFullError();
  return new StoreUnavailableError("The store's disk failed to write; retry later.");
}

/**
 * lmdb-js rejects, besides the promise of each write in a failed commit (which the caller
 * hears and answers as lmdbFailure), promises of its own that nobody can hold: the commit's
 * cause (`commitError`) and a batch's shared promise. Unheard, those would end the process on
 * a full disk. This listener hears only those echoes; any other unhandled rejection is thrown
 * on, so the process ends as Node's default would have it. lmdb-js also prints the cause of a
 * failed commit, stack and all, with console.error: that print alone is left out (the write's
 * caller gets the failure as a store error), and every other console.error goes through.
 */
let echoesHeard = false;
const isCommitEcho = (reason: unknown): boolean => {
  const r = reason as { message?: unknown; stack?: unknown } | null;
  const stack = typeof r?.stack === "string" ? r.stack : "";
  return /lmdb[\\/]write\.js/.test(stack) && /Commit failed|Input\/output error|No space left|MDB_MAP_FULL|Read-only file system/.test(String(r?.message));
};
function hearCommitEchoes(): void {
  if (echoesHeard) return;
  echoesHeard = true;
  const print = console.error;
  console.error = (...args: unknown[]) => {
    if (args.length === 1 && args[0] instanceof Error && isCommitEcho(args[0])) return;
    print.apply(console, args);
  };
  process.on("unhandledRejection", (reason) => {
    if (isCommitEcho(reason)) return;
    throw reason;
  });
}

export class LmdbBackend implements StorageBackend {
  readonly name = "lmdb" as const;
  readonly payloadScope = "global" as const;
  readonly ownPayloads = true;
  readonly path: string;
  /** Bytes of one stream segment: exactly one overflow page. */
  readonly segmentBytes: number;
  readonly pageSize: number;
  #root: RootDatabase;
  #records: Database<unknown, Key>;
  /** Format 1 payloads (whole, keyed by hex hash): read and removed, never written. */
  #legacy: Database<Buffer, string>;
  #index: Bin;
  #bodies: Bin;
  #stream: Bin;
  #large: Bin;
  #reader: LargeReader;
  /**
   * Inside one write transaction callback: the last body id and the open stream segment, read
   * once and then kept up to date (nothing else writes while the callback runs); null outside.
   */
  #tail: { bodyId: number; segId: number; seg: Buffer } | null = null;
  /**
   * Operations under way. close() waits for them before it closes the environment: lmdb-js
   * closing under a read, a cursor or a write of ours can end the process in native code.
   * Once close() is called, a new operation is refused, and one under way is ended at its
   * next step (both with storeClosed()).
   */
  #busy = 0;
  #idle: (() => void) | null = null;
  #closing: Promise<void> | null = null;

  constructor(path: string) {
    const created = storeDirectory(path);
    const existed = existsSync(join(path, "data.mdb"));
    this.path = path;
    // overlappingSync off: a commit is fsynced before its promise resolves, so a put that
    // returned survives a crash of the process or the machine. Never noSync.
    // noSubdir false: `path` is always the directory holding data.mdb and lock.mdb; lmdb-js
    // would otherwise take a path with an extension (`store.v2`) for the data file itself.
    try {
      this.#root = open({ path, maxDbs: 8, overlappingSync: false, noSubdir: false });
    } catch (e) {
      throw isReadOnlyFs(e) ? readOnlyStore(path) : e;
    }
    hearCommitEchoes();
    // shared msgpack structures: heads and version records all have one of a few shapes, and
    // decoding with shared structures makes a scan of 10,000 heads about 3x faster
    this.#records = this.#root.openDB<unknown, Key>({ name: "records", sharedStructuresKey: Symbol.for("svc.structures") });
    this.#legacy = this.#root.openDB<Buffer, string>({ name: "payloads", encoding: "binary" });
    const bin = (name: string) => this.#root.openDB<Buffer, Buffer>({ name, encoding: "binary", keyEncoding: "binary" });
    this.#index = bin("payload_index");
    this.#bodies = bin("payload_bodies");
    this.#stream = bin("payload_stream");
    this.#large = bin("payload_large");
    this.#reader = new LargeReader(path);
    // the page size is fixed when the environment is created: read it, do not assume it
    this.pageSize = (this.#root.getStats() as { pageSize: number }).pageSize;
    this.segmentBytes = this.pageSize - PAGE_HEADER;
    // LMDB creates its files 0644 less the umask: the data are the tenants', so owner only
    for (const f of ["data.mdb", "lock.mdb"]) chmodSync(join(path, f), 0o600);
    // a directory this store created or already holds (not a parent the caller chose to share)
    if (created || existed) chmodSync(path, 0o700);
  }

  /** Throws storeClosed() once close() has been called: at an operation's start and at each step it resumes. */
  #live(): void {
    if (this.#closing) throw storeClosed();
  }

  /** `fn` counted as under way (close() waits for it). */
  async #op<T>(fn: () => Promise<T>): Promise<T> {
    this.#live();
    this.#busy++;
    try {
      return await fn();
    } finally {
      this.#done();
    }
  }

  #done(): void {
    if (--this.#busy === 0) this.#idle?.();
  }

  async get(key: RecordKey): Promise<unknown> {
    this.#live(); // synchronous reads: close() cannot come between the check and the read
    return this.#records.get(k(key));
  }

  async *range(start: RecordKey, end: RecordKey): AsyncIterable<RecordEntry> {
    // the snapshot's cursor stays open while the caller awaits between entries
    this.#live();
    this.#busy++;
    try {
      for (const { key, value } of this.#records.getRange({ start: k(start), end: k(end), snapshot: true })) {
        yield { key: key as RecordKey, value };
        this.#live();
      }
    } finally {
      this.#done();
    }
  }

  async getPayload(tenant: string, id: string): Promise<Buffer | undefined> {
    return (await this.getPayloads(tenant, [id])).get(id);
  }

  getPayloads(_tenant: string, ids: readonly string[]): Promise<Map<string, Buffer>> {
    return this.#op(() => this.#getPayloads(ids));
  }

  async #getPayloads(ids: readonly string[]): Promise<Map<string, Buffer>> {
    const out = new Map<string, Buffer>();
    // payloads of payload_large are copied out by the reader's worker thread; the others are
    // copied here, giving the event loop a turn every slice (payloads are immutable under
    // their hash: reading some from a later snapshot reads the same bytes)
    const large: [string, Entry][] = [];
    const pace = new Pace();
    for (const id of ids) {
      if (pace.due()) {
        await pace.yield();
        this.#live();
      }
      const raw = peek(this.#index, indexKey(id));
      const e = raw === undefined ? undefined : decodeEntry(raw);
      if (e?.large) large.push([id, e]);
      else {
        const p = e ? this.#readEntry(e) : this.#legacy.get(id);
        if (p) out.set(id, p);
      }
    }
    for (const [id, e] of large) {
      const b = await this.#reader.read(e.large!);
      this.#live();
      // the worker did not answer with it (it failed, or the payload changed meanwhile): read here
      const p = b !== undefined && b.byteLength === e.bodyLen ? b : this.#getPayload(id);
      if (p) out.set(id, p);
    }
    return out;
  }

  async getEntry(tenant: string, ns: string, key: string, version?: number): Promise<{ head: unknown; record: unknown }> {
    this.#live();
    // two synchronous gets: one read snapshot
    const head = this.#records.get(["h", tenant, ns, key]) as { latest?: number } | undefined;
    const v = version ?? head?.latest;
    return { head, record: head && v !== undefined ? this.#records.get(["v", tenant, ns, key, v]) : undefined };
  }

  async hasPayload(_tenant: string, id: string): Promise<boolean> {
    this.#live();
    return this.#hasPayload(id);
  }

  // Reads: several gets, all synchronous, so all from one snapshot (lmdb-js renews its read
  // transaction at most once per macrotask; inside a write transaction they see its writes).
  #getPayload(id: string): Buffer | undefined {
    const raw = peek(this.#index, indexKey(id));
    return raw === undefined ? this.#legacy.get(id) : this.#readEntry(decodeEntry(raw));
  }

  /** The payload an index entry points at, copied out (in the same snapshot as the entry). */
  #readEntry(e: Entry): Buffer | undefined {
    if (e.large) {
      const v = peek(this.#large, e.large);
      return v === undefined || v.byteLength !== e.bodyLen ? undefined : Buffer.from(v); // a copy of its own
    }
    const out = Buffer.allocUnsafeSlow(e.bodyLen + e.tailLen); // own, aligned memory
    if (e.bodyId !== 0) {
      const body = peek(this.#bodies, numKey(e.bodyId));
      if (body === undefined || body.byteLength !== e.bodyLen) return undefined;
      out.set(body, 0);
    }
    return this.#readTail(e, out, e.bodyLen) ? out : undefined;
  }

  /** Copies the entry's tail into `out` at `at`; false when a segment is missing or short. */
  #readTail(e: Entry, out: Uint8Array, at: number): boolean {
    let seg = e.seg;
    let off = e.off;
    let left = e.tailLen;
    while (left > 0) {
      const s = peek(this.#stream, numKey(seg));
      if (s === undefined || s.byteLength <= off) return false;
      const n = Math.min(left, s.byteLength - off);
      out.set(s.subarray(off, off + n), at);
      at += n;
      left -= n;
      seg++;
      off = 0;
    }
    return true;
  }

  #hasPayload(id: string): boolean {
    return this.#index.doesExist(indexKey(id)) || this.#legacy.doesExist(id);
  }

  /** The last id of an append-ordered database, 0 when empty. */
  #lastId(db: Bin): number {
    for (const key of db.getKeys({ reverse: true, limit: 1 })) return numOf(key);
    return 0;
  }

  /** The write position (last body id, open segment), read in this transaction on first use. */
  #position(): { bodyId: number; segId: number; seg: Buffer } {
    if (this.#tail) return this.#tail;
    const segId = this.#lastId(this.#stream);
    const seg = segId === 0 ? Buffer.alloc(0) : this.#stream.get(numKey(segId))!;
    return (this.#tail = { bodyId: this.#lastId(this.#bodies), segId, seg });
  }

  /** Appends `bytes` to the stream (in a write transaction); returns where they start. */
  #append(bytes: Uint8Array): { seg: number; off: number } {
    const size = this.segmentBytes;
    const pos = this.#position();
    if (pos.segId === 0 || pos.seg.byteLength >= size) {
      pos.segId++;
      pos.seg = Buffer.alloc(0);
    }
    const start = { seg: pos.segId, off: pos.seg.byteLength };
    for (let at = 0; at < bytes.byteLength;) {
      if (pos.seg.byteLength >= size) {
        pos.segId++;
        pos.seg = Buffer.alloc(0);
      }
      const n = Math.min(size - pos.seg.byteLength, bytes.byteLength - at);
      const next = Buffer.allocUnsafe(pos.seg.byteLength + n);
      next.set(pos.seg, 0);
      next.set(bytes.subarray(at, at + n), pos.seg.byteLength);
      this.#stream.putSync(numKey(pos.segId), next);
      pos.seg = next;
      at += n;
    }
    return start;
  }

  /** Writes a payload in the current write transaction (replacing one of the same id: true when that left dead stream bytes). */
  #write(id: string, bytes: Uint8Array): boolean {
    const replaced = this.#remove(id);
    const n = bytes.byteLength;
    const pages = Math.floor((n + PAGE_HEADER) / this.pageSize);
    const bodyLen = pages > 0 ? pages * this.pageSize - PAGE_HEADER : 0;
    let bodyId = 0;
    if (bodyLen > 0) {
      bodyId = ++this.#position().bodyId;
      this.#bodies.putSync(numKey(bodyId), Buffer.from(bytes.buffer, bytes.byteOffset, bodyLen));
    }
    const tailLen = n - bodyLen;
    const at = tailLen > 0 ? this.#append(bytes.subarray(bodyLen)) : { seg: 0, off: 0 };
    this.#index.putSync(indexKey(id), encodeEntry({ bodyId, bodyLen, seg: at.seg, off: at.off, tailLen }));
    return replaced;
  }

  /** Removes a payload in the current write transaction; true when its tail left dead stream bytes. */
  #remove(id: string): boolean {
    this.#legacy.removeSync(id);
    const key = indexKey(id);
    const raw = this.#index.get(key);
    if (raw === undefined) return false;
    const e = decodeEntry(raw);
    if (e.large) this.#large.removeSync(e.large);
    if (e.bodyId !== 0) this.#bodies.removeSync(numKey(e.bodyId));
    this.#index.removeSync(key);
    return e.tailLen > 0;
  }

  /**
   * After removals: drops stream segments with no live bytes and moves the live tails of
   * segments (all but the last) less than RELOCATE_BELOW full to the end of the stream.
   * Afterwards every segment but the last is at least RELOCATE_BELOW full.
   */
  #reclaim(): void {
    const seg = this.segmentBytes;
    const segments: number[] = [];
    for (const key of this.#stream.getKeys({})) segments.push(numOf(key));
    if (segments.length === 0) return;
    const last = segments[segments.length - 1]!;
    // live bytes per segment, and the tails touching each (a tail spans at most two segments)
    const spans = (e: Entry): [number, number][] => {
      const out: [number, number][] = [];
      for (let s = e.seg, off = e.off, left = e.tailLen; left > 0; s++, off = 0) {
        const n = Math.min(left, seg - off);
        out.push([s, n]);
        left -= n;
      }
      return out;
    };
    const live = new Map<number, number>();
    const touching = new Map<number, number[]>();
    const entries: { key: Buffer; e: Entry; spans: [number, number][] }[] = [];
    for (const { key, value } of this.#index.getRange({})) {
      const e = decodeEntry(value);
      if (e.tailLen === 0) continue;
      const sp = spans(e);
      for (const [s, n] of sp) {
        live.set(s, (live.get(s) ?? 0) + n);
        let list = touching.get(s);
        if (!list) touching.set(s, (list = []));
        list.push(entries.length);
      }
      entries.push({ key, e, spans: sp });
    }
    // choose the tails to move; moving a tail that spans into a neighbour lowers the
    // neighbour's count too, so repeat until no segment (but the last) is sparse
    const moving = new Set<number>();
    for (let changed = true; changed;) {
      changed = false;
      for (const s of segments) {
        const l = live.get(s) ?? 0;
        if (s === last || l === 0 || l >= seg * RELOCATE_BELOW) continue;
        for (const i of touching.get(s) ?? []) {
          if (moving.has(i)) continue;
          moving.add(i);
          for (const [t, n] of entries[i]!.spans) live.set(t, live.get(t)! - n);
        }
        changed = true;
      }
    }
    // read the moving tails before anything is written (an append rewrites the last segment)
    const moved = [...moving]
      .sort((a, b) => a - b)
      .map((i) => {
        const { key, e } = entries[i]!;
        const bytes = Buffer.allocUnsafe(e.tailLen);
        if (!this.#readTail(e, bytes, 0)) throw new Error("A payload's stream segment is missing.");
        return { key, e, bytes };
      });
    // segments with nothing live left go (the last too: appends then start a fresh one)
    for (const s of segments) if ((live.get(s) ?? 0) === 0) this.#stream.removeSync(numKey(s));
    this.#tail = null; // the open segment may be gone: read the position again
    for (const { key, e, bytes } of moved) {
      const at = this.#append(bytes);
      this.#index.putSync(key, encodeEntry({ ...e, seg: at.seg, off: at.off }));
    }
  }

  async transact<T>(reads: TxReads, fn: (tx: WriteTx) => T): Promise<T> {
    // Refused before any write when the file system is nearly full: lmdb-js writing into a
    // full disk can abort the process in its native code (glibc heap check after ENOSPC)
    let staged = 0;
    for (const p of reads.stage ?? []) staged += p.bytes.byteLength;
    return this.#op(async () => {
      if (freeBytes(this.path) < staged + WRITE_RESERVE_BYTES) throw new StorageFullError();
      try {
        return await this.#transactStaged(reads, fn);
      } catch (e) {
        throw lmdbFailure(e, this.path) ?? e;
      }
    });
  }

  async #transactStaged<T>(reads: TxReads, fn: (tx: WriteTx) => T): Promise<T> {
    // large payloads the body may write: stored first, by lmdb-js's write thread
    const staged = new Map<string, Buffer>();
    const writes: Promise<unknown>[] = [];
    for (const p of reads.stage ?? []) {
      if (p.bytes.byteLength < LARGE_BYTES || staged.has(p.id) || this.#hasPayload(p.id)) continue;
      const key = largeKey();
      staged.set(p.id, key);
      writes.push(this.#large.put(key, Buffer.from(p.bytes.buffer, p.bytes.byteOffset, p.bytes.byteLength)));
    }
    try {
      await Promise.all(writes);
    } catch (e) {
      await this.#dropStaged(staged.values());
      throw e;
    }
    const used = new Set<string>();
    let committed = false;
    try {
      const result = await this.#transact(reads, fn, staged, used);
      committed = true;
      return result;
    } finally {
      // staged values the transaction did not name (it failed, or the payload was stored meanwhile)
      if (staged.size > 0) await this.#dropStaged([...staged].filter(([id]) => !(committed && used.has(id))).map(([, key]) => key));
    }
  }

  async #dropStaged(keys: Iterable<Buffer>): Promise<void> {
    // a failed removal (the disk still full) leaves an orphan that compact sweeps later
    await Promise.all([...keys].map((key) => this.#large.remove(key).catch(() => false)));
  }

  #transact<T>(reads: TxReads, fn: (tx: WriteTx) => T, staged: Map<string, Buffer>, used: Set<string>): Promise<T> {
    const records = this.#records;
    let removed = false;
    const tx: WriteTx = {
      get: (key) => {
        checkDeclared(reads, key);
        return records.get(k(key));
      },
      range: (start, end) => {
        checkDeclaredRange(reads, start, end);
        return this.#syncRange(start, end);
      },
      put: (key, value) => void records.putSync(k(key), value),
      remove: (key) => void records.removeSync(k(key)),
      putPayload: (_tenant, id, bytes) => {
        // stored, or named again, while a compaction may be under way (past its reading of the
        // versions): that compaction keeps it
        if (records.doesExist(GC_MARK)) records.putSync(touchKey(id), 1);
        if (this.#hasPayload(id)) return;
        const key = staged.get(id);
        if (key && this.#large.doesExist(key)) {
          this.#index.putSync(indexKey(id), encodeLarge(key, bytes.byteLength));
          used.add(id);
        } else removed = this.#write(id, bytes) || removed;
      },
      removePayload: (_tenant, id) => void (removed = this.#remove(id) || removed),
      payloadIds: () => {
        if (!reads.payloads) throw new Error("A write transaction listed payloads without declaring it.");
        return this.#payloadIds();
      },
    };
    // a child transaction is rolled back when the callback throws
    return records.childTransaction(() => {
      this.#tail = null;
      try {
        const result = fn(tx);
        if (removed) this.#reclaim();
        if (reads.payloads) this.#sweepLarge();
        return result;
      } finally {
        this.#tail = null;
      }
    }) as Promise<T>;
  }

  /**
   * In a transaction that lists payloads: removes the values of payload_large that no index
   * entry names and that are older than LARGE_ORPHAN_MS (a put may be between its two commits
   * for a younger one).
   */
  #sweepLarge(): void {
    for (const key of this.#orphansOfLarge(false)) this.#large.removeSync(key);
  }

  /**
   * The keys of payload_large that no index entry names, older than LARGE_ORPHAN_MS: read in the
   * current write transaction, or (`snapshot`) from a snapshot outside one. A put always stores a
   * large value under a new key just before the transaction that names it, so a value this old
   * and named by nothing is named by no later write either.
   */
  #orphansOfLarge(snapshot: boolean): Buffer[] {
    const named = new Set<string>();
    for (const { value } of this.#index.getRange({ snapshot })) {
      const e = decodeEntry(value);
      if (e.large) named.add(e.large.toString("hex"));
    }
    const before = Date.now() - LARGE_ORPHAN_MS;
    const out: Buffer[] = [];
    for (const key of this.#large.getKeys({ snapshot })) if (!named.has(key.toString("hex")) && largeKeyTime(key) < before) out.push(Buffer.from(key));
    return out;
  }

  *#syncRange(start: RecordKey, end: RecordKey): Iterable<RecordEntry> {
    for (const { key, value } of this.#records.getRange({ start: k(start), end: k(end) })) yield { key: key as RecordKey, value };
  }

  *#payloadIds(): Iterable<PayloadRef> {
    for (const key of this.#index.getKeys({ snapshot: false })) yield { tenant: "", id: idOf(key) };
    for (const key of this.#legacy.getKeys({ snapshot: false })) yield { tenant: "", id: key };
  }

  /** `fn` in a write transaction of its own (LMDB serialises it with every writer of every process). */
  async #write1<T>(fn: () => T): Promise<T> {
    if (freeBytes(this.path) < WRITE_RESERVE_BYTES) throw new StorageFullError();
    try {
      return await (this.#records.childTransaction(() => {
        this.#tail = null;
        try {
          return fn();
        } finally {
          this.#tail = null;
        }
      }) as Promise<T>);
    } catch (e) {
      throw lmdbFailure(e, this.path) ?? e;
    }
  }

  /** The 48-bit prefixes of the payload ids every version names, sorted. */
  #namedPrefixes(rules: CompactRules): Float64Array {
    const out: number[] = []; // doubles only: V8 keeps them unboxed, 8 bytes each
    for (const { value } of this.#records.getRange({ start: k(["v"]), end: k(["v", END]) })) out.push(prefixOf(rules.payloadOf(value)));
    return Float64Array.from(out).sort();
  }

  /** Up to COMPACT_PAGE records of a family (`h`, `i`), from a snapshot, after `after`. */
  #pageOf(family: string, after: Key | null): { key: RecordKey; value: unknown }[] {
    const out: { key: RecordKey; value: unknown }[] = [];
    for (const { key, value } of this.#records.getRange({ start: after ?? k([family]), end: k([family, END]), limit: COMPACT_PAGE + 1 })) {
      if (after !== null && out.length === 0 && JSON.stringify(key) === JSON.stringify(after)) continue;
      if (out.length === COMPACT_PAGE) break;
      out.push({ key: key as RecordKey, value });
    }
    return out;
  }

  /**
   * compact (lib/store/maintenance.ts) in short write transactions, so that writers (of every
   * process) wait at most for one of them, never for the whole run:
   * 1. heads, read a page at a time from a snapshot; those with expired tombstones are decided
   *    again in a transaction (up to COMPACT_REMOVALS each) and removed or rewritten with the
   *    versions under them;
   * 2. idempotency records, a page at a time, each removed only if it is still expired;
   * 3. the payloads: the versions read from a snapshot for the payloads they name (as hash
   *    prefixes), then the payloads listed a page at a time; those none names are removed a page
   *    at a time, and the stream's space reclaimed at the end. While this runs, a record of it is
   *    in the store and a put that stores a payload, or names one already stored, marks it: a
   *    marked payload is kept.
   * One compaction at a time: another one under way (its process alive) is a StoreUnavailableError.
   * `hooks.beforePayloads` runs between step 3's reading of the versions and its listing (tests).
   */
  compact(rules: CompactRules, hooks: CompactHooks = {}): Promise<CompactResult> {
    return this.#op(() => this.#compact(rules, hooks));
  }

  async #compact(rules: CompactRules, hooks: CompactHooks): Promise<CompactResult> {
    const mark = { at: Date.now(), pid: process.pid, token: randomFillSync(Buffer.alloc(8)).toString("hex") };
    await this.#write1(() => {
      const held = this.#records.get(GC_MARK) as { at?: number; pid?: number; token?: string } | undefined;
      const running = (pid: number) => (pid === process.pid ? compactionsHere.has(String(held?.token)) : processAlive(pid));
      if (held && typeof held.at === "number" && Date.now() - held.at < GC_MARK_MAX_AGE_MS && typeof held.pid === "number" && running(held.pid))
        throw new StoreUnavailableError(`Another compaction of this store is under way (process ${held.pid}); run it again once that one ends.`);
      // a record left by one that died, and what puts marked for it, go
      for (const key of this.#records.getKeys({ start: touchKey(""), end: k(["gt", END]), snapshot: false })) this.#records.removeSync(key);
      this.#records.putSync(GC_MARK, mark);
    });
    compactionsHere.add(mark.token);
    try {
      const { versions_purged, keys_purged } = await this.#compactHeads(rules);
      await this.#compactIdempotency(rules);
      const payloads_purged = await this.#compactPayloads(rules, hooks.beforePayloads);
      return { versions_purged, keys_purged, payloads_purged };
    } finally {
      // the marks (one a payload put meanwhile) go up to 1,024 in a transaction, the record with
      // the last of them; left behind (a full disk), they are taken over by the next compaction
      for (let more = true; more;)
        more = await this.#write1(() => {
          if ((this.#records.get(GC_MARK) as { token?: string } | undefined)?.token !== mark.token) return false;
          let n = 0;
          for (const key of this.#records.getKeys({ start: touchKey(""), end: k(["gt", END]), limit: COMPACT_REMOVALS, snapshot: false })) {
            this.#records.removeSync(key);
            n++;
          }
          if (n === COMPACT_REMOVALS) return true;
          this.#records.removeSync(GC_MARK);
          return false;
        }).catch(() => false);
      compactionsHere.delete(mark.token);
    }
  }

  async #compactHeads(rules: CompactRules): Promise<{ versions_purged: number; keys_purged: number }> {
    let versions = 0;
    let keys = 0;
    // the heads due, from pages read one after another, purged together (each commit is an fsync)
    let due: RecordKey[] = [];
    const purge = async () => {
      const batch = due;
      due = [];
      const r = await this.#write1(() => {
        let v = 0;
        let h = 0;
        for (const key of batch) {
          // decided again in this transaction: a write may have changed the head since its page was read
          const head = this.#records.get(k(key));
          const p = head === undefined ? null : rules.purge(head);
          if (p === null) continue;
          const [, t, ns, name] = key as [string, string, string, string];
          for (const [from, upto] of p.spans) for (let x = from; x <= upto; x++) if (this.#records.removeSync(k(versionKey(t, ns, name, x)))) v++;
          if (p.head === undefined) {
            this.#records.removeSync(k(key));
            h++;
          } else this.#records.putSync(k(key), p.head);
        }
        return { v, h };
      });
      versions += r.v;
      keys += r.h;
    };
    for (let after: Key | null = null; ;) {
      const page = this.#pageOf("h", after);
      if (page.length === 0) break;
      after = k(page[page.length - 1]!.key);
      for (const e of page) if (rules.purge(e.value) !== null) due.push(e.key);
      if (due.length >= COMPACT_REMOVALS) await purge();
      this.#live();
    }
    if (due.length > 0) await purge();
    return { versions_purged: versions, keys_purged: keys };
  }

  async #compactIdempotency(rules: CompactRules): Promise<void> {
    for (let after: Key | null = null; ;) {
      const page = this.#pageOf("i", after);
      if (page.length === 0) break;
      after = k(page[page.length - 1]!.key);
      const expired = page.filter((e) => rules.expired(e.value)).map((e) => e.key);
      if (expired.length === 0) continue;
      this.#live();
      await this.#write1(() => {
        for (const key of expired) {
          const [, t, name] = key as [string, string, string];
          const now = this.#records.get(k(idempotencyKey(t, name)));
          if (now !== undefined && rules.expired(now)) this.#records.removeSync(k(key));
        }
      });
    }
  }

  async #compactPayloads(rules: CompactRules, beforePayloads?: () => Promise<void>): Promise<number> {
    // A payload no version names is unused, unless a put stored it or named it again while this
    // compaction was under way: such a put has marked it. The versions are read first, as the
    // sorted 48-bit prefixes of the ids they name (8 bytes each, whatever the store holds), then
    // the payloads a page at a time. Two ids sharing a prefix keep an unused payload for the next
    // compaction; they never remove a named one.
    const named = this.#namedPrefixes(rules);
    await beforePayloads?.();
    let purged = 0;
    let removed = false;
    let unused: string[] = [];
    const purge = async () => {
      const batch = unused;
      unused = [];
      await this.#write1(() => {
        for (const id of batch) {
          if (this.#records.doesExist(touchKey(id)) || !this.#hasPayload(id)) continue;
          removed = this.#remove(id) || removed;
          purged++;
        }
      });
    };
    for (const db of [this.#index, this.#legacy] as Database<unknown, Key>[])
      for (let after: Key | null = null; ;) {
        this.#live();
        const page = keysAfter(db, after);
        if (page.length === 0) break;
        after = page[page.length - 1]!;
        for (const key of page) {
          const id = db === this.#legacy ? (key as string) : idOf(key as Buffer);
          if (!hasPrefix(named, prefixOf(id))) unused.push(id);
        }
        if (unused.length >= COMPACT_REMOVALS) await purge();
      }
    if (unused.length > 0) await purge();
    // values of payload_large no entry names (found outside the write), and dead stream bytes
    // reclaimed once
    const orphans = this.#orphansOfLarge(true);
    if (removed || orphans.length > 0)
      await this.#write1(() => {
        if (removed) this.#reclaim();
        for (const key of orphans) this.#large.removeSync(key);
      });
    return purged;
  }

  /** Entries and pages of each database, and the environment's high-water page (tests, bench/store.ts). */
  stats(): { page_size: number; last_page: number; dbs: Record<string, { entries: number; pages: number; overflow_pages: number }> } {
    this.#live();
    const dbs: Record<string, { entries: number; pages: number; overflow_pages: number }> = {};
    let last = 0;
    const all: [string, { getStats(): unknown }][] = [
      ["records", this.#records],
      ["payloads", this.#legacy],
      ["payload_index", this.#index],
      ["payload_bodies", this.#bodies],
      ["payload_stream", this.#stream],
      ["payload_large", this.#large],
    ];
    for (const [name, db] of all) {
      const s = db.getStats() as { entryCount: number; treeBranchPageCount: number; treeLeafPageCount: number; overflowPages: number; lastPageNumber: number };
      dbs[name] = { entries: s.entryCount, pages: s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages, overflow_pages: s.overflowPages };
      last = s.lastPageNumber;
    }
    return { page_size: this.pageSize, last_page: last, dbs };
  }

  /**
   * A consistent copy of the whole environment as `dir`/data.mdb (LMDB's mdb_env_copy2, on a
   * worker thread): one read transaction, so writers in this and other processes go on while
   * it runs. `compact` leaves out free pages (slower, smaller).
   */
  backup(dir: string, compact: boolean): Promise<void> {
    return this.#op(() => this.#root.backup(dir, compact));
  }

  /** data.mdb's size, and the pages up to the environment's last one (free pages included). */
  sizeBytes(): { file: number; used: number } {
    this.#live();
    const s = this.#root.getStats() as { lastPageNumber: number };
    return { file: statSync(join(this.path, "data.mdb")).size, used: (s.lastPageNumber + 1) * this.pageSize };
  }

  /** Refuses new operations, waits for those under way to end (each ends at its next step), then closes. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#busy > 0) await new Promise<void>((resolve) => (this.#idle = resolve));
      await this.#reader.close();
      await this.#root.close();
    })();
    return this.#closing;
  }
}
