// Data whose ArrayBuffer was transferred away (detached: postMessage, structuredClone with
// transfer) holds no bytes: a put, put_cores or putPred of it is a ValidationError naming the
// data, with one sentence, not a TypeError from a typed-array constructor.
import test from "tape";
import { createStore } from "../../lib/store/index.js";
import { ValidationError } from "../../lib/errors.js";

function detached<T extends ArrayBufferView | ArrayBuffer>(x: T): T {
  const buf = x instanceof ArrayBuffer ? x : x.buffer;
  structuredClone(buf, { transfer: [buf as ArrayBuffer] });
  return x;
}

test("put, put_cores and putPred of detached data: a ValidationError", async (t) => {
  const s = await createStore({ path: ":memory:" });
  const refused = async (what: string, field: string, p: () => Promise<unknown>) => {
    try {
      await p();
      t.fail(`${what}: accepted`);
    } catch (e) {
      t.ok(e instanceof ValidationError, `${what}: ValidationError (${(e as Error).message})`);
      t.equal((e as ValidationError).field, field, `${what}: names ${field}`);
      t.ok(/^[^\n]+\.$/.test((e as Error).message) && !/\. [A-Z]/.test((e as Error).message), `${what}: one sentence`);
    }
  };
  try {
    await refused("Float32Array", "data", () => s.put("ns", "a", detached(new Float32Array(4096)), { shape: [4096] }));
    await refused("ArrayBuffer as float32", "data", () => s.put("ns", "a", detached(new ArrayBuffer(16)), { shape: [4], dtype: "float32" }));
    await refused("ArrayBuffer as bytes", "data", () => s.put("ns", "a", detached(new ArrayBuffer(16))));
    await refused("a core", "cores.0.data", () => s.putCores("ns", "c", [{ shape: [1, 4, 1], data: detached(new Float32Array(4)), dtype: "float32" }]));
    await refused("a pred stream", "stream", () => s.putPred("ns", "p", detached(new Uint8Array(64)), { relative_error: 0, max_abs_error: 0 }));
    const ok = await s.put("ns", "b", new Float32Array(4096).fill(1), { shape: [4096] });
    t.equal(ok.version, 1, "the store still takes puts");
  } finally {
    await s.close();
  }
});
