// The scoped API keys of one tenant on its admin page: the list (no secrets; created, last used,
// expiry), a form that creates one and shows it once, and revocation behind a confirmation
// that names the key. Validation is the gateway's: its sentence is shown as it comes.
import { api, clear, dialog, enc, h, showError, showKeyOnce, showNotice } from "./core.js";

interface KeyRow {
  key_id: string;
  name: string;
  scopes: string[];
  namespaces: string[] | null;
  expires_at: string | null;
  expired: boolean;
  created_at: string;
  last_used_at: string | null;
}

/** Shown beside the form: the gateway's limit of scoped keys per tenant. */
const MAX_KEYS = 20;

/** The section listing `tenantId`'s scoped keys, with create and revoke when the tenant is active. */
export async function keysSection(tenantId: string, tenantNamespaces: string[], active: boolean, rerender: () => void): Promise<HTMLElement> {
  const r = await api<{ keys: KeyRow[] }>(`/gate/admin/keys/${enc(tenantId)}`);
  const revoke = (k: KeyRow) => async () => {
    try {
      const c = await dialog(
        `Revoke key ${k.name}?`,
        [h("p", {}, `Key ${k.name} (${k.key_id}) of tenant ${tenantId} stops working at once, on every gateway.`)],
        [
          { label: "Cancel", value: "cancel" },
          { label: `Revoke ${k.name}`, value: "ok", danger: true },
        ],
      );
      if (c !== "ok") return;
      await api("/gate/admin/keys/revoke", { body: { key_id: k.key_id } });
      showNotice(`Key ${k.name} of ${tenantId} is revoked.`);
      rerender();
    } catch (e) {
      showError(e);
    }
  };
  const table =
    r.keys.length === 0
      ? h("p", { class: "muted", "data-testid": "keys-none" }, "No scoped keys. The tenant's own key (create, rotate) has every scope.")
      : h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { "data-testid": "keys" },
            h(
              "thead",
              {},
              h("tr", {}, ...["Name", "Key id", "Scopes", "Namespaces", "Expires", "Created", "Last used", ""].map((c) => h("th", { scope: "col" }, c))),
            ),
            h(
              "tbody",
              {},
              ...r.keys.map((k) =>
                h(
                  "tr",
                  { "data-key": k.key_id },
                  h("td", {}, k.name),
                  h("td", { class: "nowrap" }, k.key_id),
                  h("td", {}, k.scopes.join(", ")),
                  h("td", {}, k.namespaces === null ? h("span", { class: "muted" }, "all") : k.namespaces.join(", ")),
                  h(
                    "td",
                    { class: "nowrap" },
                    k.expires_at === null ? "never" : k.expired ? h("span", { class: "muted" }, `${k.expires_at} (expired)`) : k.expires_at,
                  ),
                  h("td", { class: "nowrap" }, k.created_at),
                  h("td", { class: "nowrap" }, k.last_used_at ?? "never"),
                  h("td", {}, h("button", { type: "button", class: "danger", "data-testid": `revoke-${k.name}`, onclick: revoke(k) }, "Revoke")),
                ),
              ),
            ),
          ),
        );

  const nsBoxes = tenantNamespaces.map((ns) => h("label", { class: "check" }, h("input", { type: "checkbox", name: "ns", value: ns }), ` ${ns}`));
  const form = h(
    "form",
    {
      class: "stack",
      "aria-labelledby": "new-key-h",
      "data-testid": "key-form",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        const f = new FormData(ev.target as HTMLFormElement);
        const namespaces = f.getAll("ns").map(String);
        const date = String(f.get("expires") ?? "").trim();
        try {
          const made = await api<{ api_key: string; name: string }>("/gate/admin/keys", {
            body: {
              tenant_id: tenantId,
              name: String(f.get("name") ?? "").trim(),
              scopes: String(f.get("scopes")) === "write" ? ["read", "write"] : ["read"],
              ...(namespaces.length ? { namespaces } : {}),
              ...(date ? { expires_at: `${date}T00:00:00Z` } : {}),
            },
          });
          await showKeyOnce(tenantId, made.api_key, `Key ${made.name} of ${tenantId}`, "if it is lost, revoke it and create another");
          rerender();
        } catch (e) {
          showError(e);
        }
      },
    },
    h("h3", { id: "new-key-h" }, "Create a key"),
    h(
      "div",
      { class: "row wrap" },
      h("label", {}, "Name ", h("input", { name: "name", required: true, maxlength: 64, "data-testid": "key-name" })),
      h(
        "label",
        {},
        "Scopes ",
        h(
          "select",
          { name: "scopes", "data-testid": "key-scopes" },
          h("option", { value: "read" }, "read (get, list, search, serve, queries)"),
          h("option", { value: "write" }, "read and write (also put, delete)"),
        ),
      ),
      h("label", {}, "Expires (UTC date, optional) ", h("input", { name: "expires", type: "date", "data-testid": "key-expires" })),
    ),
    h("fieldset", {}, h("legend", {}, "Namespaces (none ticked: every namespace of the tenant)"), h("div", { class: "row wrap" }, ...nsBoxes)),
    h(
      "div",
      { class: "row" },
      h("button", { type: "submit", class: "primary" }, "Create key"),
      h("span", { class: "muted" }, `At most ${MAX_KEYS} keys per tenant.`),
    ),
  );

  const section = h("section", { class: "card", "aria-labelledby": "keys-h", "data-testid": "keys-section" }, h("h2", { id: "keys-h" }, "API keys"));
  clear(
    section,
    h("h2", { id: "keys-h" }, "API keys"),
    table,
    active ? form : h("p", { class: "muted" }, "A deactivated tenant's keys do not work; revoke them to tidy up."),
  );
  return section;
}
