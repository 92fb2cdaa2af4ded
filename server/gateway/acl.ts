// Namespace isolation (step 4 of the order of checks, docs/api.md): every namespace a request names must be in the
// tenant's ACL. The engine also scopes entries by tenant, so this is the first of two walls.
import { ForbiddenError } from "../../lib/errors.js";
import type { TenantRecord } from "./tenants.js";

/** Whether every namespace named is in the tenant's ACL. */
export function aclAllows(tenant: TenantRecord, namespaces: readonly string[]): boolean {
  for (const ns of namespaces) if (!tenant.namespaces.includes(ns)) return false;
  return true;
}

export function checkAcl(tenant: TenantRecord, namespaces: readonly string[]): void {
  for (const ns of namespaces) {
    if (!tenant.namespaces.includes(ns)) {
      throw new ForbiddenError(`Tenant ${tenant.tenant_id} is not allowed to access namespace ${ns}.`);
    }
  }
}
