// Progress of a bulk job on standard error: on a terminal one line redrawn in place with \r
// (count/total, bytes, MB/s, ETA), at most every `minRedrawMs`; elsewhere a plain line per
// finished item, so that logs of CI jobs stay readable.
import { fmtBytes, fmtDuration } from "./common.js";

export interface ProgressOptions {
  write(text: string): void;
  isTTY: boolean;
  totalItems: number;
  totalBytes: number;
  /** Clock in ms (injectable for tests). */
  now?: () => number;
  /** Minimum interval between two redraws on a terminal (default 100 ms). */
  minRedrawMs?: number;
  /** Terminal width; the line is cut to it (default 100). */
  columns?: number;
  /** What an item is called in the status line (default "files"). */
  unit?: string;
}

export class Progress {
  readonly #o: Required<Omit<ProgressOptions, "columns" | "unit">> & { columns: number; unit: string };
  readonly #start: number;
  #items = 0;
  #bytes = 0;
  #failed = 0;
  #lastDraw = -Infinity;
  #drawn = false;
  /** One transfer measured in bytes (moved): the line names the unit instead of counting items. */
  #single = false;

  constructor(o: ProgressOptions) {
    this.#o = { now: () => performance.now(), minRedrawMs: 100, columns: 100, unit: "files", ...o };
    this.#start = this.#o.now();
  }

  get items(): number {
    return this.#items;
  }
  get bytes(): number {
    return this.#bytes;
  }

  /** The status line: "12/40 files  48.0 MB/160 MB  21.3 MB/s  ETA 5s". */
  line(): string {
    const el = (this.#o.now() - this.#start) / 1000;
    const rate = el > 0 ? this.#bytes / el : 0;
    const left = this.#o.totalBytes - this.#bytes;
    const eta = this.#items >= this.#o.totalItems ? 0 : rate > 0 ? left / rate : Infinity;
    const pct = this.#o.totalBytes > 0 ? Math.floor((100 * this.#bytes) / this.#o.totalBytes) : 100;
    const failed = this.#failed ? `  ${this.#failed} failed` : "";
    const what = this.#single ? this.#o.unit : `${this.#items}/${this.#o.totalItems} ${this.#o.unit}`;
    return `${what}  ${fmtBytes(this.#bytes)}/${fmtBytes(this.#o.totalBytes)} (${pct}%)  ${(rate / 1e6).toFixed(1)} MB/s  ETA ${fmtDuration(eta)}${failed}`;
  }

  /** Records one finished item; `note` is the plain-mode line's tail (verdict or failure reason). */
  done(name: string, bytes: number, ok: boolean, note: string): void {
    this.#items++;
    this.#bytes += bytes;
    if (!ok) this.#failed++;
    if (this.#o.isTTY) {
      const t = this.#o.now();
      if (t - this.#lastDraw >= this.#o.minRedrawMs || this.#items === this.#o.totalItems) {
        this.#lastDraw = t;
        this.#drawn = true;
        this.#o.write(`\r${this.line().slice(0, this.#o.columns - 1)}\x1b[K`);
      }
    } else {
      this.#o.write(`[${this.#items}/${this.#o.totalItems}] ${name} ${fmtBytes(bytes)} ${ok ? "ok" : "FAILED"}: ${note}\n`);
    }
  }

  /** Sets the bytes moved of the item under way (one put or serve) and redraws on a terminal. */
  moved(bytes: number): void {
    this.#bytes = bytes;
    this.#single = true;
    if (!this.#o.isTTY) return;
    const t = this.#o.now();
    if (t - this.#lastDraw >= this.#o.minRedrawMs || bytes >= this.#o.totalBytes) {
      this.#lastDraw = t;
      this.#drawn = true;
      this.#o.write(`\r${this.line().slice(0, this.#o.columns - 1)}\x1b[K`);
    }
  }

  /** Ends the bar (a newline on a terminal so the summary starts on a fresh line). */
  finish(): void {
    if (this.#o.isTTY && this.#drawn) this.#o.write("\n");
  }
}
