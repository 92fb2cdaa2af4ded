// The console's entry: sign-in, the header, and the hash routes of the tenant and admin views.
// Routes carry names only (namespaces, keys, tenant ids); the key stays in sessionStorage.
import { adminAudit, adminTenant, adminTenants } from "./admin.js";
import {
  api,
  ApiError,
  clear,
  h,
  hideBanner,
  isAbandoned,
  loadSession,
  newPage,
  onUnauthorized,
  saveSession,
  setCurrent,
  showError,
  type Session,
} from "./core.js";
import { entryPage, namespacePage, tenantHome, type Account } from "./tenant.js";
import { keyProblem, signInHint } from "./signin-hint.js";

const main = () => document.getElementById("main")!;

function signIn(): void {
  const form = h(
    "form",
    {
      class: "card signin",
      "aria-labelledby": "signin-h",
      "data-testid": "signin",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        const f = new FormData(ev.target as HTMLFormElement);
        const key = String(f.get("key") ?? "").trim();
        const kind = f.get("kind") === "admin" ? "admin" : "tenant";
        const problem = keyProblem(key);
        if (problem) {
          showError(problem);
          (form.querySelector("input[name=key]") as HTMLInputElement).focus();
          return;
        }
        const s: Session = { kind, key };
        try {
          if (kind === "tenant") s.tenantId = (await api<Account>("/gate/account", { session: s })).tenant_id;
          else await api("/gate/admin/tenants", { session: s });
        } catch (e) {
          const hint = e instanceof ApiError && e.status === 401 ? signInHint(kind, key) : null;
          showError(hint ? new Error(`${(e as Error).message} ${hint}`) : e);
          return;
        }
        hideBanner();
        saveSession(s);
        setCurrent(s);
        // One route per sign-in: a changed hash routes through hashchange, an unchanged one here.
        const target = kind === "admin" ? "#/admin" : "#/";
        if (location.hash !== target) location.hash = target;
        else void route();
      },
    },
    h("h1", { id: "signin-h" }, "Sign in"),
    h(
      "fieldset",
      {},
      h("legend", {}, "Key"),
      h("label", {}, h("input", { type: "radio", name: "kind", value: "tenant", checked: true }), " Tenant API key"),
      h("label", {}, h("input", { type: "radio", name: "kind", value: "admin", "data-testid": "kind-admin" }), " Service key (admin)"),
    ),
    h(
      "label",
      {},
      "Key ",
      h("input", { type: "password", name: "key", class: "key", required: true, autocomplete: "off", spellcheck: "false", "data-testid": "key" }),
    ),
    h("p", { class: "muted small" }, "The key is kept in this tab only and sent to this gateway's API; signing out or closing the tab forgets it."),
    h("button", { type: "submit", class: "primary" }, "Sign in"),
  );
  renderHeader(null);
  clear(main(), form);
  (form.querySelector("input[name=key]") as HTMLInputElement).focus();
}

function renderHeader(s: Session | null): void {
  const nav = document.getElementById("nav")!,
    who = document.getElementById("who")!;
  if (!s) {
    clear(nav);
    clear(who);
    return;
  }
  const links =
    s.kind === "admin"
      ? [h("a", { href: "#/admin" }, "Tenants"), h("a", { href: "#/admin/audit" }, "Audit log")]
      : [h("a", { href: "#/" }, "Namespaces and usage")];
  clear(nav, ...links);
  clear(
    who,
    h("span", { "data-testid": "who" }, s.kind === "admin" ? "admin" : `tenant ${s.tenantId ?? ""}`),
    h(
      "button",
      {
        type: "button",
        "data-testid": "signout",
        onclick: () => {
          // A page still loading is cancelled with the session: nothing of it renders after this.
          newPage();
          saveSession(null);
          setCurrent(null);
          hideBanner();
          history.replaceState(null, "", location.pathname); // no hashchange: sign-in is shown once
          signIn();
        },
      },
      "Sign out",
    ),
  );
}

/** Splits "#/a/b?x=1" into decoded path segments and parameters. */
function parseHash(): { parts: string[]; params: URLSearchParams } {
  const raw = location.hash.replace(/^#\/?/, "");
  const qi = raw.indexOf("?");
  const path = qi < 0 ? raw : raw.slice(0, qi);
  const parts = path
    .split("/")
    .filter((p) => p.length)
    .map((p) => {
      try {
        return decodeURIComponent(p);
      } catch {
        return p;
      }
    });
  return { parts, params: new URLSearchParams(qi < 0 ? "" : raw.slice(qi + 1)) };
}

/** The key stopped working (rotated, revoked, tenant deactivated): forget it and ask again, with the API's sentence. */
function signedOutBy(e: ApiError): void {
  newPage();
  saveSession(null);
  setCurrent(null);
  signIn();
  showError(e);
}
onUnauthorized(signedOutBy);

async function route(): Promise<void> {
  // Whatever page was loading is cancelled, signed in or not.
  const signal = newPage();
  const s = loadSession();
  setCurrent(s);
  if (!s) return signIn();
  renderHeader(s);
  const { parts, params } = parseHash();
  const el = main();
  hideBanner();
  clear(el, h("p", { class: "muted" }, "Loading…"));
  const rerender = () => void route();
  try {
    if (s.kind === "admin") {
      if (parts[0] !== "admin" || parts.length === 1) await adminTenants(el, rerender);
      else if (parts[1] === "tenant" && parts[2]) await adminTenant(el, parts[2], rerender);
      else if (parts[1] === "audit") await adminAudit(el, params);
      else await adminTenants(el, rerender);
    } else if (parts[0] === "ns" && parts[1]) await namespacePage(el, parts[1], params);
    else if (parts[0] === "entry" && parts[1] && parts.length > 2) await entryPage(el, parts[1], parts.slice(2).join("/"), params);
    else await tenantHome(el);
  } catch (e) {
    // Left for another page or signed out (a 401 has done so already): this page renders nothing.
    if (signal.aborted || isAbandoned(e)) return;
    clear(el, h("p", { class: "muted" }, "This page could not be shown."));
    showError(e);
  }
  if (!signal.aborted) el.focus({ preventScroll: true });
}

window.addEventListener("hashchange", () => void route());
// A module script runs once the document is parsed.
void route();
