// createClient against a real gateway and engine: what has no store counterpart. The
// store's method calls themselves run over HTTP in test/store/store.test.ts and tt.test.ts
// (test/store/harness.ts), with every result compared call by call to createStore's; this
// file checks the HTTP side only: lastResponse, the status and request id of errors, the
// gateway's own errors (ACL, API key), and that a bad input costs no request.
import test from "tape";
import { createClient } from "../../lib/client.js";
import { ForbiddenError, NotFoundError, UnauthorizedError, ValidationError } from "../../lib/errors.js";
import { Stack } from "../store/harness.js";
import { MAX_JSON_VECTOR } from "../../lib/schemas.js";

const stack = new Stack();
test.onFinish(() => stack.close());

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

test("client over a gateway: lastResponse of a put, a serve and a failed get", async (t) => {
  const c = await stack.client(["ns"]);
  try {
    t.equal(c.lastResponse, null, "null before the first call");
    await c.put(
      "ns",
      "k",
      Int32Array.from({ length: 4096 }, (_, i) => i % 7),
      { shape: [4096] },
    );
    const put = c.lastResponse!;
    t.equal(put.status, 201, "put: 201");
    t.match(String(put.request_id), UUID, `put: a request id (${put.request_id})`);
    t.equal(put.headers["x-request-id"], put.request_id, "the request id is the X-Request-Id header");
    t.ok(put.cus !== null && put.cus > 0, `a put is charged compute units (${put.cus})`);
    t.deepEqual(
      [put.rate_limit.limit, put.rate_limit.remaining! < put.rate_limit.limit!, put.rate_limit.reset! > 0],
      [1_000_000, true, true],
      "rate-limit headers",
    );
    t.equal(put.attempts, 1, "one attempt");
    await c.serve("ns", "k", { slice: [[0, 8]] });
    const serve = c.lastResponse!;
    t.deepEqual(
      [serve.status, serve.headers["content-type"], serve.headers["x-svc-dtype"], serve.headers["x-svc-shape"]],
      [200, "application/octet-stream", "int32", "8"],
      "serve travels as octet-stream",
    );
    t.notEqual(serve.request_id, put.request_id, "each response has its own request id");
    const e = await c.get("ns", "nope").catch((x: unknown) => x);
    t.ok(e instanceof NotFoundError, "NotFoundError");
    const err = e as NotFoundError & { status: number; requestId: string };
    t.deepEqual(
      [err.status, err.extra.status, err.requestId, err.extra.request_id],
      [404, 404, c.lastResponse!.request_id, c.lastResponse!.request_id],
      "the error carries the status and the response's request id",
    );
    t.equal(c.lastResponse!.cus, 0, "a failed call is charged nothing");
  } finally {
    await c.close();
  }
});

test("client over a gateway: errors that have no store counterpart; bad input costs no request", async (t) => {
  const c = await stack.client(["ns"]);
  try {
    const e1 = await c.list("elsewhere").catch((x: unknown) => x);
    t.ok(
      e1 instanceof ForbiddenError && e1.code === "forbidden" && /namespace elsewhere/.test(e1.message),
      `a namespace outside the ACL: ${(e1 as Error).message}`,
    );
    const before = c.lastResponse;
    const e2 = await c.get("bad ns", "k").catch((x: unknown) => x);
    t.ok(e2 instanceof ValidationError && /namespace/.test(e2.message), "a bad namespace is refused by the client");
    t.equal(c.lastResponse, before, "without a request");
    const stranger = createClient({ baseUrl: await stack.url(), apiKey: `svc_live_${"x".repeat(40)}` });
    const e3 = await stranger.list("ns").catch((x: unknown) => x);
    t.ok(e3 instanceof UnauthorizedError && e3.code === "unauthorized" && stranger.lastResponse?.status === 401, "an unknown API key: UnauthorizedError, 401");
    await stranger.close();
  } finally {
    await c.close();
  }
});

test("client over a gateway: a number list longer than the wire's JSON list travels as vector_b64", async (t) => {
  const c = await stack.client(["ns"]);
  try {
    const n = MAX_JSON_VECTOR + 1;
    const v = Array.from({ length: n }, (_, i) => Math.sin(i / 1000));
    await c.put("ns", "long", Float64Array.from(v), { shape: [n] });
    const r = await c.query.vector("ns", { vector: v, k: 1 });
    t.equal(c.lastResponse!.status, 200, `query.vector with ${n} numbers: 200`);
    t.equal(r.results[0]?.key, "long", "the entry is its own nearest");
    t.ok(Math.abs(r.results[0]!.score - 1) < 1e-5, `cosine 1 (${r.results[0]?.score})`);
  } finally {
    await c.close();
  }
});
