// `svc audit`: the newest records of the gateway's audit log (GET /gate/admin/audit), filtered by
// tenant and status, with the service key.
import { adminCall } from "./admin.js";
import { parse, table, UsageError, type Io, shown } from "./common.js";
import { tenantIdProblem } from "../../lib/client-names.js";
// a type only: nothing of the gateway is loaded
import type { AuditRecord } from "../../server/gateway/audit.js";

export const AUDIT_HELP = `Usage: svc audit [--tenant ID] [--status CODE] [--limit N] [--json] [--data DIR]

The newest records of the gateway's audit log, newest first: time, tenant, method, path,
namespace, status, CUs and latency. --limit is 1-1000 (default 100). The log read is this
gateway's own file (SVC_GATE_AUDIT_LOG_PATH); at most its last 64 MiB are searched per call.`;

export async function auditCommand(argv: string[], io: Io): Promise<number> {
  const { values, help } = parse(
    argv,
    { tenant: { type: "string" }, status: { type: "string" }, limit: { type: "string" }, json: { type: "boolean" }, data: { type: "string" } },
    { min: 0, max: 0, names: "no arguments" },
  );
  if (help) {
    io.out(AUDIT_HELP + "\n");
    return 0;
  }
  const q = new URLSearchParams();
  const tenant = values.tenant as string | undefined,
    status = values.status as string | undefined,
    limit = values.limit as string | undefined;
  if (tenant !== undefined) {
    if (tenantIdProblem(tenant) !== null) throw new UsageError(`Invalid tenant id ${shown(tenant)}: use 1-64 characters of a-z 0-9 - _.`);
    q.set("tenant_id", tenant);
  }
  if (status !== undefined) {
    if (!/^[1-5][0-9][0-9]$/.test(status)) throw new UsageError("--status must be an HTTP status code, for example 429.");
    q.set("status", status);
  }
  if (limit !== undefined) {
    if (!/^[0-9]{1,4}$/.test(limit) || Number(limit) < 1 || Number(limit) > 1000) throw new UsageError("--limit must be a whole number from 1 to 1000.");
    q.set("limit", limit);
  }
  const r = await adminCall(io, values.data as string | undefined, "GET", `/gate/admin/audit${q.size ? `?${q}` : ""}`);
  if (values.json) {
    io.out(JSON.stringify(r, null, 2) + "\n");
    return 0;
  }
  const recs = (r.records ?? []) as AuditRecord[];
  if (!recs.length) {
    io.out("No matching audit records.\n");
    return 0;
  }
  io.out(
    table([
      ["TIME", "TENANT", "METHOD", "PATH", "NAMESPACE", "STATUS", "CUS", "MS"],
      ...recs.map((a) => [a.ts, a.tenant_id || "-", a.method, a.path, a.namespace || "-", String(a.status), String(a.cus), String(a.latency_ms)]),
    ]),
  );
  if (!r.complete) io.out(`(the newest ${r.scanned_bytes} bytes of the log were read)\n`);
  return 0;
}
