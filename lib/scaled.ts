// Numbers kept as m · 2^e: inner products, norms and distances of data near float64's limits,
// whose value (or the sums on the way to it) lies outside float64's range. The addon returns
// its inner products in this form (native/tt.h Scaled: e is 0 and m the value wherever the
// value is a normal float64 between 2^-1000 and 2^1000), so ordinary data pay nothing for it.
import { ValidationError } from "./errors.js";

/** The value m · 2^e; m is NaN where an input held NaN or infinities. */
export interface Scaled {
  m: number;
  e: number;
}

export const ZERO: Scaled = { m: 0, e: 0 };

/** x · 2^e for any integer e, in steps so that 2^e itself need not be a float64. */
export function ldexp(x: number, e: number): number {
  let v = x;
  let k = e;
  while (k > 1000 && Number.isFinite(v) && v !== 0) {
    v *= 2 ** 1000;
    k -= 1000;
  }
  while (k < -1000 && v !== 0) {
    v *= 2 ** -1000;
    k += 1000;
  }
  return v * 2 ** k;
}

/** The exponent p with 2^p ≤ |x| < 2^(p+1) (x finite, not 0), exact for subnormals too. */
export function ilogb(x: number): number {
  const a = Math.abs(x);
  let p = Math.floor(Math.log2(a));
  // log2 rounds near powers of two
  if (2 ** p > a) p--;
  else if (p < 1023 && 2 ** (p + 1) <= a) p++;
  return p;
}

/** s with |m| in [1, 2) (or m 0 / not finite). */
export function normalise(s: Scaled): Scaled {
  if (s.m === 0 || !Number.isFinite(s.m)) return { m: s.m, e: 0 };
  const p = ilogb(s.m);
  return { m: ldexp(s.m, -p), e: s.e + p };
}

/** A plain number as Scaled. */
export const of = (x: number): Scaled => normalise({ m: x, e: 0 });

/** The value of s as a float64: ±Infinity above float64's range, 0 below it. */
export const value = (s: Scaled): number => ldexp(s.m, s.e);

/** Whether s is a finite float64 (not above float64's largest value). */
export const fits = (s: Scaled): boolean => Number.isFinite(value(s));

/** √s. */
export function sqrt(s: Scaled): Scaled {
  const n = normalise(s);
  if (n.m <= 0 || !Number.isFinite(n.m)) return { m: Math.sqrt(n.m), e: 0 };
  const odd = n.e & 1;
  return { m: Math.sqrt(odd ? 2 * n.m : n.m), e: (n.e - odd) / 2 };
}

/** Scaled results of the addon, [m_0 .. m_{n-1}, e_0 .. e_{n-1}] (native/addon.cc). */
export function unpack(r: Float64Array): Scaled[] {
  const n = r.length / 2;
  const out = new Array<Scaled>(n);
  for (let i = 0; i < n; i++) out[i] = { m: r[i]!, e: r[n + i]! };
  return out;
}

/** a < b, a > b or equal as -1, 1, 0 (neither NaN). */
export function compare(a: Scaled, b: Scaled): number {
  const x = normalise(a);
  const y = normalise(b);
  if (x.m === 0 || y.m === 0 || Math.sign(x.m) !== Math.sign(y.m)) return Math.sign(x.m - y.m);
  if (x.e !== y.e) return Math.sign(x.m) * Math.sign(x.e - y.e);
  return Math.sign(x.m - y.m);
}

/**
 * The Frobenius norm of x, from the sum of squares of x_i scaled by the power of two of the
 * largest magnitude (as LAPACK's dnrm2 scales): no square overflows or underflows to a loss of
 * digits, and the result is kept scaled.
 */
export function denseNormScaled(x: ArrayLike<number>): Scaled {
  let max = 0;
  for (let i = 0; i < x.length; i++) {
    const a = Math.abs(x[i]!);
    if (a > max) max = a;
  }
  if (max === 0 || !Number.isFinite(max)) return { m: max, e: 0 };
  // dividing by a power of two is exact and never overflows, unlike 1 / a subnormal max
  const p = ilogb(max);
  const f1 = 2 ** -Math.trunc(p / 2);
  const f2 = 2 ** (Math.trunc(p / 2) - p);
  let s = 0;
  for (let i = 0; i < x.length; i++) {
    const v = x[i]! * f1 * f2;
    s += v * v;
  }
  return normalise({ m: Math.sqrt(s), e: p });
}

/**
 * A cosine within [-1, 1]: the quotient of a dot product and two norms, each rounded, can pass
 * 1 by a few ulps (an entry against itself gave 1.0000000000000024); the true value cannot.
 */
export const clampCosine = (c: number): number => (c > 1 ? 1 : c < -1 ? -1 : c);

/** cos = ⟨a,b⟩ / (‖a‖ ‖b‖) from scaled parts, within [-1, 1]: 0 where a norm is 0; always a float64. */
export function cosine(dot: Scaled, na: Scaled, nb: Scaled): number {
  const x = normalise(na);
  const y = normalise(nb);
  if (x.m === 0 || y.m === 0) return 0;
  const d = normalise(dot);
  return clampCosine(ldexp(d.m / (x.m * y.m), d.e - x.e - y.e));
}

/**
 * √(‖a‖² + ‖b‖² − 2⟨a,b⟩) with everything scaled by the larger norm's power of two, and
 * whether that lost more than three digits (near-equal tensors: the caller then measures the
 * difference itself).
 */
export function l2(dot: Scaled, na: Scaled, nb: Scaled, cancel: number): { distance: Scaled; cancelled: boolean } {
  const x = normalise(na);
  const y = normalise(nb);
  const p = Math.max(x.m === 0 ? -Infinity : x.e, y.m === 0 ? -Infinity : y.e);
  if (p === -Infinity) return { distance: ZERO, cancelled: false };
  const a = ldexp(x.m, x.e - p);
  const b = ldexp(y.m, y.e - p);
  const d = ldexp(dot.m, dot.e - 2 * p);
  const sum = a * a + b * b;
  const q = sum - 2 * d;
  return { distance: normalise({ m: Math.sqrt(Math.max(0, q)), e: p }), cancelled: q < cancel * sum };
}

/**
 * A scaled result as a float64 for the caller, or a ValidationError saying that the true value
 * lies beyond float64's range (`what` names it: "the inner product of a and b").
 */
export function toNumber(s: Scaled, what: string, field: string): number {
  if (Number.isNaN(s.m)) throw new ValidationError(`${field} must contain only finite numbers.`, field);
  const v = value(s);
  if (!Number.isFinite(v)) {
    throw new ValidationError(`${what} is about ${describe(s)}, beyond float64's largest value (1.8e308), so it cannot be given as a number.`, field);
  }
  return v;
}

/** A scaled value in decimal, e.g. "4.5e+309". */
export function describe(s: Scaled): string {
  const n = normalise(s);
  if (n.m === 0 || !Number.isFinite(n.m)) return String(n.m);
  const l10 = Math.log10(Math.abs(n.m)) + n.e * Math.log10(2);
  const exp = Math.floor(l10);
  const mant = 10 ** (l10 - exp);
  return `${n.m < 0 ? "-" : ""}${mant.toFixed(1)}e${exp >= 0 ? "+" : ""}${exp}`;
}
