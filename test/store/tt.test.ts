// The floating-point path of the store (needs the TT engine): verdicts compressed, weak and
// passthrough, measured relative error, float64/float16/bfloat16, serve with slices and
// output dtypes, put_cores and the atomic batch, and similarity (pairwise, top-K, vector)
// against dense float64 arithmetic on the reconstructed tensors (1e-5 relative).
import { ValidationError, VersionConflictError, NotFoundError, GpuUnavailableError } from "../../lib/errors.js";
import { halfToFloat, bf16ToFloat } from "../../lib/store/codec.js";
import { rejects, storeSuite } from "./harness.js";

const suite = storeSuite({ targets: ["lmdb", "postgres", "http"], namespaces: ["ns", "ns2", "fam"] });

/** A smooth 3-D field: low TT rank. */
function field(n: number, phase: number, Arr: typeof Float32Array | typeof Float64Array = Float32Array) {
  const out = new Arr(n * n * n);
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++)
      for (let k = 0; k < n; k++)
        out[(i * n + j) * n + k] =
          Math.sin((i + phase) / 7) * Math.cos(j / 5 - phase) + 0.5 * Math.exp(-((k - n / 2) ** 2) / (n * 3)) * Math.cos(i / 9 + phase);
  return out;
}
function noise(n: number, seed: number) {
  let x = seed >>> 0 || 1;
  return Float32Array.from({ length: n }, () => (x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5);
}
const f64 = (a: ArrayLike<number>) => Float64Array.from(a as ArrayLike<number>);
const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
};
const norm = (a: ArrayLike<number>) => Math.sqrt(dot(a, a));
const dist = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += (a[i]! - b[i]!) ** 2;
  return Math.sqrt(s);
};
const relErr = (a: ArrayLike<number>, b: ArrayLike<number>) => dist(a, b) / norm(b);
const dense = (m: string, a: ArrayLike<number>, b: ArrayLike<number>) =>
  m === "dot" ? dot(a, b) : m === "cosine" ? dot(a, b) / (norm(a) * norm(b)) : dist(a, b);
const close = (x: number, y: number, rel = 1e-5, abs = 1e-9) => Math.abs(x - y) <= rel * Math.max(Math.abs(x), Math.abs(y)) + abs;

suite.test("a smooth float32 field is compressed within tolerance", async (t, s) => {
  const x = field(32, 0);
  const r = await s.put("ns", "f", x, { shape: [32, 32, 32], tolerance: 1e-4 });
  t.deepEqual([r.verdict, r.compressed, r.fingerprint.codec, r.dtype], ["compressed", true, "tt", "float32"], "verdict compressed, codec tt");
  t.ok(
    r.tt && r.tt.ranks[0] === 1 && r.tt.ranks.at(-1) === 1 && r.tt.ranks.length === r.tt.modes.length + 1,
    `ranks ${JSON.stringify(r.tt?.ranks)} over modes ${JSON.stringify(r.tt?.modes)}`,
  );
  t.ok(
    r.compression_ratio > 1.2 && close(r.compression_ratio, r.bytes_in / r.bytes_stored, 1e-12),
    `ratio ${r.compression_ratio.toFixed(2)} = bytes_in/bytes_stored`,
  );
  t.ok(r.relative_error > 0 && r.relative_error <= 1e-4, `relative_error ${r.relative_error} within tolerance`);
  const back = await s.serve("ns", "f");
  t.ok(back.data instanceof Float32Array && back.dtype === "float32", "served as float32");
  const measured = relErr(f64(back.data as Float32Array), f64(x));
  t.ok(measured <= 1e-4 && close(measured, r.relative_error, 0.05, 1e-7), `measured error ${measured} matches the reported ${r.relative_error}`);
  t.ok(close(r.fingerprint.norm!, norm(back.data as Float32Array), 1e-5), "fingerprint norm is the stored tensor's norm");
  const info = await s.get("ns", "f");
  t.deepEqual(info.fingerprint, r.fingerprint, "get returns the fingerprint");
  const blk = await s.serve("ns", "f", {
    slice: [
      [3, 7],
      [0, 32],
      [10, 12],
    ],
  });
  t.deepEqual(blk.shape, [4, 32, 2], "slice shape");
  let ok = true;
  for (let i = 0; i < 4; i++)
    for (let j = 0; j < 32; j++)
      for (let k = 0; k < 2; k++)
        ok &&= close((blk.data as Float32Array)[(i * 32 + j) * 2 + k]!, (back.data as Float32Array)[((i + 3) * 32 + j) * 32 + k + 10]!, 1e-5, 1e-6);
  t.ok(ok, "the slice equals that block of the full reconstruction");
  const as64 = await s.serve("ns", "f", { dtype: "float64" });
  t.ok(as64.data instanceof Float64Array && as64.dtype === "float64", "output dtype float64");
  const as16 = await s.serve("ns", "f", { dtype: "float16" });
  t.ok(
    as16.data instanceof Uint16Array && Math.abs(halfToFloat((as16.data as Uint16Array)[5]!) - (back.data as Float32Array)[5]!) < 1e-3,
    "output dtype float16 (bit patterns)",
  );
});

suite.test("codec tt: weak when the caller's rank cap forces a larger error; passthrough for noise and small data", async (t, s) => {
  const x = field(32, 1);
  const w = await s.put("ns", "w", x, { shape: [32, 32, 32], tolerance: 1e-5, max_rank: 1, codec: "tt" });
  t.deepEqual([w.verdict, w.compressed], ["weak", true], "verdict weak");
  t.ok(w.relative_error > 1e-5 && w.tt!.ranks.every((r) => r === 1), `rank 1, error ${w.relative_error}`);
  const back = await s.serve("ns", "w");
  t.ok(close(relErr(f64(back.data as Float32Array), f64(x)), w.relative_error, 0.01, 1e-7), "weak entries remain usable; error as reported");
  const nz = noise(32 * 32 * 32, 9);
  const p = await s.put("ns", "noise", nz, { shape: [32, 32, 32], codec: "tt" });
  t.deepEqual(
    [p.verdict, p.compressed, p.compression_ratio, p.relative_error, p.fingerprint.codec, p.tt],
    ["passthrough", false, 1, 0, "raw", null],
    "incompressible floats are stored raw",
  );
  t.deepEqual(Buffer.from((await s.serve("ns", "noise")).data.buffer), Buffer.from(nz.buffer), "raw floats serve bit-exact");
  // 128^3 noise: under the default max_rank 256 a capped TT would reach ratio 3 at relative
  // error 0.8; no TT within the tolerance comes near 1.2, so it is stored raw
  const big = await s.put("ns", "noise-big", noise(128 ** 3, 10), { shape: [128, 128, 128], codec: "tt" });
  t.deepEqual([big.verdict, big.compressed, big.bytes_stored], ["passthrough", false, 128 ** 3 * 4], "large incompressible floats are stored raw too");
  const small = await s.put("ns", "small", new Float32Array(100).fill(1), { shape: [10, 10] });
  t.equal(small.verdict, "passthrough", "below min_compress_bytes");
  await rejects(t, s.put("ns", "nan", Float32Array.from([1, NaN, 3, 4]), { shape: [4] }), ValidationError, /NaN or infinite/, "NaN refused");
  await rejects(t, s.put("ns", "inf", new Float64Array(2048).fill(Infinity), { shape: [2048] }), ValidationError, /NaN or infinite/, "Infinity refused");
});

suite.test("all-zero floating data: an exact rank-1 TT of zeros (or raw where that is no smaller)", async (t, s) => {
  for (const [name, x] of [
    ["float32", new Float32Array(32 ** 3)],
    ["float64", new Float64Array(32 ** 3)],
  ] as const) {
    const p = await s.put("ns", `zeros-${name}`, x, { shape: [32, 32, 32] });
    t.deepEqual(
      [p.verdict, p.compressed, p.relative_error, p.fingerprint.codec, p.fingerprint.norm],
      ["compressed", true, 0, "tt", 0],
      `${name}: compressed, error 0, norm 0`,
    );
    t.ok(p.tt!.ranks.every((r) => r === 1) && p.compression_ratio > 100, `${name}: ranks 1, ratio ${p.compression_ratio}`);
    const back = await s.serve("ns", `zeros-${name}`);
    t.ok(back.data.length === x.length && (back.data as Float32Array).every((v) => v === 0), `${name}: serves zeros`);
  }
  const ones = await s.put("ns", "ones", new Float32Array(32 ** 3).fill(1), { shape: [32, 32, 32], codec: "tt" });
  t.equal(ones.verdict, "compressed", "a non-zero entry beside it");
  const sim = await s.query.similarity("ns", "zeros-float32", "ones", { metric: "cosine" });
  t.equal(sim.score, 0, "cosine with a zero entry is 0");
  const l2 = await s.query.similarity("ns", "zeros-float32", "ones", { metric: "l2" });
  t.ok(close(l2.score, Math.sqrt(32 ** 3)), `l2 to the ones is their norm (${l2.score})`);
  // a prime length: the rank-1 TT is the whole vector, no smaller than the data
  const prime = await s.put("ns", "zeros-prime", new Float32Array(1031), { shape: [1031], codec: "tt" });
  t.deepEqual([prime.verdict, prime.bytes_stored], ["passthrough", 1031 * 4], "zeros of a prime length under codec tt: passthrough");
  const exact = await s.put("ns", "zeros-prime-auto", new Float32Array(1031), { shape: [1031] });
  t.deepEqual(
    [exact.verdict, exact.fingerprint.codec, exact.relative_error, exact.max_abs_error],
    ["lossless", "lossless", 0, 0],
    `the same under codec auto: an exact entry (${exact.bytes_stored} bytes)`,
  );
});

suite.test("float64 keeps float64 cores; float16 and bfloat16 round-trip in their dtype", async (t, s) => {
  const x = field(24, 2, Float64Array);
  const r = await s.put("ns", "d", x, { shape: [24, 24, 24], tolerance: 1e-7, max_rank: 64 });
  const back = await s.serve("ns", "d");
  t.ok(back.data instanceof Float64Array, "float64 served as float64");
  t.ok(r.relative_error <= 1e-7 && relErr(back.data as Float64Array, x) <= 1e-7, `float64 precision kept (${relErr(back.data as Float64Array, x)})`);
  const x32 = field(24, 3);
  const h = Uint16Array.from(x32, (v) => {
    const f = new Float32Array([v]);
    return new Uint16Array(f.buffer)[1]!; // bfloat16 by truncation
  });
  const rb = await s.put("ns", "bf", h, { shape: [24, 24, 24], dtype: "bfloat16", tolerance: 1e-2 });
  t.equal(rb.bytes_in, 24 ** 3 * 2, "bytes_in counts 2-byte elements");
  const bb = await s.serve("ns", "bf");
  t.ok(bb.data instanceof Uint16Array && bb.dtype === "bfloat16", "bfloat16 served as bfloat16 bits");
  const ref = Float64Array.from(h, bf16ToFloat);
  t.ok(
    relErr(Float64Array.from(bb.data as Uint16Array, bf16ToFloat), ref) <= 1e-2,
    "bfloat16 values served in bfloat16 within the tolerance (its rounding counted)",
  );
});

/** Random TT cores of the given modes and ranks. */
function cores(modes: number[], ranks: number[], seed: number) {
  let x = seed;
  const rnd = () => (x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5;
  return modes.map((n, k) => ({
    shape: [ranks[k]!, n, ranks[k + 1]!] as [number, number, number],
    data: Float32Array.from({ length: ranks[k]! * n * ranks[k + 1]! }, rnd),
  }));
}
/** Dense contraction of cores, in float64 (the oracle). */
function contract(cs: { shape: [number, number, number]; data: Float32Array }[]): Float64Array {
  let cur = Float64Array.from([1]);
  let rows = 1;
  for (const c of cs) {
    const [r0, n, r1] = c.shape;
    const next = new Float64Array(rows * n * r1);
    for (let a = 0; a < rows; a++)
      for (let i = 0; i < r0; i++) {
        const v = cur[a * r0 + i]!;
        if (v === 0) continue;
        for (let j = 0; j < n * r1; j++) next[a * n * r1 + j] += v * c.data[i * n * r1 + j]!;
      }
    cur = next;
    rows *= n;
  }
  return cur;
}

suite.test("put_cores stores given cores; chains are validated; the batch is atomic", async (t, s) => {
  const cs = cores([4, 6, 5], [1, 3, 2, 1], 11);
  const r = await s.putCores("ns", "c", cs, { shape: [24, 5], metadata: { src: "cores" } });
  t.deepEqual([r.verdict, r.relative_error, r.shape, r.tt], ["compressed", 0, [24, 5], { modes: [4, 6, 5], ranks: [1, 3, 2, 1] }], "put_cores result");
  t.equal(r.bytes_stored, (12 + 36 + 10) * 4, "bytes_stored is the cores' size");
  const back = await s.serve("ns", "c");
  t.deepEqual(back.shape, [24, 5], "dense shape");
  const want = contract(cs);
  t.ok(relErr(f64(back.data as Float32Array), want) < 1e-6, "serve equals the dense contraction");
  t.ok(close(r.fingerprint.norm!, norm(want), 1e-5), "norm of the given cores");
  const bad: [unknown[], RegExp, string][] = [
    [[{ shape: [2, 4, 1], data: new Float32Array(8) }], /first core must start with rank 1/, "first rank"],
    [[{ shape: [1, 4, 2], data: new Float32Array(8) }], /last core must end with rank 1/, "last rank"],
    [
      [
        { shape: [1, 4, 2], data: new Float32Array(8) },
        { shape: [3, 4, 1], data: new Float32Array(12) },
      ],
      /rank 3 does not match/,
      "rank chain",
    ],
    [[{ shape: [1, 4, 1], data: new Float32Array(5) }], /needs 16/, "data length"],
    [
      [
        { shape: [1, 4, 2], data: new Float32Array(8) },
        { shape: [2, 4, 1], data: new Float64Array(8) },
      ],
      /same dtype/,
      "mixed dtypes",
    ],
    [[{ shape: [1, 4, 1], data: Float32Array.from([1, NaN, 0, 0]) }], /NaN/, "non-finite core"],
    [[], /1 to 64 cores/, "no cores"],
    [Array.from({ length: 65 }, () => ({ shape: [1, 1, 1], data: new Float32Array(1) })), /1 to 64 cores/, "65 cores"],
    [[null], /cores\.0 must be an object/, "a core that is not an object"],
    [[{ shape: [1, 4], data: new Float32Array(4) }], /core shape must be/, "a core shape of two entries"],
    [[{ shape: [1, 0, 1], data: new Float32Array(0) }], /at least 1/, "a zero core dimension"],
    [[{ shape: [1, 2.5, 1], data: new Float32Array(2) }], /integers/, "a fractional core dimension"],
    [[{ shape: [1, 4, 1], data: new Float32Array(4), dtype: "float64" }], /dtype float64 does not match its float32 data/, "dtype against the typed array"],
    [[{ shape: [1, 4, 1], data: new Float32Array(4), dtype: "float16" }], /cores\.0\.dtype/, "a core dtype other than float32/float64"],
    [[{ shape: [1, 4, 1], data: [1, 2, 3, 4] }], /cores\.0\.data must be a Float32Array/, "data as a plain list"],
    [
      [
        { shape: [1, 4, 2], data: Float32Array.from([1, 2, 3, 4, 5, 6, 7, Infinity]) },
        { shape: [2, 4, 3], data: new Float32Array(24) },
      ],
      /cores\.0\.data contains NaN/,
      "the first core's problem is named first",
    ],
    [[{ shape: [1, 2, 1], data: new Uint8Array(8) }], /./, "bytes taken as float32 (accepted shape, rank chain ok)"],
  ];
  for (const [c, re, msg] of bad.slice(0, -1)) await rejects(t, s.putCores("ns", "x", c as never), ValidationError, re, msg);
  const fromBytes = await s.putCores("ns", "bytes", bad.at(-1)![0] as never);
  t.deepEqual([fromBytes.dtype, fromBytes.tt], ["float32", { modes: [2], ranks: [1, 1] }], "cores given as bytes are float32 unless dtype says otherwise");
  await rejects(t, s.putCores("ns", "x", cs, { shape: [7, 7] }), ValidationError, /modes give 120/, "dense shape product");
  const ok1 = { key: "b1", cores: cores([8, 8], [1, 2, 1], 1) };
  const res = await s.putCoresBatch("ns", [
    ok1,
    { key: "b2", cores: cores([8, 8], [1, 3, 1], 2), metadata: { i: 2 } },
    { key: "b1", cores: cores([8, 8], [1, 1, 1], 3) },
  ]);
  t.deepEqual(
    res.results.map((x) => [x.key, x.version]),
    [
      ["b1", 1],
      ["b2", 1],
      ["b1", 2],
    ],
    "batch results in order; a repeated key gets consecutive versions",
  );
  await rejects(
    t,
    s.putCoresBatch("ns", [
      { key: "n1", cores: cores([8, 8], [1, 2, 1], 4) },
      { key: "n2", cores: [{ shape: [1, 8, 2], data: new Float32Array(16) }] },
    ]),
    ValidationError,
    /^items\.1: .*last core/,
    "an invalid item fails the batch, naming its index",
  );
  await rejects(
    t,
    s.putCoresBatch("ns", [
      { key: "n1", cores: cores([8, 8], [1, 2, 1], 4) },
      { key: "b2", cores: cores([8, 8], [1, 2, 1], 5), if_version: 5 },
    ]),
    VersionConflictError,
    /items\.1/,
    "a version conflict fails the whole batch",
  );
  await rejects(
    t,
    s.putCoresBatch("ns", [
      { key: "n1", cores: cores([8, 8], [1, 2, 1], 4) },
      { key: "bad//key", cores: cores([8, 8], [1, 2, 1], 5) },
    ]),
    ValidationError,
    /^items\.1: .*segment/,
    "an invalid key fails the batch, naming its index",
  );
  await rejects(
    t,
    s.putCoresBatch("ns", [{ key: "n1", cores: [] }, { key: "n2", cores: cores([8, 8], [1, 2, 1], 5), colour: 1 } as never]),
    ValidationError,
    /^items\.1: unknown field 'colour'/,
    "every item's key and options are checked before any item's cores",
  );
  await rejects(
    t,
    s.putCoresBatch("ns", [{ key: "n1", cores: [] }]),
    ValidationError,
    /^items\.0: cores must be a list of 1 to 64 cores/,
    "an item without cores",
  );
  await rejects(t, s.putCoresBatch("ns", [null as never]), ValidationError, /^items\.0: must be an object/, "an item that is not an object");
  await rejects(t, s.get("ns", "n1"), NotFoundError, /No entry n1/, "nothing of a failed batch was stored");
  const info = await s.get("ns", "b2");
  t.deepEqual(
    [info.metadata, info.fingerprint.codec, info.fingerprint.tt],
    [{ i: 2 }, "tt", { modes: [8, 8], ranks: [1, 3, 1] }],
    "a batch item's metadata and TT form",
  );
  const c64 = [{ shape: [1, 3, 1] as [number, number, number], data: Float64Array.from([1, 2, 3]), dtype: "float64" as const }];
  const r64 = await s.putCores("ns", "c64", c64, { shape: [3] });
  const s64 = await s.serve("ns", "c64");
  t.deepEqual(
    [r64.dtype, s64.data instanceof Float64Array, Array.from(s64.data as Float64Array)],
    ["float64", true, [1, 2, 3]],
    "float64 cores serve as float64, exactly",
  );
  const asF32 = await s.serve("ns", "c64", { dtype: "float32", slice: [[1, 3]] });
  t.ok(asF32.data instanceof Float32Array && Array.from(asF32.data).join() === "2,3", "a slice of them as float32");
});

suite.test("pairwise similarity on stored forms agrees with dense arithmetic", async (t, s, ctx) => {
  const a = field(32, 0),
    b = field(32, 0.3);
  await s.put("ns", "a", a, { shape: [32, 32, 32], tolerance: 1e-5 });
  await s.put("ns", "b", b, { shape: [32, 32, 32], tolerance: 1e-5 });
  await s.put("ns", "a2", a, { shape: [32, 32, 32], tolerance: 1e-5 });
  await s.put("ns", "raw", noise(32 ** 3, 5), { shape: [32, 32, 32] }); // passthrough: dense
  await s.put("ns", "raw2", noise(32 ** 3, 6), { shape: [32, 32, 32] });
  await s.put(
    "ns",
    "int",
    Int16Array.from({ length: 32 ** 3 }, (_, i) => (i % 32) - 16),
    { shape: [32, 32, 32] },
  ); // lossless ints
  await s.putCores(
    "ns",
    "cores",
    cores([32, 32, 32], [1, 2, 2, 1], 7).map((c) => ({ ...c })),
    { shape: [32, 32, 32] },
  );
  // same dense shape, other modes: exercises the fallback
  await s.putCores("ns", "othermodes", cores([8, 4, 32, 32], [1, 3, 3, 2, 1], 8), { shape: [32, 32, 32] });
  await s.put("ns", "flat", a.subarray(0, 1024), { shape: [1024] });
  await s.put("ns", "blob", Buffer.alloc(32 ** 3 * 4, 1));
  const served = new Map<string, Float64Array>();
  for (const k of ["a", "b", "a2", "raw", "raw2", "int", "cores", "othermodes"])
    served.set(k, Float64Array.from((await s.serve("ns", k, { dtype: undefined })).data as ArrayLike<number>, Number));
  const pairs = [
    ["a", "b"],
    ["a", "a2"],
    ["a", "raw"],
    ["raw", "a"],
    ["raw", "raw2"],
    ["int", "a"],
    ["int", "raw"],
    ["cores", "a"],
    ["othermodes", "a"],
    ["othermodes", "cores"],
    ["a", "a"],
  ];
  for (const m of ["cosine", "dot", "l2"] as const) {
    for (const [x, y] of pairs) {
      const r = await s.query.similarity("ns", x!, y!, { metric: m });
      const want = dense(m, served.get(x!)!, served.get(y!)!);
      t.ok(close(r.score, want, 1e-5, m === "l2" ? 1e-6 * norm(served.get(x!)!) : 1e-12), `${m}(${x}, ${y}) = ${r.score} vs dense ${want}`);
    }
  }
  // top-K mixing every kind of candidate: TT of the query's modes (batched), TT of other
  // modes, raw floats and lossless ints; from a TT query and from a dense (raw) query
  for (const qk of ["a", "raw"]) {
    for (const m of ["cosine", "l2"] as const) {
      const r = await s.query.topk("ns", { key: qk, k: 100, metric: m, include_self: true });
      const ok = r.results.every((x) => close(x.score, dense(m, served.get(qk)!, served.get(x.key)!), 1e-5, m === "l2" ? 1e-6 * norm(served.get(qk)!) : 1e-12));
      t.ok(
        ok && r.scanned === 8 && r.skipped === 2,
        `top-K from ${qk} (${m}) over mixed candidates agrees with dense; scanned ${r.scanned}, skipped ${r.skipped}`,
      );
    }
  }
  const self = await s.query.similarity("ns", "a", "a", { metric: "l2" });
  t.ok(Math.abs(self.score) < 1e-6 * norm(served.get("a")!), `l2 of an entry with itself is ~0 (${self.score})`);
  const r = await s.query.similarity("ns", "a", "b");
  t.deepEqual([r.metric, r.a, r.b], ["cosine", { key: "a", version: 1 }, { key: "b", version: 1 }], "cosine by default; keys and versions echoed");
  await rejects(t, s.query.similarity("ns", "a", "flat"), ValidationError, /different shapes/, "different shapes: 400");
  await rejects(t, s.query.similarity("ns", "blob", "a"), ValidationError, /bytes/, "bytes entries: 400");
  await rejects(t, s.query.similarity("ns", "a", "zz"), NotFoundError, /No entry zz/, "unknown key: 404");
  const other = await ctx.tenant("other");
  await other.put("ns2", "a", b, { shape: [32, 32, 32] });
  await rejects(t, s.query.similarity("ns", "a", "a", { namespace_b: "ns2" }), NotFoundError, /No entry/, "namespace_b stays within the tenant");
  await s.put("ns2", "a", b, { shape: [32, 32, 32], tolerance: 1e-5 });
  const across = await s.query.similarity("ns", "a", "a", { namespace_b: "ns2", metric: "dot" });
  const direct = await s.query.similarity("ns", "a", "b", { metric: "dot" });
  t.ok(close(across.score, direct.score, 1e-6), `namespace_b compares across namespaces of the tenant (${across.score})`);
  // versions: a second version of b, compared by number against the first
  await s.put("ns", "b", a, { shape: [32, 32, 32], tolerance: 1e-5 });
  const v1 = await s.query.similarity("ns", "a", "b", { version_b: 1 });
  const v2 = await s.query.similarity("ns", "a", "b");
  t.deepEqual(
    [v1.b, v2.b],
    [
      { key: "b", version: 1 },
      { key: "b", version: 2 },
    ],
    "version_b picks the version; latest by default",
  );
  t.ok(close(v1.score, r.score, 1e-12) && close(v2.score, 1, 1e-5), `scores of each version (${v1.score}, ${v2.score})`);
  await rejects(t, s.query.similarity("ns", "a", "b", { version_a: 2 }), NotFoundError, /no version 2/, "a missing version_a is not_found");
});

suite.test("top-K and vector queries over a namespace", async (t, s) => {
  const n = 16;
  const fields: Float32Array<ArrayBuffer>[] = [];
  for (let i = 0; i < 12; i++) {
    fields.push(field(n, i * 0.15) as Float32Array<ArrayBuffer>);
    await s.put("fam", `f${String(i).padStart(2, "0")}`, fields[i]!, { shape: [n, n, n], tolerance: 1e-5, metadata: { i, group: i % 2 ? "odd" : "even" } });
  }
  await s.put("fam", "raw", noise(n ** 3, 3), { shape: [n, n, n], metadata: { i: 99 } });
  await s.put("fam", "other-shape", field(8, 0), { shape: [8, 8, 8] });
  await s.put("fam", "deleted", fields[0]!, { shape: [n, n, n] });
  await s.delete("fam", "deleted");
  const dens = new Map<string, Float64Array>();
  for (const item of (await s.list("fam")).keys)
    if (item.key !== "other-shape") dens.set(item.key, Float64Array.from((await s.serve("fam", item.key)).data as Float32Array));
  for (const m of ["cosine", "dot", "l2"] as const) {
    const r = await s.query.topk("fam", { key: "f03", k: 5, metric: m });
    const want = [...dens.entries()]
      .filter(([k]) => k !== "f03")
      .map(([k, x]) => ({ key: k, score: dense(m, dens.get("f03")!, x) }))
      .sort((p, q) => (m === "l2" ? p.score - q.score : q.score - p.score));
    t.deepEqual(
      r.results.map((x) => x.key),
      want.slice(0, 5).map((x) => x.key),
      `${m}: same order as the dense scan`,
    );
    t.ok(
      r.results.every((x, i) => close(x.score, want[i]!.score, 1e-5, 1e-9)),
      `${m}: scores agree to 1e-5`,
    );
    t.deepEqual([r.scanned, r.skipped], [12, 1], `${m}: scanned 12 (self excluded, deleted not a candidate), skipped 1 of another shape`);
  }
  const self = await s.query.topk("fam", { key: "f03", k: 1, include_self: true });
  t.deepEqual(
    self.results.map((x) => x.key),
    ["f03"],
    "include_self: the entry is its own best match",
  );
  const filtered = await s.query.topk("fam", { key: "f03", k: 10, filter: { group: "odd" } });
  t.ok(filtered.results.every((x) => Number(x.key.slice(1)) % 2 === 1) && filtered.scanned === 5, "filter applied before scoring");
  const vq = await s.query.vector("fam", { vector: fields[7]!, shape: [n, n, n], k: 3, metric: "cosine" });
  t.equal(vq.results[0]!.key, "f07", "vector query finds the stored copy first");
  t.ok(close(vq.results[0]!.score, dense("cosine", Float64Array.from(fields[7]!), dens.get("f07")!), 1e-5), "vector score agrees with dense");
  const vl = await s.query.vector("fam", { vector: Array.from(fields[2]!), shape: [n, n, n], k: 2, metric: "l2" });
  t.ok(vl.results[0]!.key === "f02" && close(vl.results[0]!.score, dist(Float64Array.from(fields[2]!), dens.get("f02")!), 1e-5, 1e-6), "JSON-list vector, l2");
  const flat = await s.query.vector("fam", { vector: [1, 2, 3], k: 2 });
  t.deepEqual([flat.results, flat.scanned, flat.skipped], [[], 0, 14], "shape defaults to the vector's length; nothing of that shape");
  await rejects(t, s.query.vector("fam", { vector: [1, 2, 3], shape: [2, 2] }), ValidationError, /needs 4/, "vector/shape mismatch");
  await rejects(t, s.query.vector("fam", { vector: [1, NaN] }), ValidationError, /vector/, "non-finite vector");
  const q64 = Float64Array.from(fields[5]!);
  const v64 = await s.query.vector("fam", { vector: q64, shape: [n, n, n], k: 100, metric: "dot" });
  t.ok(
    v64.results.length === 13 && v64.results.every((x) => close(x.score, dot(q64, dens.get(x.key)!), 1e-5, 1e-9)),
    "a Float64Array vector, dot: every score agrees with dense",
  );
  await rejects(t, s.query.topk("fam", { key: "nope" }), NotFoundError, /No entry nope/, "top-K of an unknown key");
  await rejects(t, s.query.topk("fam", { key: "deleted" }), NotFoundError, /No entry deleted/, "top-K of a deleted key");
});

suite.test("serveGpu: not_found first; then a handle equal to the CPU serve, or GpuUnavailableError with the reason", async (t, s) => {
  await rejects(t, s.serveGpu("ns", "missing"), NotFoundError, /No entry missing/, "missing key");
  await rejects(t, s.serveGpu("ns", "a", { version: 0 }), ValidationError, /version/, "bad version");
  await rejects(t, s.serveGpu("bad ns!", "a"), ValidationError, /namespace/, "bad namespace");
  const x = field(16, 0.5);
  await s.put("ns", "a", x, { shape: [16, 16, 16], tolerance: 1e-5 });
  await rejects(t, s.serveGpu("ns", "a", { version: 2 }), NotFoundError, /no version 2/, "missing version");
  let h;
  try {
    h = await s.serveGpu("ns", "a");
  } catch (e) {
    t.ok(e instanceof GpuUnavailableError && e.code === "gpu_unavailable" && e.message.length > 20, `no usable device: ${(e as Error).message}`);
    return;
  }
  t.deepEqual([h.namespace, h.key, h.version, h.resident], ["ns", "a", 1, true], "the handle names the entry");
  const cpu = await s.serve("ns", "a");
  const back = await h.reconstruct();
  t.ok(relErr(f64(back.data as Float32Array), f64(cpu.data as Float32Array)) < 1e-5, "reconstruct equals the CPU serve");
  await h.release();
});

suite.run();
