// In-memory implementation of the storage interface (for ":memory:" stores and tests):
// same ordering and transaction semantics as LMDB, within one process.
import {
  checkDeclared,
  checkDeclaredRange,
  lowerBound,
  type PayloadRef,
  type RecordEntry,
  type RecordKey,
  type StorageBackend,
  type TxReads,
  type WriteTx,
} from "./backend.js";

// Tuples become strings whose JS order is the element-wise order: strings joined by
// NUL (below every key character), numbers as fixed-width decimals.
function encodeKey(key: RecordKey): string {
  return key.map((p) => (typeof p === "number" ? `\u0001${String(p).padStart(17, "0")}` : p)).join("\u0000");
}

const DELETED = Symbol("deleted");

export class MemoryBackend implements StorageBackend {
  readonly name = "memory" as const;
  readonly payloadScope = "global" as const;
  readonly ownPayloads = false;
  #records = new Map<string, RecordEntry>();
  #sorted: string[] = [];
  #payloads = new Map<string, Buffer>();
  #queue: Promise<unknown> = Promise.resolve();
  #closed = false;

  #get(key: RecordKey): unknown {
    const e = this.#records.get(encodeKey(key));
    return e === undefined ? undefined : structuredClone(e.value);
  }

  async get(key: RecordKey): Promise<unknown> {
    return this.#get(key);
  }

  async *range(start: RecordKey, end: RecordKey): AsyncIterable<RecordEntry> {
    // snapshot the slice so that concurrent writes do not disturb the iteration
    const keys = this.#sorted.slice(lowerBound(this.#sorted, encodeKey(start)), lowerBound(this.#sorted, encodeKey(end)));
    const snap = keys.map((k) => this.#records.get(k)).filter((r) => r !== undefined);
    for (const r of snap) yield { key: r.key, value: structuredClone(r.value) };
  }

  async getPayload(_tenant: string, id: string): Promise<Buffer | undefined> {
    return this.#payloads.get(id);
  }

  async getPayloads(_tenant: string, ids: readonly string[]): Promise<Map<string, Buffer>> {
    const out = new Map<string, Buffer>();
    for (const id of ids) {
      const p = this.#payloads.get(id);
      if (p) out.set(id, p);
    }
    return out;
  }

  async getEntry(tenant: string, ns: string, key: string, version?: number): Promise<{ head: unknown; record: unknown }> {
    const head = this.#get(["h", tenant, ns, key]) as { latest?: number } | undefined;
    const v = version ?? head?.latest;
    return { head, record: head && v !== undefined ? this.#get(["v", tenant, ns, key, v]) : undefined };
  }

  async hasPayload(_tenant: string, id: string): Promise<boolean> {
    return this.#payloads.has(id);
  }

  transact<T>(reads: TxReads, fn: (tx: WriteTx) => T): Promise<T> {
    if (this.#closed) return Promise.reject(new Error("The store is closed."));
    const run = this.#queue.then(() => this.#run(reads, fn));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  #run<T>(reads: TxReads, fn: (tx: WriteTx) => T): T {
    // writes are staged and applied only when fn returns, so a throw keeps nothing
    const recs = new Map<string, RecordEntry | typeof DELETED>();
    const pays = new Map<string, Buffer | typeof DELETED>();
    const self = this;
    const tx: WriteTx = {
      get(key) {
        checkDeclared(reads, key);
        const staged = recs.get(encodeKey(key));
        if (staged === DELETED) return undefined;
        if (staged) return structuredClone(staged.value);
        return self.#get(key);
      },
      *range(start, end) {
        checkDeclaredRange(reads, start, end);
        const s = encodeKey(start);
        const e = encodeKey(end);
        const keys = new Set(self.#sorted.slice(lowerBound(self.#sorted, s), lowerBound(self.#sorted, e)));
        for (const k of recs.keys()) if (k >= s && k < e) keys.add(k);
        for (const k of [...keys].sort()) {
          const staged = recs.get(k);
          if (staged === DELETED) continue;
          const r = staged ?? self.#records.get(k);
          if (r) yield { key: r.key, value: structuredClone(r.value) };
        }
      },
      put(key, value) {
        recs.set(encodeKey(key), { key: [...key], value: structuredClone(value) });
      },
      remove(key) {
        recs.set(encodeKey(key), DELETED);
      },
      putPayload(_tenant, id, bytes) {
        const p = pays.get(id);
        if (p === undefined ? !self.#payloads.has(id) : p === DELETED) pays.set(id, Buffer.from(bytes));
      },
      removePayload(_tenant, id) {
        pays.set(id, DELETED);
      },
      *payloadIds(): Iterable<PayloadRef> {
        if (!reads.payloads) throw new Error("A write transaction listed payloads without declaring it.");
        const ids = new Set([...self.#payloads.keys(), ...pays.keys()]);
        for (const id of ids) if (pays.get(id) !== DELETED) yield { tenant: "", id };
      },
    };
    const result = fn(tx);
    for (const [k, v] of recs) {
      if (v === DELETED) {
        if (this.#records.delete(k)) this.#sorted.splice(lowerBound(this.#sorted, k), 1);
      } else {
        if (!this.#records.has(k)) this.#sorted.splice(lowerBound(this.#sorted, k), 0, k);
        this.#records.set(k, v);
      }
    }
    for (const [id, p] of pays) {
      if (p === DELETED) this.#payloads.delete(id);
      else this.#payloads.set(id, p);
    }
    return result;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#queue;
  }
}
