// Inputs and oracles for the pred codec tests: seeded fields and plain-TypeScript error measures.
import { gaussian, prod, rng } from "../tt/helpers.js";

export { gaussian, prod, rng };

/** A smooth field (sum of sines per dimension) plus seeded noise of relative size `noise`. */
export function field(shape: number[], f64: boolean, seed = 1, noise = 0.01): Float32Array | Float64Array {
  const n = prod(shape);
  const a = f64 ? new Float64Array(n) : new Float32Array(n);
  const g = gaussian(seed);
  const freq = shape.map((_, k) => 0.03 + 0.05 * ((seed * 7 + k * 3) % 5));
  const idx = new Array<number>(shape.length).fill(0);
  for (let i = 0; i < n; i++) {
    let v = 0;
    for (let k = 0; k < shape.length; k++) v += Math.sin(idx[k]! * freq[k]! + k);
    a[i] = v + noise * g();
    for (let k = shape.length - 1; k >= 0; k--) {
      if (++idx[k]! < shape[k]!) break;
      idx[k] = 0;
    }
  }
  return a;
}

/** max |x - y| and ‖x - y‖ / ‖x‖ in float64. */
export function errors(x: ArrayLike<number>, y: ArrayLike<number>): { maxAbs: number; rel: number } {
  let m = 0,
    e = 0,
    s = 0;
  for (let i = 0; i < x.length; i++) {
    const d = x[i]! - y[i]!;
    m = Math.max(m, Math.abs(d));
    e += d * d;
    s += x[i]! * x[i]!;
  }
  return { maxAbs: m, rel: s > 0 ? Math.sqrt(e / s) : e > 0 ? Infinity : 0 };
}

/** The elements of a [start, stop) box of a C-order array. */
export function sliceOf(full: ArrayLike<number>, shape: number[], slice: [number, number][]): number[] {
  const out: number[] = [];
  const strides = shape.map((_, j) => prod(shape.slice(j + 1)));
  const rec = (j: number, off: number) => {
    if (j === shape.length) {
      out.push(full[off]!);
      return;
    }
    for (let i = slice[j]![0]; i < slice[j]![1]; i++) rec(j + 1, off + i * strides[j]!);
  };
  rec(0, 0);
  return out;
}

/** Whether two arrays hold the same bit patterns (NaN-safe, -0 distinct). */
export function bitEqual(a: Float32Array | Float64Array, b: Float32Array | Float64Array): boolean {
  if (a.constructor !== b.constructor || a.length !== b.length) return false;
  const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}
