// What the validation step (api.md step 3) needs to know about each data-plane route: its
// operation name (for metering), the body it takes, and which fields name namespaces (for
// the ACL of step 4). The gateway checks what the order of checks depends on: well-formed
// JSON, required fields, namespace and key names; the engine validates the rest of the body.
import { z } from "zod";
import { ValidationError } from "../../lib/errors.js";
import { keySchema, namespaceSchema, parseOrThrow } from "../../lib/names.js";
import type { Operation } from "./meter.js";

export type BodyKind = "none" | "json" | "json-or-octet";

export interface RouteMatch {
  op: Operation;
  body: BodyKind;
  /** Namespaces named by the path (or the octet-stream put's query string). */
  pathNamespaces: string[];
}

/** Zod schema per JSON body; loose objects, since the engine owns the remaining fields. */
const BODY: Partial<Record<Operation, z.ZodType<Record<string, unknown>>>> = {
  put: z.looseObject({ namespace: namespaceSchema, key: keySchema, data_b64: z.string({ message: "data_b64 must be a Base64 string" }) }),
  put_cores: z.looseObject({ namespace: namespaceSchema, key: keySchema, cores: z.array(z.unknown(), { message: "cores must be a list" }).min(1, "cores must not be empty") }),
  put_cores_batch: z.looseObject({
    namespace: namespaceSchema,
    items: z.array(z.unknown(), { message: "items must be a list" }).min(1, "items must not be empty").max(1000, "items must have at most 1000 entries"),
  }),
  serve: z.looseObject({ namespace: namespaceSchema, key: keySchema, device: z.enum(["cpu", "gpu"], { message: "device must be cpu or gpu" }).optional() }),
  search: z.looseObject({ namespace: namespaceSchema }),
  query_similarity: z.looseObject({ namespace: namespaceSchema, a: keySchema, b: keySchema, namespace_b: namespaceSchema.optional() }),
  query_topk: z.looseObject({ namespace: namespaceSchema, key: keySchema }),
  query_vector: z.looseObject({ namespace: namespaceSchema }),
};

const POST_ROUTES: Record<string, Operation> = {
  "/v1/put": "put",
  "/v1/put_cores": "put_cores",
  "/v1/put_cores_batch": "put_cores_batch",
  "/v1/serve": "serve",
  "/v1/search": "search",
  "/v1/query/similarity": "query_similarity",
  "/v1/query/topk": "query_topk",
  "/v1/query/vector": "query_vector",
};

function decode(seg: string, what: string): string {
  try {
    return decodeURIComponent(seg);
  } catch {
    throw new ValidationError(`${what} in the path is not valid percent-encoding.`, what);
  }
}

/**
 * Finds the route of `method` + raw `path` (percent-encoded, no query); null when none.
 * Path names are validated here (400 on a bad namespace or key).
 */
export function matchRoute(method: string, path: string): RouteMatch | null {
  if (method === "POST") {
    const op = POST_ROUTES[path];
    if (!op) return null;
    return { op, body: op === "put" ? "json-or-octet" : "json", pathNamespaces: [] };
  }
  const m = /^\/v1\/(get|delete|list)\/([^/]+)(?:\/(.+))?$/.exec(path);
  if (!m) return null;
  const verb = m[1]!;
  if ((verb === "delete") !== (method === "DELETE") || (verb !== "delete" && method !== "GET")) return null;
  const ns = parseOrThrow(namespaceSchema, decode(m[2]!, "namespace"), "namespace");
  if (verb === "list") {
    if (m[3] !== undefined) return null;
    return { op: "list", body: "none", pathNamespaces: [ns] };
  }
  if (m[3] === undefined) throw new ValidationError("key is required in the path after the namespace.", "key");
  parseOrThrow(keySchema, decode(m[3], "key"), "key");
  return { op: verb as Operation, body: "none", pathNamespaces: [ns] };
}

/** Validates a parsed JSON body of `op`; returns the namespaces it names and serve's device. */
export function validateJsonBody(op: Operation, body: unknown): { namespaces: string[]; device?: string } {
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw new ValidationError("The request body must be a JSON object.");
  const schema = BODY[op];
  if (!schema) throw new ValidationError(`Operation ${op} takes no body.`);
  const b = parseOrThrow(schema, body);
  const namespaces = [b.namespace as string];
  if (op === "query_similarity" && typeof b.namespace_b === "string" && b.namespace_b !== b.namespace) namespaces.push(b.namespace_b);
  return { namespaces, device: typeof b.device === "string" ? b.device : undefined };
}

/** Validates the query string of an application/octet-stream put; returns its namespace. */
export function validatePutQuery(query: URLSearchParams): string {
  for (const name of ["namespace", "key"]) {
    if (query.getAll(name).length > 1) throw new ValidationError(`${name} must be given once in the query string.`, name);
  }
  const ns = parseOrThrow(namespaceSchema, query.get("namespace") ?? undefined, "namespace");
  parseOrThrow(keySchema, query.get("key") ?? undefined, "key");
  return ns;
}
