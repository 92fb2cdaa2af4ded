// The admin view (service key): tenants with plan, namespaces, state, this month's CUs and
// utilisation; a tenant's usage by operation and its actions (rotate key, add namespace, change
// plan, deactivate) and scoped keys (keys.ts); creating tenants; and a filtered tail of the audit log.
import { usageBars } from "./charts.js";
import { api, clear, dialog, enc, fieldError, fmt, h, keepForm, showError, showKeyOnce, showNotice } from "./core.js";
import { keysSection } from "./keys.js";

const PLANS = ["starter", "builder", "pro", "enterprise"];

interface TenantRow {
  tenant_id: string;
  plan: string;
  namespaces: string[];
  active: boolean;
}

const tenantLink = (id: string) => `#/admin/tenant/${enc(id)}`;

function planSelect(current?: string): HTMLSelectElement {
  return h(
    "select",
    { name: "plan", "aria-label": "Plan" },
    ...PLANS.map((p) => {
      const o = h("option", { value: p }, p);
      o.selected = p === (current ?? "starter");
      return o;
    }),
  );
}

function utilBar(u: number, quota: number | null): HTMLElement {
  if (quota === null) return h("span", { class: "muted" }, "no quota");
  const bar = h("span", { class: "bar-fill" });
  bar.style.width = `${Math.min(100, u * 100).toFixed(1)}%`; // CSSOM, allowed under the CSP
  if (u >= 1) bar.classList.add("over");
  return h(
    "span",
    { class: "bar", role: "img", "aria-label": `${(u * 100).toFixed(1)}% of the quota used` },
    bar,
    h("span", { class: "bar-label" }, `${(u * 100).toFixed(1)}%`),
  );
}

/** Every tenant with its usage this month, and the create form. */
export async function adminTenants(main: HTMLElement, rerender: () => void): Promise<void> {
  const [list, usage] = await Promise.all([
    api<{ tenants: TenantRow[] }>("/gate/admin/tenants"),
    api<{ period: string; tenants: { tenant_id: string; cus_used: number; monthly_quota: number | null; utilization: number }[] }>("/gate/admin/usage"),
  ]);
  const byId = new Map(usage.tenants.map((u) => [u.tenant_id, u]));
  const create = h(
    "form",
    {
      class: "card",
      "aria-labelledby": "create-h",
      "data-testid": "create-form",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        const f = new FormData(ev.target as HTMLFormElement);
        const namespaces = String(f.get("namespaces") ?? "")
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean);
        const email = String(f.get("email") ?? "").trim();
        try {
          const r = await api<{ tenant_id: string; api_key: string }>("/gate/onboard/create", {
            body: {
              tenant_id: String(f.get("tenant_id") ?? "").trim(),
              plan: String(f.get("plan")),
              ...(namespaces.length ? { namespaces } : {}),
              ...(email ? { email } : {}),
            },
          });
          await showKeyOnce(r.tenant_id, r.api_key);
          rerender();
        } catch (e) {
          showError(e);
        }
      },
    },
    h("h2", { id: "create-h" }, "Create a tenant"),
    h(
      "div",
      { class: "row wrap" },
      h(
        "label",
        {},
        "Tenant id ",
        h("input", {
          name: "tenant_id",
          required: true,
          pattern: "[a-z0-9_\\-]{1,64}",
          title: "1 to 64 characters: a-z, 0-9, - and _",
          "data-testid": "new-tenant-id",
        }),
      ),
      h("label", {}, "Plan ", planSelect()),
      h("label", {}, "Namespaces ", h("input", { name: "namespaces", placeholder: "default", "data-testid": "new-tenant-ns" })),
      h("label", {}, "E-mail ", h("input", { name: "email", type: "email" })),
      h("button", { type: "submit", class: "primary" }, "Create"),
    ),
  );
  clear(
    main,
    h("h1", {}, "Tenants"),
    h("p", { class: "muted" }, `Usage in ${usage.period} (UTC month).`),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { "data-testid": "tenants" },
        h("thead", {}, h("tr", {}, ...["Tenant", "Plan", "Namespaces", "State", "CUs", "Quota", "Utilisation"].map((c) => h("th", { scope: "col" }, c)))),
        h(
          "tbody",
          {},
          ...list.tenants.map((t) => {
            const u = byId.get(t.tenant_id);
            return h(
              "tr",
              { "data-tenant": t.tenant_id },
              h("td", {}, h("a", { href: tenantLink(t.tenant_id) }, t.tenant_id)),
              h("td", {}, t.plan),
              h("td", {}, t.namespaces.join(", ")),
              h("td", {}, t.active ? "active" : h("span", { class: "muted" }, "deactivated")),
              h("td", { class: "num" }, fmt.num(u?.cus_used ?? 0, 6)),
              h("td", { class: "num" }, u?.monthly_quota ?? "–"),
              h("td", {}, utilBar(u?.utilization ?? 0, u?.monthly_quota ?? null)),
            );
          }),
        ),
      ),
    ),
    create,
  );
}

/** One tenant: usage by operation and the actions on it. */
export async function adminTenant(main: HTMLElement, id: string, rerender: () => void): Promise<void> {
  const [list, u] = await Promise.all([
    api<{ tenants: TenantRow[] }>("/gate/admin/tenants"),
    api<{
      period: string;
      cus_used: number;
      monthly_quota: number | null;
      utilization: number;
      breakdown: Record<string, number>;
      overage_cus: number;
      overage_amount: number;
    }>(`/gate/admin/usage/${enc(id)}`),
  ]);
  const t = list.tenants.find((x) => x.tenant_id === id);
  if (!t) throw new Error(`Tenant ${id} does not exist.`);
  const keys = await keysSection(id, t.namespaces, t.active, rerender);
  // An action that returns false was cancelled: the page stays as it is (and the focus where it was).
  const act = async (fn: () => Promise<unknown>, notice?: string) => {
    try {
      if ((await fn()) === false) return;
      if (notice) showNotice(notice);
      rerender();
    } catch (e) {
      showError(e);
    }
  };
  const rotate = h(
    "button",
    {
      type: "button",
      "data-testid": "rotate",
      onclick: () =>
        act(async () => {
          const c = await dialog(
            `Rotate the key of ${id}?`,
            [h("p", {}, `The current key of tenant ${id} stops working at once.`)],
            [
              { label: "Cancel", value: "cancel" },
              { label: `Rotate the key of ${id}`, value: "ok", danger: true },
            ],
          );
          if (c !== "ok") return false;
          const r = await api<{ api_key: string }>("/gate/onboard/rotate-key", { body: { tenant_id: id } });
          await showKeyOnce(id, r.api_key);
        }),
    },
    "Rotate key",
  );
  const addNs = h(
    "form",
    {
      class: "row",
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        const ns = String(new FormData(ev.target as HTMLFormElement).get("namespace") ?? "").trim();
        void act(() => api("/gate/onboard/add-namespace", { body: { tenant_id: id, namespace: ns } }), `Namespace ${ns} added to ${id}.`);
      },
    },
    h("label", {}, "Namespace ", h("input", { name: "namespace", required: true, "data-testid": "add-ns" })),
    h("button", { type: "submit" }, "Add namespace"),
  );
  const tier = h(
    "form",
    {
      class: "row",
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        const plan = String(new FormData(ev.target as HTMLFormElement).get("plan"));
        void act(() => api("/gate/onboard/update-tier", { body: { tenant_id: id, plan } }), `Tenant ${id} is now on plan ${plan}.`);
      },
    },
    h("label", {}, "Plan ", planSelect(t.plan)),
    h("button", { type: "submit" }, "Change plan"),
  );
  const deactivate = h(
    "button",
    {
      type: "button",
      class: "danger",
      "data-testid": "deactivate",
      disabled: !t.active,
      onclick: () =>
        act(async () => {
          const c = await dialog(
            `Deactivate tenant ${id}?`,
            [h("p", {}, `Tenant ${id}'s API key stops working at once. Its data are kept for the retention period.`)],
            [
              { label: "Cancel", value: "cancel" },
              { label: `Deactivate ${id}`, value: "ok", danger: true },
            ],
          );
          if (c !== "ok") return false;
          await api("/gate/onboard/deactivate", { body: { tenant_id: id } });
          showNotice(`Tenant ${id} is deactivated.`);
        }),
    },
    "Deactivate",
  );
  clear(
    main,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/admin" }, "Tenants"), " / ", id),
    h("h1", {}, `Tenant ${id}`),
    h("p", { "data-testid": "tenant-state" }, `Plan ${t.plan} · ${t.active ? "active" : "deactivated"} · namespaces ${t.namespaces.join(", ")}`),
    h(
      "section",
      {},
      h("h2", {}, `Usage in ${u.period}`),
      h(
        "p",
        {},
        `${u.cus_used} CUs${u.monthly_quota === null ? "" : ` of ${u.monthly_quota}`} · overage ${u.overage_cus} CUs (${u.overage_amount.toFixed(2)})`,
      ),
      usageBars(u.breakdown),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", {}, "Actions"),
      t.active
        ? h("div", { class: "stack" }, addNs, tier, h("div", { class: "row" }, rotate, deactivate))
        : h("p", { class: "muted" }, "A deactivated tenant cannot be changed."),
    ),
    keys,
  );
}

/** Why an audit filter value cannot be sent (the API's ranges), or null. */
function auditProblem(name: "status" | "limit", v: string): string | null {
  if (name === "status") return /^\d{3}$/.test(v) ? null : "Status is a three-digit HTTP status, for example 401.";
  return /^\d+$/.test(v) && Number(v) >= 1 && Number(v) <= 1000 ? null : "Records is a whole number from 1 to 1000.";
}

/** The newest audit records, filtered by tenant and status. */
export async function adminAudit(main: HTMLElement, params: URLSearchParams): Promise<void> {
  const q = new URLSearchParams();
  for (const k of ["tenant_id", "status", "limit"]) {
    const v = params.get(k);
    if (v) q.set(k, v);
  }
  const inputs = {
    tenant_id: h("input", { name: "tenant_id", value: q.get("tenant_id") ?? "", "data-testid": "audit-tenant" }),
    status: h("input", { name: "status", value: q.get("status") ?? "", inputmode: "numeric", size: 4, "data-testid": "audit-status" }),
    limit: h("input", { name: "limit", value: q.get("limit") ?? "100", inputmode: "numeric", size: 5, "data-testid": "audit-limit" }),
  };
  const form = h(
    "form",
    {
      class: "search",
      role: "search",
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        const n = new URLSearchParams();
        for (const k of ["tenant_id", "status", "limit"] as const) {
          const v = inputs[k].value.trim();
          const problem = v && k !== "tenant_id" ? auditProblem(k, v) : null;
          if (problem) return fieldError(inputs[k], problem);
          inputs[k].removeAttribute("aria-invalid");
          if (v) n.set(k, v);
        }
        location.hash = `#/admin/audit${n.size ? `?${n}` : ""}`;
      },
    },
    h("label", {}, "Tenant ", inputs.tenant_id),
    h("label", {}, "Status ", inputs.status),
    h("label", {}, "Records ", inputs.limit),
    h("button", { type: "submit", class: "primary" }, "Filter"),
  );
  const body = h("div", { class: "table-wrap" }, h("p", { class: "muted" }, "Loading…"));
  clear(main, h("h1", {}, "Audit log"), h("p", { class: "muted" }, "Newest first; read-only."), form, body);
  try {
    // An address edited by hand is checked as the form is.
    for (const k of ["status", "limit"] as const) {
      const v = q.get(k);
      const problem = v ? auditProblem(k, v) : null;
      if (problem) {
        inputs[k].setAttribute("aria-invalid", "true");
        throw new Error(problem);
      }
    }
    await auditTable(body, q);
  } catch (e) {
    keepForm(body, e, "No records shown.");
  }
}

async function auditTable(body: HTMLElement, q: URLSearchParams): Promise<void> {
  const r = await api<{
    records: {
      ts: string;
      tenant_id: string;
      method: string;
      path: string;
      namespace: string;
      status: number;
      cus: number;
      latency_ms: number;
      request_id: string;
    }[];
    complete: boolean;
    scanned_bytes: number;
  }>(`/gate/admin/audit${q.size ? `?${q}` : ""}`);
  clear(
    body,
    h(
      "p",
      { class: "muted", "data-testid": "audit-count" },
      `${r.records.length} record${r.records.length === 1 ? "" : "s"}${r.complete ? "" : ` (the newest ${fmt.bytes(r.scanned_bytes)} of the log were read)`}`,
    ),
    h(
      "table",
      { "data-testid": "audit" },
      h("thead", {}, h("tr", {}, ...["Time", "Tenant", "Method", "Path", "Namespace", "Status", "CUs", "ms"].map((c) => h("th", { scope: "col" }, c)))),
      h(
        "tbody",
        {},
        ...r.records.map((a) =>
          h(
            "tr",
            {},
            h("td", { class: "nowrap" }, a.ts),
            h("td", {}, a.tenant_id || "–"),
            h("td", {}, a.method),
            h("td", { class: "path" }, a.path),
            h("td", {}, a.namespace || "–"),
            h("td", { class: "num" }, a.status),
            h("td", { class: "num" }, a.cus),
            h("td", { class: "num" }, fmt.num(a.latency_ms)),
          ),
        ),
      ),
    ),
  );
}
