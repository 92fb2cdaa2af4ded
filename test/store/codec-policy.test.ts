// The codec-policy options of createStore (docs/api.md (names and data types)): `min_compress_bytes` (default
// 4096: a payload of fewer bytes is stored raw) and `min_compression_ratio` (default 1.2: a
// codec result below it is stored raw), at their boundaries and away from their defaults,
// on floating (TT) and integer (lossless) data.
// Store-only: these are options of createStore (the engine sets them once from
// SVC_ENGINE_MIN_COMPRESS_BYTES and SVC_ENGINE_MIN_COMPRESSION_RATIO), not per-request fields;
// the policy is decided before the storage backend is involved, so the memory store suffices.
import test from "tape";
import { createStore, type PutData, type PutResult, type StoreOptions } from "../../lib/store/index.js";
import type { PutOptions } from "../../lib/schemas.js";
import { ValidationError } from "../../lib/errors.js";
import { floatToHalf } from "../../lib/store/codec.js";

/** A smooth rank-1 field sin(i/7)·cos(j/5): its TT is one core pair of rank 1. */
const field = (n: number, m: number) => Float32Array.from({ length: n * m }, (_, k) => Math.sin(Math.floor(k / m) / 7 + 0.3) * Math.cos((k % m) / 5));
const steps = (n: number) => Int32Array.from({ length: n }, (_, i) => i >> 4);
const mod7 = (n: number) => Uint8Array.from({ length: n }, (_, i) => i % 7);

/** put on a fresh in-memory store with `opts`; the store is closed afterwards. */
async function putWith(opts: Omit<StoreOptions, "path">, data: PutData, put: PutOptions): Promise<PutResult> {
  const s = await createStore({ path: ":memory:", ...opts });
  try {
    return await s.put("ns", "k", data, put);
  } finally {
    await s.close();
  }
}

/** verdict, codec, bytes_in, bytes_stored: what the policy decided. */
const what = (r: PutResult) => [r.verdict, r.fingerprint.codec, r.bytes_in, r.bytes_stored];

test("min_compress_bytes 4096 (default): 4096 bytes go through the codecs, fewer are raw", async (t) => {
  // integers: the exact 4095/4096 boundary with 1-byte items
  t.deepEqual(what(await putWith({}, mod7(4095), { shape: [4095] })), ["passthrough", "raw", 4095, 4095], "uint8, 4095 bytes: passthrough");
  t.deepEqual(
    what(await putWith({}, mod7(4096), { shape: [4096] })),
    ["lossless", "lossless", 4096, 29],
    "uint8, 4096 bytes: lossless (29 bytes, ratio 141.2)",
  );
  t.deepEqual(what(await putWith({}, steps(1023), { shape: [1023] })), ["passthrough", "raw", 4092, 4092], "int32, 4092 bytes: passthrough");
  t.deepEqual(
    what(await putWith({}, steps(1024), { shape: [1024] })),
    ["lossless", "lossless", 4096, 76],
    "int32, 4096 bytes: lossless (76 bytes by the integer coder, ratio 53.9)",
  );
  // floats: float32 has no 4095-byte payload; 4092 and 4096 bytes, and 4096 against a limit of 4097
  t.deepEqual(what(await putWith({}, field(31, 33), { shape: [31, 33] })), ["passthrough", "raw", 4092, 4092], "float32, 4092 bytes: passthrough");
  const f = await putWith({}, field(32, 32), { shape: [32, 32] });
  t.deepEqual(what(f), ["compressed", "tt", 4096, 256], "float32, 4096 bytes: TT (two rank-1 cores of 32 floats)");
  t.deepEqual([f.compression_ratio, f.tt], [16, { modes: [32, 32], ranks: [1, 1, 1] }], "ratio 16, ranks 1");
  t.ok(f.relative_error > 0 && f.relative_error <= 1e-3, `measured relative error ${f.relative_error} within the default tolerance`);
  t.deepEqual(
    what(await putWith({ min_compress_bytes: 4097 }, field(32, 32), { shape: [32, 32] })),
    ["passthrough", "raw", 4096, 4096],
    "float32, 4096 bytes with min_compress_bytes 4097: passthrough",
  );
  t.deepEqual(
    what(await putWith({ min_compress_bytes: 4097 }, mod7(4096), { shape: [4096] })),
    ["passthrough", "raw", 4096, 4096],
    "uint8, 4096 bytes with min_compress_bytes 4097: passthrough",
  );
  // float16: 2-byte items, 4094 and 4096 bytes (cores are float32, so TT must reach 1.2 x 2 = 2.4)
  const half = (n: number, m: number) => Uint16Array.from(field(n, m), floatToHalf);
  t.deepEqual(
    what(await putWith({}, half(23, 89), { shape: [23, 89], dtype: "float16" })),
    ["passthrough", "raw", 4094, 4094],
    "float16, 4094 bytes: passthrough",
  );
  const h = await putWith({}, half(32, 64), { shape: [32, 64], dtype: "float16", tolerance: 1e-2, codec: "tt" });
  t.deepEqual(
    [h.verdict, h.fingerprint.codec, h.bytes_in],
    ["compressed", "tt", 4096],
    `float16, 4096 bytes: TT (${h.bytes_stored} bytes stored, ratio ${h.compression_ratio})`,
  );
});

test("min_compression_ratio: a ratio equal to it is kept, a higher one makes the payload raw", async (t) => {
  // the check is `ratio < min_compression_ratio` -> raw, on the final bytes_in / bytes_stored
  t.equal(
    (await putWith({ min_compression_ratio: 16 }, field(32, 32), { shape: [32, 32] })).verdict,
    "compressed",
    "float32 TT at ratio 16 with min 16: compressed",
  );
  t.deepEqual(
    what(await putWith({ min_compression_ratio: 16.0001 }, field(32, 32), { shape: [32, 32] })),
    ["passthrough", "raw", 4096, 4096],
    "with min 16.0001: passthrough",
  );
  t.equal(
    (await putWith({ min_compression_ratio: 204.8 }, new Uint8Array(4096), { shape: [4096] })).verdict,
    "lossless",
    "4096 zero bytes deflate to 20 (ratio 204.8) with min 204.8: lossless",
  );
  t.deepEqual(
    what(await putWith({ min_compression_ratio: 204.81 }, new Uint8Array(4096), { shape: [4096] })),
    ["passthrough", "raw", 4096, 4096],
    "with min 204.81: passthrough",
  );
});

test("min_compression_ratio 1e6: compressible float and integer payloads are passthrough", async (t) => {
  const big = field(256, 1024); // 1 MiB of float32
  const d = await putWith({}, big, { shape: [256, 1024] });
  t.equal(d.verdict, "compressed", `at the default 1.2, the 1 MiB float32 field is TT at ratio ${d.compression_ratio}`);
  t.ok(d.compression_ratio > 1000, "a ratio far above 1.2");
  const f = await putWith({ min_compression_ratio: 1e6 }, big, { shape: [256, 1024] });
  t.deepEqual(
    [...what(f), f.compressed, f.compression_ratio, f.relative_error, f.tt],
    ["passthrough", "raw", 1048576, 1048576, false, 1, 0, null],
    "at 1e6: passthrough, stored raw",
  );
  const ints = steps(65536); // 256 KiB of int32 in runs of 16
  const l = await putWith({}, ints, { shape: [65536] });
  t.ok(l.verdict === "lossless" && l.compression_ratio > 50, `at the default, int32 runs are lossless at ratio ${l.compression_ratio.toFixed(1)}`);
  const p = await putWith({ min_compression_ratio: 1e6 }, ints, { shape: [65536] });
  t.deepEqual([...what(p), p.compressed, p.compression_ratio], ["passthrough", "raw", 262144, 262144, false, 1], "at 1e6: passthrough, stored raw");
  const z = await putWith({ min_compression_ratio: 1e6 }, new Int32Array(65536), { shape: [65536] });
  t.equal(z.verdict, "passthrough", "even all-zero integers (the integer coder stores them at 7,282:1)");
});

test("min_compress_bytes 0: small payloads go through the codecs, and the ratio still decides", async (t) => {
  const f = await putWith({ min_compress_bytes: 0 }, field(8, 8), { shape: [8, 8] });
  t.deepEqual(
    [...what(f), f.compression_ratio, f.tt],
    ["compressed", "tt", 256, 64, 4, { modes: [8, 8], ranks: [1, 1, 1] }],
    "256 bytes of float32: TT at ratio 4",
  );
  t.equal((await putWith({}, field(8, 8), { shape: [8, 8] })).verdict, "passthrough", "the same payload at the default: passthrough");
  const tiny = await putWith({ min_compress_bytes: 0 }, field(4, 4), { shape: [4, 4] });
  t.deepEqual([...what(tiny), tiny.compression_ratio], ["compressed", "tt", 64, 32, 2], "64 bytes of float32: TT at ratio 2");
  const ints = await putWith({ min_compress_bytes: 0 }, new Int32Array(100), { shape: [100] });
  t.deepEqual([...what(ints), ints.compression_ratio], ["lossless", "lossless", 400, 8, 50], "400 bytes of int32 zeros: lossless at ratio 50");
  t.equal((await putWith({}, new Int32Array(100), { shape: [100] })).verdict, "passthrough", "the same payload at the default: passthrough");
  t.deepEqual(what(await putWith({ min_compress_bytes: 0 }, Buffer.from("x"), {})), ["passthrough", "raw", 1, 1], "1 byte: deflate would grow it, so raw");
  t.deepEqual(
    what(await putWith({ min_compress_bytes: 0, min_compression_ratio: 4.0001 }, field(8, 8), { shape: [8, 8] })),
    ["passthrough", "raw", 256, 256],
    "the TT at ratio 4 under a minimum of 4.0001: raw",
  );
});

test("the policy options are validated", async (t) => {
  const bad: [Omit<StoreOptions, "path">, RegExp][] = [
    [{ min_compress_bytes: -1 }, /min_compress_bytes/],
    [{ min_compress_bytes: 1.5 }, /min_compress_bytes/],
    [{ min_compression_ratio: 0.5 }, /min_compression_ratio must be at least 1/],
    [{ min_compression_ratio: Number.NaN }, /min_compression_ratio/],
  ];
  for (const [o, re] of bad) {
    const e = await createStore({ path: ":memory:", ...o }).catch((x: unknown) => x);
    t.ok(e instanceof ValidationError && re.test(e.message), `${JSON.stringify(o)}: ${(e as Error).message}`);
  }
  t.equal((await putWith({ min_compression_ratio: 1 }, mod7(4096), { shape: [4096] })).verdict, "lossless", "min_compression_ratio 1 is allowed");
});
