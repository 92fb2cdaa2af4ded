// Charts drawn with uPlot (canvas, no network, works under a strict CSP): compute units by
// operation as bars, and 1-D entries as a line.
import uPlot from "uplot";
import { h } from "./core.js";

const ACCENT = "#3b6fb6";

function sized(el: HTMLElement): number {
  return Math.max(280, Math.min(720, (el.parentElement?.clientWidth ?? 600) - 8));
}

/** Compute units by operation as a bar chart (operations along x). */
export function usageBars(breakdown: Record<string, number>): HTMLElement {
  const ops = Object.keys(breakdown);
  const wrap = h("figure", { class: "chart", "data-testid": "usage-chart" });
  const caption = h("figcaption", { class: "muted small" }, ops.map((o) => `${o}: ${breakdown[o]}`).join(" · "));
  const host = h("div");
  wrap.append(host, caption);
  requestAnimationFrame(() => {
    const xs = ops.map((_, i) => i);
    const opts: uPlot.Options = {
      width: sized(wrap),
      height: 220,
      legend: { show: false },
      scales: { x: { time: false, range: [-0.5, ops.length - 0.5] }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [
        { values: (_u, splits) => splits.map((s) => (Number.isInteger(s) ? (ops[s] ?? "") : "")), space: 20, rotate: -30, size: 70 } as uPlot.Axis,
        { label: "CUs" },
      ],
      series: [{}, { label: "CUs", fill: ACCENT, stroke: ACCENT, paths: uPlot.paths.bars!({ size: [0.6, 60] }), points: { show: false } }],
    };
    new uPlot(opts, [xs, ops.map((o) => breakdown[o] ?? 0)], host);
  });
  return wrap;
}

/** A 1-D entry's values as a line. */
export function lineChart(values: ArrayLike<number>): HTMLElement {
  const wrap = h("figure", { class: "chart", "data-testid": "line-chart" });
  const host = h("div");
  wrap.append(host);
  requestAnimationFrame(() => {
    const xs = Array.from({ length: values.length }, (_, i) => i);
    new uPlot(
      {
        width: sized(wrap),
        height: 260,
        legend: { show: false },
        scales: { x: { time: false } },
        series: [{}, { stroke: ACCENT, width: 1, points: { show: false } }],
      },
      [xs, Array.from(values)],
      host,
    );
  });
  return wrap;
}
