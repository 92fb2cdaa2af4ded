// Scoped API keys' request fields (docs/api.md, admin routes), shared by the gateway's admin
// API and the CLI: one set of rules and sentences for both (the console shows the gateway's).
import { z } from "zod";
import { namespaceSchema, tenantIdSchema } from "./fields.js";

/** The key_id of the tenant's own key, the one issued at creation and rotation. */
export const PRIMARY_KEY_ID = "primary";

export const keyNameSchema = z
  .string()
  .min(1, "name must not be empty")
  .max(64, "name must be at most 64 characters")
  .regex(/^[A-Za-z0-9._-](?:[A-Za-z0-9 ._-]*[A-Za-z0-9._-])?$/, "name may contain only A-Z a-z 0-9 . _ - and inner spaces");

export const keyIdSchema = z
  .string()
  .max(64, "key_id must be at most 64 characters")
  .refine((s) => s !== PRIMARY_KEY_ID, "key_id primary is the tenant's own key: rotate it (rotate-key) or deactivate the tenant instead")
  .refine((s) => /^key_[A-Za-z0-9_-]{16}$/.test(s), "key_id must be a key id as POST /gate/admin/keys returns it (key_ and 16 characters)");

export const scopesSchema = z
  .array(z.string().max(32, "a scope is read or write"), {
    error: (iss) => (iss.input === undefined ? "is required" : 'scopes must be a list, ["read"] or ["read", "write"]'),
  })
  .max(8, "scopes must have at most 2 entries")
  .superRefine((list, ctx) => {
    const fail = (message: string) => ctx.addIssue({ code: "custom", message });
    if (list.length === 0) return fail('scopes must not be empty; use ["read"] or ["read", "write"]');
    const unknown = list.find((s) => s !== "read" && s !== "write");
    if (unknown !== undefined) return fail(`scopes: unknown scope ${JSON.stringify(unknown)}; the scopes are read and write`);
    if (new Set(list).size !== list.length) return fail("scopes must not name a scope twice");
    if (!list.includes("read")) return fail('scopes: write needs read as well; use ["read", "write"]');
  })
  .transform((list) => (list.includes("write") ? ["read", "write"] : ["read"]) as Array<"read" | "write">);

const ISO_UTC = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?Z$/;

/** An ISO 8601 UTC instant (`2027-01-31T00:00:00Z`), normalised to milliseconds; the calendar checked. */
export const expiresAtSchema = z
  .string({ error: (iss) => (iss.input === undefined ? "is required" : "expires_at must be an ISO 8601 UTC instant such as 2027-01-31T00:00:00Z, or null") })
  .max(40, "expires_at must be an ISO 8601 UTC instant such as 2027-01-31T00:00:00Z")
  .refine((s) => {
    const m = ISO_UTC.exec(s);
    if (!m) return false;
    const ms = Date.parse(s);
    // Date.parse rolls 2027-02-30 over to March; the instant must read back as written.
    return (
      Number.isFinite(ms) && new Date(ms).toISOString().slice(0, 16) === `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}` && (m[6] === undefined || Number(m[6]) < 60)
    );
  }, "expires_at must be an ISO 8601 UTC instant such as 2027-01-31T00:00:00Z")
  .transform((s) => new Date(Date.parse(s)).toISOString());

export const createKeySchema = z.strictObject({
  tenant_id: tenantIdSchema,
  name: keyNameSchema,
  scopes: scopesSchema,
  namespaces: z
    .array(namespaceSchema)
    .min(1, "namespaces must not be empty; leave it out (or null) for every namespace of the tenant")
    .max(1000, "namespaces must have at most 1000 entries")
    .refine((l) => new Set(l).size === l.length, "namespaces must not name a namespace twice")
    .nullable()
    .optional(),
  expires_at: expiresAtSchema.nullable().optional(),
});
export type CreateKeyInput = z.input<typeof createKeySchema>;

export const revokeKeySchema = z.strictObject({ key_id: keyIdSchema });
