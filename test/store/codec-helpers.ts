// What the codec tests of the store share: seeded noise, the errors of a served tensor measured
// as the store reports them, and the served values as float64.
import { halfToFloat } from "../../lib/store/codec.js";
import type { ServeArray } from "../../lib/store/types.js";
import { gaussian } from "../tt/helpers.js";

export const noise = (n: number, seed: number, f64 = false): Float32Array | Float64Array => {
  const g = gaussian(seed);
  return f64 ? Float64Array.from({ length: n }, () => g()) : Float32Array.from({ length: n }, () => g());
};
export const f64 = (a: ArrayLike<number>) => Float64Array.from(a);
/** The measured errors of `served` against `x`: relative Frobenius (float64, scaled) and largest element. */
export function errors(x: ArrayLike<number>, served: ArrayLike<number>): { rel: number; abs: number } {
  let s = 0,
    abs = 0;
  for (let i = 0; i < x.length; i++) {
    s = Math.max(s, Math.abs(x[i]!));
    abs = Math.max(abs, Math.abs(x[i]! - served[i]!));
  }
  let num = 0,
    den = 0;
  for (let i = 0; i < x.length; i++) {
    num += ((x[i]! - served[i]!) / s) ** 2;
    den += (x[i]! / s) ** 2;
  }
  return { rel: den === 0 ? 0 : Math.sqrt(num / den), abs };
}
export const close = (x: number, y: number, rel = 1e-5, abs = 1e-12) => Math.abs(x - y) <= rel * Math.max(Math.abs(x), Math.abs(y)) + abs;
export const values = (d: ServeArray, dtype: string): Float64Array =>
  dtype === "float16" ? Float64Array.from(d as Uint16Array, halfToFloat) : f64(d as Float32Array);
