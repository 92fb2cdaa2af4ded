// Authentication (step 2 of the order of checks, docs/api.md) and API keys. Keys are `svc_live_` + 43 base64url characters
// (32 random bytes); only their SHA-256 is stored. Comparisons of secrets run in constant time
// on equal-length digests.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { UnauthorizedError } from "../../lib/errors.js";
import type { TenantRecord, TenantRegistry } from "./tenants.js";

export const KEY_PREFIX = "svc_live_";

/** A fresh tenant API key (52 characters). */
export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString("base64url");
}

export function sha256Hex(s: string): string {
  return createHash("sha256").update(s, "utf8").digest("hex");
}

function sha256(s: string): Buffer {
  return createHash("sha256").update(s, "utf8").digest();
}

/** Constant-time equality of two secrets (compares their SHA-256 digests, always 32 bytes). */
export function secretsEqual(a: string, b: string): boolean {
  return timingSafeEqual(sha256(a), sha256(b));
}

/** A request header (the first, when it was sent more than once); works on plain Node requests. */
export function headerOf(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The credential a request carries: `X-Api-Key`, else `Authorization: Bearer <key>`. */
export function credentialOf(req: IncomingMessage): string | undefined {
  const k = headerOf(req, "x-api-key");
  if (k) return k.trim();
  const m = /^Bearer\s+(\S+)\s*$/i.exec(headerOf(req, "authorization") ?? "");
  return m?.[1];
}

/**
 * Step 2, first half: the SHA-256 (hex) of the request's tenant key. 401 when the request carries
 * no key; null when what it carries cannot be a tenant key (no lookup is needed to refuse it).
 */
export function tenantKeyHashOf(req: IncomingMessage): string | null {
  const key = credentialOf(req);
  if (!key) throw new UnauthorizedError("Missing API key: send it in X-Api-Key or Authorization: Bearer.");
  return key.startsWith(KEY_PREFIX) ? sha256Hex(key) : null;
}

/**
 * Step 2, second half: `t` (the record looked up by `keyHash`) is active and holds that very
 * key hash, compared in constant time; else 401.
 */
export function confirmTenant(t: TenantRecord | null, keyHash: string | null): TenantRecord {
  // Keys are looked up by their SHA-256, so nothing secret is compared byte by byte with
  // early exit; this is a constant-time confirmation of the match.
  if (!t || keyHash === null || !t.active || !timingSafeEqual(Buffer.from(t.key_hash, "hex"), Buffer.from(keyHash, "hex"))) {
    throw new UnauthorizedError("Invalid API key.");
  }
  return t;
}

/** The active tenant the request's key belongs to; UnauthorizedError otherwise. */
export async function authenticateTenant(registry: TenantRegistry, req: IncomingMessage): Promise<TenantRecord> {
  const h = tenantKeyHashOf(req);
  return confirmTenant(h === null ? null : await registry.findByKeyHash(h), h);
}

/** Admin authentication: `Authorization: Bearer <service key>`; anything else is 401. */
export function checkServiceKey(req: IncomingMessage, serviceKey: string): void {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(headerOf(req, "authorization") ?? "");
  if (!m) throw new UnauthorizedError("Missing service key: send it in Authorization: Bearer.");
  if (!secretsEqual(m[1]!, serviceKey)) throw new UnauthorizedError("Invalid service key.");
}
