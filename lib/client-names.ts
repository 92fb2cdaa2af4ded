// Quick checks of the client's common calls without zod, so that a program that makes one small
// call (`svc get`, `svc ls`) loads neither zod nor the store's schemas: names as lib/names.ts
// defines them (namespaces, keys, tenant ids), and the options of get, list, search and topk in their usual forms. Each
// answers exactly what the zod schema answers for what it accepts (test/client/quick-checks);
// anything else goes to the schemas (lib/client-validate.ts), which give the sentence.
const NAMESPACE = /^[A-Za-z0-9_-]+$/;
const KEY = /^[A-Za-z0-9_\-.:/@=]+$/;
// an empty, "." or ".." path segment
const KEY_BAD_SEGMENT = /(?:^|\/)\.{0,2}(?:\/|$)/;
const PREFIX = /^[A-Za-z0-9_\-.:/@=]*$/;

/** Why `v` is not a namespace (the schema's first sentence), or null when it is one. */
export function namespaceProblem(v: unknown): string | null {
  if (typeof v !== "string") return "namespace must be a string";
  if (v.length < 1) return "namespace must not be empty";
  if (v.length > 255) return "namespace must be at most 255 characters";
  if (!NAMESPACE.test(v)) return "namespace may contain only A-Z, a-z, 0-9, - and _";
  return null;
}

/** Why `v` is not a key (the schema's first sentence), or null when it is one. */
export function keyProblem(v: unknown): string | null {
  if (typeof v !== "string") return "key must be a string";
  if (v.length < 1) return "key must not be empty";
  if (v.length > 512) return "key must be at most 512 characters";
  if (!KEY.test(v)) return "key may contain only A-Z a-z 0-9 - _ . : / @ =";
  if (KEY_BAD_SEGMENT.test(v)) return "key must not have an empty, '.' or '..' path segment";
  return null;
}

/** Why `v` is not a tenant id (the schema's first sentence), or null when it is one. */
export function tenantIdProblem(v: unknown): string | null {
  if (typeof v !== "string") return "tenant_id must be a string";
  if (v.length < 1) return "tenant_id must not be empty";
  if (v.length > 64) return "tenant_id must be at most 64 characters";
  if (!/^[a-z0-9_-]+$/.test(v)) return "tenant_id may contain only a-z, 0-9, - and _";
  return null;
}

const isInt = (v: unknown, min: number, max = Number.MAX_SAFE_INTEGER): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= min && v <= max;
const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v) && Object.getPrototypeOf(v) === Object.prototype;

/** `v`'s own fields, when it is a plain object with no field outside `known`; else null. */
function fields(v: unknown, known: readonly string[]): Record<string, unknown> | null {
  if (!isPlainObject(v)) return null;
  for (const k of Object.keys(v)) if (!known.includes(k)) return null;
  return v;
}

export type QuickKind = "get" | "list" | "search" | "topk";

/**
 * The options the schema of `kind` would output for `v`, when `v` is in a form checked here
 * (every field absent, undefined or of the plain valid type); null otherwise (ask the schema).
 */
export function quickOptions(kind: QuickKind, v: unknown): Record<string, unknown> | null {
  switch (kind) {
    case "get": {
      const o = fields(v, ["version"]);
      if (!o || (o.version !== undefined && !isInt(o.version, 1))) return null;
      return o.version === undefined ? {} : { version: o.version };
    }
    case "list":
    case "search": {
      const o = fields(v, ["prefix", "limit", "offset"]);
      if (!o) return null;
      if (o.prefix !== undefined && !(typeof o.prefix === "string" && o.prefix.length <= 512 && PREFIX.test(o.prefix))) return null;
      if (o.limit !== undefined && !isInt(o.limit, 1, 1000)) return null;
      if (o.offset !== undefined && !isInt(o.offset, 0)) return null;
      return { prefix: o.prefix ?? "", limit: o.limit ?? (kind === "list" ? 1000 : 100), offset: o.offset ?? 0 };
    }
    case "topk": {
      const o = fields(v, ["key", "version", "k", "metric", "filter", "include_self"]);
      if (!o || keyProblem(o.key) !== null) return null;
      if (o.version !== undefined && !isInt(o.version, 1)) return null;
      if (o.k !== undefined && !isInt(o.k, 1, 1000)) return null;
      if (o.metric !== undefined && o.metric !== "cosine" && o.metric !== "dot" && o.metric !== "l2") return null;
      if (o.filter !== undefined && !isPlainObject(o.filter)) return null;
      if (o.include_self !== undefined && typeof o.include_self !== "boolean") return null;
      const out: Record<string, unknown> = { key: o.key, k: o.k ?? 10, metric: o.metric ?? "cosine", include_self: o.include_self ?? false };
      if (o.version !== undefined) out.version = o.version;
      if (o.filter !== undefined) out.filter = o.filter;
      return out;
    }
  }
}
