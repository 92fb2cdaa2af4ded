// The pred-encoded form of put on the engine (encoding pred: the body is a stream of the
// prediction codec, stored as it is): the answer carries the put's fields with the writer's
// declared errors, serve gives back exactly what the stream decodes to, the JSON form and the
// octet-stream form agree, and hostile bodies (truncated, random, a header that lies, a stream of
// another shape or dtype, huge declared sizes, values that decode to NaN, declared errors the
// stream contradicts, randomly corrupted streams) are each 400 with one sentence, never a crash;
// the upload limit (413), the memory budget, if_version, metadata and Idempotency-Key apply as to
// any put. Real HTTP on loopback, in-memory store.
import test from "tape";
import http from "node:http";
import type { AddressInfo } from "node:net";
import * as pred from "../../lib/pred.js";
import { createStore, type Store } from "../../lib/store/index.js";
import { createApp } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";
import { gaussian, rng } from "../tt/helpers.js";

const KEY = "svc-service-key-" + "0123456789abcdef".repeat(3);

async function engine(env: NodeJS.ProcessEnv = {}): Promise<{ url: string; store: Store; close(): Promise<void> }> {
  const store = await createStore({ path: ":memory:" });
  const config = loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_LOG_LEVEL: "silent", ...env });
  const server = http.createServer(createApp({ store, config, gpu: { unavailable: "no GPU in this test" } }));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    store,
    close: async () => {
      await new Promise<void>((r) => server.close(() => r()));
      await store.close();
    },
  };
}

interface Answer {
  status: number;
  json: Record<string, unknown>;
  headers: Headers;
}

async function call(url: string, path: string, init: { body?: Uint8Array | string; type?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  const res = await fetch(url + path, {
    method: init.body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", ...(init.type ? { "content-type": init.type } : {}), ...init.headers },
    body: init.body,
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown>, headers: res.headers };
}

const octet = (url: string, query: string, body: Uint8Array, headers: Record<string, string> = {}) =>
  call(url, `/v1/put?${query}`, { body, type: "application/octet-stream", headers });

/** Noise around a slow wave: no TT of it is small, the prediction codec shrinks it a few times. */
function noisy(n: number, seed: number): Float32Array {
  const g = gaussian(seed);
  return Float32Array.from({ length: n }, (_, i) => Math.sin(i / 300) + 0.05 * g());
}

const SHAPE = [64, 1024];
const data = noisy(64 * 1024, 1);
let enc: pred.PredResult;
let lossless: pred.PredResult;

const q = (extra = "", r: pred.PredResult = enc) =>
  `namespace=ns&key=k&dtype=float32&shape=${SHAPE.join(",")}&encoding=pred&declared_relative_error=${r.relative_error}&declared_max_abs_error=${r.max_abs_error}${extra}`;

/** A one-sentence 400 detail. */
function refusal(t: test.Test, a: Answer, what: string, pattern?: RegExp): void {
  const detail = String(a.json.detail ?? "");
  t.ok(
    a.status === 400 && a.json.code === "bad_request" && /^[A-Za-z][^\n]*\.$/.test(detail) && (pattern ? pattern.test(detail) : true),
    `${what}: ${a.status} ${detail}`,
  );
}

test("setup: a pred stream of a noise-like field, lossy and lossless", async (t) => {
  enc = await pred.compress(data, { shape: SHAPE, tolerance: 1e-3 });
  lossless = await pred.compress(data, { shape: SHAPE, max_abs_error: 0 });
  t.ok(enc.compression_ratio > 1.2 && enc.relative_error <= 1e-3, `ratio ${enc.compression_ratio.toFixed(2)}, relative error ${enc.relative_error}`);
  t.ok(pred.info(lossless.stream).lossless, "the lossless stream says so in its header");
});

test("an octet-stream put of a pred stream is stored as it is, with the put's fields", async (t) => {
  const e = await engine();
  try {
    const meta = JSON.stringify({ run: 7, läuft: true }).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
    const a = await octet(e.url, q(), enc.stream, { "x-svc-metadata": meta });
    t.equal(a.status, 201, "201");
    const r = a.json;
    t.deepEqual(
      [r.namespace, r.key, r.version, r.verdict, r.compressed, r.dtype, r.shape, r.tt, r.bytes_in, r.bytes_stored],
      ["ns", "k", 1, "compressed", true, "float32", SHAPE, null, data.byteLength, enc.stream.byteLength],
      "version 1, verdict compressed, the dense dtype and shape, bytes in and stored",
    );
    t.equal(r.relative_error, enc.relative_error, "relative_error: the declared one");
    t.equal(r.max_abs_error, enc.max_abs_error, "max_abs_error: the declared one");
    t.equal(r.compression_ratio, data.byteLength / enc.stream.byteLength, "compression_ratio: dense bytes over stream bytes");
    const fp = r.fingerprint as { codec: string; sha256: string; norm: number; tt: unknown };
    const { createHash } = await import("node:crypto");
    t.equal(fp.codec, "pred", "fingerprint.codec pred");
    t.equal(fp.sha256, createHash("sha256").update(enc.stream).digest("hex"), "fingerprint.sha256 of the stream as sent: not re-encoded");
    const dec = await pred.decompress(enc.stream);
    let s = 0;
    for (const v of dec) s += v * v;
    t.ok(Math.abs(fp.norm - Math.sqrt(s)) <= 1e-9 * Math.sqrt(s), `fingerprint.norm is the decoded values' (${fp.norm})`);
    const info = await call(e.url, "/v1/get/ns/k");
    t.deepEqual(
      [info.json.verdict, info.json.relative_error, info.json.max_abs_error, info.json.metadata],
      ["compressed", enc.relative_error, enc.max_abs_error, { run: 7, läuft: true }],
      "get: the same verdict and errors, the metadata",
    );
    const served = await fetch(`${e.url}/v1/serve`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "x-svc-tenant": "acme", "content-type": "application/json", accept: "application/octet-stream" },
      body: JSON.stringify({ namespace: "ns", key: "k" }),
    });
    const bytes = Buffer.from(await served.arrayBuffer());
    t.ok(bytes.equals(Buffer.from(dec.buffer, dec.byteOffset, dec.byteLength)), "serve gives back exactly what the stream decodes to");
    const decoded = await pred.decompress(enc.stream);
    let err = 0;
    for (let i = 0; i < decoded.length; i++) err = Math.max(err, Math.abs(decoded[i]! - data[i]!));
    t.ok(err <= enc.max_abs_error, `the served values are within the declared max_abs_error of the original (${err})`);
    const slice = await call(e.url, "/v1/serve", {
      body: JSON.stringify({
        namespace: "ns",
        key: "k",
        slice: [
          [3, 5],
          [0, 1024],
        ],
      }),
      type: "application/json",
    });
    const part = new Float32Array(Buffer.from(String(slice.json.data_b64), "base64").buffer.slice(0));
    t.deepEqual(Array.from(part.subarray(0, 8)), Array.from(dec.subarray(3 * 1024, 3 * 1024 + 8)), "a slice of the entry decodes from the stored stream");
  } finally {
    await e.close();
  }
});

test("the JSON form (data_b64 with encoding pred) and a lossless stream", async (t) => {
  const e = await engine();
  try {
    const body = JSON.stringify({
      namespace: "ns",
      key: "j",
      dtype: "float32",
      shape: SHAPE,
      data_b64: Buffer.from(enc.stream).toString("base64"),
      encoding: "pred",
      declared_relative_error: enc.relative_error,
      declared_max_abs_error: enc.max_abs_error,
      metadata: { big: "x".repeat(10_000) },
    });
    const a = await call(e.url, "/v1/put", { body, type: "application/json" });
    t.deepEqual(
      [a.status, a.json.verdict, (a.json.fingerprint as { codec: string }).codec, a.json.bytes_stored],
      [201, "compressed", "pred", enc.stream.byteLength],
      "JSON form: 201, a pred entry of the stream",
    );
    const b = await octet(e.url, q("", lossless).replace("key=k", "key=l"), lossless.stream);
    t.deepEqual(
      [b.status, b.json.verdict, b.json.relative_error, b.json.max_abs_error],
      [201, "lossless", 0, 0],
      "a lossless stream: verdict lossless, errors 0",
    );
    const served = await call(e.url, "/v1/serve", { body: JSON.stringify({ namespace: "ns", key: "l" }), type: "application/json" });
    t.ok(Buffer.from(String(served.json.data_b64), "base64").equals(Buffer.from(data.buffer)), "served bit-exact");
  } finally {
    await e.close();
  }
});

test("hostile pred bodies: each 400 with one sentence, and the engine goes on", async (t) => {
  const e = await engine();
  try {
    const s = Buffer.from(enc.stream);
    refusal(t, await octet(e.url, q(), s.subarray(0, s.length - 7)), "truncated", /not a valid pred stream/);
    refusal(t, await octet(e.url, q(), s.subarray(0, 20)), "the header cut short", /not a valid pred stream/);
    refusal(t, await octet(e.url, q(), new Uint8Array(0)), "empty body", /not a valid pred stream/);
    const r = rng(5);
    refusal(
      t,
      await octet(
        e.url,
        q(),
        Uint8Array.from({ length: 4096 }, () => Math.floor(r() * 256)),
      ),
      "random bytes",
      /not a valid pred stream/,
    );
    const magic = Buffer.concat([Buffer.from("SVCP"), Buffer.from(Uint8Array.from({ length: 4092 }, () => Math.floor(r() * 256)))]);
    refusal(t, await octet(e.url, q(), magic), "the magic then random bytes", /not a valid pred stream/);
    // the header's shape at byte 16 (after magic, version, dtype, flags, rank and eb): 2^40 rows
    const huge = Buffer.from(s);
    huge.writeBigUInt64LE(1n << 40n, 16);
    refusal(t, await octet(e.url, q(), huge), "a header declaring 2^40 rows", /not a valid pred stream/);
    const huge30 = Buffer.from(s);
    huge30.writeBigUInt64LE(1n << 30n, 16);
    refusal(
      t,
      await octet(e.url, q().replace(`shape=${SHAPE.join(",")}`, `shape=${2 ** 30},1024`), huge30),
      "a header and a query both declaring 2^30 x 1024 elements (4 TiB)",
      /not a valid pred stream/,
    );
    // a header that lies about its shape within the same element count
    const lying = Buffer.from(s);
    lying.writeBigUInt64LE(1024n, 16);
    lying.writeBigUInt64LE(64n, 24);
    refusal(t, await octet(e.url, q(), lying), "a header whose shape is not the request's", /shape|not a valid pred stream/);
    // a block table entry far larger than the stream
    const table = Buffer.from(s);
    const h = pred.info(enc.stream);
    const tableAt = 16 + 8 * h.shape.length + 4 * h.block_shape.length;
    table.writeUInt32LE(0xfffffff0, tableAt);
    refusal(t, await octet(e.url, q(), table), "a block length of 4 GiB", /not a valid pred stream/);
    const bad = Buffer.from(s);
    bad[5] = 9;
    refusal(t, await octet(e.url, q(), bad), "an unknown dtype code in the header", /not a valid pred stream/);
    refusal(t, await octet(e.url, q().replace("dtype=float32", "dtype=float64"), s), "dtype float64 for a float32 stream", /dtype float64 does not match/);
    refusal(t, await octet(e.url, q().replace("dtype=float32", "dtype=int32"), s), "dtype int32", /dtype must be float32 or float64/);
    refusal(
      t,
      await octet(e.url, q().replace(`shape=${SHAPE.join(",")}`, "shape=32,2048"), s),
      "a valid stream for another shape",
      /does not match the stream's/,
    );
    const other = await pred.compress(noisy(4096, 2), { shape: [4096], tolerance: 1e-3 });
    refusal(t, await octet(e.url, q(), other.stream), "a valid stream of another tensor", /does not match the stream's/);
    refusal(t, await octet(e.url, q().replace(/&declared_relative_error=[^&]+/, ""), s), "no declared relative error", /declared_relative_error is required/);
    refusal(t, await octet(e.url, q().replace(/&shape=[^&]+/, ""), s), "no shape", /shape is required/);
    refusal(t, await octet(e.url, q("&tolerance=0.01"), s), "tolerance with encoding pred", /tolerance does not apply/);
    refusal(t, await octet(e.url, q("&codec=tt"), s), "codec with encoding pred", /codec does not apply/);
    refusal(
      t,
      await octet(e.url, q().replace(/declared_max_abs_error=[^&]+/, "declared_max_abs_error=-1"), s),
      "a negative declared error",
      /decimal number|at least 0/,
    );
    refusal(
      t,
      await octet(e.url, q().replace(/declared_max_abs_error=[^&]+/, "declared_max_abs_error=1"), s),
      "a declared max_abs_error above the stream's own bound",
      /above the stream's own pointwise bound/,
    );
    refusal(
      t,
      await octet(e.url, "namespace=ns&key=k&dtype=float32&shape=64,1024&declared_relative_error=0", new Uint8Array(data.buffer)),
      "declared errors without encoding",
      /applies only/,
    );
    refusal(
      t,
      await octet(e.url, q("", lossless).replace(/declared_relative_error=[^&]+/, "declared_relative_error=0.5"), lossless.stream),
      "a lossless stream with a declared error",
      /lossless/,
    );
    refusal(t, await octet(e.url, q().replace("encoding=pred", "encoding=zfp"), s), "an unknown encoding", /encoding must be pred/);

    // values that decode to NaN: a stream of raw-coded noise with its first value's bits replaced
    const noise = Float32Array.from({ length: 4096 }, () => r() * 2 - 1);
    const raw = await pred.compress(noise, { shape: [4096], max_abs_error: 1e-30 });
    const at = Buffer.from(raw.stream).indexOf(Buffer.from(noise.buffer, 0, 4));
    if (at < 0) t.skip("the noise's first value was not stored raw in the stream");
    else {
      const nan = Buffer.from(raw.stream);
      nan.writeUInt32LE(0x7fc00000, at);
      refusal(
        t,
        await octet(e.url, `namespace=ns&key=n&dtype=float32&shape=4096&encoding=pred&declared_relative_error=0&declared_max_abs_error=0`, nan),
        "a stream that decodes to NaN",
        /NaN or infinite/,
      );
    }

    // randomly corrupted streams: 201 (a well-formed stream of finite values) or 400, nothing else
    const statuses = new Map<number, number>();
    for (let i = 0; i < 60; i++) {
      const c = Buffer.from(s);
      const flips = 1 + Math.floor(r() * 8);
      for (let f = 0; f < flips; f++) c[Math.floor(r() * c.length)] ^= 1 << Math.floor(r() * 8);
      const a = await octet(e.url, q().replace("key=k", `key=fuzz${i}`), c);
      statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
    }
    t.ok(
      [...statuses.keys()].every((st) => st === 201 || st === 400),
      `60 corrupted streams: ${JSON.stringify([...statuses])}`,
    );
    const after = await octet(e.url, q(), s);
    t.equal(after.status, 201, "the engine still stores a valid stream afterwards");
  } finally {
    await e.close();
  }
});

test("limits: the upload limit (413) applies to the stream, the memory budget to what it decodes to", async (t) => {
  const e = await engine({ SVC_ENGINE_MAX_UPLOAD_BYTES: String(32 * 1024), SVC_ENGINE_MEMORY_BUDGET_BYTES: String(16 * 1024 * 1024) });
  try {
    const a = await octet(e.url, q(), enc.stream);
    t.ok(
      a.status === 413 && a.json.code === "payload_too_large" && /SVC_ENGINE_MAX_UPLOAD_BYTES/.test(String(a.json.detail)),
      `a stream of ${enc.stream.byteLength} bytes over a 32 KiB limit: ${a.status} ${a.json.detail}`,
    );
    // 32 MiB of smooth values (a stream of a few kB) against a 16 MiB budget
    const n = 8 * 1024 * 1024;
    const smooth = Float32Array.from({ length: n }, (_, i) => Math.sin(i / 5000));
    const big = await pred.compress(smooth, { shape: [n], tolerance: 1e-2 });
    t.ok(big.stream.byteLength < 32 * 1024, `the stream is ${big.stream.byteLength} bytes`);
    const b = await octet(
      e.url,
      `namespace=ns&key=b&dtype=float32&shape=${n}&encoding=pred&declared_relative_error=${big.relative_error}&declared_max_abs_error=${big.max_abs_error}`,
      big.stream,
    );
    refusal(t, b, "a stream decoding to 32 MiB past a 16 MiB budget", /SVC_ENGINE_MEMORY_BUDGET_BYTES/);
    t.equal((await call(e.url, "/v1/get/ns/b")).status, 404, "nothing stored");
  } finally {
    await e.close();
  }
});

test("if_version and Idempotency-Key apply as to any put", async (t) => {
  const e = await engine();
  try {
    const first = await octet(e.url, q("&if_version=0"), enc.stream, { "idempotency-key": "pred-1" });
    t.equal(first.status, 201, "first put (if_version 0)");
    const again = await octet(e.url, q("&if_version=0"), enc.stream, { "idempotency-key": "pred-1" });
    t.deepEqual(
      [again.status, again.headers.get("idempotent-replayed"), again.json.version],
      [201, "true", 1],
      "the same request with the same key: the stored answer, replayed",
    );
    const other = await octet(e.url, q("&if_version=1"), enc.stream, { "idempotency-key": "pred-1" });
    t.deepEqual([other.status, other.json.code], [422, "idempotency_key_reused"], "another request with the same key: 422");
    const conflict = await octet(e.url, q("&if_version=0"), enc.stream);
    t.deepEqual([conflict.status, conflict.json.code], [409, "version_conflict"], "if_version 0 on an existing key: 409");
    const second = await octet(e.url, q("&if_version=1"), enc.stream);
    t.deepEqual([second.status, second.json.version], [201, 2], "if_version 1: version 2");
    const info = await call(e.url, "/v1/get/ns/k");
    t.deepEqual(info.json.versions, [1, 2], "two versions, no third from the replay");
  } finally {
    await e.close();
  }
});
