// Large bodies are worked on in worker threads (server/http/offload.ts): the result and every
// refusal are the same as on the event loop (server/http/body-prepare.ts), bodies below the
// threshold never leave the loop, the bytes moved to a worker come back whole, a pool whose
// workers were stopped starts new ones, and a small body never waits behind large ones.
import test from "tape";
import { createHash, randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { ValidationError } from "../../lib/errors.js";
import { prepareEngineJson, prepareGatewayJson, requestHash } from "../../server/http/body-prepare.js";
import {
  base64Bytes,
  closeOffload,
  hashBody,
  OFFLOAD_HEAP_MIB,
  OFFLOAD_LARGE_BYTES,
  OFFLOAD_MIN_BYTES,
  OFFLOAD_THREADS,
  offloadQueue,
  offloadStats,
  prepareEngineBody,
  prepareGatewayBody,
  setOffloadHeap,
} from "../../server/http/offload.js";
import { MAX_JSON_VECTOR } from "../../lib/schemas.js";

const big = (n = OFFLOAD_MIN_BYTES * 2) => randomBytes(n);
const json = (v: unknown) => Buffer.from(JSON.stringify(v));

/** The outcome of a call: its value, or the class, message and field of its error. */
async function outcome(f: () => unknown): Promise<{ value?: unknown; error?: { cls: string; message: string; field?: string } }> {
  try {
    return { value: await f() };
  } catch (e) {
    return { error: { cls: (e as Error).constructor.name, message: (e as Error).message, field: (e as ValidationError).field } };
  }
}

/** Typed arrays compared by element type (a Buffer is a Uint8Array), length and the SHA-256 of their bytes. */
function canon(v: unknown): unknown {
  if (ArrayBuffer.isView(v)) {
    const type = Buffer.isBuffer(v) ? "Uint8Array" : v.constructor.name;
    return {
      type,
      bytes: v.byteLength,
      sha256: createHash("sha256")
        .update(new Uint8Array(v.buffer, v.byteOffset, v.byteLength))
        .digest("hex"),
    };
  }
  if (Array.isArray(v)) return v.map(canon);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, canon(x)]));
  return v;
}

test("engine bodies: the worker's result equals the event loop's, payloads decoded", async (t) => {
  const payload = big();
  const core = new Float32Array(4 * 5 * 3).fill(0.5);
  const cases: [string, string, unknown][] = [
    ["put", "/v1/put", { namespace: "ns", key: "k", dtype: "bytes", data_b64: payload.toString("base64"), metadata: { a: [1, "x"] } }],
    [
      "put_cores",
      "/v1/put_cores",
      {
        namespace: "ns",
        key: "k",
        cores: [
          { shape: [1, 65_536, 2], data_b64: Buffer.from(new Float32Array(131_072).fill(0.125).buffer).toString("base64") },
          { shape: [2, 3, 1], data_b64: Buffer.from(new Float64Array(6).fill(2).buffer).toString("base64"), dtype: "float64" },
        ],
        shape: [196_608],
        metadata: { pad: "p".repeat(60_000) },
      },
    ],
    [
      "put_cores_batch",
      "/v1/put_cores_batch",
      {
        namespace: "ns",
        items: Array.from({ length: 40 }, (_, i) => ({
          key: `k${i}`,
          cores: [{ shape: [1, 60, 1], data_b64: Buffer.from(core.buffer, 0, 240).toString("base64") }],
          metadata: { pad: "q".repeat(8_000) },
        })),
      },
    ],
    [
      "vector_b64 float64",
      "/v1/query/vector",
      { namespace: "ns", vector_b64: Buffer.from(new Float64Array(80_000).fill(0.25).buffer).toString("base64"), dtype: "float64", shape: [80_000], k: 3 },
    ],
    ["vector of numbers, float32", "/v1/query/vector", { namespace: "ns", vector: Array.from({ length: 90_000 }, (_, i) => i / 7), dtype: "float32", k: 2 }],
    ["vector of numbers", "/v1/query/vector", { namespace: "ns", vector: Array.from({ length: 90_000 }, (_, i) => -i / 3), k: 2 }],
    ["search (parsed, not checked)", "/v1/search", { namespace: "ns", filter: { tag: { $in: Array.from({ length: 40_000 }, (_, i) => `tag-${i}`) } } }],
  ];
  for (const [what, path, body] of cases) {
    const raw = json(body);
    t.ok(raw.byteLength >= OFFLOAD_MIN_BYTES, `${what}: ${raw.byteLength} bytes, at least the threshold`);
    const inline = await outcome(() => prepareEngineJson(path, raw));
    const before = offloadStats.jobs;
    const off = await outcome(async () => (await prepareEngineBody(path, Buffer.from(raw))).value);
    t.equal(offloadStats.jobs, before + 1, `${what}: worked on in a worker`);
    t.notOk(off.error, `${what}: accepted${off.error ? ` (${off.error.message})` : ""}`);
    t.deepEqual(canon(off.value), canon(inline.value), `${what}: the same prepared body`);
  }
  const put = (await prepareEngineBody("/v1/put", json(cases[0]![2]))).value as { data: Uint8Array; metadata: unknown };
  t.ok(Buffer.from(put.data).equals(payload), "put: the decoded payload is the sent one");
  const vec = (await prepareEngineBody("/v1/query/vector", json(cases[4]![2]))).value as { vector: Float32Array };
  t.ok(vec.vector instanceof Float32Array && vec.vector.length === 90_000, "vector with dtype float32: a Float32Array");
});

test("engine bodies: every refusal is the same sentence and field from the worker", async (t) => {
  const b64 = big().toString("base64");
  const good = `{"namespace":"ns","key":"k","dtype":"bytes","data_b64":"${b64}"`;
  const hostile: [string, string, Buffer][] = [
    ["a member named twice after the payload", "/v1/put", Buffer.from(`${good},"key":"k2"}`)],
    ["__proto__ after the payload", "/v1/put", Buffer.from(`${good},"metadata":{"__proto__":{"x":1}}}`)],
    ["invalid UTF-8 at the end", "/v1/put", Buffer.concat([Buffer.from(`${good},"metadata":{"a":"`), Buffer.from([0xc3, 0x28]), Buffer.from(`"}}`)])],
    ["truncated JSON", "/v1/put", Buffer.from(good)],
    ["a bad base64 character at the very end", "/v1/put", Buffer.from(`{"namespace":"ns","key":"k","data_b64":"${b64.slice(0, -4)}AA!="}`)],
    ["base64 of a wrong length", "/v1/put", Buffer.from(`{"namespace":"ns","key":"k","data_b64":"${b64}A"}`)],
    ["an unknown field", "/v1/put", Buffer.from(`${good},"tolerence":0.1}`)],
    ["a bad namespace", "/v1/put", Buffer.from(`{"namespace":"../etc","key":"k","data_b64":"${b64}"}`)],
    ["nesting past the limit", "/v1/put", Buffer.from(`${good},"metadata":${"[".repeat(70)}${"]".repeat(70)}}`)],
    ["a JSON array", "/v1/put", Buffer.from(`["${b64}"]`)],
    [
      "a bad batch item",
      "/v1/put_cores_batch",
      Buffer.from(
        `{"namespace":"ns","items":[{"key":"a","cores":[{"shape":[1,2,1],"data_b64":"AAAAAAAAAAA="}]},{"key":"b","cores":[{"shape":[1,2],"data_b64":"${b64}"}]}]}`,
      ),
    ],
    [
      "vector_b64 not whole values",
      "/v1/query/vector",
      Buffer.from(`{"namespace":"ns","k":1,"dtype":"float64","vector_b64":"${b64.slice(0, 4 * 100_000)}AAAA"}`),
    ],
    ["vector and vector_b64 together", "/v1/query/vector", Buffer.from(`{"namespace":"ns","k":1,"vector":[1],"vector_b64":"${b64}"}`)],
    ["a number that overflows", "/v1/query/vector", Buffer.from(`{"namespace":"ns","k":1,"vector":[1e999${",1".repeat(200_000)}]}`)],
  ];
  for (const [what, path, raw] of hostile) {
    t.ok(raw.byteLength >= OFFLOAD_MIN_BYTES, `${what}: above the threshold`);
    const inline = await outcome(() => prepareEngineJson(path, raw));
    const off = await outcome(() => prepareEngineBody(path, Buffer.from(raw)));
    t.ok(inline.error?.cls === "ValidationError", `${what}: refused on the loop (${inline.error?.message})`);
    t.deepEqual(off.error, inline.error, `${what}: the same ValidationError from the worker`);
  }
});

test("small bodies stay on the event loop; hashes and base64 agree; moved bytes come back whole", async (t) => {
  const small = json({ namespace: "ns", key: "k", data_b64: "AAAA" });
  const before = offloadStats.jobs;
  const r = await prepareEngineBody("/v1/put", small, "POST\n/v1/put\napplication/json\n\n");
  t.equal(offloadStats.jobs, before, "a small body is not sent to a worker");
  t.equal(r.hash, requestHash("POST\n/v1/put\napplication/json\n\n", small), "its request hash");

  const body = big(3 * OFFLOAD_MIN_BYTES + 1);
  const copy = Buffer.from(body);
  const prefix = "POST\n/v1/put?namespace=ns&key=k\napplication/octet-stream\n\n";
  const h = await hashBody(prefix, body);
  t.equal(h.hash, requestHash(prefix, copy), "a large body's request hash equals the one taken on the loop");
  t.ok(h.bytes.equals(copy) && Buffer.isBuffer(h.bytes), "the body comes back as a Buffer, byte for byte");

  const raw = json({ namespace: "team-a", a: "x", b: "y", namespace_b: "team-b", pad: undefined, metric: "cosine" });
  t.deepEqual(await prepareGatewayBody("query_similarity", raw).then((x) => x.namespaces), ["team-a", "team-b"], "gateway, small: the namespaces named");
  const put = json({ namespace: "team-c", key: "k", data_b64: big().toString("base64") });
  const putCopy = Buffer.from(put);
  const g = await prepareGatewayBody("put", put);
  t.deepEqual(g.namespaces, ["team-c"], "gateway, large: the namespace named");
  t.ok(g.bytes.equals(putCopy), "gateway, large: the bytes to forward come back whole");
  const bad = json({ namespace: "team-c", key: "k", data_b64: `${big().toString("base64")}!` });
  t.deepEqual(
    await outcome(() => prepareGatewayBody("put", Buffer.from(bad))),
    await outcome(() => prepareGatewayJson("put", bad)),
    "gateway, large: the same refusal as on the loop",
  );

  for (const n of [0, 1, 2, 3, OFFLOAD_MIN_BYTES - 1, OFFLOAD_MIN_BYTES, 5 * OFFLOAD_MIN_BYTES + 2]) {
    const b = big(n);
    const text = await base64Bytes(b);
    t.equal(text.toString("latin1"), b.toString("base64"), `base64 of ${n} bytes`);
  }
});

test("the worker threads run at a lower priority than the event loop (Linux)", async (t) => {
  if (process.platform !== "linux") {
    t.skip("thread priorities are set on Linux only");
    return;
  }
  await prepareEngineBody("/v1/put", json({ namespace: "ns", key: "k", data_b64: big().toString("base64") }));
  // field 19 of /proc/<pid>/task/<tid>/stat is the thread's nice value
  const niceOf = (tid: string) =>
    Number(
      readFileSync(`/proc/self/task/${tid}/stat`, "utf8")
        .replace(/^.*\) /, "")
        .split(" ")[16],
    );
  const nice = readdirSync("/proc/self/task").map(niceOf);
  const main = niceOf(String(process.pid));
  if (main >= 10) {
    t.skip(`this process already runs at nice ${main}`);
    return;
  }
  t.ok(nice.includes(10), `a worker thread runs at nice 10, the event loop at ${main} (threads: ${nice.join(" ")})`);
});

test("a body that needs more heap than a worker has: 413 for it alone; the pool goes on", async (t) => {
  await closeOffload();
  setOffloadHeap(64);
  const small = await outcome(async () => (await prepareEngineBody("/v1/put", json({ namespace: "ns", key: "k", data_b64: big().toString("base64") }))).value);
  t.notOk(small.error, "a 700 KB body fits in a 64 MiB worker heap");
  // 4 million distinct numbers: about 100 MiB once parsed (a heap number and a slot each)
  const many = Buffer.from(`{"namespace":"ns","filter":{"v":{"$in":[${Array.from({ length: 4_000_000 }, (_, i) => i + 0.5).join(",")}]}}}`);
  const other = prepareEngineBody("/v1/put", json({ namespace: "ns", key: "other", data_b64: big().toString("base64") }));
  const r = await outcome(() => prepareEngineBody("/v1/search", many));
  t.equal(r.error?.cls, "PayloadTooLargeError", `refused: ${r.error?.message}`);
  const o = await outcome(() => other);
  t.ok(
    (o.value as { value?: { key?: string } } | undefined)?.value?.key === "other" || o.error?.cls === "PayloadTooLargeError",
    `a body read at the same time: its own answer, or the same 413 when it shared the worker (${o.error?.cls ?? "answered"})`,
  );
  setOffloadHeap(OFFLOAD_HEAP_MIB);
  await closeOffload();
  const after = await prepareEngineBody("/v1/put", json({ namespace: "ns", key: "after", data_b64: big().toString("base64") }));
  t.equal((after.value as { key: string }).key, "after", "the next body is read by a new worker");
});

test("query/vector: a JSON list of more than MAX_JSON_VECTOR numbers is refused, naming vector_b64", async (t) => {
  const body = Buffer.from(`{"namespace":"ns","k":1,"vector":[${"1,".repeat(MAX_JSON_VECTOR)}1]}`);
  for (const [where, f] of [
    ["worker", () => prepareEngineBody("/v1/query/vector", Buffer.from(body))],
    ["loop", () => prepareEngineJson("/v1/query/vector", body)],
  ] as const) {
    const r = await outcome(f);
    t.equal(r.error?.field, "vector", `${where}: field vector`);
    t.match(r.error?.message ?? "", /at most 1048576 numbers; send a longer vector as vector_b64/, `${where}: ${r.error?.message}`);
  }
  const okBody = json({ namespace: "ns", k: 1, vector: Array.from({ length: MAX_JSON_VECTOR }, () => 1) });
  t.notOk((await outcome(() => prepareEngineBody("/v1/query/vector", okBody))).error, "exactly MAX_JSON_VECTOR numbers: accepted");
});

test("many jobs at once each get their own answer; a stopped pool starts again", async (t) => {
  const bodies = Array.from({ length: 12 }, (_, i) => ({ i, payload: big(OFFLOAD_MIN_BYTES + i * 1000) }));
  const results = await Promise.all(
    bodies.map(({ i, payload }) =>
      prepareEngineBody("/v1/put", json({ namespace: "ns", key: `k${i}`, data_b64: payload.toString("base64") })).then(
        (r) => r.value as { key: string; data: Uint8Array },
      ),
    ),
  );
  t.ok(
    results.every((r, i) => r.key === `k${i}` && Buffer.from(r.data).equals(bodies[i]!.payload)),
    "12 concurrent bodies: each answer is its own body's",
  );
  await closeOffload();
  const again = await prepareEngineBody("/v1/put", json({ namespace: "ns", key: "after", data_b64: big().toString("base64") }));
  t.equal((again.value as { key: string }).key, "after", "after the workers were stopped, a new one takes the next body");
  await closeOffload();
});

test("large bodies leave a worker to the small ones: a small body goes ahead of the large ones waiting", async (t) => {
  const largeSlots = Math.max(1, OFFLOAD_THREADS - 1);
  const large = Array.from({ length: largeSlots + 2 }, (_, i) => ({ i, payload: big(OFFLOAD_LARGE_BYTES) }));
  const jobs = large.map(({ i, payload }) =>
    prepareEngineBody("/v1/put", json({ namespace: "ns", key: `large${i}`, data_b64: payload.toString("base64") })).then(
      (r) => r.value as { key: string; data: Uint8Array },
    ),
  );
  t.deepEqual(
    offloadQueue(),
    { running: largeSlots, runningLarge: largeSlots, waiting: 2, waitingLarge: 2 },
    `${largeSlots} large bodies run (of ${OFFLOAD_THREADS} workers); 2 wait`,
  );
  const smallPayload = big();
  const small = prepareEngineBody("/v1/put", json({ namespace: "ns", key: "small", data_b64: smallPayload.toString("base64") })).then(
    (r) => r.value as { key: string; data: Uint8Array },
  );
  t.deepEqual(offloadQueue(), { running: largeSlots + 1, runningLarge: largeSlots, waiting: 2, waitingLarge: 2 }, "the small body runs at once beside them");
  const [results, s] = await Promise.all([Promise.all(jobs), small]);
  t.ok(
    results.every((r, i) => r.key === `large${i}` && Buffer.from(r.data).equals(large[i]!.payload)),
    "every large body gets its own answer",
  );
  t.ok(s.key === "small" && Buffer.from(s.data).equals(smallPayload), "so does the small one");
  t.deepEqual(offloadQueue(), { running: 0, runningLarge: 0, waiting: 0, waitingLarge: 0 }, "nothing left running or waiting");
  await closeOffload();
});
