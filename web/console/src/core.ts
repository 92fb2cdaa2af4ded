// The console's shared pieces: element building (text only through textContent, never HTML),
// the signed-in session (sessionStorage, gone when the tab closes or on sign-out) and the API
// client, which sends the key as the API's headers and turns every error into its sentence.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | EventListener | undefined>;

/** Creates an element; `on*` attributes become listeners, other values attributes, children text or nodes. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.slice(2).toLowerCase(), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(typeof c === "number" ? String(c) : c);
  return el;
}

export function clear(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(typeof c === "number" ? String(c) : c);
}

export interface Session {
  kind: "tenant" | "admin";
  key: string;
  /** The tenant's id (tenant sessions). */
  tenantId?: string;
}

const SESSION_KEY = "svc-console-session";

export function loadSession(): Session | null {
  try {
    const s = JSON.parse(sessionStorage.getItem(SESSION_KEY) ?? "null") as Session | null;
    return s && (s.kind === "tenant" || s.kind === "admin") && typeof s.key === "string" ? s : null;
  } catch {
    return null;
  }
}

export function saveSession(s: Session | null): void {
  if (s) sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
  else sessionStorage.removeItem(SESSION_KEY);
}

/** An error answer of the API: its one-sentence detail, code and status. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    detail: string,
    readonly requestId?: string,
  ) {
    super(detail);
  }
}

export interface RateState {
  limit: number;
  remaining: number;
  resetS: number;
}

/** The rate-limit headers of the last tenant response, for the usage view. */
export let lastRate: RateState | null = null;
const rateListeners = new Set<(r: RateState) => void>();
export function onRate(fn: (r: RateState) => void): () => void {
  rateListeners.add(fn);
  return () => rateListeners.delete(fn);
}

function noteRate(headers: Headers): void {
  const limit = headers.get("x-ratelimit-limit");
  if (limit === null) return;
  lastRate = { limit: Number(limit), remaining: Number(headers.get("x-ratelimit-remaining")), resetS: Number(headers.get("x-ratelimit-reset")) };
  for (const fn of rateListeners) fn(lastRate);
}

export interface CallOptions {
  method?: string;
  body?: unknown;
  /** Ask for raw bytes (Accept: application/octet-stream). */
  binary?: boolean;
  /** The key to try (the sign-in form); without it the signed-in session's, whose 401 signs the tab out. */
  session?: Session;
}

export interface BinaryAnswer {
  bytes: ArrayBuffer;
  headers: Headers;
}

let current: Session | null = null;
export function setCurrent(s: Session | null): void {
  current = s;
}
export function session(): Session | null {
  return current;
}

let page = new AbortController();
/**
 * Starts a page: the calls of the page before are cancelled, so that an answer that comes after
 * the user moved on (another page, sign-out) never renders. Returns the new page's signal.
 */
export function newPage(): AbortSignal {
  page.abort();
  page = new AbortController();
  return page.signal;
}
/** The signal of the page shown now. */
export function pageSignal(): AbortSignal {
  return page.signal;
}

const abandoned = () => new ApiError(0, "aborted", "The page was left before the answer came.");
/** A call cancelled because its page was left: nothing to show. */
export const isAbandoned = (e: unknown): boolean => e instanceof ApiError && e.code === "aborted";

let unauthorized: (e: ApiError) => void = () => undefined;
/** What a 401 on the signed-in session's key does (sign the tab out with the API's sentence). */
export function onUnauthorized(fn: (e: ApiError) => void): void {
  unauthorized = fn;
}

/** Calls the API on this origin with the session's key in the API's headers. */
export async function api<T = any>(path: string, opts: CallOptions = {}): Promise<T> {
  const s = opts.session ?? current;
  // Cancelled with the page that made the call, when another page or the sign-in form replaces it.
  const signal = page.signal;
  // Signed out (a timer or handler of a page already left): no call without a key.
  if (!s || signal.aborted) throw abandoned();
  const headers: Record<string, string> = {};
  if (s.kind === "tenant") headers["X-Api-Key"] = s.key;
  else if (s.kind === "admin") headers["Authorization"] = `Bearer ${s.key}`;
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  if (opts.binary) headers["Accept"] = "application/octet-stream";
  let r: Response;
  try {
    r = await fetch(path, {
      method: opts.method ?? (opts.body !== undefined ? "POST" : "GET"),
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      credentials: "omit",
      cache: "no-store",
      signal,
    });
  } catch {
    if (signal.aborted) throw abandoned();
    throw new ApiError(0, "network", "The gateway cannot be reached; check that it is running.");
  }
  if (s.kind === "tenant") noteRate(r.headers);
  if (!r.ok) {
    let detail = `The request failed with status ${r.status}.`;
    let code = "error";
    let rid: string | undefined;
    try {
      const j = (await r.json()) as { detail?: unknown; code?: unknown; request_id?: unknown };
      if (typeof j.detail === "string") detail = j.detail;
      if (typeof j.code === "string") code = j.code;
      if (typeof j.request_id === "string") rid = j.request_id;
    } catch {
      // not the API's JSON error body; keep the status sentence
    }
    if (signal.aborted) throw abandoned();
    const err = new ApiError(r.status, code, detail, rid);
    // The signed-in key stopped working (rotated, revoked, tenant deactivated) during any call.
    if (r.status === 401 && opts.session === undefined && s === current) unauthorized(err);
    throw err;
  }
  try {
    if (opts.binary) return { bytes: await r.arrayBuffer(), headers: r.headers } as T;
    return (await r.json()) as T;
  } catch (e) {
    if (signal.aborted) throw abandoned();
    throw e;
  }
}

const banner = () => document.getElementById("banner")!;

/** Shows an error as the API's sentence (or a plain message) in the alert banner. */
export function showError(e: unknown): void {
  if (isAbandoned(e)) return;
  const b = banner();
  b.hidden = false;
  b.className = "banner error";
  clear(b, e instanceof Error ? e.message : String(e));
}

/** Shows a form field's error in the banner, marks the field and gives it the focus; the input stays as typed. */
export function fieldError(input: HTMLInputElement, sentence: string): void {
  input.setAttribute("aria-invalid", "true");
  showError(sentence);
  input.focus();
}

/** A failure of the part below a form: its sentence in the banner, the form kept to correct the input. */
export function keepForm(host: HTMLElement, e: unknown, empty: string): void {
  // Left for another page, or the key stopped working (the tab is signed out): not this page's to show.
  if (isAbandoned(e) || (e instanceof ApiError && e.status === 401)) throw e;
  showError(e);
  clear(host, h("p", { class: "muted", "data-testid": "empty" }, empty));
}

export function showNotice(text: string): void {
  const b = banner();
  b.hidden = false;
  b.className = "banner notice";
  clear(b, text);
}

export function hideBanner(): void {
  banner().hidden = true;
}

/** Runs `fn`, showing its failure in the banner; returns its result or undefined. */
export async function guarded<T>(fn: () => Promise<T>): Promise<T | undefined> {
  try {
    return await fn();
  } catch (e) {
    showError(e);
    return undefined;
  }
}

export const fmt = {
  bytes(n: number): string {
    if (!Number.isFinite(n)) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) {
      n /= 1024;
      i++;
    }
    return `${i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)} ${u[i]}`;
  },
  num(n: number | null | undefined, digits = 3): string {
    if (n === null || n === undefined || !Number.isFinite(n)) return "–";
    if (n === 0) return "0";
    const a = Math.abs(n);
    return a >= 1e5 || a < 1e-3 ? n.toExponential(2) : Number(n.toPrecision(digits)).toString();
  },
  shape(s: readonly number[] | null | undefined): string {
    return s && s.length ? s.join("×") : "–";
  },
};

/** Path segments of the API are percent-encoded one by one (a key may hold '/'). */
export const enc = (s: string): string => encodeURIComponent(s);
export const encKey = (k: string): string => k.split("/").map(enc).join("/");

/** A modal dialog with the given body and buttons; resolves with the chosen button's value. */
export function dialog(title: string, body: Child[], buttons: { label: string; value: string; primary?: boolean; danger?: boolean }[]): Promise<string> {
  return new Promise((resolve) => {
    const d = h("dialog", { class: "modal", "aria-label": title });
    // Closing (a button or Escape) gives the focus back to the control that opened the dialog.
    const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    const done = (v: string) => {
      d.close();
      d.remove();
      if (opener?.isConnected) opener.focus();
      resolve(v);
    };
    d.append(
      h("h2", {}, title),
      ...body.filter((c): c is Node | string => c !== null && c !== undefined && c !== false).map((c) => (typeof c === "number" ? String(c) : c)),
      h(
        "div",
        { class: "actions" },
        ...buttons.map((b) => h("button", { type: "button", class: b.danger ? "danger" : b.primary ? "primary" : "", onclick: () => done(b.value) }, b.label)),
      ),
    );
    d.addEventListener("cancel", (ev) => {
      ev.preventDefault();
      done("cancel");
    });
    document.body.append(d);
    d.showModal();
    (d.querySelector("button.primary, button.danger, button") as HTMLButtonElement | null)?.focus();
  });
}

/** Shows a newly issued API key once, with a copy button and the warning that it is not shown again. */
export async function showKeyOnce(tenantId: string, key: string, title = `API key of ${tenantId}`, ifLost = "if it is lost, rotate the key"): Promise<void> {
  const field = h("input", { type: "text", readonly: true, value: key, class: "key", "aria-label": `API key of ${tenantId}`, "data-testid": "new-key" });
  const status = h("span", { class: "muted", role: "status" });
  const copy = h(
    "button",
    {
      type: "button",
      onclick: async () => {
        field.select();
        try {
          await navigator.clipboard.writeText(key);
          status.textContent = "Copied.";
        } catch {
          status.textContent = "Select the key and copy it with the keyboard.";
        }
      },
    },
    "Copy",
  );
  await dialog(
    title,
    [
      h("p", { class: "warning" }, `This key is shown once and cannot be shown again. Store it now; ${ifLost}.`),
      h("div", { class: "row" }, field, copy),
      status,
    ],
    [{ label: "I have stored the key", value: "ok", primary: true }],
  );
}
