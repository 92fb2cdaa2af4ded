// The perceptual colour map of the slice viewer: viridis, as a 256-entry lookup table built from
// d3-scale-chromatic's ramp (matplotlib's data). Pure functions, shared with the browser tests.
import { interpolateViridis } from "d3-scale-chromatic";

/** 256 RGB triples, index 0 for the lowest value. */
export const VIRIDIS: Uint8Array = (() => {
  const lut = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const hex = interpolateViridis(i / 255); // "#rrggbb"
    lut[i * 3] = parseInt(hex.slice(1, 3), 16);
    lut[i * 3 + 1] = parseInt(hex.slice(3, 5), 16);
    lut[i * 3 + 2] = parseInt(hex.slice(5, 7), 16);
  }
  return lut;
})();

/** The table index of `v` on the scale [lo, hi] (a flat scale maps everything to the middle). */
export function colorIndex(v: number, lo: number, hi: number): number {
  if (!(hi > lo)) return 128;
  const t = (v - lo) / (hi - lo);
  return t <= 0 ? 0 : t >= 1 ? 255 : Math.round(t * 255);
}

/** Finite minimum and maximum of the values. */
export function range(values: ArrayLike<number>): { lo: number; hi: number } {
  let lo = Infinity,
    hi = -Infinity;
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return Number.isFinite(lo) ? { lo, hi } : { lo: 0, hi: 0 };
}

/**
 * Paints a rows×cols image of `values` (row-major, value of row r and column c at
 * r*rowStride + c*colStride) into RGBA `out`.
 */
export function paint(
  values: ArrayLike<number>,
  rows: number,
  cols: number,
  rowStride: number,
  colStride: number,
  lo: number,
  hi: number,
  out: Uint8ClampedArray,
): void {
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const k = colorIndex(values[r * rowStride + c * colStride]!, lo, hi) * 3;
      const p = (r * cols + c) * 4;
      out[p] = VIRIDIS[k]!;
      out[p + 1] = VIRIDIS[k + 1]!;
      out[p + 2] = VIRIDIS[k + 2]!;
      out[p + 3] = 255;
    }
  }
}
