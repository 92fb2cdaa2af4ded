// `svc usage --mine`: a tenant's own plan, limits and usage from GET /gate/account, with the
// tenant key of SVC_API_KEY (no service key needed).
import { errorFromCode, SvcError } from "../../lib/errors.js";
import { fmtCus, fmtUtil } from "./admin.js";
import { apiKeyOf, gatewayCall, gatewayUrl, table, type Io } from "./common.js";

interface Account {
  tenant_id: string;
  plan: string;
  namespaces: string[];
  rate_limit: { requests: number; window_s: number };
  usage: { period: string; cus_used: number; monthly_quota: number | null; utilization: number | null; breakdown: Record<string, number> };
}

/** The account view of SVC_API_KEY's tenant; a non-2xx answer is thrown as the library's error. */
export async function fetchAccount(io: Io, period?: string): Promise<Account> {
  const apiKey = apiKeyOf(io);
  const base = gatewayUrl(io);
  const res = await gatewayCall(base, `/gate/account${period ? `?period=${period}` : ""}`, "GET", { "x-api-key": apiKey, accept: "application/json" });
  let body: Record<string, unknown> | undefined;
  try {
    body = JSON.parse(res.text) as Record<string, unknown>;
  } catch {
    body = undefined;
  }
  if (res.status >= 400) {
    const err = errorFromCode(
      typeof body?.code === "string" ? body.code : "internal",
      typeof body?.detail === "string" ? body.detail : `The gateway answered HTTP ${res.status}.`,
    );
    if (typeof body?.request_id === "string") err.extra.request_id = body.request_id;
    throw err;
  }
  if (!body || typeof body.tenant_id !== "string" || typeof body.usage !== "object" || body.usage === null) {
    throw new SvcError("internal", "The gateway answered GET /gate/account with a body that is not an account.");
  }
  return body as unknown as Account;
}

export async function ownUsage(io: Io, period: string | undefined, json: boolean): Promise<number> {
  const a = await fetchAccount(io, period);
  if (json) {
    io.out(JSON.stringify(a, null, 2) + "\n");
    return 0;
  }
  const u = a.usage;
  let text =
    `Tenant ${a.tenant_id} (plan ${a.plan}), period ${u.period}: ${fmtCus(u.cus_used)} CUs used of ${u.monthly_quota ?? "unlimited"} (${fmtUtil(u.utilization)}); ` +
    `rate limit ${a.rate_limit.requests} requests per ${a.rate_limit.window_s} s; namespaces ${a.namespaces.join(", ") || "none"}.\n`;
  const bd = Object.entries(u.breakdown ?? {}).sort(([x], [y]) => x.localeCompare(y));
  if (bd.length) text += table([["OPERATION", "CUS"], ...bd.map(([op, c]) => [op, fmtCus(c)])]);
  io.out(text);
  return 0;
}
