// Admin commands: `svc tenant …`, `svc usage`, `svc reload` — calls to the gateway's
// /gate/onboard/* and /gate/admin/* endpoints with the service key (docs/api.md, admin routes).
import { errorFromCode, SvcError } from "../../lib/errors.js";
import { namespaceProblem, tenantIdProblem } from "../../lib/client-names.js";
import { gatewayCall, gatewayUrl, parse, serviceKey, table, UsageError, type Io, type OptionSpec, shown } from "./common.js";

export const TENANT_HELP = `Usage:
  svc tenant create ID [--plan P] [--namespace NS]... [--email E] [--quota N|none] [--rate-limit REQ/WINDOW_S]
  svc tenant rotate-key ID
  svc tenant add-namespace ID NS
  svc tenant set-plan ID PLAN [--quota N|none] [--rate-limit REQ/WINDOW_S]
  svc tenant deactivate ID
  svc tenant list

Admin calls to the gateway at SVC_GATE_URL (default http://127.0.0.1:8080) with the service key
from SVC_GATE_ENGINE_SERVICE_KEY, or from DIR/service.key written by 'svc up' (--data DIR,
default ./svc-data). 'create' and 'rotate-key' print the tenant's API key once, as
SVC_API_KEY=<key>. --quota and --rate-limit apply to plan enterprise only.
Options: --json prints the gateway's JSON response instead of text.`;

export const USAGE_HELP = `Usage: svc usage [ID] [--period YYYY-MM] [--json] [--data DIR] [--mine]

Without ID: the usage table of every tenant for the period (default the current UTC month).
With ID: that tenant's record with its breakdown by operation. Both need the service key.
With --mine, or without ID when no service key is at hand: the usage of the tenant whose key
is in SVC_API_KEY (GET /gate/account), with its plan, quota and rate limit.`;

export const RELOAD_HELP = `Usage: svc reload [--json] [--data DIR]

Makes the gateway reload its tenant registry from storage.`;

const PLANS = ["starter", "builder", "pro", "enterprise"];

/** One admin call; a non-2xx answer becomes the library's error class with the server's detail. */
export async function adminCall(io: Io, dataDir: string | undefined, method: "GET" | "POST", path: string, body?: unknown): Promise<Record<string, unknown>> {
  const base = gatewayUrl(io);
  const key = serviceKey(io, dataDir);
  const res = await gatewayCall(
    base,
    path,
    method,
    { authorization: `Bearer ${key}`, accept: "application/json", ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    body !== undefined ? JSON.stringify(body) : undefined,
  );
  let parsed: Record<string, unknown> | undefined;
  try {
    parsed = JSON.parse(res.text) as Record<string, unknown>;
  } catch {
    parsed = undefined;
  }
  if (res.status >= 400) {
    const detail = typeof parsed?.detail === "string" ? parsed.detail : `The gateway answered HTTP ${res.status}.`;
    const err = errorFromCode(typeof parsed?.code === "string" ? parsed.code : "internal", detail);
    if (typeof parsed?.request_id === "string") err.extra.request_id = parsed.request_id;
    throw err;
  }
  if (!parsed) throw new SvcError("internal", "The gateway answered with a body that is not JSON.");
  return parsed;
}

function hasServiceKey(io: Io, dataDir: string | undefined): boolean {
  try {
    serviceKey(io, dataDir);
    return true;
  } catch {
    return false;
  }
}

function tenantId(v: string): string {
  const problem = tenantIdProblem(v);
  if (problem !== null) throw new UsageError(`Invalid tenant id ${shown(v)}: ${problem}.`);
  return v;
}

function planOf(v: string): string {
  if (!PLANS.includes(v)) throw new UsageError(`Unknown plan ${shown(v)}: use one of ${PLANS.join(", ")}.`);
  return v;
}

/** --quota and --rate-limit, for plan enterprise. */
function enterpriseFields(values: { quota?: string; "rate-limit"?: string }, plan: string | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (values.quota === undefined && values["rate-limit"] === undefined) return out;
  if (plan !== "enterprise") throw new UsageError("--quota and --rate-limit apply only to plan enterprise.");
  if (values.quota !== undefined) {
    if (values.quota === "none") out.monthly_quota = null;
    else if (/^\d+(\.\d+)?$/.test(values.quota)) out.monthly_quota = Number(values.quota);
    else throw new UsageError("--quota must be a number of CUs or 'none'.");
  }
  if (values["rate-limit"] !== undefined) {
    const m = /^(\d+)\/(\d+)$/.exec(values["rate-limit"]);
    if (!m || Number(m[1]) < 1 || Number(m[2]) < 1) throw new UsageError("--rate-limit must be REQUESTS/WINDOW_S, for example 1000/60.");
    out.rate_limit = { requests: Number(m[1]), window_s: Number(m[2]) };
  }
  return out;
}

/** A tenant's monthly quota in words: "quota N CUs/month", or that there is none. */
const quotaText = (q: unknown) => (q === null || q === undefined ? "no monthly quota" : `quota ${String(q)} CUs/month`);
/** A tenant's rate limit in words. */
const rateText = (r: unknown) => {
  const x = r as { requests?: number; window_s?: number } | null | undefined;
  return x ? `rate limit ${x.requests} requests per ${x.window_s} s` : "no rate limit";
};

export async function tenantCommand(argv: string[], io: Io): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === "--help" || sub === "-h" || sub === "help") {
    io.out(TENANT_HELP + "\n");
    if (sub === undefined) throw new UsageError("Missing subcommand: expected create, rotate-key, add-namespace, set-plan, deactivate or list.");
    return 0;
  }
  const common: OptionSpec = { json: { type: "boolean" }, data: { type: "string" } };
  const spec: Record<string, { min: number; max: number; names: string }> = {
    create: { min: 1, max: 1, names: "ID" },
    "rotate-key": { min: 1, max: 1, names: "ID" },
    "add-namespace": { min: 2, max: 2, names: "ID NS" },
    "set-plan": { min: 2, max: 2, names: "ID PLAN" },
    deactivate: { min: 1, max: 1, names: "ID" },
    list: { min: 0, max: 0, names: "no arguments" },
  };
  const pos = spec[sub];
  if (!pos) throw new UsageError(`Unknown tenant subcommand ${shown(sub)}.`);
  const extra: OptionSpec =
    sub === "create"
      ? {
          plan: { type: "string" },
          namespace: { type: "string", multiple: true },
          email: { type: "string" },
          quota: { type: "string" },
          "rate-limit": { type: "string" },
        }
      : sub === "set-plan"
        ? { quota: { type: "string" }, "rate-limit": { type: "string" } }
        : {};
  const { values, positionals, help } = parse(rest, { ...common, ...extra }, pos);
  if (help) {
    io.out(TENANT_HELP + "\n");
    return 0;
  }
  const v = values as Record<string, string | string[] | boolean | undefined>;
  const data = v.data as string | undefined;
  const print = (r: Record<string, unknown>, text: string) => io.out(v.json ? JSON.stringify(r, null, 2) + "\n" : text);

  switch (sub) {
    case "create": {
      const id = tenantId(positionals[0]!);
      const plan = v.plan === undefined ? undefined : planOf(v.plan as string);
      const namespaces = v.namespace as string[] | undefined;
      for (const ns of namespaces ?? []) {
        if (namespaceProblem(ns) !== null) throw new UsageError(`Invalid namespace ${shown(ns)}: use 1-255 characters of A-Z a-z 0-9 - _.`);
      }
      // the gateway's own rule (server/gateway/admin.ts), checked before the request
      if (v.email !== undefined && !(await import("zod")).z.email().max(320).safeParse(v.email).success)
        throw new UsageError(`--email '${String(v.email)}' is not an e-mail address.`);
      const body = {
        tenant_id: id,
        ...(plan ? { plan } : {}),
        ...(namespaces ? { namespaces } : {}),
        ...(v.email !== undefined ? { email: v.email } : {}),
        ...enterpriseFields(v as { quota?: string; "rate-limit"?: string }, plan),
      };
      const r = await adminCall(io, data, "POST", "/gate/onboard/create", body);
      print(
        r,
        `Created tenant ${r.tenant_id} (plan ${r.plan}, namespaces ${(r.namespaces as string[]).join(", ")}, ` +
          `${quotaText(r.monthly_quota)}, ${rateText(r.rate_limit)}).\n` +
          `The API key is shown once; keep it now:\nSVC_API_KEY=${r.api_key}\n`,
      );
      return 0;
    }
    case "rotate-key": {
      const r = await adminCall(io, data, "POST", "/gate/onboard/rotate-key", { tenant_id: tenantId(positionals[0]!) });
      print(r, `Rotated the key of tenant ${r.tenant_id}; the old key no longer works.\nSVC_API_KEY=${r.api_key}\n`);
      return 0;
    }
    case "add-namespace": {
      const ns = positionals[1]!;
      if (namespaceProblem(ns) !== null) throw new UsageError(`Invalid namespace ${shown(ns)}: use 1-255 characters of A-Z a-z 0-9 - _.`);
      const r = await adminCall(io, data, "POST", "/gate/onboard/add-namespace", { tenant_id: tenantId(positionals[0]!), namespace: ns });
      print(r, `Tenant ${r.tenant_id} namespaces: ${(r.namespaces as string[]).join(", ")}\n`);
      return 0;
    }
    case "set-plan": {
      const plan = planOf(positionals[1]!);
      const r = await adminCall(io, data, "POST", "/gate/onboard/update-tier", {
        tenant_id: tenantId(positionals[0]!),
        plan,
        ...enterpriseFields(v as { quota?: string; "rate-limit"?: string }, plan),
      });
      print(r, `Tenant ${r.tenant_id} is on plan ${r.plan} (${quotaText(r.monthly_quota)}, ${rateText(r.rate_limit)}).\n`);
      return 0;
    }
    case "deactivate": {
      const r = await adminCall(io, data, "POST", "/gate/onboard/deactivate", { tenant_id: tenantId(positionals[0]!) });
      print(r, `Tenant ${r.tenant_id} is ${r.status}; its key no longer works.\n`);
      return 0;
    }
    default: {
      const r = await adminCall(io, data, "GET", "/gate/admin/tenants");
      const tenants = (r.tenants ?? []) as Array<{ tenant_id: string; plan: string; namespaces: string[]; active: boolean }>;
      const rows = [["TENANT", "PLAN", "ACTIVE", "NAMESPACES"], ...tenants.map((t) => [t.tenant_id, t.plan, t.active ? "yes" : "no", t.namespaces.join(",")])];
      print(r, tenants.length ? table(rows) : "No tenants.\n");
      return 0;
    }
  }
}

export async function usageCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, help } = parse(
    argv,
    {
      period: { type: "string" },
      json: { type: "boolean" },
      data: { type: "string" },
      mine: { type: "boolean" },
    },
    { min: 0, max: 1, names: "[ID]" },
  );
  if (help) {
    io.out(USAGE_HELP + "\n");
    return 0;
  }
  const period = values.period as string | undefined;
  if (period !== undefined && !/^\d{4}-(0[1-9]|1[0-2])$/.test(period)) throw new UsageError("--period must be YYYY-MM, for example 2026-11.");
  const q = period ? `?period=${period}` : "";
  const data = values.data as string | undefined;
  if (values.mine && positionals[0] !== undefined) throw new UsageError("--mine shows the usage of SVC_API_KEY's tenant: leave out ID.");
  if (values.mine || (positionals[0] === undefined && io.env.SVC_API_KEY && !hasServiceKey(io, data))) {
    const { ownUsage } = await import("./account.js");
    return ownUsage(io, period, Boolean(values.json));
  }
  if (positionals[0] !== undefined) {
    const id = tenantId(positionals[0]);
    const r = await adminCall(io, data, "GET", `/gate/admin/usage/${id}${q}`);
    if (values.json) {
      io.out(JSON.stringify(r, null, 2) + "\n");
      return 0;
    }
    const bd = Object.entries((r.breakdown ?? {}) as Record<string, number>).sort(([a], [b]) => a.localeCompare(b));
    let text = `Tenant ${r.tenant_id}, period ${r.period}: ${fmtCus(r.cus_used)} CUs used of ${r.monthly_quota ?? "unlimited"} (${fmtUtil(r.utilization)})`;
    if (typeof r.overage_cus === "number" && r.overage_cus > 0) text += `, overage ${fmtCus(r.overage_cus)} CUs = ${r.overage_amount}`;
    text += "\n";
    if (bd.length) text += table([["OPERATION", "CUS"], ...bd.map(([op, c]) => [op, fmtCus(c)])]);
    io.out(text);
    return 0;
  }
  const r = await adminCall(io, data, "GET", `/gate/admin/usage${q}`);
  if (values.json) {
    io.out(JSON.stringify(r, null, 2) + "\n");
    return 0;
  }
  const rows = ((r.tenants ?? []) as Array<{ tenant_id: string; cus_used: number; monthly_quota: number | null; utilization: number | null }>).map((t) => [
    t.tenant_id,
    fmtCus(t.cus_used),
    t.monthly_quota === null || t.monthly_quota === undefined ? "unlimited" : String(t.monthly_quota),
    fmtUtil(t.utilization),
  ]);
  io.out(`Usage for ${r.period}\n` + (rows.length ? table([["TENANT", "CUS_USED", "QUOTA", "UTILIZATION"], ...rows]) : "No tenants.\n"));
  return 0;
}

export async function reloadCommand(argv: string[], io: Io): Promise<number> {
  const { values, help } = parse(argv, { json: { type: "boolean" }, data: { type: "string" } }, { min: 0, max: 0, names: "no arguments" });
  if (help) {
    io.out(RELOAD_HELP + "\n");
    return 0;
  }
  const r = await adminCall(io, values.data as string | undefined, "POST", "/gate/admin/reload");
  io.out(values.json ? JSON.stringify(r, null, 2) + "\n" : `Reloaded the tenant registry: ${r.tenants_loaded} tenants.\n`);
  return 0;
}

export const fmtCus = (v: unknown) => (typeof v === "number" ? String(Math.round(v * 1000) / 1000) : String(v));
export const fmtUtil = (v: unknown) => (typeof v === "number" ? `${(v * 100).toFixed(1)}%` : "n/a");
