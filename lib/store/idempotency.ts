// Idempotent writes: the response of a write made with an idempotency key is stored under
// (tenant, key) in the same transaction as the write, with the hash of the request, and kept
// 24 hours. A repeat of the same request gets the stored response and writes nothing; the
// same key with another request is an IdempotencyKeyReusedError.
import { IdempotencyKeyReusedError } from "../errors.js";
import type { Idempotency, Scope } from "./context.js";
import { idempotencyKey, open } from "./context.js";

/** How long a stored response answers repeats of its request. */
export const IDEMPOTENCY_TTL_MS = 24 * 3600 * 1000;

/** The stored record: the request's hash, the response (JSON text) and when it was stored. */
export interface IdempotencyRecord {
  request_hash: string;
  result: string;
  created_at: number;
}

/**
 * What a stored record means for this request: the stored response (a replay), or undefined
 * when there is none or it has expired; a record of another request throws.
 */
export function replayOf(idem: Idempotency, stored: unknown, now: number): unknown {
  const r = stored as IdempotencyRecord | undefined;
  if (r === undefined || r === null || r.created_at + IDEMPOTENCY_TTL_MS <= now) return undefined;
  if (r.request_hash !== idem.request_hash)
    throw new IdempotencyKeyReusedError("This Idempotency-Key was already used for a different request in the last 24 hours; use a new key for a new request.");
  idem.replayed = true;
  return JSON.parse(r.result);
}

/** The stored response of this scope's key, read before any work is done (undefined: none). */
export async function lookup(s: Scope): Promise<unknown> {
  if (!s.idem) return undefined;
  const core = open(s);
  return replayOf(s.idem, await core.backend.get(idempotencyKey(s.tenant, s.idem.key)), core.clock.now());
}

export function recordOf(idem: Idempotency, result: unknown, now: number): IdempotencyRecord {
  return { request_hash: idem.request_hash, result: JSON.stringify(result), created_at: now };
}
