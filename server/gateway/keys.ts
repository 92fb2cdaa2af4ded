// Scoped API keys (docs/api.md, admin routes): several keys per tenant, each with a name, scopes
// (read, or read and write), an optional subset of the tenant's namespaces and an optional expiry.
// They live in the tenant's record (tenants.ts), so creating or revoking one changes the record
// and every gateway sharing the store sees it at its next request, exactly as a rotation. The key
// of creation and rotation keeps every scope on every namespace (key_id "primary").
import { randomBytes, timingSafeEqual } from "node:crypto";
import type { Request, Response, Router } from "express";
import { ConflictError, ForbiddenError, NotFoundError, UnauthorizedError, ValidationError } from "../../lib/errors.js";
import { createKeySchema, PRIMARY_KEY_ID, revokeKeySchema } from "../../lib/key-schemas.js";
import { parseOrThrow, tenantIdSchema } from "../../lib/fields.js";
import { sha256Hex } from "../../lib/sha256.js";
import { generateApiKey } from "./auth.js";
import type { Clock } from "./clock.js";
import type { KeyUsageTracker } from "./key-usage.js";
import type { Operation } from "./meter.js";
import type { Scope, ScopedKey, TenantRecord, TenantRegistry } from "./tenants.js";

/** Scoped keys a tenant may hold at once (expired ones count until they are revoked). */
export const MAX_KEYS_PER_TENANT = 20;
export { PRIMARY_KEY_ID };

/** Which scope each data-plane operation needs. */
export const SCOPE_OF: Readonly<Record<Operation, Scope>> = Object.freeze({
  get: "read",
  list: "read",
  search: "read",
  serve: "read",
  query_similarity: "read",
  query_topk: "read",
  query_vector: "read",
  put: "write",
  put_cores: "write",
  put_cores_batch: "write",
  delete: "write",
});

/** What the key a request authenticated with allows. */
export interface KeyGrant {
  readonly key_id: string;
  readonly scopes: readonly Scope[];
  /** null: every namespace of the tenant. */
  readonly namespaces: readonly string[] | null;
}

const PRIMARY_GRANT: KeyGrant = Object.freeze({ key_id: PRIMARY_KEY_ID, scopes: Object.freeze(["read", "write"] as Scope[]), namespaces: null });

interface KeyEntry {
  readonly hash: Buffer;
  readonly grant: KeyGrant;
  readonly expiresAt: string | null;
  readonly expiresMs: number;
}

// A record's keys decoded once per record object: the registries and the Redis admission cache
// hand out the same frozen record for every request until it changes, so a request does no
// hex decoding and allocates no grant.
const decoded = new WeakMap<TenantRecord, readonly KeyEntry[]>();

function entriesOf(t: TenantRecord): readonly KeyEntry[] {
  let out = decoded.get(t);
  if (out) return out;
  const list: KeyEntry[] = [];
  if (t.key_hash.length === 64) list.push({ hash: Buffer.from(t.key_hash, "hex"), grant: PRIMARY_GRANT, expiresAt: null, expiresMs: Infinity });
  for (const k of t.keys ?? []) {
    if (k.key_hash.length !== 64) continue;
    const grant: KeyGrant = Object.freeze({
      key_id: k.key_id,
      scopes: Object.freeze([...k.scopes]),
      namespaces: k.namespaces === null ? null : Object.freeze([...k.namespaces]),
    });
    list.push({ hash: Buffer.from(k.key_hash, "hex"), grant, expiresAt: k.expires_at, expiresMs: k.expires_at === null ? Infinity : Date.parse(k.expires_at) });
  }
  out = Object.freeze(list);
  decoded.set(t, out);
  return out;
}

/**
 * Step 2, second half: `t` (the record looked up by `keyHash`) is active and holds that key hash,
 * compared in constant time with each of its keys (no early exit), and a scoped key has not
 * expired at `nowMs`; else 401. Returns the tenant and what the key allows.
 */
export function confirmKey(t: TenantRecord | null, keyHash: string | null, nowMs: number): { tenant: TenantRecord; grant: KeyGrant } {
  if (!t || keyHash === null || keyHash.length !== 64 || !t.active) throw new UnauthorizedError("Invalid API key.");
  const h = Buffer.from(keyHash, "hex");
  let found: KeyEntry | null = null;
  for (const e of entriesOf(t)) if (timingSafeEqual(e.hash, h) && found === null) found = e;
  if (found === null) throw new UnauthorizedError("Invalid API key.");
  if (nowMs >= found.expiresMs) throw new UnauthorizedError(`This API key expired at ${found.expiresAt}.`);
  return { tenant: t, grant: found.grant };
}

/** Step 4, after the tenant's ACL: the key's scopes cover `op` and its namespaces every one named; else 403. */
export function checkGrant(grant: KeyGrant, op: Operation, namespaces: readonly string[]): void {
  const need = SCOPE_OF[op];
  if (!grant.scopes.includes(need)) {
    throw new ForbiddenError(`API key ${grant.key_id} lacks scope ${need}, which ${op} needs (its scopes: ${grant.scopes.join(", ")}).`);
  }
  if (grant.namespaces === null) return;
  for (const ns of namespaces) {
    if (!grant.namespaces.includes(ns))
      throw new ForbiddenError(`API key ${grant.key_id} is not allowed namespace ${ns}: it is limited to a subset of the tenant's namespaces.`);
  }
}

/** Whether `grant` may do anything the tenant may (the account's billing actions need that). */
export const isFullGrant = (g: KeyGrant): boolean => g.namespaces === null && g.scopes.includes("write");

/** A key as the admin API lists it: never its hash. */
export function keyView(tenantId: string, k: ScopedKey, lastUsedMs: number | undefined, nowMs: number) {
  return {
    key_id: k.key_id,
    tenant_id: tenantId,
    name: k.name,
    scopes: k.scopes,
    namespaces: k.namespaces,
    expires_at: k.expires_at,
    expired: k.expires_at !== null && nowMs >= Date.parse(k.expires_at),
    created_at: k.created_at,
    last_used_at: lastUsedMs === undefined ? null : new Date(lastUsedMs).toISOString(),
  };
}

/** Adds a scoped key to a tenant; returns the key (shown once) and its record. */
export async function createScopedKey(registry: TenantRegistry, input: unknown, nowMs: number): Promise<{ apiKey: string; key: ScopedKey; tenantId: string }> {
  const b = parseOrThrow(createKeySchema, input);
  if (b.expires_at != null && Date.parse(b.expires_at) <= nowMs) {
    throw new ValidationError(`expires_at ${b.expires_at} is not in the future.`, "expires_at");
  }
  const apiKey = generateApiKey();
  const key: ScopedKey = {
    key_id: `key_${randomBytes(12).toString("base64url")}`,
    name: b.name,
    key_hash: sha256Hex(apiKey),
    scopes: b.scopes,
    namespaces: b.namespaces ?? null,
    expires_at: b.expires_at ?? null,
    created_at: new Date(nowMs).toISOString(),
  };
  await registry.update(b.tenant_id, (t) => {
    if (!t.active) throw new ConflictError(`Tenant ${t.tenant_id} is deactivated.`);
    const outside = key.namespaces?.find((ns) => !t.namespaces.includes(ns));
    if (outside !== undefined) throw new ValidationError(`namespaces: ${outside} is not a namespace of tenant ${t.tenant_id}.`, "namespaces");
    const keys = t.keys ?? [];
    if (keys.length >= MAX_KEYS_PER_TENANT) {
      throw new ValidationError(`Tenant ${t.tenant_id} already holds ${MAX_KEYS_PER_TENANT} keys, the most allowed; revoke one first.`, "tenant_id");
    }
    if (keys.some((k) => k.name === key.name)) throw new ConflictError(`Tenant ${t.tenant_id} already has a key named ${key.name}.`);
    return { ...t, keys: [...keys, key], updated_at: key.created_at };
  });
  return { apiKey, key, tenantId: b.tenant_id };
}

/** Removes a scoped key; refused at once by every gateway sharing the registry. */
export async function revokeScopedKey(registry: TenantRegistry, input: unknown, nowMs: number): Promise<{ keyId: string; tenantId: string }> {
  const { key_id } = parseOrThrow(revokeKeySchema, input);
  const gone = () => new NotFoundError(`API key ${key_id} does not exist or was already revoked.`);
  const t = await registry.findByKeyId(key_id);
  if (!t) throw gone();
  await registry.update(t.tenant_id, (cur) => {
    const keys = cur.keys ?? [];
    if (!keys.some((k) => k.key_id === key_id)) throw gone();
    return { ...cur, keys: keys.filter((k) => k.key_id !== key_id), updated_at: new Date(nowMs).toISOString() };
  });
  return { keyId: key_id, tenantId: t.tenant_id };
}

export interface KeysRouterDeps {
  registry: TenantRegistry;
  clock: Clock;
  keyUsage: KeyUsageTracker;
}

/**
 * POST /gate/admin/keys, GET /gate/admin/keys/{tenant_id}, POST /gate/admin/keys/revoke, added
 * to the admin router (service key checked, JSON parsed before them). The tenant a call acted on
 * goes to `res.locals.tenant_id` for its audit record.
 */
export function addKeyRoutes(r: Router, d: KeysRouterDeps): void {
  const body = (req: Request): unknown => (req.body === undefined ? {} : req.body);

  r.post("/gate/admin/keys/revoke", async (req: Request, res: Response) => {
    const out = await revokeScopedKey(d.registry, body(req), d.clock.now());
    res.locals.tenant_id = out.tenantId;
    res.status(200).json({ key_id: out.keyId, tenant_id: out.tenantId, status: "revoked" });
  });

  r.post("/gate/admin/keys", async (req: Request, res: Response) => {
    const { apiKey, key, tenantId } = await createScopedKey(d.registry, body(req), d.clock.now());
    res.status(201).json({
      key_id: key.key_id,
      api_key: apiKey,
      tenant_id: tenantId,
      name: key.name,
      scopes: key.scopes,
      namespaces: key.namespaces,
      expires_at: key.expires_at,
    });
  });

  r.get("/gate/admin/keys/:tenant_id", async (req: Request, res: Response) => {
    const id = parseOrThrow(tenantIdSchema, req.params.tenant_id, "tenant_id");
    const t = await d.registry.get(id);
    if (!t) throw new NotFoundError(`Tenant ${id} does not exist.`);
    const used = await d.keyUsage.lastUsed(id);
    const now = d.clock.now();
    res.status(200).json({ tenant_id: id, keys: (t.keys ?? []).map((k) => keyView(id, k, used.get(k.key_id), now)) });
  });
}
