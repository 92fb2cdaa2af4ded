// Copies a store from one backend to another (svc migrate): every tenant's heads with their
// tombstones, every version record still kept (tombstoned ones too), the payloads they
// reference and the stored responses of idempotent writes, as they are: versions, fingerprints
// and instants unchanged. One transaction per key on the destination (head, versions and
// payloads together), so an interrupted copy leaves whole keys only; run again, it skips the
// keys whose head the destination already holds unchanged, and copies the rest.
import type { RecordKey, StorageBackend } from "./backend.js";
import { END } from "./context.js";
import { unpackRecord } from "./records.js";
import type { HeadRecord, VersionRecord } from "./types.js";

export interface CopyProgress {
  /** Called after each key: copied (false: already there), payload bytes written. */
  key(name: string, copied: boolean, bytes: number): void;
}

export interface CopyResult {
  keys: number;
  copied: number;
  skipped: number;
  versions: number;
  payload_bytes: number;
  idempotency_records: number;
}

/** Heads in the source (for a progress total). */
export async function countHeads(src: StorageBackend): Promise<number> {
  let n = 0;
  for await (const _ of src.range(["h"], ["h", END])) n++;
  return n;
}

/** Whether the destination's head is the source's (the key was copied and has not changed since). */
function sameHead(a: HeadRecord, b: HeadRecord | undefined): boolean {
  return (
    b !== undefined &&
    a.latest === b.latest &&
    a.first_live === b.first_live &&
    a.deleted === b.deleted &&
    a.updated_at === b.updated_at &&
    JSON.stringify(a.tombstones) === JSON.stringify(b.tombstones)
  );
}

export async function copyStore(src: StorageBackend, dst: StorageBackend, progress?: CopyProgress): Promise<CopyResult> {
  const r: CopyResult = { keys: 0, copied: 0, skipped: 0, versions: 0, payload_bytes: 0, idempotency_records: 0 };
  const tenantOf = (t: string) => (dst.payloadScope === "tenant" ? t : "");
  for await (const { key, value } of src.range(["h"], ["h", END])) {
    const [, t, ns, k] = key as [string, string, string, string];
    const name = `${t}/${ns}/${k}`;
    r.keys++;
    const head = unpackRecord<HeadRecord>(structuredClone(value))!;
    if (sameHead(head, unpackRecord<HeadRecord>(await dst.get(key)))) {
      r.skipped++;
      progress?.key(name, false, 0);
      continue;
    }
    // every version record still stored, with its payload
    const versions: { key: RecordKey; value: unknown }[] = [];
    for await (const v of src.range(["v", t, ns, k], ["v", t, ns, k, Number.MAX_SAFE_INTEGER])) versions.push(v);
    const shas = [...new Set(versions.map((v) => unpackRecord<VersionRecord>(structuredClone(v.value))!.fingerprint.sha256))];
    const payloads = await src.getPayloads(t, shas);
    const missing = shas.filter((s) => !payloads.has(s));
    if (missing.length) throw new Error(`The source's payload of ${name} (${missing[0]}) is missing; nothing of this key was copied.`);
    let bytes = 0;
    await dst.transact({ keys: [key, ...versions.map((v) => v.key)] }, (tx) => {
      bytes = 0;
      for (const [sha, p] of payloads) {
        tx.putPayload(tenantOf(t), sha, p);
        bytes += p.byteLength;
      }
      for (const v of versions) tx.put(v.key, v.value);
      tx.put(key, value); // the head last: its presence means the key is complete
    });
    r.copied++;
    r.versions += versions.length;
    r.payload_bytes += bytes;
    progress?.key(name, true, bytes);
  }
  // stored responses of idempotent writes (kept 24 hours): retries keep working after the move
  const idem: { key: RecordKey; value: unknown }[] = [];
  for await (const e of src.range(["i"], ["i", END])) idem.push(e);
  for (let i = 0; i < idem.length; i += 500) {
    const part = idem.slice(i, i + 500);
    await dst.transact({ keys: part.map((e) => e.key) }, (tx) => {
      for (const e of part) tx.put(e.key, e.value);
    });
  }
  r.idempotency_records = idem.length;
  return r;
}
