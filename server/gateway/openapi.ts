// GET /openapi.json: an OpenAPI 3.1 description of every gateway endpoint, generated with
// zod 4's z.toJSONSchema from the very schemas the engine and the gateway validate with
// (lib/schemas.ts, lib/fields.ts, the admin schemas), so the document cannot drift from
// the checks. OpenAPI 3.1 schemas are JSON Schema 2020-12, which is what zod emits.
import { readFileSync } from "node:fs";
import { z } from "zod";
import type { RequestHandler } from "express";
import { dtypeSchema, namespaceSchema, keySchema, tenantIdSchema } from "../../lib/fields.js";
import {
  putBodySchema,
  putQuerySchema,
  putCoresBodySchema,
  putCoresBatchBodySchema,
  putCoresItemSchema,
  getQuerySchema,
  listQuerySchema,
  searchBodySchema,
  serveBodySchema,
  similarityBodySchema,
  topkBodySchema,
  vectorBodySchema,
} from "../../lib/schemas.js";
import { createSchema, idSchema, addNamespaceSchema, updateTierSchema } from "./admin.js";
import { createKeySchema, revokeKeySchema } from "../../lib/key-schemas.js";
import { checkoutBodySchema } from "./billing.js";

type Json = Record<string, unknown>;

// ---- response bodies ----
// The results are TypeScript types in lib/store/types.ts, not zod schemas, so these are
// written here; test/client/openapi.test.ts parses live responses of every operation with
// them (strict objects), so a field added, removed or retyped on the wire fails that test.
const int = z.number().int();
const instant = z.string().regex(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
// the wire names every dtype as the put schemas do
const dtypeOut = dtypeSchema;
const verdict = z.enum(["compressed", "weak", "lossless", "passthrough"]);
const metric = z.enum(["cosine", "dot", "l2"]);
const codecOut = z.enum(["tt", "pred", "lossless", "raw"]);
const ttInfo = z.strictObject({ modes: z.array(int), ranks: z.array(int) });
const fingerprint = z.strictObject({ sha256: z.string(), codec: codecOut, tt: ttInfo.nullable(), norm: z.number().nullable() });
const putResult = z.strictObject({
  namespace: z.string(),
  key: z.string(),
  version: int,
  verdict,
  compressed: z.boolean(),
  compression_ratio: z.number(),
  relative_error: z.number(),
  max_abs_error: z.number(),
  dtype: dtypeOut,
  shape: z.array(int),
  tt: ttInfo.nullable(),
  bytes_in: int,
  bytes_stored: int,
  fingerprint,
});
const rateLimit = z.strictObject({ requests: int, window_s: int });
/** With billing on, the admin calls that stop a tenant's paid plan say what they canceled at the provider. */
const billingCancellations = {
  cancellations: z
    .array(z.strictObject({ subscription_id: z.string(), result: z.enum(["canceled", "already_canceled", "failed"]), detail: z.string() }))
    .optional(),
  pending_cancellations: z.array(z.string()).optional(),
};
const scope = z.enum(["read", "write"]);
const ref2 = z.strictObject({ key: z.string(), version: int });
const topk = z.strictObject({ metric, results: z.array(z.strictObject({ key: z.string(), version: int, score: z.number() })), scanned: int, skipped: int });

/** Success bodies by operationId. */
// With several engines /health adds each one's state (by position in SVC_GATE_ENGINE_URL).
const healthBody = z.strictObject({
  status: z.literal("ok"),
  engine_reachable: z.boolean(),
  store_connected: z.boolean(),
  uptime_s: int,
  engines: z.array(z.strictObject({ index: int, reachable: z.boolean(), in_rotation: z.boolean(), in_flight: int })).optional(),
});
// Writes accept an Idempotency-Key: a repeat with the same key and request gets the stored answer.
const idempotencyKeyParam = {
  name: "Idempotency-Key",
  in: "header",
  required: false,
  description:
    "1-255 visible ASCII characters. A repeat within 24 hours with the same key and request returns the stored answer with Idempotent-Replayed: true (charged as a get); with another request, 422.",
  schema: { type: "string", minLength: 1, maxLength: 255, pattern: "^[\\x21-\\x7e]+$" },
};

export const RESPONSE_SCHEMAS = {
  put: putResult,
  put_cores: putResult,
  put_cores_batch: z.strictObject({ results: z.array(putResult) }),
  get: z.strictObject({
    namespace: z.string(),
    key: z.string(),
    version: int,
    latest_version: int,
    versions: z.array(int),
    created_at: instant,
    dtype: dtypeOut,
    shape: z.array(int),
    metadata: z.record(z.string(), z.unknown()),
    verdict,
    compressed: z.boolean(),
    compression_ratio: z.number(),
    relative_error: z.number(),
    max_abs_error: z.number().nullable(),
    bytes_in: int,
    bytes_stored: int,
    fingerprint,
  }),
  delete: z.strictObject({ namespace: z.string(), key: z.string(), deleted: z.literal(true), version: int, purge_after: instant }),
  list: z.strictObject({
    namespace: z.string(),
    keys: z.array(
      z.strictObject({
        key: z.string(),
        version: int,
        updated_at: instant,
        dtype: dtypeOut,
        shape: z.array(int),
        verdict,
        codec: codecOut,
        relative_error: z.number().nullable(),
        max_abs_error: z.number().nullable(),
      }),
    ),
    total: int,
    limit: int,
    offset: int,
    next_offset: int.nullable(),
  }),
  search: z.strictObject({
    namespace: z.string(),
    results: z.array(z.strictObject({ key: z.string(), version: int, metadata: z.record(z.string(), z.unknown()) })),
    total: int,
    limit: int,
    offset: int,
    next_offset: int.nullable(),
  }),
  serve: z.union([
    z.strictObject({ namespace: z.string(), key: z.string(), version: int, dtype: dtypeOut, shape: z.array(int), data_b64: z.string() }),
    z.strictObject({
      namespace: z.string(),
      key: z.string(),
      version: int,
      device: z.string(),
      resident: z.boolean(),
      bytes_on_device: int,
      tt: ttInfo.nullable(),
    }),
  ]),
  query_similarity: z.strictObject({ metric, score: z.number(), a: ref2, b: ref2 }),
  query_topk: topk,
  query_vector: topk,
  tenant_create: z.strictObject({
    tenant_id: z.string(),
    api_key: z.string(),
    plan: z.string(),
    namespaces: z.array(z.string()),
    monthly_quota: z.number().nullable(),
    rate_limit: rateLimit,
  }),
  tenant_rotate_key: z.strictObject({ tenant_id: z.string(), api_key: z.string() }),
  tenant_add_namespace: z.strictObject({ tenant_id: z.string(), namespaces: z.array(z.string()) }),
  tenant_update_tier: z.strictObject({
    tenant_id: z.string(),
    plan: z.string(),
    monthly_quota: z.number().nullable(),
    rate_limit: rateLimit,
    ...billingCancellations,
  }),
  tenant_deactivate: z.strictObject({ tenant_id: z.string(), status: z.literal("deactivated"), ...billingCancellations }),
  tenants_list: z.strictObject({
    tenants: z.array(z.strictObject({ tenant_id: z.string(), plan: z.string(), namespaces: z.array(z.string()), active: z.boolean() })),
  }),
  usage_all: z.strictObject({
    period: z.string(),
    tenants: z.array(z.strictObject({ tenant_id: z.string(), cus_used: z.number(), monthly_quota: z.number().nullable(), utilization: z.number().nullable() })),
  }),
  usage_tenant: z.strictObject({
    tenant_id: z.string(),
    period: z.string(),
    cus_used: z.number(),
    monthly_quota: z.number().nullable(),
    utilization: z.number().nullable(),
    breakdown: z.record(z.string(), z.number()),
    overage_cus: z.number(),
    overage_amount: z.number(),
  }),
  registry_reload: z.strictObject({ status: z.literal("ok"), tenants_loaded: int }),
  key_create: z.strictObject({
    key_id: z.string(),
    api_key: z.string(),
    tenant_id: z.string(),
    name: z.string(),
    scopes: z.array(scope),
    namespaces: z.array(z.string()).nullable(),
    expires_at: instant.nullable(),
  }),
  keys_list: z.strictObject({
    tenant_id: z.string(),
    keys: z.array(
      z.strictObject({
        key_id: z.string(),
        tenant_id: z.string(),
        name: z.string(),
        scopes: z.array(scope),
        namespaces: z.array(z.string()).nullable(),
        expires_at: instant.nullable(),
        expired: z.boolean(),
        created_at: instant,
        last_used_at: instant.nullable(),
      }),
    ),
  }),
  key_revoke: z.strictObject({ key_id: z.string(), tenant_id: z.string(), status: z.literal("revoked") }),
  audit_tail: z.strictObject({
    records: z.array(
      z.strictObject({
        ts: instant,
        tenant_id: z.string(),
        method: z.string(),
        path: z.string(),
        namespace: z.string(),
        status: int,
        cus: z.number(),
        latency_ms: z.number(),
        request_id: z.string(),
        key_id: z.string(),
      }),
    ),
    count: int,
    limit: int,
    complete: z.boolean(),
    scanned_bytes: int,
  }),
  account: z.strictObject({
    tenant_id: z.string(),
    plan: z.string(),
    namespaces: z.array(z.string()),
    monthly_quota: z.number().nullable(),
    rate_limit: rateLimit,
    usage: z.strictObject({
      period: z.string(),
      cus_used: z.number(),
      monthly_quota: z.number().nullable(),
      utilization: z.number().nullable(),
      breakdown: z.record(z.string(), z.number()),
    }),
  }),
  health: healthBody,
  gate_health: healthBody,
} as const satisfies Record<string, z.ZodType>;

const toSchema = (s: z.ZodType): Json => {
  const j = z.toJSONSchema(s, { io: "input", unrepresentable: "any", target: "draft-2020-12" }) as Json;
  delete j.$schema;
  return j;
};

/** Query (or path) parameters of a zod object schema, one per field. */
function paramsOf(obj: z.ZodObject, where: "query" | "path" | "header"): Json[] {
  const full = toSchema(obj);
  const props = (full.properties ?? {}) as Record<string, Json>;
  const required = new Set((full.required ?? []) as string[]);
  return Object.entries(props).map(([name, schema]) => ({ name, in: where, required: where === "path" || required.has(name), schema }));
}

const pathParam = (name: string, s: z.ZodType, description: string): Json => ({ name, in: "path", required: true, description, schema: toSchema(s) });

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const errorResponse = (description: string) => ({ description, content: { "application/json": { schema: ref("Error") } } });

const RATE_HEADERS = {
  "X-RateLimit-Limit": { description: "Requests allowed in the window.", schema: { type: "integer" } },
  "X-RateLimit-Remaining": { description: "Requests left in the window.", schema: { type: "integer" } },
  "X-RateLimit-Reset": { description: "Unix time (seconds) at which the window frees a slot.", schema: { type: "integer" } },
};
const DATA_HEADERS = {
  "X-SVC-CUs": { description: "Compute units charged for this request (0 when nothing was).", schema: { type: "number" } },
  "X-Request-Id": { description: "Correlation id (UUID).", schema: { type: "string", format: "uuid" } },
  ...RATE_HEADERS,
};

// the error statuses each kind of endpoint can answer (docs/api.md (order of checks, errors))
const DATA_ERRORS = {
  "400": errorResponse("Malformed request: bad JSON, a missing or invalid field, an invalid namespace or key."),
  "401": errorResponse("Missing, unknown, rotated or deactivated API key."),
  "403": errorResponse("A namespace of the request is not in the tenant's ACL."),
  "404": errorResponse("Unknown key, deleted key or missing version."),
  "409": errorResponse("Version conflict (if_version)."),
  "413": errorResponse("Body larger than the upload limit."),
  "415": errorResponse("Unsupported Content-Type."),
  "429": { ...errorResponse("Rate limit exceeded; see Retry-After."), headers: { "Retry-After": { schema: { type: "integer" } }, ...RATE_HEADERS } },
  "502": errorResponse("The engine is unreachable or timed out."),
  "503": { ...errorResponse("Monthly CU quota exhausted (billing enabled); see Retry-After."), headers: { "Retry-After": { schema: { type: "integer" } } } },
};
const ADMIN_ERRORS = {
  "400": errorResponse("Malformed request or unknown plan."),
  "401": errorResponse("Missing or wrong service key (a tenant key is refused too)."),
  "404": errorResponse("Unknown tenant."),
  "409": errorResponse("The tenant exists already, or is deactivated."),
};

const ok = (status: string, description: string, content: Json = { "application/json": { schema: { type: "object" } } }) => ({
  [status]: { description, headers: DATA_HEADERS, content },
});

const jsonBody = (s: z.ZodType): Json => ({ required: true, content: { "application/json": { schema: toSchema(s) } } });

interface Op {
  method: "get" | "post" | "delete";
  path: string;
  id: string;
  summary: string;
  kind: "data" | "tenant" | "admin" | "public";
  body?: Json;
  params?: Json[];
  responses: Json;
}

/** Billing adds two routes when its router is mounted (checkout body: billing.ts's schema unless given). */
export interface BillingDoc {
  checkoutBody?: z.ZodType;
}

function billingOperations(b: BillingDoc): Op[] {
  return [
    {
      method: "post",
      path: "/gate/checkout",
      id: "checkout",
      summary: "Create a payment-provider checkout session for plan builder or pro (tenant key).",
      kind: "data",
      body: jsonBody(b.checkoutBody ?? checkoutBodySchema),
      responses: {
        "200": {
          description: "The checkout session.",
          content: { "application/json": { schema: toSchema(z.strictObject({ session_id: z.string(), checkout_url: z.string() })) } },
        },
        "404": errorResponse("Billing is disabled."),
      },
    },
    {
      method: "post",
      path: "/webhooks/payment",
      id: "payment_webhook",
      summary: "Payment-provider events, verified with the Stripe-Signature header.",
      kind: "public",
      params: [{ name: "Stripe-Signature", in: "header", required: true, schema: { type: "string" } }],
      body: { required: true, content: { "application/json": { schema: { type: "object" } } } },
      responses: {
        "200": {
          description: "Processed, or a replay or an ignored event type.",
          content: { "application/json": { schema: toSchema(z.strictObject({ received: z.literal(true) })) } },
        },
        "400": errorResponse("Bad or stale signature, or a malformed event."),
      },
    },
  ];
}

/** The put parameters of the pred-encoded form (docs/api.md, put of a pred stream); the JSON form has the same fields. */
const PUT_PRED_PARAMS: Record<string, string> = {
  encoding:
    "pred: the body is a stream of the prediction codec, checked and decoded in full by the engine and stored as it is; dtype (float32 or float64), shape and both declared errors are then required, tolerance, max_abs_error, codec and max_rank refused.",
  declared_relative_error: "With encoding pred: the relative Frobenius error the client measured against its own data; recorded as the entry's relative_error.",
  declared_max_abs_error:
    "With encoding pred: the largest element error the client measured against its own data, at most the stream's own bound; recorded as the entry's max_abs_error.",
};

/** The data plane (docs/api.md, data plane). */
function dataPlaneOperations(): Op[] {
  const nsParam = pathParam("namespace", namespaceSchema, "Namespace.");
  const keyParam = pathParam("key", keySchema, "Key: the rest of the path after the namespace (it may contain '/'), percent-decoded.");
  // put_cores_batch items are validated one by one with the put_cores item schema
  const batchDoc = putCoresBatchBodySchema.extend({ items: z.array(putCoresItemSchema).min(1).max(1000) });
  return [
    {
      method: "post",
      path: "/v1/put",
      id: "put",
      summary: "Ingest, compress and store a tensor or blob, or store a prediction-codec stream encoded by the client (encoding pred) (1.0 CU).",
      kind: "data",
      body: {
        required: true,
        content: {
          "application/json": { schema: toSchema(putBodySchema) },
          "application/octet-stream": { schema: { type: "string", contentMediaType: "application/octet-stream" } },
        },
      },
      params: [
        ...paramsOf(putQuerySchema, "query").map((p) => ({
          ...p,
          required: false,
          description: PUT_PRED_PARAMS[p.name as string] ?? "Octet-stream form only (required there for namespace and key).",
        })),
        { name: "X-SVC-Metadata", in: "header", required: false, description: "Octet-stream form: metadata as a JSON object.", schema: { type: "string" } },
        idempotencyKeyParam,
      ],
      responses: ok("201", "Stored; the put outcome (verdict, compression_ratio, relative_error, fingerprint, …)."),
    },
    {
      method: "post",
      path: "/v1/put_cores",
      id: "put_cores",
      summary: "Store tensor-train cores as they are (1.0 CU).",
      kind: "data",
      body: jsonBody(putCoresBodySchema),
      params: [idempotencyKeyParam],
      responses: ok("201", "Stored; a put outcome."),
    },
    {
      method: "post",
      path: "/v1/put_cores_batch",
      id: "put_cores_batch",
      summary: "Store up to 1000 put_cores items atomically validated (2.0 CU).",
      kind: "data",
      body: jsonBody(batchDoc),
      params: [idempotencyKeyParam],
      responses: ok("201", "results: one put outcome per item, in order."),
    },
    {
      method: "get",
      path: "/v1/get/{namespace}/{key}",
      id: "get",
      summary: "Metadata and fingerprint, without decompression (0.1 CU).",
      kind: "data",
      params: [nsParam, keyParam, ...paramsOf(getQuerySchema, "query")],
      responses: ok("200", "The entry's version record."),
    },
    {
      method: "delete",
      path: "/v1/delete/{namespace}/{key}",
      id: "delete",
      summary: "Soft delete of the whole key (0.1 CU).",
      kind: "data",
      params: [nsParam, keyParam, idempotencyKeyParam],
      responses: ok("200", "deleted, last version, purge_after."),
    },
    {
      method: "get",
      path: "/v1/list/{namespace}",
      id: "list",
      summary: "Keys in ascending byte order, paginated (0.1 CU).",
      kind: "data",
      params: [nsParam, ...paramsOf(listQuerySchema, "query")],
      responses: ok("200", "keys, total, limit, offset, next_offset."),
    },
    {
      method: "post",
      path: "/v1/search",
      id: "search",
      summary: "Metadata-filtered key listing (0.5 CU).",
      kind: "data",
      body: jsonBody(searchBodySchema),
      responses: ok("200", "results, total, limit, offset, next_offset."),
    },
    {
      method: "post",
      path: "/v1/serve",
      id: "serve",
      summary: "Reconstruct a dense array (cpu, 0.5 CU) or load the cores into GPU memory (gpu, 2.0 CU).",
      kind: "data",
      body: jsonBody(serveBodySchema),
      responses: {
        ...ok(
          "200",
          "cpu: JSON with data_b64, or the raw bytes with X-SVC-Dtype, X-SVC-Shape and X-SVC-Version when Accept is application/octet-stream; gpu: residency record.",
          {
            "application/json": { schema: { type: "object" } },
            "application/octet-stream": { schema: { type: "string", contentMediaType: "application/octet-stream" } },
          },
        ),
        "501": errorResponse("device gpu requested where the engine has no usable CUDA device (gpu_unavailable)."),
      },
    },
    {
      method: "post",
      path: "/v1/query/similarity",
      id: "query_similarity",
      summary: "Similarity of two entries on their stored form (1.0 CU).",
      kind: "data",
      body: jsonBody(similarityBodySchema),
      responses: ok("200", "metric, score, a, b."),
    },
    {
      method: "post",
      path: "/v1/query/topk",
      id: "query_topk",
      summary: "Top-K entries most similar to a stored entry (1.0 CU).",
      kind: "data",
      body: jsonBody(topkBodySchema),
      responses: ok("200", "metric, results, scanned, skipped."),
    },
    {
      method: "post",
      path: "/v1/query/vector",
      id: "query_vector",
      summary: "Top-K entries most similar to an external dense tensor (1.0 CU).",
      kind: "data",
      body: jsonBody(vectorBodySchema),
      responses: ok("200", "metric, results, scanned, skipped."),
    },
  ];
}

/** Tenant onboarding (service key). */
function onboardingOperations(): Op[] {
  return [
    {
      method: "post",
      path: "/gate/onboard/create",
      id: "tenant_create",
      summary: "Create a tenant; the API key is returned once.",
      kind: "admin",
      body: jsonBody(createSchema),
      responses: { "201": { description: "tenant_id, api_key, plan, namespaces, monthly_quota, rate_limit." } },
    },
    {
      method: "post",
      path: "/gate/onboard/rotate-key",
      id: "tenant_rotate_key",
      summary: "Issue a new API key; the old one stops working at once.",
      kind: "admin",
      body: jsonBody(idSchema),
      responses: { "200": { description: "tenant_id, api_key." } },
    },
    {
      method: "post",
      path: "/gate/onboard/add-namespace",
      id: "tenant_add_namespace",
      summary: "Append a namespace to the tenant's ACL.",
      kind: "admin",
      body: jsonBody(addNamespaceSchema),
      responses: { "200": { description: "tenant_id, namespaces." } },
    },
    {
      method: "post",
      path: "/gate/onboard/update-tier",
      id: "tenant_update_tier",
      summary: "Change the plan (quota and rate limit follow).",
      kind: "admin",
      body: jsonBody(updateTierSchema),
      responses: {
        "200": {
          description:
            "tenant_id, plan, monthly_quota, rate_limit; with billing on, cancellations and pending_cancellations (a move to starter or enterprise cancels the tenant's subscription).",
        },
      },
    },
    {
      method: "post",
      path: "/gate/onboard/deactivate",
      id: "tenant_deactivate",
      summary: "Deactivate a tenant; its key stops working at once.",
      kind: "admin",
      body: jsonBody(idSchema),
      responses: {
        "200": {
          description: "tenant_id, status (deactivated); with billing on, cancellations and pending_cancellations (the tenant's subscription is canceled).",
        },
      },
    },
  ];
}

/** Admin reads, keys, metrics and reload (service key). */
function adminOperations(): Op[] {
  return [
    {
      method: "get",
      path: "/gate/admin/tenants",
      id: "tenants_list",
      summary: "Every tenant.",
      kind: "admin",
      responses: { "200": { description: "tenants: list of tenant_id, plan, namespaces, active." } },
    },
    {
      method: "get",
      path: "/gate/admin/usage",
      id: "usage_all",
      summary: "Usage of every tenant for a period.",
      kind: "admin",
      params: [periodParam()],
      responses: { "200": { description: "period, tenants: list of tenant_id, cus_used, monthly_quota, utilization." } },
    },
    {
      method: "get",
      path: "/gate/admin/usage/{tenant_id}",
      id: "usage_tenant",
      summary: "One tenant's usage record with breakdown and overage.",
      kind: "admin",
      params: [pathParam("tenant_id", tenantIdSchema, "Tenant id."), periodParam()],
      responses: { "200": { description: "tenant_id, period, cus_used, monthly_quota, utilization, breakdown, overage_cus, overage_amount." } },
    },
    {
      method: "get",
      path: "/gate/admin/audit",
      id: "audit_tail",
      summary: "The newest records of this gateway's audit log, newest first, filtered by tenant and status.",
      kind: "admin",
      params: [
        { name: "tenant_id", in: "query", required: false, description: "Only this tenant's records.", schema: toSchema(tenantIdSchema) },
        {
          name: "status",
          in: "query",
          required: false,
          description: "Only records with this HTTP status.",
          schema: { type: "string", pattern: "^[1-5][0-9][0-9]$" },
        },
        {
          name: "limit",
          in: "query",
          required: false,
          description: "How many records at most (1-1000, default 100).",
          schema: { type: "string", pattern: "^[0-9]{1,4}$" },
        },
      ],
      responses: {
        "200": {
          description: "records (audit records, newest first), count, limit, complete (the whole log was read), scanned_bytes.",
          content: { "application/json": { schema: { type: "object" } } },
        },
        "404": errorResponse("The audit log is disabled on this gateway."),
      },
    },
    {
      method: "get",
      path: "/metrics",
      id: "metrics",
      summary: "Prometheus metrics; the service key or SVC_GATE_METRICS_TOKEN as a bearer token.",
      kind: "admin",
      responses: { "200": { description: "Prometheus text format 0.0.4.", content: { "text/plain": { schema: { type: "string" } } } } },
    },
    {
      method: "post",
      path: "/gate/admin/keys",
      id: "key_create",
      kind: "admin",
      body: jsonBody(createKeySchema),
      summary:
        "Create a scoped API key for a tenant (scopes read, or read and write; optional namespace subset and expiry); the key is returned once. At most 20 per tenant.",
      responses: {
        "201": { description: "key_id, api_key, tenant_id, name, scopes, namespaces (null: every namespace of the tenant), expires_at (null: never)." },
        "404": errorResponse("Unknown tenant."),
      },
    },
    {
      method: "get",
      path: "/gate/admin/keys/{tenant_id}",
      id: "keys_list",
      kind: "admin",
      summary: "A tenant's scoped keys, without secrets, with created_at and last_used_at (written at most once a minute).",
      params: [pathParam("tenant_id", tenantIdSchema, "Tenant id.")],
      responses: { "200": { description: "tenant_id, keys." }, "404": errorResponse("Unknown tenant.") },
    },
    {
      method: "post",
      path: "/gate/admin/keys/revoke",
      id: "key_revoke",
      kind: "admin",
      body: jsonBody(revokeKeySchema),
      summary: "Revoke a scoped key; every gateway sharing the registry refuses it from the next request on.",
      responses: { "200": { description: "key_id, tenant_id, status (revoked)." }, "404": errorResponse("Unknown or already revoked key_id.") },
    },
    {
      method: "post",
      path: "/gate/admin/reload",
      id: "registry_reload",
      summary: "Reload the tenant registry from storage.",
      kind: "admin",
      responses: { "200": { description: "status (ok), tenants_loaded." } },
    },
  ];
}

/** The tenant's account view, health and this document. */
function publicOperations(): Op[] {
  return [
    {
      method: "get",
      path: "/gate/account",
      id: "account",
      summary: "The calling tenant's plan, namespaces, limits and usage for a period (tenant key; 0 CUs, counts against the rate limit).",
      kind: "tenant",
      params: [periodParam()],
      responses: ok("200", "tenant_id, plan, namespaces, monthly_quota, rate_limit, usage (period, cus_used, monthly_quota, utilization, breakdown)."),
    },
    {
      method: "get",
      path: "/health",
      id: "health",
      summary: "Liveness of the gateway and reachability of the engine and store.",
      kind: "public",
      responses: {
        "200": {
          description: "status, engine_reachable, store_connected, uptime_s; with several engines, engines (index, reachable, in_rotation, in_flight).",
        },
      },
    },
    {
      method: "get",
      path: "/gate/health",
      id: "gate_health",
      summary: "Same as /health.",
      kind: "public",
      responses: { "200": { description: "status, engine_reachable, store_connected, uptime_s." } },
    },
    {
      method: "get",
      path: "/openapi.json",
      id: "openapi",
      summary: "This document.",
      kind: "public",
      responses: { "200": { description: "The OpenAPI 3.1 document.", content: { "application/json": { schema: { type: "object" } } } } },
    },
  ];
}

function operations(): Op[] {
  return [...dataPlaneOperations(), ...onboardingOperations(), ...adminOperations(), ...publicOperations()];
}

function periodParam(): Json {
  return {
    name: "period",
    in: "query",
    required: false,
    description: "Month YYYY-MM (default the current UTC month).",
    schema: { type: "string", pattern: "^\\d{4}-(0[1-9]|1[0-2])$" },
  };
}

/** The package's version, from the nearest package.json above this file (source or dist). */
function packageVersion(): string {
  for (let u = new URL("./", import.meta.url); u.pathname !== "/"; u = new URL("../", u)) {
    try {
      const p = JSON.parse(readFileSync(new URL("package.json", u), "utf8")) as { name?: string; version?: string };
      if (p.name === "svc-tensor" && p.version) return p.version;
    } catch {
      /* keep walking up */
    }
  }
  return "0.0.0";
}

/** Builds the OpenAPI 3.1 document of the gateway. */
export function openApiDocument(opts: { serverUrl?: string; billing?: BillingDoc } = {}): Json {
  const version = packageVersion();
  const paths: Record<string, Record<string, Json>> = {};
  for (const op of [...operations(), ...(opts.billing ? billingOperations(opts.billing) : [])]) {
    const tenantKey = op.kind === "data" || op.kind === "tenant";
    const security = tenantKey ? [{ ApiKey: [] }, { TenantBearer: [] }] : op.kind === "admin" ? [{ ServiceKey: [] }] : [];
    const errors = tenantKey ? DATA_ERRORS : op.kind === "admin" ? ADMIN_ERRORS : {};
    const rs = (RESPONSE_SCHEMAS as Record<string, z.ZodType>)[op.id];
    if (rs) {
      // the success response's JSON body gets the schema of RESPONSE_SCHEMAS
      const [code, r] = Object.entries(op.responses).find(([c]) => c.startsWith("2"))! as [string, Json];
      const content = { ...((r.content as Json | undefined) ?? {}), "application/json": { schema: toSchema(rs) } };
      op.responses = { ...op.responses, [code]: { ...r, content } };
    }
    (paths[op.path] ??= {})[op.method] = {
      operationId: op.id,
      summary: op.summary,
      tags: [op.kind === "data" ? "data plane" : op.kind === "tenant" ? "account" : op.kind === "admin" ? "admin" : "public"],
      security,
      ...(op.params?.length ? { parameters: op.params } : {}),
      ...(op.body ? { requestBody: op.body } : {}),
      responses: { ...op.responses, ...errors },
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "svc-tensor gateway",
      version,
      description:
        "Tensor-train compressed tensor storage behind a multi-tenant gateway. Request schemas are generated from the zod schemas the servers validate with.",
    },
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    ...(opts.serverUrl ? { servers: [{ url: opts.serverUrl }] } : {}),
    paths,
    components: {
      securitySchemes: {
        ApiKey: { type: "apiKey", in: "header", name: "X-Api-Key", description: "Tenant API key (svc_live_…)." },
        TenantBearer: { type: "http", scheme: "bearer", description: "Tenant API key as Authorization: Bearer." },
        ServiceKey: { type: "http", scheme: "bearer", description: "The service key (SVC_GATE_ENGINE_SERVICE_KEY)." },
      },
      schemas: {
        Error: {
          type: "object",
          required: ["detail", "code", "request_id"],
          properties: {
            detail: { type: "string", description: "One human-readable sentence." },
            code: {
              type: "string",
              enum: [
                "bad_request",
                "payload_too_large",
                "unauthorized",
                "forbidden",
                "not_found",
                "version_conflict",
                "rate_limited",
                "quota_exhausted",
                "engine_unreachable",
                "gpu_unavailable",
                "unsupported_media_type",
                "overloaded",
                "idempotency_key_reused",
                "store_unavailable",
                "storage_full",
                "state_unavailable",
                "internal",
              ],
            },
            request_id: { type: "string", format: "uuid" },
          },
        },
      },
    },
  };
}

/** Express handler for GET /openapi.json (the document is built once); `billing` when that router is mounted. */
export function openApiHandler(opts: { billing?: BillingDoc } = {}): RequestHandler {
  let doc: string | null = null;
  return (_req, res) => {
    doc ??= JSON.stringify(openApiDocument(opts));
    res.setHeader("X-SVC-CUs", "0");
    res.type("application/json").send(doc);
  };
}
