// Typed arrays over a SharedArrayBuffer are typed arrays like any other: the tt and pred
// functions, a put and query.vector read them and give what they give for the same values in
// an ordinary ArrayBuffer (they were an InternalError "Invalid argument" from the addon).
import test from "tape";
import * as tt from "../../lib/tt.js";
import * as pred from "../../lib/pred.js";
import { createStore } from "../../lib/store/index.js";

function shared<T extends Float32Array | Float64Array>(a: T): T {
  const Ctor = a.constructor as { new (b: SharedArrayBuffer, off: number, n: number): T };
  // an offset into the shared buffer, so the element pointer is not the buffer's start
  const buf = new SharedArrayBuffer(a.byteLength + 16);
  const out = new Ctor(buf, 16, a.length);
  out.set(a);
  return out;
}

const n = 64;
const data = Float32Array.from({ length: n * n }, (_, i) => Math.sin(i / 40) + Math.cos(i / 300));

test("tt functions take arrays over a SharedArrayBuffer", async (t) => {
  const plain = (await tt.compress(data, [n, n], { tolerance: 1e-4 }))!;
  const fromShared = (await tt.compress(shared(data), [n, n], { tolerance: 1e-4 }))!;
  t.deepEqual(fromShared.ranks, plain.ranks, "compress: the same ranks");
  t.equal(fromShared.relative_error, plain.relative_error, "compress: the same measured error");
  const sharedCores = { ...plain, cores: plain.cores.map((c) => shared(c)) };
  t.deepEqual(await tt.reconstruct(sharedCores), await tt.reconstruct(plain), "reconstruct from shared cores");
  t.equal(await tt.dot(sharedCores, plain), await tt.dot(plain, plain), "dot with shared cores");
  t.equal(await tt.dotDense(plain, shared(data)), await tt.dotDense(plain, data), "dotDense with a shared dense operand");
  t.equal(await tt.denseDot(shared(data), data), await tt.denseDot(data, data), "denseDot");
});

test("pred functions take arrays over a SharedArrayBuffer", async (t) => {
  const plain = await pred.compress(data, { shape: [n, n], tolerance: 1e-3 });
  const fromShared = await pred.compress(shared(data), { shape: [n, n], tolerance: 1e-3 });
  t.deepEqual(fromShared.stream, plain.stream, "compress: the same stream");
  t.deepEqual(await pred.dot([plain.stream], shared(data)), await pred.dot([plain.stream], data), "dot with a shared x");
  t.deepEqual(await pred.estimate(shared(data), { shape: [n, n], tolerance: 1e-3 }), await pred.estimate(data, { shape: [n, n], tolerance: 1e-3 }), "estimate");
});

test("a store puts and queries with arrays over a SharedArrayBuffer", async (t) => {
  const store = await createStore({ path: ":memory:" });
  try {
    for (const codec of ["auto", "tt", "pred", "lossless"] as const) {
      const a = await store.put("ns", `plain-${codec}`, data, { shape: [n, n], codec });
      const b = await store.put("ns", `shared-${codec}`, shared(data), { shape: [n, n], codec });
      t.equal(b.fingerprint.sha256, a.fingerprint.sha256, `put, codec ${codec}: the same payload as from an ordinary array`);
    }
    const f64 = Float64Array.from(data);
    const want = await store.query.vector("ns", { vector: f64, shape: [n, n], k: 3 });
    const got = await store.query.vector("ns", { vector: shared(f64), shape: [n, n], k: 3 });
    t.deepEqual(got, want, "query.vector with a shared vector");
  } finally {
    await store.close();
  }
});
