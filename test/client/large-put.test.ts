// createClient and tensors past the upload limit: a large float32/float64 put is compressed by
// the client with the engine's codec and stored with put_cores (the answer carries the error
// measured here; the stored record is put_cores'), a compressed form still past the limit and a
// raw body past it are refused with the server's sentence (never a transport error), and
// progress is reported. Real gateway and engine on loopback, with a small upload limit.
import test from "tape";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { createClient, type TransferProgress } from "../../lib/client.js";
import { PayloadTooLargeError, ValidationError } from "../../lib/errors.js";
import { startStack, type Stack } from "../cli/stack.js";

const LIMIT = 256 * 1024;
let stack: Stack;
test.onFinish(() => stack?.close());

/** A smooth field (sums of a few separable waves), exactly what TT compresses well. */
function field(shape: [number, number, number], Arr: Float32ArrayConstructor | Float64ArrayConstructor = Float32Array): Float32Array | Float64Array {
  const [A, B, C] = shape;
  const d = new Arr(A * B * C);
  let i = 0;
  for (let a = 0; a < A; a++)
    for (let b = 0; b < B; b++) for (let c = 0; c < C; c++) d[i++] = Math.sin(a / 9) * Math.cos(b / 13) + 0.5 * Math.sin((b + c) / 17) + 1;
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
    maxAbs = Math.max(maxAbs, Math.abs(e));
  }
  return { rel: Math.sqrt(num / den), maxAbs };
}

test("setup: a gateway whose upload limit is 256 KiB", async (t) => {
  stack = await startStack(["ns"], { SVC_ENGINE_MAX_UPLOAD_BYTES: String(LIMIT) });
  t.pass(`gateway at ${stack.gateway}`);
});

for (const Arr of [Float32Array, Float64Array]) {
  const dtype = Arr === Float32Array ? "float32" : "float64";
  test(`a ${dtype} field 8-16x the upload limit is compressed by the client and stored`, async (t) => {
    const events: TransferProgress[] = [];
    const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey, localCompressBytes: 1024 * 1024, onProgress: (p) => events.push(p) });
    try {
      const shape: [number, number, number] = [64, 64, 128];
      const d = field(shape, Arr);
      t.ok(d.byteLength >= 8 * LIMIT, `${d.byteLength} bytes against a limit of ${LIMIT}`);
      const r = await c.put("ns", `f-${dtype}`, d, { shape, tolerance: 1e-3, metadata: { run: 1 } });
      t.deepEqual(
        [r.dtype, r.shape, r.bytes_in, r.verdict, r.compressed, r.fingerprint.codec],
        [dtype, shape, d.byteLength, "compressed", true, "tt"],
        "stored as a TT of the dense shape and dtype",
      );
      t.ok(r.bytes_stored * 20 < d.byteLength, `${d.byteLength} -> ${r.bytes_stored} bytes`);
      const served = await c.serve("ns", `f-${dtype}`);
      t.equal(served.dtype, dtype, "served in its dtype");
      const e = errors(d, served.data as Float32Array);
      t.ok(r.relative_error > 0 && r.relative_error <= 1e-3, `relative_error ${r.relative_error} within the tolerance`);
      t.ok(Math.abs(e.rel - r.relative_error) <= 1e-6 * Math.max(1, e.rel) + 1e-7, `the reported relative error is the served one (${e.rel})`);
      t.ok(Math.abs(e.maxAbs - r.max_abs_error) <= 1e-5 * e.maxAbs + 1e-7, `the reported max_abs_error is the served one (${e.maxAbs} vs ${r.max_abs_error})`);
      const info = await c.get("ns", `f-${dtype}`);
      t.deepEqual(
        [info.verdict, info.relative_error, info.metadata],
        ["compressed", 0, { run: 1 }],
        "the stored record is put_cores' (relative_error 0), with the metadata",
      );
      t.equal(events[0]?.phase, "compress", "progress: the compression is reported first");
      t.ok(
        events.some((p) => p.phase === "download" && p.done === p.total),
        "progress: the serve's download to its end",
      );
    } finally {
      await c.close();
    }
  });
}

test("all zeros past the limit: the exact rank-1 TT; an exact put of incompressible data: the server's 413 sentence", async (t) => {
  const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey, localCompressBytes: 1024 * 1024 });
  try {
    const z = await c.put("ns", "zeros", new Float32Array(64 * 64 * 64), { shape: [64, 64, 64] });
    t.deepEqual([z.verdict, z.relative_error, z.max_abs_error, z.tt?.ranks.every((r) => r === 1)], ["compressed", 0, 0, true], "zeros are a rank-1 TT");
    let seed = 7;
    const noise = Float32Array.from({ length: 64 * 64 * 64 }, () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32 - 0.5);
    // uniform random bits: no exact codec shrinks them by 1.2x, so the put goes as it is
    const e = await c.put("ns", "noise", noise, { shape: [64, 64, 64], tolerance: 0 }).catch((x: unknown) => x);
    t.ok(e instanceof PayloadTooLargeError, "413");
    t.match((e as Error).message, /upload limit of 262144 bytes \(SVC_ENGINE_MAX_UPLOAD_BYTES\)/, `the server's sentence: ${(e as Error).message}`);
  } finally {
    await c.close();
  }
});

test("a compressed form still past the limit: one sentence with the server's limit, the compressed size and the variable", async (t) => {
  // the cores of a smooth field are a few kB: a server that refuses every body stands for a limit below them
  const detail = "The request body of 4242 bytes is larger than the upload limit of 1000 bytes (SVC_ENGINE_MAX_UPLOAD_BYTES).";
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(413, { "content-type": "application/json" });
    res.end(JSON.stringify({ code: "payload_too_large", detail, request_id: "r-1" }));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const c = createClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: "k", localCompressBytes: 0 });
  try {
    const e = await c.put("ns", "k", field([32, 32, 32]), { shape: [32, 32, 32] }).catch((x: unknown) => x);
    t.ok(e instanceof PayloadTooLargeError, `413 (${(e as Error).constructor.name})`);
    const m = (e as Error).message;
    t.match(
      m,
      /^Even compressed to \d+ bytes of TT cores \(ratio [\d.]+\), the tensor is past the upload limit: The request body of 4242 bytes is larger than the upload limit of 1000 bytes \(SVC_ENGINE_MAX_UPLOAD_BYTES\); raise SVC_ENGINE_MAX_UPLOAD_BYTES on the engine and the gateway, or allow a larger tolerance or a smaller max_rank\.$/,
      m,
    );
    t.equal((e as PayloadTooLargeError).extra.request_id, "r-1", "with the server's request id");
  } finally {
    await c.close();
    await new Promise<void>((r) => server.close(() => r()));
  }
});

test("hostile inputs of a large put are refused before any request", async (t) => {
  const c = createClient({ baseUrl: stack.gateway, apiKey: stack.apiKey, localCompressBytes: 1024 });
  try {
    const d = field([16, 16, 16]);
    const cases: Array<[string, () => Promise<unknown>, RegExp]> = [
      [
        "NaN",
        () => {
          const x = new Float32Array(d);
          x[77] = NaN;
          return c.put("ns", "h", x, { shape: [16, 16, 16] });
        },
        /NaN or infinite/,
      ],
      [
        "Infinity",
        () => {
          const x = new Float64Array(4096);
          x.fill(1);
          x[4095] = -Infinity;
          return c.put("ns", "h", x, { shape: [4096] });
        },
        /NaN or infinite/,
      ],
      ["no shape", () => c.put("ns", "h", d), /shape is required for dtype float32/],
      ["a shape of other size", () => c.put("ns", "h", d, { shape: [16, 16, 15] }), /needs 15360/],
      [
        "a Buffer of odd length as float32",
        () => c.put("ns", "h", Buffer.alloc(4097), { dtype: "float32", shape: [1024] }),
        /not a whole number of float32|needs 4096/,
      ],
      [
        "a tolerance below float32's digits for codec tt",
        () => c.put("ns", "h", d, { shape: [16, 16, 16], tolerance: 1e-9, codec: "tt" }),
        /tolerance 1e-9 is below the TT engine's floor of 0.000001 for float32 data; use codec auto or pred/,
      ],
      ["a max_rank of 0", () => c.put("ns", "h", d, { shape: [16, 16, 16], max_rank: 0 }), /max_rank/],
    ];
    for (const [name, run, re] of cases) {
      const before = c.lastResponse;
      const e = await run().catch((x: unknown) => x);
      t.ok(e instanceof ValidationError && re.test((e as Error).message), `${name}: ${(e as Error).message}`);
      t.equal(c.lastResponse, before, `${name}: no request`);
    }
    for (const bad of [-1, 1.5, "64", true, null]) {
      t.throws(
        () => createClient({ baseUrl: stack.gateway, apiKey: "k", localCompressBytes: bad as never }),
        ValidationError,
        `localCompressBytes ${JSON.stringify(bad)} refused`,
      );
    }
  } finally {
    await c.close();
  }
});

test("a server that resets the connection mid-body: the client asks again with the headers alone and reads its 413", async (t) => {
  const detail = "The request body of 8388608 bytes is larger than the upload limit of 1024 bytes (SVC_ENGINE_MAX_UPLOAD_BYTES).";
  for (const mode of ["answer, then reset", "reset without an answer"]) {
    const seen: Array<string | undefined> = [];
    // answers from the headers, then destroys the socket with the body unread (the kernel resets
    // it); in the second mode the first request of each put is reset before any answer, so only
    // the client's headers-only question can read the refusal
    const server = createServer((req, res) => {
      seen.push(req.headers["content-length"]);
      if (mode === "reset without an answer" && seen.length % 2 === 1) {
        req.socket.destroy();
        return;
      }
      res.writeHead(413, { "content-type": "application/json", connection: "close", "x-request-id": "r-413" });
      res.end(JSON.stringify({ code: "payload_too_large", detail, request_id: "r-413" }), () => req.socket.destroy());
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const c = createClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: "k", maxRetries: 0 });
    try {
      for (let i = 0; i < 3; i++) {
        const e = await c.put("ns", "k", Buffer.alloc(8 * 1024 * 1024), { dtype: "bytes" }).catch((x: unknown) => x);
        t.ok(e instanceof PayloadTooLargeError && (e as Error).message === detail, `${mode}, try ${i + 1}: ${(e as Error).message}`);
        t.equal((e as PayloadTooLargeError).extra.request_id, "r-413", "with the server's request id");
      }
      t.ok(
        seen.every((l) => l === String(8 * 1024 * 1024)),
        "every request, the question included, announced the body's length",
      );
      if (mode === "reset without an answer") t.equal(seen.length, 6, "each put asked once more");
    } finally {
      await c.close();
      await new Promise<void>((r) => server.close(() => r()));
    }
  }
  const quiet = createServer((req) => {
    req.socket.destroy();
  });
  await new Promise<void>((r) => quiet.listen(0, "127.0.0.1", r));
  const c = createClient({ baseUrl: `http://127.0.0.1:${(quiet.address() as AddressInfo).port}`, apiKey: "k", maxRetries: 0 });
  try {
    const e = await c.put("ns", "k", Buffer.alloc(8 * 1024 * 1024), { dtype: "bytes" }).catch((x: unknown) => x);
    t.match(
      (e as Error).message,
      /could not be reached \((EPIPE|ECONNRESET|UND_ERR_SOCKET)\)/,
      `a server that never answers: the transport error stands (${(e as Error).message})`,
    );
  } finally {
    await c.close();
    await new Promise<void>((r) => quiet.close(() => r()));
  }
});
