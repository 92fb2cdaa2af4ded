// The slice viewer: two axes of an entry shown as an image, a slider for every other axis, the
// viridis scale with its range and the value under the cursor. Each slice is fetched with serve
// and a `slice` as raw bytes, so only the shown plane travels; while one fetch is in flight,
// further slider moves coalesce into one next fetch of the latest position.
import { api, clear, fmt, h, type BinaryAnswer } from "./core.js";
import { paint, range, VIRIDIS } from "./colormap.js";

/** The viewer shows at most this many elements along each axis (a window from index 0). */
export const MAX_AXIS = 1024;

export interface EntryRef {
  namespace: string;
  key: string;
  version: number;
  dtype: string;
  shape: number[];
}

export interface View {
  rowAxis: number;
  colAxis: number;
  /** One index per axis; those of the shown axes are ignored. */
  index: number[];
}

const FLOATING = new Set(["float32", "float64", "float16", "bfloat16"]);
export const viewable = (e: { dtype: string; shape: number[] | null }): boolean =>
  e.dtype !== "bytes" && !!e.shape && e.shape.length >= 1 && e.shape.every((n) => n > 0);

/** The serve request for a view of an entry. */
export function sliceRequest(e: EntryRef, v: View): Record<string, unknown> {
  const slice = e.shape.map((n, ax) => (ax === v.rowAxis || ax === v.colAxis ? [0, Math.min(n, MAX_AXIS)] : [v.index[ax]!, v.index[ax]! + 1]));
  return {
    namespace: e.namespace,
    key: e.key,
    version: e.version,
    slice,
    ...(FLOATING.has(e.dtype) ? { dtype: "float32" } : {}),
  };
}

/** Decodes raw little-endian bytes of a dtype to numbers. */
export function decode(bytes: ArrayBuffer, dtype: string): ArrayLike<number> {
  switch (dtype) {
    case "float32":
      return new Float32Array(bytes);
    case "float64":
      return new Float64Array(bytes);
    case "int8":
      return new Int8Array(bytes);
    case "uint8":
    case "bool":
      return new Uint8Array(bytes);
    case "int16":
      return new Int16Array(bytes);
    case "uint16":
      return new Uint16Array(bytes);
    case "int32":
      return new Int32Array(bytes);
    case "uint32":
      return new Uint32Array(bytes);
    case "int64":
      return Float64Array.from(new BigInt64Array(bytes), Number);
    case "uint64":
      return Float64Array.from(new BigUint64Array(bytes), Number);
    default:
      throw new Error(`Values of dtype ${dtype} cannot be shown.`);
  }
}

/** Fetches the plane of a view: its values and the strides of its rows and columns. */
export async function fetchPlane(
  e: EntryRef,
  v: View,
): Promise<{ values: ArrayLike<number>; rows: number; cols: number; rowStride: number; colStride: number }> {
  const ans = await api<BinaryAnswer>("/v1/serve", { body: sliceRequest(e, v), binary: true });
  const values = decode(ans.bytes, ans.headers.get("x-svc-dtype") ?? e.dtype);
  const rows = Math.min(e.shape[v.rowAxis]!, MAX_AXIS);
  const cols = e.shape.length === 1 ? 1 : Math.min(e.shape[v.colAxis]!, MAX_AXIS);
  // The block is C-ordered with size 1 on the other axes: the later of the two axes is contiguous.
  const rowStride = v.rowAxis < v.colAxis ? cols : 1;
  const colStride = v.rowAxis < v.colAxis ? 1 : rows;
  if (values.length !== rows * cols) throw new Error(`The served slice has ${values.length} values, not ${rows * cols}.`);
  return { values, rows, cols, rowStride, colStride };
}

/** Draws a plane into a canvas at one pixel per element; returns the scale used. */
export function drawPlane(
  canvas: HTMLCanvasElement,
  p: Awaited<ReturnType<typeof fetchPlane>>,
  scale?: { lo: number; hi: number },
): { lo: number; hi: number } {
  const s = scale ?? range(p.values);
  canvas.width = p.cols;
  canvas.height = p.rows;
  const ctx = canvas.getContext("2d")!;
  const img = ctx.createImageData(p.cols, p.rows);
  paint(p.values, p.rows, p.cols, p.rowStride, p.colStride, s.lo, s.hi, img.data);
  ctx.putImageData(img, 0, 0);
  return s;
}

function colorbar(): HTMLCanvasElement {
  const c = h("canvas", { class: "colorbar", width: 256, height: 1, "aria-hidden": "true" });
  const ctx = c.getContext("2d")!;
  const img = ctx.createImageData(256, 1);
  for (let i = 0; i < 256; i++) {
    img.data[i * 4] = VIRIDIS[i * 3]!;
    img.data[i * 4 + 1] = VIRIDIS[i * 3 + 1]!;
    img.data[i * 4 + 2] = VIRIDIS[i * 3 + 2]!;
    img.data[i * 4 + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
  return c;
}

export interface Viewer {
  element: HTMLElement;
  /** Called after every slice drawn, with the view shown. */
  onView(fn: (v: View) => void): void;
  view(): View;
}

/** Builds the viewer for an entry of at least one dimension. */
export function sliceViewer(e: EntryRef, report: (err: unknown) => void): Viewer {
  const nd = e.shape.length;
  const v: View = { rowAxis: 0, colAxis: nd > 1 ? 1 : 0, index: e.shape.map((n) => Math.floor(n / 2)) };
  const canvas = h("canvas", { class: "slice", "data-testid": "slice-canvas", tabindex: "0", "aria-label": "Slice of the entry" });
  const readout = h("output", { class: "readout", "data-testid": "readout" }, "Move the pointer over the image to read values.");
  const lo = h("span", { "data-testid": "scale-lo" }),
    hi = h("span", { "data-testid": "scale-hi" });
  const note = h("p", { class: "muted small" });
  const sliders = h("div", { class: "sliders" });
  const listeners: ((v: View) => void)[] = [];
  let plane: Awaited<ReturnType<typeof fetchPlane>> | null = null;
  let inFlight = false,
    pending = false,
    requestedAt = 0;

  const axisSelect = (label: string, which: "rowAxis" | "colAxis") =>
    h(
      "label",
      {},
      label,
      " ",
      h(
        "select",
        {
          "data-testid": which === "rowAxis" ? "axis-rows" : "axis-cols",
          onchange: (ev: Event) => {
            const ax = Number((ev.target as HTMLSelectElement).value);
            const other = which === "rowAxis" ? "colAxis" : "rowAxis";
            if (v[other] === ax) v[other] = v[which];
            v[which] = ax;
            build();
            request();
          },
        },
        ...e.shape.map((n, ax) => {
          const o = h("option", { value: ax }, `axis ${ax} (${n})`);
          o.selected = v[which] === ax;
          return o;
        }),
      ),
    );

  const controls = h("div", { class: "row wrap" });
  function build(): void {
    if (nd > 1) clear(controls, axisSelect("Rows", "rowAxis"), axisSelect("Columns", "colAxis"));
    clear(sliders);
    e.shape.forEach((n, ax) => {
      if (ax === v.rowAxis || ax === v.colAxis) return;
      const val = h("output", {}, String(v.index[ax]));
      const input = h("input", {
        type: "range",
        min: 0,
        max: n - 1,
        step: 1,
        value: v.index[ax]!,
        "data-testid": `slider-${ax}`,
        "aria-label": `Index along axis ${ax}`,
        oninput: (ev: Event) => {
          v.index[ax] = Number((ev.target as HTMLInputElement).value);
          val.textContent = String(v.index[ax]);
          request();
        },
      });
      sliders.append(h("label", { class: "slider" }, `axis ${ax}`, input, val, h("span", { class: "muted" }, ` of ${n}`)));
    });
    const clipped = e.shape.filter((n, ax) => (ax === v.rowAxis || ax === v.colAxis) && n > MAX_AXIS).length > 0;
    note.textContent = clipped ? `Axes longer than ${MAX_AXIS} are shown from index 0 to ${MAX_AXIS - 1}.` : "";
  }

  async function request(): Promise<void> {
    requestedAt = performance.now();
    if (inFlight) {
      pending = true;
      return;
    }
    inFlight = true;
    canvas.setAttribute("aria-busy", "true");
    try {
      do {
        pending = false;
        const t0 = requestedAt;
        const shown: View = { rowAxis: v.rowAxis, colAxis: v.colAxis, index: [...v.index] };
        plane = await fetchPlane(e, shown);
        const s = drawPlane(canvas, plane);
        // Displayed with its longer side at 512 CSS pixels (the height follows the aspect ratio).
        canvas.style.width = `${Math.round((512 * plane.cols) / Math.max(plane.rows, plane.cols))}px`;
        lo.textContent = fmt.num(s.lo, 4);
        hi.textContent = fmt.num(s.hi, 4);
        // "On screen" is the next frame after the pixels are in the canvas: timed from the slider's move.
        requestAnimationFrame(() => {
          const ms = performance.now() - t0;
          canvas.dataset.drawMs = ms.toFixed(1);
          canvas.dataset.view = JSON.stringify(shown);
          canvas.dispatchEvent(new CustomEvent("slice-drawn", { detail: { ms, view: shown } }));
        });
        for (const fn of listeners) fn(shown);
      } while (pending);
    } catch (err) {
      report(err);
    } finally {
      inFlight = false;
      canvas.removeAttribute("aria-busy");
    }
  }

  canvas.addEventListener("mousemove", (ev) => {
    if (!plane) return;
    const r = canvas.getBoundingClientRect();
    const c = Math.floor(((ev.clientX - r.left) / r.width) * plane.cols);
    const row = Math.floor(((ev.clientY - r.top) / r.height) * plane.rows);
    if (c < 0 || row < 0 || c >= plane.cols || row >= plane.rows) return;
    const val = plane.values[row * plane.rowStride + c * plane.colStride]!;
    readout.textContent = nd > 1 ? `axis ${v.rowAxis} = ${row}, axis ${v.colAxis} = ${c}: ${fmt.num(val, 6)}` : `index ${row}: ${fmt.num(val, 6)}`;
  });

  build();
  void request();
  const element = h(
    "section",
    { class: "viewer", "aria-label": "Slice viewer" },
    controls,
    h("div", { class: "canvas-wrap" }, canvas),
    h("div", { class: "scale" }, lo, colorbar(), hi),
    readout,
    sliders,
    note,
  );
  return { element, onView: (fn) => void listeners.push(fn), view: () => ({ rowAxis: v.rowAxis, colAxis: v.colAxis, index: [...v.index] }) };
}
