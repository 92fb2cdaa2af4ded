// LMDB implementation of the storage interface: one environment under `path` with two
// named databases, `records` (msgpack: heads and version records) and `payloads`
// (binary, keyed by the payload's SHA-256), so reading metadata never touches payloads.
import { mkdirSync } from "node:fs";
import { open, type Database, type Key, type RootDatabase } from "lmdb";
import type { RecordKey, StorageBackend, WriteTx } from "./backend.js";

const k = (key: RecordKey): Key => key as unknown as Key;

export class LmdbBackend implements StorageBackend {
  readonly name = "lmdb" as const;
  readonly path: string;
  #root: RootDatabase;
  #records: Database<unknown, Key>;
  #payloads: Database<Buffer, string>;

  constructor(path: string) {
    mkdirSync(path, { recursive: true });
    this.path = path;
    // overlappingSync off: a commit is fsynced before its promise resolves, so a put that
    // returned survives a crash of the process or the machine. Never noSync.
    this.#root = open({ path, maxDbs: 4, overlappingSync: false });
    // shared msgpack structures: heads and version records all have one of a few shapes, and
    // decoding with shared structures makes a scan of 10,000 heads about 3x faster
    this.#records = this.#root.openDB<unknown, Key>({ name: "records", sharedStructuresKey: Symbol.for("svc.structures") });
    this.#payloads = this.#root.openDB<Buffer, string>({ name: "payloads", encoding: "binary" });
  }

  get(key: RecordKey): unknown {
    return this.#records.get(k(key));
  }

  *range(start: RecordKey, end: RecordKey): Iterable<{ key: RecordKey; value: unknown }> {
    for (const { key, value } of this.#records.getRange({ start: k(start), end: k(end), snapshot: true })) yield { key: key as RecordKey, value };
  }

  getPayload(id: string): Buffer | undefined {
    return this.#payloads.get(id);
  }
  hasPayload(id: string): boolean {
    return this.#payloads.doesExist(id);
  }

  transact<T>(fn: (tx: WriteTx) => T): Promise<T> {
    const records = this.#records;
    const payloads = this.#payloads;
    const tx: WriteTx = {
      get: (key) => records.get(k(key)),
      range: (start, end) => this.range(start, end),
      getPayload: (id) => payloads.get(id),
      hasPayload: (id) => payloads.doesExist(id),
      put: (key, value) => void records.putSync(k(key), value),
      remove: (key) => void records.removeSync(k(key)),
      putPayload: (id, bytes) => void payloads.putSync(id, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)),
      removePayload: (id) => void payloads.removeSync(id),
      payloadIds: () => payloads.getKeys({ snapshot: false }) as Iterable<string>,
    };
    // a child transaction is rolled back when the callback throws
    return records.childTransaction(() => fn(tx)) as Promise<T>;
  }

  async close(): Promise<void> {
    await this.#root.close();
  }
}
