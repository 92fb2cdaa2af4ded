// The data-plane routes of the gateway. What the validation step (step 3 of the order of checks, docs/api.md) needs to know about each data-plane route: its
// operation name (for metering), the body it takes, and which fields name namespaces (for
// the ACL of step 4). The gateway checks what the order of checks depends on: well-formed
// Bodies and query strings are checked with the same schemas the engine uses (lib/schemas.ts),
// so a request the gateway lets through is one the engine accepts as well-formed.
import { z } from "zod";
import { ValidationError } from "../../lib/errors.js";
import { keyOf, namespaceOf, parseOrThrow } from "../../lib/fields.js";
import * as S from "../../lib/schemas.js";
import type { Operation } from "./operations.js";

export type BodyKind = "none" | "json" | "json-or-octet";

export interface RouteMatch {
  op: Operation;
  body: BodyKind;
  /** Namespaces named by the path (or the octet-stream put's query string). */
  pathNamespaces: string[];
}

/** The shared zod schemas of docs/api.md (data plane) (lib/schemas.ts), per JSON body. */
const BODY: Partial<Record<Operation, z.ZodType<Record<string, unknown>>>> = {
  put: S.putBodySchema,
  put_cores: S.putCoresBodySchema,
  put_cores_batch: S.putCoresBatchBodySchema,
  serve: S.serveBodySchema,
  search: S.searchBodySchema,
  query_similarity: S.similarityBodySchema,
  query_topk: S.topkBodySchema,
  query_vector: S.vectorBodySchema as unknown as z.ZodType<Record<string, unknown>>,
};

/** Query strings of the routes without a body. */
const QUERY: Partial<Record<Operation, z.ZodType>> = {
  get: S.getQuerySchema,
  list: S.listQuerySchema,
  delete: z.strictObject({}),
};

/** The routes whose query schema accepts an empty query: most requests have none, and it is not parsed. */
const EMPTY_QUERY_OK = new Set(Object.keys(QUERY).filter((op) => QUERY[op as Operation]!.safeParse({}).success));

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
export function matchRoute(method: string, path: string, query: Record<string, string> = {}): RouteMatch | null {
  if (method === "POST") {
    const op = POST_ROUTES[path];
    if (!op) return null;
    return { op, body: op === "put" ? "json-or-octet" : "json", pathNamespaces: [] };
  }
  const m = /^\/v1\/(get|delete|list)\/([^/]+)(?:\/(.+))?$/.exec(path);
  if (!m) return null;
  const verb = m[1]!;
  if ((verb === "delete") !== (method === "DELETE") || (verb !== "delete" && method !== "GET")) return null;
  const ns = namespaceOf(decode(m[2]!, "namespace"));
  if (verb === "list") {
    if (m[3] !== undefined) return null;
  } else {
    if (m[3] === undefined) throw new ValidationError("key is required in the path after the namespace.", "key");
    keyOf(decode(m[3], "key"));
  }
  const op = verb as Operation;
  if (!EMPTY_QUERY_OK.has(op) || Object.keys(query).length > 0) parseOrThrow(QUERY[op]!, query, "query");
  return { op, body: "none", pathNamespaces: [ns] };
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

/** Validates the query string (read by server/http/query.ts) of an application/octet-stream put; returns its namespace. */
export function validatePutQuery(query: Record<string, string>): string {
  const q = parseOrThrow(S.putQuerySchema, query, "query");
  return q.namespace;
}
