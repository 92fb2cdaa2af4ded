// Every bad input to the tt functions is a ValidationError naming the field; none crashes,
// hangs or aborts the process, including calls that reach the native backstop directly.
import test from "tape";
import * as tt from "../../lib/tt.js";
import { ValidationError } from "../../lib/errors.js";
import { native } from "../../lib/native.js";
import { randomTT } from "./helpers.js";

async function rejects(t: test.Test, p: () => Promise<unknown> | unknown, field: string, what: string) {
  try {
    await p();
    t.fail(`${what}: should have been rejected`);
  } catch (e) {
    t.ok(e instanceof ValidationError, `${what}: ValidationError (${(e as Error).message})`);
    t.equal((e as ValidationError).field, field, `${what}: names ${field}`);
    t.equal((e as ValidationError).code, "bad_request", `${what}: code bad_request`);
    t.ok(/^[^\n]+$/.test((e as Error).message), `${what}: one-line message`);
  }
}

const good = () => randomTT([4, 5, 6], [1, 2, 3, 1], 1);

test("non-finite values in large cores: checked by the addon off the event loop, same field and message", async (t) => {
  // cores above 65,536 elements are scanned on the worker thread (native/addon.cc), smaller ones
  // in lib/tt.ts; the caller sees the same ValidationError either way
  const big = randomTT([3, 40_000, 3], [1, 2, 2, 1], 7, false); // middle core: 160,000 elements
  const withAt = (v: number, k: number, i: number) => ({ ...big, cores: big.cores.map((c, j) => (j === k ? Object.assign(c.slice(), { [i]: v }) : c)) });
  const nan = withAt(NaN, 1, 150_000);
  const inf = withAt(-Infinity, 1, 123_456);
  const ok = { ...big, cores: big.cores.map((c) => c.slice()) };
  await rejects(t, () => tt.reconstruct(nan), "cores[1]", "reconstruct, NaN deep in a large core");
  await rejects(t, () => tt.dot(ok, inf), "b.cores[1]", "dot, -Infinity in b's large core");
  await rejects(t, () => tt.dotDense(nan, new Float32Array(3 * 40_000 * 3)), "t.cores[1]", "dotDense");
  await rejects(t, () => tt.round(inf, { tolerance: 1e-3 }), "t.cores[1]", "round");
  await rejects(t, () => tt.dotBatch(ok, [ok, nan]), "candidates[1].cores[1]", "dotBatch candidate");
  await rejects(t, () => tt.dotDenseBatch(new Float32Array(3 * 40_000 * 3), [nan]), "candidates[0].cores[1]", "dotDenseBatch candidate");
  // each call is started only when awaited: a second promise created early would reject with no
  // handler attached while the first is awaited (an unhandled rejection that ends the process)
  const calls: Array<[string, () => Promise<unknown>]> = [
    ["NaN", () => tt.reconstruct(nan)],
    ["-Infinity", () => tt.dot(ok, inf)],
  ];
  for (const [what, call] of calls) {
    const e = await call().then(
      () => null,
      (x: unknown) => x as Error,
    );
    t.match(
      e?.message ?? "",
      new RegExp(`must contain only finite numbers \\(found ${what.replace("+", "\\+")} at index 1[25]`),
      `${what}: the message names the value and its index`,
    );
  }
  // the same TT without the bad value is fine
  t.ok(Number.isFinite(await tt.dot(ok, ok)), "a finite large TT passes");
});

test("compress rejects bad data, shapes and options", async (t) => {
  const x = new Float32Array(24).map((_, i) => Math.sin(i));
  await rejects(t, () => tt.compress([1, 2, 3] as unknown as Float32Array, [3]), "data", "plain array");
  await rejects(t, () => tt.compress(new Int32Array(4) as unknown as Float32Array, [4]), "data", "int array");
  await rejects(t, () => tt.compress(new Float32Array(0), [0]), "data", "empty data");
  await rejects(t, () => tt.compress(x, [5, 5]), "shape", "product mismatch");
  await rejects(t, () => tt.compress(x, [2.5, 2, 4.8]), "shape.0", "non-integer shape");
  await rejects(t, () => tt.compress(x, [-2, -12]), "shape.0", "negative shape");
  await rejects(t, () => tt.compress(x, "24" as unknown as number[]), "shape", "shape not an array");
  const nan = x.slice();
  nan[7] = NaN;
  await rejects(t, () => tt.compress(nan, [2, 3, 4]), "data", "NaN value");
  const inf = new Float64Array(24).fill(1);
  inf[3] = -Infinity;
  await rejects(t, () => tt.compress(inf, [2, 3, 4]), "data", "infinite value");
  await rejects(t, () => tt.compress(new Float32Array(24), [2, 3, 4]), "data", "all zeros");
  for (const tol of [0, -1, 1, 2, NaN, Infinity]) await rejects(t, () => tt.compress(x, [2, 3, 4], { tolerance: tol }), "tolerance", `tolerance ${tol}`);
  await rejects(t, () => tt.compress(x, [2, 3, 4], { tolerance: 1e-9 }), "tolerance", "tolerance below float32 precision");
  await rejects(t, () => tt.compress(new Float64Array(x), [2, 3, 4], { tolerance: 1e-13 }), "tolerance", "tolerance below float64 reach");
  for (const r of [0, -3, 1.5, 1025, 1e9]) await rejects(t, () => tt.compress(x, [2, 3, 4], { max_rank: r }), "max_rank", `max_rank ${r}`);
  await rejects(t, () => tt.compress(x, [2, 3, 4], { modes: [5, 5] }), "modes", "modes product mismatch");
  await rejects(t, () => tt.compress(x, [2, 3, 4], { modes: [4, 3, 2] }), "modes", "modes that do not group into the shape");
  await rejects(t, () => tt.compress(x, [2, 3, 4], { modes: [] }), "modes", "empty modes");
  await rejects(t, () => tt.compress(x, [2, 3, 4], { min_ratio: -1 }), "min_ratio", "negative min_ratio");
  await rejects(t, () => tt.compress(x, [2, 3, 4], { tolerence: 1e-3 } as never), "options", "misspelt option");
  await rejects(t, () => tt.compress(x, [2, 3, 4], 5 as never), "options", "options not an object");
});

test("TT arguments: mismatched cores, ranks, types and values", async (t) => {
  const g = good();
  await rejects(t, () => tt.reconstruct(null as never), "t", "null TT");
  await rejects(t, () => tt.reconstruct({ ...g, cores: g.cores.slice(0, 2) }), "cores", "missing core");
  await rejects(t, () => tt.reconstruct({ ...g, ranks: [1, 2, 3] }), "ranks", "short ranks");
  await rejects(t, () => tt.reconstruct({ ...g, ranks: [2, 2, 3, 1] }), "ranks", "ranks not starting with 1");
  await rejects(t, () => tt.reconstruct({ ...g, ranks: [1, 2, 4, 1] }), "cores[1]", "core length mismatch");
  await rejects(t, () => tt.reconstruct({ ...g, modes: [4, 5.5, 6] }), "modes.1", "fractional mode");
  await rejects(t, () => tt.reconstruct({ ...g, cores: [g.cores[0]!, new Float32Array(g.cores[1]!), g.cores[2]!] }), "cores[1]", "mixed core types");
  const bad = g.cores.map((c) => c.slice());
  bad[2]![5] = NaN;
  await rejects(t, () => tt.reconstruct({ ...g, cores: bad }), "cores[2]", "NaN in a core");
  await rejects(t, () => tt.reconstruct({ ...g, shape: [7, 3, 7] }), "shape", "shape not factored by modes");
  await rejects(t, () => tt.reconstruct(g, { slice: [[0, 4]] }), "slice", "slice arity");
  await rejects(
    t,
    () =>
      tt.reconstruct(g, {
        slice: [
          [0, 4],
          [0, 6],
          [0, 6],
        ],
      }),
    "slice[1]",
    "slice past the end",
  );
  await rejects(
    t,
    () =>
      tt.reconstruct(g, {
        slice: [
          [2, 2],
          [0, 5],
          [0, 6],
        ],
      }),
    "slice[0]",
    "empty slice",
  );
  await rejects(
    t,
    () =>
      tt.reconstruct(g, {
        slice: [
          [-1, 2],
          [0, 5],
          [0, 6],
        ],
      }),
    "slice.0.0",
    "negative slice start",
  );
  const other = randomTT([5, 4, 6], [1, 2, 3, 1], 2);
  await rejects(t, () => tt.dot(g, other), "b.modes", "dot with different modes");
  await rejects(t, () => tt.dotDense(g, new Float64Array(10)), "x", "dense length mismatch");
  const xs = new Float64Array(120);
  xs[3] = Infinity;
  await rejects(t, () => tt.dotDense(g, xs), "x", "non-finite dense operand");
  await rejects(t, () => tt.dotBatch(g, [g, other]), "candidates[1].modes", "batch candidate with other modes");
  await rejects(t, () => tt.dotDenseBatch(new Float64Array(120), [g, { ...g, ranks: [1, 9, 3, 1] }]), "candidates[1].cores[0]", "bad batch candidate");
  await rejects(t, () => tt.denseDot(new Float32Array(3), new Float32Array(4)), "b", "denseDot lengths");
  await rejects(t, () => tt.round(g, { tolerance: 0 }), "tolerance", "round tolerance 0");
  await rejects(t, () => tt.round(g, { max_rank: 0 }), "max_rank", "round max_rank 0");
  const zero = { ...g, cores: g.cores.map((c) => new Float64Array(c.length)) };
  await rejects(t, () => tt.round(zero), "cores", "round of a zero tensor");
  t.throws(() => tt.chooseModes([0, 3]), ValidationError, "chooseModes rejects a zero dimension");
});

test("the native backstop rejects bad calls with codes instead of crashing", async (t) => {
  const n = native();
  const expectCode = async (p: () => Promise<unknown>, what: string) => {
    try {
      await p();
      t.fail(`${what}: should reject`);
    } catch (e) {
      t.equal((e as { code?: string }).code, "bad_request", `${what}: ${(e as Error).message}`);
    }
  };
  const g = good();
  await expectCode(() => n.compress(new Float32Array(8).fill(1), [3, 3], 1e-3, 8, 0), "modes product");
  await expectCode(() => n.compress({} as never, [1], 1e-3, 8, 0), "data not a typed array");
  await expectCode(() => n.reconstruct(g.cores, [1, 2, 3, 1], [4, 5, 6], [4, 5, 6], [1, 1, 1], [0, 9, 0, 5, 0, 6]), "slice out of range");
  await expectCode(() => n.reconstruct(g.cores, [1, 2, 2, 1], [4, 5, 6], [4, 5, 6], [1, 1, 1], null), "core length");
  await expectCode(() => n.dot(g.cores, g.ranks, g.cores.slice(0, 2), g.ranks, g.modes), "core count");
  await expectCode(() => n.dotDense(g.cores, g.ranks, g.modes, new Float32Array(3)), "dense length");
  await expectCode(() => n.denseDot(new Float32Array(3), new Float64Array(2)), "dense lengths");
  await expectCode(() => n.compress(new Float32Array(8).fill(1), [2, 4], 0, 8, 0), "tolerance 0");
  await expectCode(() => n.compress(new Float32Array(8).fill(1), [2, 4], 1e-3, 0, 0), "max_rank 0");
  await expectCode(() => n.compress(new Float32Array(8).fill(NaN), [2, 4], 1e-3, 4, 0), "NaN data");
  t.pass("the process is still alive");
});

test("a dense result too large to allocate is refused before any work", async (t) => {
  const big = {
    modes: [1 << 20, 1 << 20, 1 << 10],
    ranks: [1, 1, 1, 1],
    cores: [new Float32Array(1 << 20).fill(1), new Float32Array(1 << 20).fill(1), new Float32Array(1 << 10).fill(1)],
  };
  await rejects(t, () => tt.reconstruct(big), "shape", "2^50-element reconstruction");
  const block = await tt.reconstruct(big, {
    slice: [
      [0, 2],
      [5, 7],
      [0, 3],
    ],
  });
  t.deepEqual(Array.from(block), new Array(12).fill(1), "a small block of it is fine");
  await rejects(
    t,
    () =>
      tt.reconstruct(big, {
        slice: [
          [0, 1 << 20],
          [0, 1 << 10],
          [0, 1 << 10],
        ],
      }),
    "slice",
    "a block that is still too large",
  );
});
