// Maintenance of the whole store (every tenant): compact purges expired tombstones, the
// versions they cover, expired idempotency records, and payloads no kept version references.
import { ValidationError } from "../errors.js";
import type { CompactRules, PayloadRef, RecordKey, WriteTx } from "./backend.js";
import { END, open, versionKey, type Core } from "./context.js";
import { IDEMPOTENCY_TTL_MS, type IdempotencyRecord } from "./idempotency.js";
import { packRecord, unpackRecord } from "./records.js";
import type { CompactResult, HeadRecord, VersionRecord } from "./types.js";

/**
 * Purges tombstones whose `purge_after` is at or before `now` (default: the store's clock)
 * and payloads that no kept version references. Covers every tenant.
 */
export async function compact(core: Core, opts: { now?: number | Date } = {}): Promise<CompactResult> {
  const { backend, clock } = open({ core, tenant: "" });
  const now = opts.now === undefined ? clock.now() : opts.now instanceof Date ? opts.now.getTime() : opts.now;
  if (typeof now !== "number" || !Number.isFinite(now)) throw new ValidationError("now must be a Date or a number of milliseconds.", "now");
  const rules = rulesAt(now);
  // a backend that pages through the records itself holds a bounded number of them at once
  if (backend.compact) return backend.compact(rules);
  const reads = {
    ranges: [
      [["h"], ["h", END]],
      [["v"], ["v", END]],
      [["i"], ["i", END]],
    ] as [string[], string[]][],
    payloads: true,
  };
  return backend.transact(reads, (tx) => compactIn(tx, rules, backend.payloadScope === "tenant"));
}

/** What compact at `now` does with each stored record. */
export function rulesAt(now: number): CompactRules {
  return {
    purge(value) {
      const head = unpackRecord<HeadRecord>(value)!;
      const expired = head.tombstones.filter((s) => s.purge_after <= now);
      if (expired.length === 0) return null;
      const kept = head.tombstones.filter((s) => s.purge_after > now);
      return {
        spans: expired.map((s) => [s.from, s.upto]),
        head: head.deleted && kept.length === 0 ? undefined : packRecord({ ...head, tombstones: kept }),
      };
    },
    payloadOf: (value) => unpackRecord<VersionRecord>(value)!.fingerprint.sha256,
    expired: (value) => (value as IdempotencyRecord).created_at + IDEMPOTENCY_TTL_MS <= now,
  };
}

/**
 * compact as one write transaction. Each family is read lazily and only what changes is kept
 * until the writes, made after its reading (a write could disturb the reading under way).
 */
function compactIn(tx: WriteTx, rules: CompactRules, perTenant: boolean): CompactResult {
  let versionsPurged = 0;
  let keysPurged = 0;
  const referenced = new Set<string>();
  const purges: { key: RecordKey; p: NonNullable<ReturnType<CompactRules["purge"]>> }[] = [];
  for (const { key, value } of tx.range(["h"], ["h", END])) {
    const p = rules.purge(value);
    if (p !== null) purges.push({ key, p });
  }
  for (const { key, p } of purges) {
    const [, t, ns, k] = key as [string, string, string, string];
    for (const [from, upto] of p.spans) {
      for (let v = from; v <= upto; v++) {
        if (tx.get(versionKey(t, ns, k, v)) !== undefined) {
          tx.remove(versionKey(t, ns, k, v));
          versionsPurged++;
        }
      }
    }
    if (p.head === undefined) {
      tx.remove(key);
      keysPurged++;
    } else tx.put(key, p.head);
  }
  // payloads are shared by every tenant (LMDB, memory) or held per tenant (PostgreSQL)
  for (const { key, value } of tx.range(["v"], ["v", END])) {
    const sha = rules.payloadOf(value);
    referenced.add(perTenant ? `${key[1] as string}\u0000${sha}` : sha);
  }
  const unused: PayloadRef[] = [];
  for (const ref of tx.payloadIds()) if (!referenced.has(perTenant ? `${ref.tenant}\u0000${ref.id}` : ref.id)) unused.push(ref);
  for (const { tenant, id } of unused) tx.removePayload(tenant, id);
  const expired: RecordKey[] = [];
  for (const { key, value } of tx.range(["i"], ["i", END])) if (rules.expired(value)) expired.push(key);
  for (const key of expired) tx.remove(key);
  const payloadsPurged = unused.length;
  return { versions_purged: versionsPurged, keys_purged: keysPurged, payloads_purged: payloadsPurged };
}
