// `svc key create|ls|revoke`: a tenant's scoped API keys, through the gateway's /gate/admin/keys
// endpoints with the service key (docs/api.md, admin routes). Arguments are checked with the
// gateway's own schemas first, so a bad one is a usage error (exit 2) before any call.
import type { z } from "zod";
import { expiresAtSchema, keyIdSchema, keyNameSchema, scopesSchema } from "../../lib/key-schemas.js";
import { namespaceSchema, tenantIdSchema } from "../../lib/fields.js";
import { adminCall } from "./admin.js";
import { clipped, parse, shown, table, UsageError, type Io, type OptionSpec } from "./common.js";

export const KEY_HELP = `Usage:
  svc key create TENANT NAME [--scopes read|read,write] [--namespace NS]... [--expires 2027-01-31T00:00:00Z]
  svc key ls TENANT
  svc key revoke KEY_ID

Scoped API keys of a tenant: several per tenant, each with a name, scopes (read: get, list,
search, serve, queries; read,write: also put, put_cores, batch, delete; default read), an
optional subset of the tenant's namespaces (--namespace, repeated; default every namespace)
and an optional expiry (an ISO 8601 UTC instant). 'create' prints the key once, as
SVC_API_KEY=<key>; 'revoke' stops it at once on every gateway sharing the registry.
A tenant holds at most 20 scoped keys; its own key (from 'svc tenant create' or
'rotate-key') keeps every scope.
Admin calls to the gateway at SVC_GATE_URL (default http://127.0.0.1:8080) with the service key
from SVC_GATE_ENGINE_SERVICE_KEY, or from DIR/service.key written by 'svc up' (--data DIR).
Options: --json prints the gateway's JSON response instead of text.`;

/** `v` checked by `schema`, or a usage error naming `what` with the schema's sentence. */
function checked<S extends z.ZodType>(schema: S, v: unknown, what: string): z.output<S> {
  const r = schema.safeParse(v);
  if (r.success) return r.data;
  const msg = r.error.issues[0]!.message.replace(/\.$/, "");
  const text = JSON.stringify(v) ?? String(v);
  throw new UsageError(`Invalid ${what} ${clipped(text, typeof v === "string" ? v.length : text.length)}: ${msg}.`);
}

interface KeyRow {
  key_id: string;
  name: string;
  scopes: string[];
  namespaces: string[] | null;
  expires_at: string | null;
  expired?: boolean;
  created_at: string;
  last_used_at: string | null;
}

export async function keyCommand(argv: string[], io: Io): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === "--help" || sub === "-h" || sub === "help") {
    io.out(KEY_HELP + "\n");
    if (sub === undefined) throw new UsageError("Missing subcommand: expected create, ls or revoke.");
    return 0;
  }
  const positional: Record<string, { min: number; max: number; names: string }> = {
    create: { min: 2, max: 2, names: "TENANT NAME" },
    ls: { min: 1, max: 1, names: "TENANT" },
    revoke: { min: 1, max: 1, names: "KEY_ID" },
  };
  const pos = positional[sub];
  if (!pos) throw new UsageError(`Unknown key subcommand ${shown(sub)}.`);
  const options: OptionSpec = { json: { type: "boolean" }, data: { type: "string" } };
  if (sub === "create") Object.assign(options, { scopes: { type: "string" }, namespace: { type: "string", multiple: true }, expires: { type: "string" } });
  const { values, positionals, help } = parse(rest, options, pos);
  if (help) {
    io.out(KEY_HELP + "\n");
    return 0;
  }
  const data = values.data as string | undefined;
  const print = (r: Record<string, unknown>, text: string) => io.out(values.json ? JSON.stringify(r, null, 2) + "\n" : text);

  if (sub === "create") {
    const tenant = checked(tenantIdSchema, positionals[0]!, "tenant id");
    const name = checked(keyNameSchema, positionals[1]!, "key name");
    const scopes = checked(scopesSchema, ((values.scopes as string | undefined) ?? "read").split(","), "--scopes");
    const namespaces = values.namespace as string[] | undefined;
    for (const ns of namespaces ?? []) checked(namespaceSchema, ns, "namespace");
    const expires = values.expires === undefined ? undefined : checked(expiresAtSchema, values.expires, "--expires");
    const r = await adminCall(io, data, "POST", "/gate/admin/keys", {
      tenant_id: tenant,
      name,
      scopes,
      ...(namespaces ? { namespaces } : {}),
      ...(expires ? { expires_at: expires } : {}),
    });
    const ns = r.namespaces === null ? "every namespace" : `namespaces ${(r.namespaces as string[]).join(", ")}`;
    print(
      r,
      `Created key ${r.key_id} '${r.name}' of tenant ${r.tenant_id}: ${(r.scopes as string[]).join(", ")} on ${ns}, ` +
        `${r.expires_at === null ? "no expiry" : `expires ${r.expires_at}`}.\nThe API key is shown once; keep it now:\nSVC_API_KEY=${r.api_key}\n`,
    );
    return 0;
  }
  if (sub === "ls") {
    const tenant = checked(tenantIdSchema, positionals[0]!, "tenant id");
    const r = await adminCall(io, data, "GET", `/gate/admin/keys/${tenant}`);
    const keys = (r.keys ?? []) as KeyRow[];
    const rows = keys.map((k) => [
      k.key_id,
      k.name,
      k.scopes.join(","),
      k.namespaces === null ? "*" : k.namespaces.join(","),
      k.expires_at === null ? "never" : `${k.expires_at}${k.expired ? " (expired)" : ""}`,
      k.created_at,
      k.last_used_at ?? "never",
    ]);
    print(
      r,
      keys.length ? table([["KEY_ID", "NAME", "SCOPES", "NAMESPACES", "EXPIRES", "CREATED", "LAST_USED"], ...rows]) : `Tenant ${tenant} has no scoped keys.\n`,
    );
    return 0;
  }
  const keyId = checked(keyIdSchema, positionals[0]!, "key id");
  const r = await adminCall(io, data, "POST", "/gate/admin/keys/revoke", { key_id: keyId });
  print(r, `Revoked key ${r.key_id} of tenant ${r.tenant_id}; it no longer works.\n`);
  return 0;
}
