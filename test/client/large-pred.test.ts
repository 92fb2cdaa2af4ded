// createClient and large tensors that are not low-rank: the client chooses the codec as the
// engine's auto does, compresses with the prediction codec and sends the stream as a put with
// encoding pred, so a 70 MiB noise-like float32 tensor passes a gateway whose upload limit is
// 32 MiB; the answer has the fields of a server-side put, the entry reads back within the bound,
// the put is metered as a put (1 CU); codec, tolerance and max_abs_error are honoured; putPred
// sends a caller's own stream; a stream still past the limit is one sentence. Real gateway and
// engine on loopback.
import test from "tape";
import { createClient, type SvcClient } from "../../lib/client.js";
import { ForbiddenError, PayloadTooLargeError, ValidationError } from "../../lib/errors.js";
import * as pred from "../../lib/pred.js";
import type { PutResult } from "../../lib/store/index.js";
import { startStack, type Stack } from "../cli/stack.js";
import { gaussian } from "../tt/helpers.js";

const MiB = 1024 * 1024;
let stack: Stack;
test.onFinish(() => stack?.close());

/** A slow wave under noise: no TT of it is small, the prediction codec shrinks it a few times. */
function noisy(n: number, seed: number): Float32Array {
  const g = gaussian(seed);
  const d = new Float32Array(n);
  for (let i = 0; i < n; i++) d[i] = Math.sin(i / 4000) + 0.05 * g();
  return d;
}

function errors(x: ArrayLike<number>, y: ArrayLike<number>): { rel: number; maxAbs: number } {
  let num = 0;
  let den = 0;
  let maxAbs = 0;
  for (let i = 0; i < x.length; i++) {
    const e = x[i]! - y[i]!;
    num += e * e;
    den += x[i]! * x[i]!;
    if (Math.abs(e) > maxAbs) maxAbs = Math.abs(e);
  }
  return { rel: Math.sqrt(num / den), maxAbs };
}

/** The field names of a put answer with the type of each value (fingerprint's and tt's inner fields too). */
function kinds(r: PutResult): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(r)) out[k] = v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
  for (const [k, v] of Object.entries(r.fingerprint)) out[`fingerprint.${k}`] = v === null ? "null" : typeof v;
  return out;
}

test("setup: a gateway whose upload limit is 32 MiB", async (t) => {
  stack = await startStack(["ns"], { SVC_ENGINE_MAX_UPLOAD_BYTES: String(32 * MiB) });
  t.pass(`gateway at ${stack.gateway}`);
});

test("a 70 MiB noise-like float32 tensor goes as a pred stream and reads back within the bound", async (t) => {
  const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey });
  try {
    const shape = [280, 256, 256];
    const d = noisy(280 * 256 * 256, 1);
    t.equal(d.byteLength, 70 * MiB, "70 MiB, over twice the upload limit");
    const r = await c.put("ns", "noise70", d, { shape, tolerance: 1e-3, metadata: { kind: "noise" } });
    t.deepEqual(
      [r.verdict, r.compressed, r.fingerprint.codec, r.dtype, r.shape, r.bytes_in, r.tt],
      ["compressed", true, "pred", "float32", shape, d.byteLength, null],
      "stored as a pred entry of the dense dtype and shape",
    );
    t.ok(r.bytes_stored < 32 * MiB && r.compression_ratio > 2, `${d.byteLength} -> ${r.bytes_stored} bytes (ratio ${r.compression_ratio.toFixed(2)})`);
    t.equal(c.lastResponse?.cus, 1, "charged as a put: 1 CU");
    t.ok(r.relative_error > 0 && r.relative_error <= 1e-3, `relative_error ${r.relative_error} within the tolerance`);
    const served = await c.serve("ns", "noise70");
    const e = errors(d, served.data as Float32Array);
    t.ok(e.rel <= 1e-3, `served within the tolerance (${e.rel})`);
    t.ok(Math.abs(e.rel - r.relative_error) <= 1e-6 * e.rel, `the answer's relative_error is the served one (${e.rel} vs ${r.relative_error})`);
    t.equal(e.maxAbs, r.max_abs_error, `the answer's max_abs_error is the served one (${e.maxAbs})`);
    const info = await c.get("ns", "noise70");
    t.deepEqual(
      [info.verdict, info.relative_error, info.max_abs_error, info.metadata, info.fingerprint.codec],
      ["compressed", r.relative_error, r.max_abs_error, { kind: "noise" }, "pred"],
      "the stored record keeps the errors measured by the client, and the metadata",
    );
    // a server-side put of the same kind of data: the same fields, of the same types
    const small = noisy(64 * 1024, 2);
    const server = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey, localCompressBytes: false });
    try {
      const s = await server.put("ns", "server-side", small, { shape: [64, 1024], codec: "pred" });
      t.equal(s.fingerprint.codec, "pred", "the server-side put stored a pred entry");
      t.deepEqual(kinds(r), kinds(s), "the client-side answer has the server-side answer's fields, of the same types");
    } finally {
      await server.close();
    }
  } finally {
    await c.close();
  }
});

test("the client's choice follows the options: codec, tolerance, max_abs_error", async (t) => {
  const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey, localCompressBytes: MiB });
  try {
    const d = noisy(2 * 1024 * 1024, 3);
    const a = await c.put("ns", "abs", d, { shape: [2048, 1024], max_abs_error: 0.01 });
    const served = await c.serve("ns", "abs");
    const e = errors(d, served.data as Float32Array);
    t.ok(
      a.fingerprint.codec === "pred" && a.max_abs_error <= 0.01 && e.maxAbs <= 0.01 && e.maxAbs === a.max_abs_error,
      `max_abs_error 0.01 alone: pred, every element within it (${e.maxAbs})`,
    );
    const both = await c.put("ns", "both", d, { shape: [2048, 1024], max_abs_error: 0.05, tolerance: 1e-3 });
    t.ok(both.relative_error <= 1e-3 && both.max_abs_error <= 0.05, `both bounds hold (${both.relative_error}, ${both.max_abs_error})`);
    const smooth = Float32Array.from({ length: 2 * 1024 * 1024 }, (_, i) => Math.sin(Math.floor(i / 1024) / 40) * Math.cos((i % 1024) / 30));
    const auto = await c.put("ns", "smooth-auto", smooth, { shape: [2048, 1024] });
    t.equal(auto.fingerprint.codec, "tt", "a smooth field under auto: TT cores");
    const forced = await c.put("ns", "smooth-pred", smooth, { shape: [2048, 1024], codec: "pred" });
    t.equal(forced.fingerprint.codec, "pred", "the same field with codec pred: a pred stream");
    const exact = await c.put("ns", "smooth-exact", smooth, { shape: [2048, 1024], codec: "lossless" });
    const back = await c.serve("ns", "smooth-exact");
    t.deepEqual(
      [exact.verdict, exact.fingerprint.codec, exact.relative_error, exact.max_abs_error],
      ["lossless", "pred", 0, 0],
      "codec lossless: the prediction codec's exact stream",
    );
    t.ok(Buffer.from((back.data as Float32Array).buffer).equals(Buffer.from(smooth.buffer)), "served bit-exact");
    const tt = await c.put("ns", "noise-tt", d, { shape: [2048, 1024], codec: "tt" });
    t.deepEqual([tt.verdict, tt.fingerprint.codec], ["passthrough", "raw"], "noise with codec tt: no TT shrinks it, so it goes as it is and is stored raw");
  } finally {
    await c.close();
  }
});

test("putPred: a caller's own stream; bad input refused before any request; the gateway's ACL", async (t) => {
  const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey });
  try {
    const d = noisy(64 * 1024, 4);
    const r = await pred.compress(d, { shape: [256, 256], tolerance: 1e-2 });
    const p = await c.putPred("ns", "own", r.stream, { relative_error: r.relative_error, max_abs_error: r.max_abs_error, metadata: { big: "é".repeat(9000) } });
    t.deepEqual(
      [p.verdict, p.shape, p.dtype, p.relative_error, p.max_abs_error, p.bytes_stored],
      ["compressed", [256, 256], "float32", r.relative_error, r.max_abs_error, r.stream.byteLength],
      "dtype and shape from the header, the declared errors, metadata past the header's size (JSON form)",
    );
    t.equal((await c.get("ns", "own")).metadata.big, "é".repeat(9000), "the metadata arrived");
    const before = c.lastResponse;
    const cases: Array<[string, () => Promise<unknown>, RegExp]> = [
      ["no declared errors", () => c.putPred("ns", "x", r.stream, {} as never), /relative_error/],
      ["a negative declared error", () => c.putPred("ns", "x", r.stream, { relative_error: -1, max_abs_error: 0 }), /relative_error must be at least 0/],
      ["not a stream", () => c.putPred("ns", "x", [1, 2] as never, { relative_error: 0, max_abs_error: 0 }), /stream must be a Uint8Array/],
      ["random bytes", () => c.putPred("ns", "x", new Uint8Array(64), { relative_error: 0, max_abs_error: 0 }), /not a valid pred stream/],
      ["a dtype of the wrong kind", () => c.putPred("ns", "x", r.stream, { relative_error: 0, max_abs_error: 0, dtype: "int8" as never }), /dtype/],
    ];
    for (const [name, run, re] of cases) {
      const e = await run().catch((x: unknown) => x);
      t.ok(e instanceof ValidationError && re.test((e as Error).message), `${name}: ${(e as Error).message}`);
    }
    t.equal(c.lastResponse, before, "none of them sent a request");
    const lie = await c.putPred("ns", "x", r.stream, { relative_error: 0, max_abs_error: 0, shape: [128, 512] }).catch((x: unknown) => x);
    t.ok(
      lie instanceof ValidationError && /does not match the stream's/.test((lie as Error).message),
      `a shape that is not the stream's: the engine's 400 (${(lie as Error).message})`,
    );
    // the gateway checks the fields with the engine's schema: refused before forwarding, nothing charged
    const raw = await fetch(`${stack.gateway}/v1/put?namespace=ns&key=x&dtype=float32&shape=256,256&encoding=pred&tolerance=0.01`, {
      method: "POST",
      headers: { "x-api-key": stack.apiKey, "content-type": "application/octet-stream" },
      body: r.stream,
    });
    const body = (await raw.json()) as { detail: string };
    t.deepEqual(
      [raw.status, raw.headers.get("x-svc-cus"), body.detail],
      [400, "0", "tolerance does not apply to a put with encoding pred, whose stream carries its own coding and bounds."],
      "the gateway refuses tolerance with encoding pred: 400, 0 CUs",
    );
    const foreign = await c.putPred("other", "x", r.stream, { relative_error: r.relative_error, max_abs_error: r.max_abs_error }).catch((x: unknown) => x);
    t.ok(foreign instanceof ForbiddenError, `a namespace outside the tenant's: 403 (${(foreign as Error).message})`);
  } finally {
    await c.close();
  }
});

test("a pred stream still past the limit: one sentence with the compressed size, the server's limit and the variable", async (t) => {
  const small = await startStack(["ns"], { SVC_ENGINE_MAX_UPLOAD_BYTES: String(256 * 1024) });
  let c: SvcClient | undefined;
  try {
    c = createClient({ baseUrl: small.gateway, apiKey: small.apiKey, localCompressBytes: MiB });
    const d = noisy(1024 * 1024, 5);
    const e = await c.put("ns", "k", d, { shape: [1024, 1024], tolerance: 1e-4 }).catch((x: unknown) => x);
    t.ok(e instanceof PayloadTooLargeError, `413 (${(e as Error).constructor.name})`);
    t.match(
      (e as Error).message,
      /^Even compressed to \d+ bytes of pred stream \(ratio [\d.]+\), the tensor is past the upload limit: .*upload limit of 262144 bytes \(SVC_ENGINE_MAX_UPLOAD_BYTES\); raise SVC_ENGINE_MAX_UPLOAD_BYTES on the engine and the gateway, or allow a larger tolerance or max_abs_error\.$/,
      (e as Error).message,
    );
  } finally {
    await c?.close();
    await small.close();
  }
});
