// The one storage interface the store is written against, with two implementations:
// LMDB on disk (lib/store/lmdb.ts) and memory (lib/store/memory.ts).

/** Record keys are tuples of strings and numbers, ordered element by element (strings by bytes). */
export type RecordKey = readonly (string | number)[];

export interface ReadView {
  get(key: RecordKey): unknown;
  /** Entries with start <= key < end, ascending. */
  range(start: RecordKey, end: RecordKey): Iterable<{ key: RecordKey; value: unknown }>;
  getPayload(id: string): Buffer | undefined;
  hasPayload(id: string): boolean;
}

export interface WriteTx extends ReadView {
  put(key: RecordKey, value: unknown): void;
  remove(key: RecordKey): void;
  putPayload(id: string, bytes: Uint8Array): void;
  removePayload(id: string): void;
  payloadIds(): Iterable<string>;
}

export interface StorageBackend extends ReadView {
  readonly name: "lmdb" | "memory";
  /**
   * Runs `fn` as one atomic, isolated write transaction (serialised with every other
   * writer, across processes for LMDB) and resolves once it is durable. When `fn` throws,
   * nothing it wrote is kept and the promise rejects with that error.
   */
  transact<T>(fn: (tx: WriteTx) => T): Promise<T>;
  close(): Promise<void>;
  /** Bytes on disk (`file`) and in use (`used`), for backends that keep files. */
  sizeBytes?(): { file: number; used: number };
}
