// The client's checks that need zod (the store's own schemas), loaded by lib/client-core.ts only
// when a call is not covered by its quick checks (lib/client-names.ts): a put, a serve, an
// option out of the common forms, or a bad name, whose sentence then comes from here.
import { z } from "zod";
import { dtypeSchema, keySchema, namespaceSchema, parseOrThrow } from "./fields.js";
import {
  putOptionsSchema,
  putCoresOptionsSchema,
  putPredOptionsSchema,
  getOptionsSchema,
  listOptionsSchema,
  searchOptionsSchema,
  serveOptionsSchema,
  similarityOptionsSchema,
  topkOptionsSchema,
  vectorOptionsSchema,
} from "./schemas.js";

export { itemsize, naturalDtype } from "./fields.js";
export { checkCores } from "./store/cores.js";
export { parseOrThrow, dtypeSchema, putPredOptionsSchema };

export const OPTION_SCHEMAS = {
  put: putOptionsSchema,
  putCores: putCoresOptionsSchema,
  get: getOptionsSchema,
  list: listOptionsSchema,
  search: searchOptionsSchema,
  serve: serveOptionsSchema,
  similarity: similarityOptionsSchema,
  topk: topkOptionsSchema,
  vector: vectorOptionsSchema,
} as const;
export type OptionKind = keyof typeof OPTION_SCHEMAS;
export type OptionsOf<K extends OptionKind> = z.output<(typeof OPTION_SCHEMAS)[K]>;

/** A method's options checked as the store checks them (`what` names the whole value: "options"). */
export function options<K extends OptionKind>(kind: K, v: unknown, what?: string): OptionsOf<K> {
  return parseOrThrow(OPTION_SCHEMAS[kind], v, what) as OptionsOf<K>;
}

export const checkNamespace = (v: unknown): string => parseOrThrow(namespaceSchema, v, "namespace");
export const checkKey = (v: unknown, field = "key"): string => parseOrThrow(keySchema, v, field);

const PEM_CERT = "-----BEGIN CERTIFICATE-----";

export const clientOptionsSchema = z
  .object({
    baseUrl: z.url({ protocol: /^https?$/, error: "baseUrl must be an http(s) URL" }),
    apiKey: z.string().min(1, "apiKey must not be empty"),
    maxRetries: z.number().int().min(0).max(20).optional(),
    backoffMs: z.number().min(0).max(60_000).optional(),
    maxBackoffMs: z.number().min(0).max(3_600_000).optional(),
    timeoutMs: z.number().int().min(1).max(3_600_000).optional(),
    sleep: z.function().optional(),
    localCompressBytes: z.union([z.number().int().min(0), z.literal(false)]).optional(),
    onProgress: z.function().optional(),
    ca: z
      .union([z.string().min(1), z.instanceof(Uint8Array), z.array(z.union([z.string().min(1), z.instanceof(Uint8Array)])).min(1)], {
        error: "ca must be PEM text or bytes, or a non-empty list of them",
      })
      .refine(
        (ca) => (Array.isArray(ca) ? ca : [ca]).every((c) => (typeof c === "string" ? c : Buffer.from(c).toString("latin1")).includes(PEM_CERT)),
        "ca must hold PEM certificates (-----BEGIN CERTIFICATE-----)",
      )
      .optional(),
  })
  .strict()
  .refine((o) => o.ca === undefined || o.baseUrl.startsWith("https:"), { message: "ca applies to an https baseUrl only", path: ["ca"] });
