// Console figures, measured in Debian's Chromium (playwright-core) against a real gateway and
// engine on loopback. Prints the machine line first, then one JSON object per figure:
//   slice      a new 256×256 slice of a 256³ float32 entry on screen after a slider move: from
//              the input event to the next frame after the pixels are drawn (p50/p95/max ms over
//              SVC_BENCH_MOVES moves, default 40), with the number of pixels that differ from the
//              colour map of the served slice (checked on every fifth move; 0 is the only valid figure)
//   assets     the console's files, total bytes raw and gzip-compressed
import { readdirSync, readFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import * as tt from "../lib/tt.js";
import { colorIndex, range, VIRIDIS } from "../web/console/src/colormap.js";
import { adminCall, chromiumMissing, launchBrowser, putField, servedSlice, startStack } from "../test/console/browser.js";

// The callbacks given to page.evaluate run in the browser; this program is type-checked without
// the DOM library (its fetch types clash with Node's), so the little of the page it reads is declared here.
interface PageCanvas {
  dataset: { view?: string };
  width: number;
  height: number;
  getContext(kind: "2d"): { getImageData(x: number, y: number, w: number, h: number): { data: ArrayLike<number> } } | null;
}
declare const document: { querySelector(selector: string): unknown };
type HTMLCanvasElement = PageCanvas;

const MOVES = Number(process.env.SVC_BENCH_MOVES ?? 40);
const N = 256;
const b = tt.backend();
console.log(
  JSON.stringify({
    bench: "console",
    isa: b.isa,
    threads: b.threads,
    node: process.version,
    cpus: cpus().length,
    cpu: cpus()[0]?.model ?? "unknown",
    mem_gib: Math.round(totalmem() / 2 ** 30),
    browser: "chromium (headless)",
  }),
);
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify(o));
const root = new URL("..", import.meta.url).pathname;

let assetsRaw = 0,
  assetsGz = 0;
for (const f of readdirSync(join(root, "dist", "console"))) {
  const buf = readFileSync(join(root, "dist", "console", f));
  assetsRaw += buf.length;
  assetsGz += gzipSync(buf, { level: 9 }).length;
}
emit({ figure: "assets", raw_bytes: assetsRaw, gzip_bytes: assetsGz, target_gzip_bytes: 300_000, ok: assetsGz < 300_000 });

const missing = chromiumMissing();
if (missing) {
  emit({ figure: "slice", skipped: missing });
  process.exit(0);
}

/** A smooth 256³ field whose planes along axis 2 all differ. */
function field(): Float32Array {
  const out = new Float32Array(N * N * N);
  let i = 0;
  for (let x = 0; x < N; x++)
    for (let y = 0; y < N; y++)
      for (let z = 0; z < N; z++) {
        out[i++] = Math.sin(x / 19 + z / 31) * Math.cos(y / 23 - z / 41) + 0.3 * Math.sin((x + y) / 37 + z / 17);
      }
  return out;
}

const stack = await startStack();
const browser = await launchBrowser();
try {
  const key = (await adminCall(stack.url, "/gate/onboard/create", { tenant_id: "bench", namespaces: ["fields"] })).api_key as string;
  const put = await putField(stack.url, key, "fields", "cube", [N, N, N], field(), { kind: "bench" });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await page.goto(`${stack.url}/console/`);
  await page.getByTestId("key").fill(key);
  await page.getByTestId("key").press("Enter");
  await page.getByTestId("namespaces").waitFor();
  await page.goto(`${stack.url}/console/#/entry/fields/cube`);
  await page.waitForFunction(() => !!(document.querySelector("[data-testid=slice-canvas]") as HTMLCanvasElement | null)?.dataset.view, undefined, {
    timeout: 120_000,
  });
  const times: number[] = [];
  let mismatched = 0,
    checked = 0;
  for (let m = 0; m < MOVES; m++) {
    const idx = (m * 37 + 5) % N;
    // Move the slider as a user does (an input event), then wait for that plane's frame.
    // (A string, so the bundler's helpers for named functions do not travel into the page.)
    const ms = (await page.evaluate(`new Promise((resolve) => {
      const c = document.querySelector("[data-testid=slice-canvas]");
      const s = document.querySelector("[data-testid=slider-2]");
      c.addEventListener("slice-drawn", function on(ev) {
        if (ev.detail.view.index[2] !== ${idx}) return;
        c.removeEventListener("slice-drawn", on);
        resolve(ev.detail.ms);
      });
      s.value = "${idx}";
      s.dispatchEvent(new Event("input", { bubbles: true }));
    })`)) as number;
    times.push(ms);
    if (m % 5 === 0) {
      const pix = await page.evaluate(() => {
        const c = document.querySelector("[data-testid=slice-canvas]") as HTMLCanvasElement;
        return Array.from(c.getContext("2d")!.getImageData(0, 0, c.width, c.height).data);
      });
      const v = await servedSlice(stack.url, key, {
        namespace: "fields",
        key: "cube",
        slice: [
          [0, N],
          [0, N],
          [idx, idx + 1],
        ],
      });
      const { lo, hi } = range(v);
      for (let p = 0; p < N * N; p++) {
        const k = colorIndex(v[p]!, lo, hi) * 3;
        if (pix[p * 4] !== VIRIDIS[k] || pix[p * 4 + 1] !== VIRIDIS[k + 1] || pix[p * 4 + 2] !== VIRIDIS[k + 2]) mismatched++;
      }
      checked += N * N;
    }
  }
  const sorted = [...times].sort((a, c) => a - c);
  const q = (f: number) => Math.round(sorted[Math.min(sorted.length - 1, Math.floor(f * sorted.length))]! * 10) / 10;
  emit({
    figure: "slice",
    entry: `${N}x${N}x${N} float32`,
    relative_error: put.relative_error,
    compression_ratio: put.compression_ratio,
    moves: MOVES,
    p50_ms: q(0.5),
    p95_ms: q(0.95),
    max_ms: Math.round(sorted.at(-1)! * 10) / 10,
    target_ms: 150,
    pixels_checked: checked,
    pixel_mismatches: mismatched,
    ok: mismatched === 0 && q(0.5) <= 150,
  });
} finally {
  await browser.close();
  await stack.close();
}
