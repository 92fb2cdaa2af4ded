// Authentication (step 2 of the order of checks, docs/api.md) and API keys. Keys are `svc_live_` + 43 base64url characters
// (32 random bytes); only their SHA-256 is stored. Comparisons of secrets run in constant time
// on equal-length digests.
import { randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { UnauthorizedError, ValidationError } from "../../lib/errors.js";
import { sha256, sha256Hex } from "../../lib/sha256.js";

export const KEY_PREFIX = "svc_live_";

/** A fresh tenant API key (52 characters). */
export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString("base64url");
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

/**
 * Every credential a request carries, in order: each `X-Api-Key` value (a header sent twice, or
 * values joined by commas, count one each) and each `Authorization: Bearer` token. Read from the
 * raw headers, since Node keeps only the first of two Authorization headers.
 */
function credentialsOf(req: IncomingMessage): string[] {
  const out: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (name === "x-api-key") {
      for (const v of raw[i + 1]!.split(",")) if (v.trim()) out.push(v.trim());
    } else if (name === "authorization") {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(raw[i + 1]!);
      if (m) out.push(m[1]!);
    }
  }
  return out;
}

/**
 * The credential a request carries (`X-Api-Key` or `Authorization: Bearer <key>`); 400 when it
 * carries two that differ, so that a request is never served as one of two identities.
 */
export function credentialOf(req: IncomingMessage): string | undefined {
  const all = credentialsOf(req);
  for (let i = 1; i < all.length; i++) {
    if (all[i] !== all[0]) throw new ValidationError("The request carries two different credentials; send one key, in X-Api-Key or Authorization: Bearer.");
  }
  return all[0];
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

/** Admin authentication: `Authorization: Bearer <service key>`; anything else is 401. */
export function checkServiceKey(req: IncomingMessage, serviceKey: string): void {
  const key = credentialOf(req);
  const m = /^Bearer\s+(\S+)\s*$/i.exec(headerOf(req, "authorization") ?? "");
  if (!m || key === undefined) throw new UnauthorizedError("Missing service key: send it in Authorization: Bearer.");
  if (!secretsEqual(key, serviceKey)) throw new UnauthorizedError("Invalid service key.");
}
