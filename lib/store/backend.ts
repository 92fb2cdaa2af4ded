// The one storage interface the store is written against, with three implementations:
// LMDB on disk (lib/store/lmdb.ts), PostgreSQL (lib/store/postgres.ts) and memory
// (lib/store/memory.ts).
//
// Reads are asynchronous. A write transaction declares what it reads before its body runs
// (`TxReads`); the body itself is synchronous, over those reads and its own writes. On LMDB the
// body runs inside the write transaction, which must not yield to the event loop (lmdb-js lets
// every read of the process see an open write transaction's uncommitted writes); on PostgreSQL
// the declared rows are read with FOR UPDATE before the body runs and the body's writes are
// sent afterwards, all in one database transaction.

import type { CompactResult } from "./types.js";

/** Record keys are tuples of strings and numbers, ordered element by element (strings by bytes). */
export type RecordKey = readonly (string | number)[];

export interface RecordEntry {
  key: RecordKey;
  value: unknown;
}

/**
 * The record families every backend stores (the first element of a key):
 * - `["h", tenant, namespace, key]`: a head
 * - `["v", tenant, namespace, key, version]`: a version record (written once, never changed)
 * - `["i", tenant, idempotency key]`: a stored response of an idempotent write
 */
export type RecordFamily = "h" | "v" | "i";

/** What a write transaction reads; on PostgreSQL these rows stay locked until it commits. */
export interface TxReads {
  keys?: RecordKey[];
  /** Half-open ranges [start, end). */
  ranges?: [RecordKey, RecordKey][];
  /** Whether the body lists every payload (`payloadIds`). */
  payloads?: boolean;
  /**
   * Payloads the body may write with putPayload: a backend may store large ones before the
   * body runs, off the event loop (LMDB), and name them in the transaction. Unchanged until
   * the transaction has resolved.
   */
  stage?: { tenant: string; id: string; bytes: Uint8Array }[];
}

export interface PayloadRef {
  tenant: string;
  id: string;
}

/**
 * What compact decides for each record, for a backend that runs compact itself
 * (StorageBackend.compact) instead of as one write transaction over every record.
 */
export interface CompactRules {
  /**
   * A stored head's expired tombstones: the version spans to remove ([from, upto], inclusive)
   * and the head to store instead (undefined: the head is removed too); null where none expired.
   */
  purge(head: unknown): { spans: [number, number][]; head: unknown } | null;
  /** The payload id a stored version record names. */
  payloadOf(version: unknown): string;
  /** Whether a stored idempotency record has expired. */
  expired(record: unknown): boolean;
}

/** Points of a backend's compact where a test may act (writes go on around them). */
export interface CompactHooks {
  /** Once compact has read which payloads the versions name, before it removes the others. */
  beforePayloads?: () => Promise<void>;
}

/** Committed data, read outside any write transaction. */
export interface ReadView {
  get(key: RecordKey): Promise<unknown>;
  /** Entries with start <= key < end, ascending, from one snapshot. */
  range(start: RecordKey, end: RecordKey): AsyncIterable<RecordEntry>;
  getPayload(tenant: string, id: string): Promise<Buffer | undefined>;
  /** The payloads of `ids` that exist, in one round trip where the backend has round trips. */
  getPayloads(tenant: string, ids: readonly string[]): Promise<Map<string, Buffer>>;
  hasPayload(tenant: string, id: string): Promise<boolean>;
  /**
   * A head and one of its version records (`version`, else the latest the head names) from one
   * snapshot, in one round trip where the backend has round trips: what get and serve read.
   */
  getEntry(tenant: string, ns: string, key: string, version?: number): Promise<{ head: unknown; record: unknown }>;
}

/** A write transaction's body: synchronous reads of what it declared, and its writes. */
export interface WriteTx {
  /** A declared key (or one inside a declared range), as this transaction sees it. */
  get(key: RecordKey): unknown;
  /** A declared range, as this transaction sees it. */
  range(start: RecordKey, end: RecordKey): Iterable<RecordEntry>;
  put(key: RecordKey, value: unknown): void;
  remove(key: RecordKey): void;
  /**
   * Stores a payload under its content hash unless that tenant's copy (or the shared one)
   * exists. The bytes must not change until the transaction has resolved: a backend may send
   * them after the body has returned (PostgreSQL).
   */
  putPayload(tenant: string, id: string, bytes: Uint8Array): void;
  removePayload(tenant: string, id: string): void;
  /** Every stored payload (needs `payloads: true` in the reads), without this transaction's removals. */
  payloadIds(): Iterable<PayloadRef>;
}

export interface StorageBackend extends ReadView {
  readonly name: "lmdb" | "memory" | "postgres";
  /**
   * How payloads are shared: `global`, one copy per content hash for the whole store (LMDB,
   * memory: `tenant` of a PayloadRef is then ""); `tenant`, one copy per tenant and hash
   * (PostgreSQL: no row refers across tenants).
   */
  readonly payloadScope: "global" | "tenant";
  /**
   * Whether getPayload and getPayloads return memory of the caller's own (a new copy per call:
   * LMDB, PostgreSQL) rather than memory the backend keeps (memory): a serve then answers with
   * it without copying it again.
   */
  readonly ownPayloads: boolean;
  /**
   * Reads `reads`, runs `fn` over them as one atomic, isolated write transaction (serialised
   * with every writer touching the same records, across processes) and resolves once it is
   * durable. When `fn` throws, nothing it wrote is kept and the promise rejects with that error.
   */
  transact<T>(reads: TxReads, fn: (tx: WriteTx) => T): Promise<T>;
  close(): Promise<void>;
  /**
   * Runs compact by `rules` over every record in short steps beside the writers, holding a
   * bounded number of records at once (LMDB, PostgreSQL). Backends without it run compact as
   * one write transaction that reads every record (lib/store/maintenance.ts).
   */
  compact?(rules: CompactRules, hooks?: CompactHooks): Promise<CompactResult>;
  /** Bytes on disk (`file`) and in use (`used`), for backends that keep files. */
  sizeBytes?(): { file: number; used: number };
  /** Whether the backend can serve now (one round trip to a database; a local file: true). */
  ping?(): Promise<boolean>;
}

/** Element-wise tuple order (strings by UTF-16 units, which for the store's ASCII keys is byte order). */
export function compareKeys(a: RecordKey, b: RecordKey): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (x === y) continue;
    if (typeof x === "number" && typeof y === "number") return x < y ? -1 : 1;
    if (typeof x !== typeof y) return typeof x === "number" ? -1 : 1;
    return x < y ? -1 : 1;
  }
  return a.length - b.length;
}

/** Throws unless `key` was declared (itself or inside a declared range): a bug in the store, not bad input. */
export function checkDeclared(reads: TxReads, key: RecordKey): void {
  if (reads.keys?.some((k) => compareKeys(k, key) === 0)) return;
  if (reads.ranges?.some(([s, e]) => compareKeys(s, key) <= 0 && compareKeys(key, e) < 0)) return;
  throw new Error(`A write transaction read the undeclared key ${JSON.stringify(key)}.`);
}

/** Throws unless [start, end) lies inside a declared range. */
export function checkDeclaredRange(reads: TxReads, start: RecordKey, end: RecordKey): void {
  if (reads.ranges?.some(([s, e]) => compareKeys(s, start) <= 0 && compareKeys(end, e) <= 0)) return;
  throw new Error(`A write transaction read the undeclared range ${JSON.stringify([start, end])}.`);
}

/** The first index of the ascending `sorted` whose value is not below `x` (binary search). */
export function lowerBound<T extends string | number>(sorted: ArrayLike<T>, x: T): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
