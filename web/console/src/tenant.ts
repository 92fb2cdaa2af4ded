// The tenant view: namespaces and the month's usage, a namespace's entries (prefix and metadata
// filter search, paging), and an entry's page (metadata, fingerprint, versions, slice viewer,
// top-K neighbours with thumbnails of the same slice).
import { usageBars, lineChart } from "./charts.js";
import { api, ApiError, clear, enc, encKey, fieldError, fmt, guarded, h, keepForm, lastRate, onRate, pageSignal, showError, type RateState } from "./core.js";
import { decode, drawPlane, fetchPlane, sliceViewer, viewable, type EntryRef, type View } from "./slice.js";
import { npyBlob } from "./npy.js";

export interface Account {
  tenant_id: string;
  plan: string;
  namespaces: string[];
  monthly_quota: number | null;
  rate_limit: { requests: number; window_s: number };
  usage: { period: string; cus_used: number; monthly_quota: number | null; utilization: number; breakdown: Record<string, number> };
}

/** GET /v1/get's answer as the console reads it; web/console/server-types.check.ts checks it against the server's (npm run lint). */
export interface EntryInfo {
  namespace: string;
  key: string;
  version: number;
  latest_version: number;
  versions: number[];
  created_at: string;
  dtype: string;
  shape: number[] | null;
  metadata: Record<string, unknown>;
  verdict: string;
  compressed: boolean;
  compression_ratio: number;
  relative_error: number;
  max_abs_error: number | null;
  bytes_in: number;
  bytes_stored: number;
  fingerprint: { sha256: string; codec: string; tt: { modes: number[]; ranks: number[] } | null; norm: number | null };
}

const nsLink = (ns: string) => `#/ns/${enc(ns)}`;
const entryLink = (ns: string, key: string, version?: number) => `#/entry/${enc(ns)}/${encKey(key)}${version ? `?v=${version}` : ""}`;

function rateText(r: RateState | null): string {
  if (!r) return "No request counted yet.";
  const reset = new Date(r.resetS * 1000).toISOString().replace(".000Z", "Z");
  return `${r.remaining} of ${r.limit} requests left in the window; it resets by ${reset}.`;
}

/** Namespaces and the month's usage. */
export async function tenantHome(main: HTMLElement): Promise<void> {
  const signal = pageSignal();
  const acct = await api<Account>("/gate/account");
  const u = acct.usage;
  const rate = h("p", { "data-testid": "rate-state" }, rateText(lastRate));
  const stop = onRate((r) => (rate.textContent = rateText(r)));
  signal.addEventListener("abort", () => stop(), { once: true });
  const quota =
    u.monthly_quota === null
      ? h("p", {}, `${u.cus_used} CUs used in ${u.period}; no quota applies.`)
      : h(
          "div",
          {},
          h("p", {}, `${u.cus_used} of ${u.monthly_quota} CUs used in ${u.period} (${(u.utilization * 100).toFixed(1)}%).`),
          h("meter", { min: 0, max: 1, value: Math.min(1, u.utilization), "aria-label": "Quota used", class: "quota" }),
        );
  clear(
    main,
    h("h1", {}, `Tenant ${acct.tenant_id}`),
    h("p", { class: "muted" }, `Plan ${acct.plan} · rate limit ${acct.rate_limit.requests} requests per ${acct.rate_limit.window_s} s`),
    h(
      "section",
      { "aria-labelledby": "ns-h" },
      h("h2", { id: "ns-h" }, "Namespaces"),
      h("ul", { class: "links", "data-testid": "namespaces" }, ...acct.namespaces.map((ns) => h("li", {}, h("a", { href: nsLink(ns) }, ns)))),
    ),
    h(
      "section",
      { "aria-labelledby": "usage-h" },
      h("h2", { id: "usage-h" }, `Usage in ${u.period}`),
      quota,
      usageBars(u.breakdown),
      h("h3", {}, "Rate limit"),
      rate,
    ),
  );
}

/** Runs `fn` over `items` with at most `n` at a time, keeping the order of the results. */
async function pool<T, R>(items: T[], n: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!);
      }
    }),
  );
  return out;
}

const PAGE = 20;

/** The filter as the API takes it (a JSON object), or the sentence saying why it is not one. */
function parseFilter(text: string): { filter: Record<string, unknown> } | { error: string } {
  let filter: unknown;
  try {
    filter = JSON.parse(text);
  } catch {
    return { error: 'The metadata filter is not valid JSON; write it as a JSON object, for example {"run.seed": {"$gte": 3}}.' };
  }
  if (typeof filter !== "object" || filter === null || Array.isArray(filter)) {
    return { error: 'The metadata filter is a JSON object, for example {"run.seed": {"$gte": 3}}.' };
  }
  return { filter: filter as Record<string, unknown> };
}

/** A namespace's entries: prefix and filter search with paging; one get per row for its figures. */
export async function namespacePage(main: HTMLElement, ns: string, params: URLSearchParams): Promise<void> {
  const prefix = params.get("prefix") ?? "";
  const filterText = params.get("filter") ?? "";
  const offset = Math.max(0, Math.floor(Number(params.get("offset") ?? 0)) || 0);
  const filterInput = h("input", { name: "filter", value: filterText, placeholder: '{"run.seed": {"$gte": 3}}', "data-testid": "filter" });
  const form = h(
    "form",
    {
      class: "search",
      role: "search",
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        const f = new FormData(ev.target as HTMLFormElement);
        const q = new URLSearchParams();
        const p = String(f.get("prefix") ?? ""),
          fl = String(f.get("filter") ?? "").trim();
        if (fl) {
          const parsed = parseFilter(fl);
          if ("error" in parsed) return fieldError(filterInput, parsed.error);
        }
        filterInput.removeAttribute("aria-invalid");
        if (p) q.set("prefix", p);
        if (fl) q.set("filter", fl);
        location.hash = `${nsLink(ns)}${q.size ? `?${q}` : ""}`;
      },
    },
    h("label", {}, "Key prefix ", h("input", { name: "prefix", value: prefix, "data-testid": "prefix" })),
    h("label", { class: "grow" }, "Metadata filter (JSON) ", filterInput),
    h("button", { type: "submit", class: "primary" }, "Search"),
  );
  const table = h("div", { class: "table-wrap" }, h("p", { class: "muted" }, "Loading…"));
  clear(
    main,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/" }, "Namespaces"), " / ", ns),
    h("h1", {}, `Namespace ${ns}`),
    form,
    table,
  );
  try {
    await entriesTable(table, ns, prefix, filterText, offset);
  } catch (e) {
    // The filter itself refused (not JSON here, or the API's 400): the field is marked for correction.
    if (filterText && (e instanceof ApiError ? e.status === 400 : true)) filterInput.setAttribute("aria-invalid", "true");
    keepForm(table, e, "No entries shown.");
  }
}

async function entriesTable(table: HTMLElement, ns: string, prefix: string, filterText: string, offset: number): Promise<void> {
  let keys: { key: string; version: number }[];
  let total: number, nextOffset: number | null;
  if (filterText) {
    const parsed = parseFilter(filterText);
    if ("error" in parsed) throw new Error(parsed.error);
    const r = await api<{ results: { key: string; version: number }[]; total: number; next_offset: number | null }>("/v1/search", {
      body: { namespace: ns, filter: parsed.filter, ...(prefix ? { prefix } : {}), limit: PAGE, offset },
    });
    keys = r.results;
    total = r.total;
    nextOffset = r.next_offset;
  } else {
    const q = new URLSearchParams({ limit: String(PAGE), offset: String(offset) });
    if (prefix) q.set("prefix", prefix);
    const r = await api<{ keys: { key: string; version: number }[]; total: number; next_offset: number | null }>(`/v1/list/${enc(ns)}?${q}`);
    keys = r.keys;
    total = r.total;
    nextOffset = r.next_offset;
  }
  const rows = await pool(keys, 4, (k) => api<EntryInfo>(`/v1/get/${enc(ns)}/${encKey(k.key)}`));
  const pageLink = (off: number) => {
    const q = new URLSearchParams();
    if (prefix) q.set("prefix", prefix);
    if (filterText) q.set("filter", filterText);
    if (off) q.set("offset", String(off));
    return `${nsLink(ns)}${q.size ? `?${q}` : ""}`;
  };
  // An offset past the last entry (a link kept while entries were deleted, an edited address).
  const pastEnd = rows.length === 0 && total > 0;
  clear(
    table,
    h(
      "p",
      { class: "muted", "data-testid": "total" },
      total === 0
        ? "No entries match."
        : pastEnd
          ? `No entries from ${offset + 1} on: ${total === 1 ? "1 entry matches" : `${total} entries match`}.`
          : `Entries ${offset + 1}–${offset + rows.length} of ${total}`,
    ),
    rows.length === 0
      ? null
      : h(
          "table",
          { "data-testid": "entries" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ...["Key", "Dtype", "Shape", "Verdict", "Ratio", "Rel. error", "Bytes in", "Stored", "Version", "Codec", "Max abs error"].map((c) =>
                h("th", { scope: "col" }, c),
              ),
            ),
          ),
          h(
            "tbody",
            {},
            ...rows.map((e) =>
              h(
                "tr",
                {},
                // A long key is cut with an ellipsis; the link's text and title hold it whole.
                h("td", { class: "key" }, h("a", { href: entryLink(ns, e.key), title: e.key }, e.key)),
                h("td", {}, e.dtype),
                h("td", {}, fmt.shape(e.shape)),
                h("td", {}, h("span", { class: `verdict ${e.verdict}` }, e.verdict)),
                h("td", { class: "num" }, fmt.num(e.compression_ratio)),
                h("td", { class: "num" }, fmt.num(e.relative_error)),
                h("td", { class: "num" }, fmt.bytes(e.bytes_in)),
                h("td", { class: "num" }, fmt.bytes(e.bytes_stored)),
                h("td", { class: "num" }, e.version),
                h("td", {}, e.fingerprint.codec),
                h("td", { class: "num" }, e.max_abs_error === null ? "–" : fmt.num(e.max_abs_error)),
              ),
            ),
          ),
        ),
    h(
      "div",
      { class: "pager" },
      pastEnd
        ? h("a", { href: pageLink(0), class: "button", "data-testid": "first-page" }, "First page")
        : offset > 0
          ? h("a", { href: pageLink(Math.max(0, offset - PAGE)), class: "button" }, "← Previous")
          : null,
      nextOffset !== null ? h("a", { href: pageLink(nextOffset), class: "button", "data-testid": "next-page" }, "Next →") : null,
    ),
  );
}

/** Thumbnails of the neighbours, redrawn for the view the main viewer shows. */
function neighbours(ns: string, base: EntryRef, results: { key: string; version: number; score: number }[]) {
  const cells = results.map((r) => {
    const c = h("canvas", { class: "thumb", "aria-hidden": "true" });
    return {
      r,
      c,
      el: h(
        "li",
        { "data-testid": "neighbour" },
        h("a", { href: entryLink(ns, r.key) }, c, h("span", {}, r.key)),
        h("span", { class: "muted small" }, `score ${fmt.num(r.score, 5)}`),
      ),
    };
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const signal = pageSignal();
  signal.addEventListener("abort", () => clearTimeout(timer), { once: true });
  const draw = (v: View) => {
    clearTimeout(timer);
    // After the slider rests, so the main slice keeps the connection to itself while it moves.
    timer = setTimeout(() => {
      if (signal.aborted) return;
      for (const { r, c } of cells) {
        void fetchPlane({ ...base, key: r.key, version: r.version }, v).then(
          (p) => drawPlane(c, p),
          () => undefined,
        );
      }
    }, 150);
  };
  return { list: h("ol", { class: "neighbours" }, ...cells.map((x) => x.el)), draw };
}

/** An entry: figures, metadata, fingerprint, versions, slice viewer and neighbours. */
/** The whole version served (floating data in float32 for bfloat16) and saved as KEY.npy. */
async function downloadNpy(ns: string, key: string, e: EntryInfo): Promise<void> {
  const ans = await api<{ bytes: ArrayBuffer; headers: Headers }>("/v1/serve", {
    body: { namespace: ns, key, version: e.version, ...(e.dtype === "bfloat16" ? { dtype: "float32" } : {}) },
    binary: true,
  });
  const dtype = ans.headers.get("x-svc-dtype") ?? e.dtype;
  const shape = (ans.headers.get("x-svc-shape") ?? "").split(",").filter(Boolean).map(Number);
  const url = URL.createObjectURL(npyBlob(dtype, shape, ans.bytes));
  const a = h("a", { href: url, download: `${key.replaceAll("/", "_")}-v${e.version}.npy` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

export async function entryPage(main: HTMLElement, ns: string, key: string, params: URLSearchParams): Promise<void> {
  const v = params.get("v");
  const e = await api<EntryInfo>(`/v1/get/${enc(ns)}/${encKey(key)}${v ? `?version=${enc(v)}` : ""}`);
  const versionSelect = h(
    "select",
    {
      "data-testid": "version",
      "aria-label": "Version",
      onchange: (ev: Event) => (location.hash = entryLink(ns, key, Number((ev.target as HTMLSelectElement).value))),
    },
    ...[...e.versions].reverse().map((n) => {
      const o = h("option", { value: n }, `version ${n}${n === e.latest_version ? " (latest)" : ""}`);
      o.selected = n === e.version;
      return o;
    }),
  );
  const facts: [string, string][] = [
    ["dtype", e.dtype],
    ["shape", fmt.shape(e.shape)],
    ["verdict", e.verdict],
    ["compression ratio", fmt.num(e.compression_ratio)],
    ["relative error", fmt.num(e.relative_error)],
    ["max abs error", e.max_abs_error === null ? "not measured" : fmt.num(e.max_abs_error)],
    ["codec", e.fingerprint.codec],
    ["bytes in", fmt.bytes(e.bytes_in)],
    ["bytes stored", fmt.bytes(e.bytes_stored)],
    ["created", e.created_at],
  ];
  const fp = e.fingerprint;
  const fpFacts: [string, string][] = [
    ["sha256", fp.sha256],
    ["codec", fp.codec],
    ["norm", fmt.num(fp.norm, 6)],
    ...(fp.tt
      ? ([
          ["TT modes", fp.tt.modes.join(", ")],
          ["TT ranks", fp.tt.ranks.join(", ")],
        ] as [string, string][])
      : []),
  ];
  const dl = (pairs: [string, string][], id?: string) =>
    h("dl", { class: "facts", ...(id ? { "data-testid": id } : {}) }, ...pairs.flatMap(([k, val]) => [h("dt", {}, k), h("dd", {}, val)]));
  const viewerHost = h("div");
  const nbHost = h("div");
  clear(
    main,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/" }, "Namespaces"), " / ", h("a", { href: nsLink(ns) }, ns), " / ", key),
    h("h1", {}, key),
    h(
      "div",
      { class: "row" },
      versionSelect,
      h("span", { class: "muted" }, `${e.versions.length} version${e.versions.length === 1 ? "" : "s"} kept`),
      h("button", { type: "button", "data-testid": "download-npy", onclick: () => void guarded(() => downloadNpy(ns, key, e)) }, "Download .npy"),
    ),
    h(
      "div",
      { class: "grid" },
      h(
        "section",
        { "aria-labelledby": "facts-h" },
        h("h2", { id: "facts-h" }, "Entry"),
        dl(facts, "facts"),
        h("h2", {}, "Fingerprint"),
        dl(fpFacts, "fingerprint"),
        h("h2", {}, "Metadata"),
        h("pre", { class: "json", "data-testid": "metadata" }, JSON.stringify(e.metadata, null, 2)),
      ),
      h("section", { "aria-labelledby": "view-h" }, h("h2", { id: "view-h" }, "Values"), viewerHost, nbHost),
    ),
  );
  const shape = e.shape ?? [];
  if (!viewable({ dtype: e.dtype, shape: e.shape })) {
    clear(viewerHost, h("p", { class: "muted" }, e.dtype === "bytes" ? "Byte payloads have no values to show." : "This entry has no dimensions to show."));
    return;
  }
  const ref: EntryRef = { namespace: ns, key, version: e.version, dtype: e.dtype, shape };
  if (shape.length === 1) {
    const n = Math.min(shape[0]!, 100_000);
    const ans = await api<{ bytes: ArrayBuffer; headers: Headers }>("/v1/serve", {
      body: { namespace: ns, key, version: e.version, slice: [[0, n]], ...(e.dtype.startsWith("float") || e.dtype === "bfloat16" ? { dtype: "float32" } : {}) },
      binary: true,
    });
    clear(
      viewerHost,
      lineChart(decode(ans.bytes, ans.headers.get("x-svc-dtype") ?? e.dtype)),
      n < shape[0]! ? h("p", { class: "muted small" }, `The first ${n} of ${shape[0]} values.`) : null,
    );
    return;
  }
  const viewer = sliceViewer(ref, showError);
  clear(viewerHost, viewer.element);
  // Neighbours: the latest versions of entries of the same shape, by cosine similarity.
  await guarded(async () => {
    const top = await api<{ results: { key: string; version: number; score: number }[]; scanned: number }>("/v1/query/topk", {
      body: { namespace: ns, key, version: e.version, k: 6, metric: "cosine" },
    });
    if (top.results.length === 0) {
      clear(nbHost, h("h2", {}, "Nearest entries"), h("p", { class: "muted" }, "No other entry of this shape in the namespace."));
      return;
    }
    const nb = neighbours(ns, ref, top.results);
    clear(nbHost, h("h2", {}, "Nearest entries (cosine)"), nb.list);
    viewer.onView(nb.draw);
    nb.draw(viewer.view());
  });
}
