// Sweep of the TT engine's error bound: 1,000 seeded cases (default), from small random tensors
// to 256 MB inputs (256^3 and 512x512x256 fields, 4096^2 matrices), five spectra, float32 and
// float64, plain, quantized and default modes, tolerances from 1e-2 down to each type's floor.
// For each case the error is measured here in float64 from tt.reconstruct; a case whose error
// exceeds its tolerance while no rank reached max_rank is a violation and is printed.
// Usage: node --import tsx bench/tt-sweep.ts [--cases N] [--seed S] [--large L] [--from I]
//   --large: how many of the cases are the 64-256 MB inputs (default 12); --from: start at case I
//   of the same seeded list (to resume a run).
// Prints one JSON line per violation, per capped case and per large case, a progress line on
// stderr per case, and a summary line at the end (also when stopped by SIGINT or SIGTERM).
import { cpus, loadavg } from "node:os";
import * as tt from "../lib/tt.js";
import { denseFromTT, prod, relErr, rng } from "../test/tt/helpers.js"; // the seeded generators the TT tests use

const args = process.argv.slice(2);
const arg = (name: string, dflt: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const CASES = arg("cases", 1000),
  SEED = arg("seed", 1),
  LARGE = Math.min(arg("large", 12), CASES),
  FROM = arg("from", 0);

type Spectrum = "exponential" | "power" | "flat" | "lowrank" | "noisefloor";
const SPECTRA: Spectrum[] = ["exponential", "power", "flat", "lowrank", "noisefloor"];

/** Dense tensor from a Gaussian TT with bond weights following the spectrum (+ noise floor). */
function fromTT(shape: number[], kind: Spectrum, R: number, floor: number, seed: number, f64: boolean): Float32Array | Float64Array {
  // one decay for every bond, drawn at the first
  let w: ((i: number) => number) | undefined;
  const x = denseFromTT(shape, R, seed, (_r, u) => (w ??= spectrum(kind, u)), kind === "noisefloor" ? floor : 0);
  return f64 ? x : Float32Array.from(x);
}

/** Bond weights of a spectrum, its decay drawn from u. */
function spectrum(kind: Spectrum, u: () => number): (i: number) => number {
  const a = 0.3 + 1.5 * u(),
    p = 1 + 2 * u();
  return (i) => (kind === "exponential" ? Math.exp(-a * i) : kind === "power" ? (i + 1) ** -p : kind === "lowrank" ? Math.exp(-0.3 * i) : 1);
}

/** Smooth 3-D field: `count` rotated anisotropic Gaussians (not separable). */
function gaussians(n0: number, n1: number, n2: number, count: number, seed: number): Float32Array {
  const u = rng(seed);
  const x = new Float32Array(n0 * n1 * n2);
  for (let b = 0; b < count; b++) {
    const s = 1 / (0.04 + 0.15 * u());
    const l = [s * (0.5 + u()), (u() - 0.5) * s, s * (0.5 + u()), (u() - 0.5) * s, (u() - 0.5) * s, s * (0.5 + u())];
    const c = [u(), u(), u()],
      amp = u() - 0.3;
    for (let i = 0; i < n0; i++) {
      const dx = i / n0 - c[0]!;
      for (let j = 0; j < n1; j++) {
        const dy = j / n1 - c[1]!;
        const y0 = l[0]! * dx,
          y1 = l[1]! * dx + l[2]! * dy,
          y2b = l[3]! * dx + l[4]! * dy;
        const q01 = y0 * y0 + y1 * y1;
        if (q01 > 80) continue;
        const base = (i * n1 + j) * n2;
        for (let k = 0; k < n2; k++) {
          const y2 = y2b + l[5]! * (k / n2 - c[2]!);
          const q = 0.5 * (q01 + y2 * y2);
          if (q < 40) x[base + k]! += amp * Math.exp(-q);
        }
      }
    }
  }
  return x;
}

/** Wave-like 3-D field: sums of products of sines with random frequencies (separable terms). */
function waves(n0: number, n1: number, n2: number, count: number, seed: number): Float32Array {
  const u = rng(seed);
  const x = new Float32Array(n0 * n1 * n2);
  const f = new Float64Array(n0),
    gg = new Float64Array(n1),
    h = new Float32Array(n2);
  for (let t = 0; t < count; t++) {
    const a = Math.exp(-t / 6),
      k0 = 1 + 8 * u(),
      k1 = 1 + 8 * u(),
      k2 = 1 + 8 * u(),
      p0 = 6 * u(),
      p1 = 6 * u(),
      p2 = 6 * u();
    for (let i = 0; i < n0; i++) f[i] = a * Math.sin((k0 * Math.PI * i) / n0 + p0);
    for (let j = 0; j < n1; j++) gg[j] = Math.sin((k1 * Math.PI * j) / n1 + p1);
    for (let k = 0; k < n2; k++) h[k] = Math.sin((k2 * Math.PI * k) / n2 + p2);
    for (let i = 0; i < n0; i++)
      for (let j = 0; j < n1; j++) {
        const s = f[i]! * gg[j]!,
          base = (i * n1 + j) * n2;
        for (let k = 0; k < n2; k++) x[base + k]! += s * h[k]!;
      }
  }
  return x;
}

/** n x n matrix of `count` separable bumps with weights exp(-q/8). */
function bumps(n: number, count: number, seed: number): Float32Array {
  const u = rng(seed);
  const x = new Float32Array(n * n);
  const f = new Float64Array(n),
    g = new Float32Array(n);
  for (let q = 0; q < count; q++) {
    const w = Math.exp(-q / 8),
      c1 = u(),
      c2 = u(),
      s1 = 0.02 + 0.1 * u(),
      s2 = 0.02 + 0.1 * u();
    for (let i = 0; i < n; i++) {
      f[i] = w * Math.exp(-(((i / n - c1) / s1) ** 2));
      g[i] = Math.exp(-(((i / n - c2) / s2) ** 2));
    }
    for (let i = 0; i < n; i++) {
      const s = f[i]!;
      if (Math.abs(s) < 1e-30) continue;
      const base = i * n;
      for (let j = 0; j < n; j++) x[base + j]! += s * g[j]!;
    }
  }
  return x;
}

interface Case {
  label: string;
  shape: number[];
  make: () => Float32Array | Float64Array;
  f64: boolean;
  tol: number;
  modes: "plain" | "quantized" | "default";
}

function buildCases(): Case[] {
  const u = rng(SEED * 7919);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(u() * xs.length)]!;
  const tolFor = (f64: boolean, lo = f64 ? tt.MIN_TOLERANCE_F64 : tt.MIN_TOLERANCE_F32) => {
    const l = Math.log10(lo);
    return u() < 0.15 ? lo : 10 ** (l + (-2 - l) * u());
  };
  const out: Case[] = [];
  // Large inputs: 256^3 and 512x512x256 fields, 4096^2 matrices (64-256 MB of float32).
  const large: Array<() => Case> = [
    () => ({
      label: "gaussians24 256^3",
      shape: [256, 256, 256],
      make: () => gaussians(256, 256, 256, 24, 1 + out.length),
      f64: false,
      tol: tolFor(false, 1e-5),
      modes: pick(["default", "plain"] as const),
    }),
    () => ({
      label: "waves 256^3",
      shape: [256, 256, 256],
      make: () => waves(256, 256, 256, 30, 2 + out.length),
      f64: false,
      tol: tolFor(false, 1e-5),
      modes: pick(["default", "plain"] as const),
    }),
    () => ({
      label: "bumps60 4096^2",
      shape: [4096, 4096],
      make: () => bumps(4096, 60, 3 + out.length),
      f64: false,
      tol: tolFor(false, 1e-5),
      modes: pick(["default", "plain"] as const),
    }),
    () => ({
      label: "gaussians12 512x512x256",
      shape: [512, 512, 256],
      make: () => gaussians(512, 512, 256, 12, 4 + out.length),
      f64: false,
      tol: tolFor(false, 1e-4),
      modes: "default",
    }),
  ];
  for (let i = 0; i < LARGE; i++) out.push(large[i % large.length]!());
  // Medium inputs (1-64 MB) on the randomized range finder's sizes, and small random tensors.
  const medium: number[][] = [
    [128, 128, 128],
    [2048, 2048],
    [1024, 4096],
    [256, 256, 128],
    [64, 64, 64, 64],
    [512, 512],
    [1024, 1024],
    [96, 96, 96, 8],
    [2048, 512],
    [16, 16, 16, 16, 16],
  ];
  while (out.length < CASES) {
    const mediumCase = u() < 0.08;
    const f64 = u() < 0.4;
    let shape: number[];
    if (mediumCase) shape = pick(medium);
    else {
      const d = 2 + Math.floor(u() * 5);
      const elems = 10 ** (2 + 3.5 * u());
      const logs = Array.from({ length: d }, () => 0.3 + u());
      const sum = logs.reduce((a, b) => a + b, 0);
      shape = logs.map((l) => Math.max(2, Math.round(Math.exp((Math.log(elems) * l) / sum))));
      if (u() < 0.4) shape[Math.floor(u() * d)] = pick([64, 96, 128, 256]);
      while (prod(shape) > 2e6) shape = shape.map((s) => Math.max(2, Math.floor(s * 0.8)));
    }
    const kind = pick(SPECTRA);
    const R = kind === "lowrank" ? 1 + Math.floor(u() * 5) : 4 + Math.floor(u() * (mediumCase ? 16 : 30));
    const floor = 10 ** (-2 - 6 * u());
    const seed = 100 + out.length;
    // float64 tolerances below 1e-7 take the QR + Jacobi route: on the medium sizes only down to 1e-9
    const lo = f64 && mediumCase ? 1e-9 : undefined;
    out.push({
      label: `${kind} R${R}`,
      shape,
      make: () => fromTT(shape, kind, R, floor, seed, f64),
      f64,
      tol: tolFor(f64, lo),
      modes: pick(["default", "plain", "quantized"] as const),
    });
  }
  return out;
}

const cases = buildCases();
console.log(
  JSON.stringify({
    sweep: "tt bound",
    cases: cases.length,
    seed: SEED,
    machine: { cpu: cpus()[0]?.model ?? "unknown", cores: cpus().length, loadavg_1m: +loadavg()[0]!.toFixed(2) },
    backend: tt.backend().isa,
  }),
);
let violations = 0,
  capped = 0,
  done = 0,
  last = -1;
let bytesTotal = 0,
  secondsTotal = 0;
const t00 = performance.now();
const summary = () =>
  console.log(
    JSON.stringify({
      summary: true,
      from: FROM,
      last_case: last,
      cases: done,
      violations,
      capped_by_max_rank: capped,
      input_GB: +(bytesTotal / 2 ** 30).toFixed(2),
      compress_s: +secondsTotal.toFixed(1),
      wall_s: +((performance.now() - t00) / 1000).toFixed(1),
      loadavg_1m: +loadavg()[0]!.toFixed(2),
    }),
  );
for (const sig of ["SIGINT", "SIGTERM"] as const)
  process.on(sig, () => {
    summary();
    process.exit(violations ? 1 : 2);
  });
for (const [i, c] of cases.entries()) {
  if (i < FROM) continue;
  const data = c.make();
  const opts: tt.CompressOptions = { tolerance: c.tol, max_rank: tt.MAX_RANK_LIMIT };
  if (c.modes === "plain") opts.modes = c.shape;
  else if (c.modes === "quantized") opts.modes = tt.chooseModes(c.shape);
  const t0 = performance.now();
  const r = (await tt.compress(data, c.shape, opts))!;
  const s = (performance.now() - t0) / 1000;
  const y = await tt.reconstruct(r);
  const err = relErr(data, y);
  done++;
  last = i;
  process.stderr.write(`case ${i} ${c.shape.join("x")} ${c.f64 ? "f64" : "f32"} tol ${c.tol.toExponential(1)}: ${s.toFixed(2)} s\n`);
  bytesTotal += data.byteLength;
  secondsTotal += s;
  const bound = Math.max(...r.ranks) >= tt.MAX_RANK_LIMIT;
  const line = {
    case: i,
    data: c.label,
    shape: c.shape,
    dtype: c.f64 ? "float64" : "float32",
    modes: r.modes.length === c.shape.length ? "plain" : "quantized",
    asked: c.modes,
    tolerance: +c.tol.toExponential(3),
    measured_error: +err.toExponential(3),
    engine_error: +r.relative_error.toExponential(3),
    max_rank_bound: bound,
    ranks: r.ranks,
    ratio: +(data.length / r.cores.reduce((a, b) => a + b.length, 0)).toFixed(2),
    compress_s: +s.toFixed(3),
    MBps: +(data.byteLength / 2 ** 20 / s).toFixed(1),
  };
  if (err > c.tol && !bound) {
    violations++;
    console.log(JSON.stringify({ VIOLATION: true, ...line }));
  } else if (err > c.tol) {
    capped++;
    console.log(JSON.stringify({ capped: true, ...line }));
  } else if (data.byteLength >= 64 << 20) {
    console.log(JSON.stringify(line));
  }
}
summary();
process.exit(violations ? 1 : 0);
