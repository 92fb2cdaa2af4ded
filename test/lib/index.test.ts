import test from "tape";
import * as svc from "../../lib/index.js";

test("public surface: the README example runs through the package entry point", async (t) => {
  const store = await svc.createStore({ path: ":memory:" });
  try {
    const n = 32;
    const data = new Float32Array(n * n * n);
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) for (let k = 0; k < n; k++) data[(i * n + j) * n + k] = Math.sin(i / 7) * Math.cos(j / 5) + k / n;
    const put = await store.put("default", "field/t0", data, { shape: [n, n, n], dtype: "float32", tolerance: 1e-4 });
    t.equal(put.version, 1, "first put is version 1");
    t.ok(put.relative_error <= 1e-4, `measured error ${put.relative_error} within tolerance`);
    const info = await store.get("default", "field/t0");
    t.equal(info.fingerprint.codec, put.verdict === "passthrough" ? "raw" : "tt", "fingerprint names the codec");
    const block = await store.serve("default", "field/t0", {
      slice: [
        [0, 4],
        [0, n],
        [0, n],
      ],
    });
    t.deepEqual(block.shape, [4, n, n], "slice has the block's shape");
    t.ok(block.data instanceof Float32Array, "served as the stored dtype");
  } finally {
    await store.close();
  }
});

test("public surface: errors carry the API's code words", (t) => {
  t.equal(new svc.NotFoundError("x").code, "not_found");
  t.equal(new svc.VersionConflictError("x").code, "version_conflict");
  t.equal(new svc.ValidationError("x", "shape").code, "bad_request");
  t.equal(new svc.GpuUnavailableError("x").code, "gpu_unavailable");
  t.ok(new svc.ValidationError("x") instanceof svc.SvcError, "all derive from SvcError");
  t.end();
});

test("public surface: tt, npy and client are exported", (t) => {
  t.equal(typeof svc.tt.compress, "function");
  t.equal(typeof svc.tt.backend().isa, "string");
  t.equal(typeof svc.readNpy, "function");
  t.equal(typeof svc.writeNpy, "function");
  t.equal(typeof svc.createClient, "function");
  t.ok(svc.DTYPES.includes("bfloat16"));
  t.end();
});
