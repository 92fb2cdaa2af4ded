// createClient's HTTP layer against a tiny local server scripted per test: octet-stream
// both ways, error bodies turned into the library's classes with code/detail/request_id,
// lastResponse headers, 429/502 retries with backoff honouring Retry-After, limits.
import test from "tape";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { createClient, parseRetryAfter } from "../../lib/client.js";
import {
  NotFoundError,
  RateLimitedError,
  ValidationError,
  EngineUnreachableError,
  VersionConflictError,
  SvcError,
  OverloadedError,
  QuotaExhaustedError,
  StoreUnavailableError,
  StateUnavailableError,
  StorageFullError,
} from "../../lib/errors.js";

type Handler = (req: IncomingMessage, body: Buffer, res: ServerResponse) => void;

async function withServer(
  handlers: Handler[],
  fn: (url: string, seen: Array<{ method: string; url: string; headers: IncomingMessage["headers"]; body: Buffer }>) => Promise<void>,
) {
  const seen: Array<{ method: string; url: string; headers: IncomingMessage["headers"]; body: Buffer }> = [];
  let i = 0;
  const srv = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
      const h = handlers[Math.min(i++, handlers.length - 1)]!;
      h(req, body, res);
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  try {
    await fn(url, seen);
  } finally {
    srv.closeAllConnections();
    await new Promise((r) => srv.close(r));
  }
}

const jsonRes =
  (status: number, body: unknown, headers: Record<string, string> = {}): Handler =>
  (_q, _b, res) => {
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(JSON.stringify(body));
  };

const RID = "6f1c8d1e-2b7a-4c1e-9a43-0d1f2e3a4b5c";
const putBody = {
  namespace: "default",
  key: "a/b",
  version: 1,
  verdict: "compressed",
  compressed: true,
  compression_ratio: 4,
  relative_error: 1e-5,
  dtype: "float32",
  shape: [2, 2],
  tt: null,
  bytes_in: 16,
  bytes_stored: 4,
  fingerprint: { sha256: "x", codec: "tt", tt: null, norm: 1 },
};

test("client: put sends the payload as application/octet-stream with the fields as query parameters and metadata in X-SVC-Metadata", async (t) => {
  await withServer(
    [
      jsonRes(201, putBody, {
        "x-svc-cus": "1",
        "x-ratelimit-limit": "100",
        "x-ratelimit-remaining": "99",
        "x-ratelimit-reset": "1767225600",
        "x-request-id": RID,
      }),
    ],
    async (url, seen) => {
      const c = createClient({ baseUrl: url + "/", apiKey: "svc_live_abc" });
      const r = await c.put("default", "a/b", new Float32Array([1, 2, 3, 4]), {
        shape: [2, 2],
        tolerance: 1e-4,
        max_rank: 8,
        metadata: { run: 1 },
        if_version: 0,
      });
      t.deepEqual(r, putBody, "result is the server's body");
      const s = seen[0]!;
      t.equal(s.method, "POST", "POST");
      const u = new URL(s.url, url);
      t.equal(u.pathname, "/v1/put", "path /v1/put");
      t.deepEqual(
        Object.fromEntries(u.searchParams),
        { namespace: "default", key: "a/b", dtype: "float32", shape: "2,2", tolerance: "0.0001", max_rank: "8", if_version: "0" },
        "query parameters, dtype inferred from Float32Array",
      );
      t.equal(s.headers["content-type"], "application/octet-stream", "octet-stream body");
      t.deepEqual(Array.from(new Float32Array(s.body.buffer, s.body.byteOffset, 4)), [1, 2, 3, 4], "raw little-endian bytes");
      t.equal(s.headers["x-svc-metadata"], '{"run":1}', "metadata header");
      t.equal(s.headers["x-api-key"], "svc_live_abc", "API key header");
      t.deepEqual(
        c.lastResponse && {
          status: c.lastResponse.status,
          cus: c.lastResponse.cus,
          rl: c.lastResponse.rate_limit,
          rid: c.lastResponse.request_id,
          attempts: c.lastResponse.attempts,
        },
        { status: 201, cus: 1, rl: { limit: 100, remaining: 99, reset: 1767225600 }, rid: RID, attempts: 1 },
        "lastResponse exposes CUs, rate-limit headers and request id",
      );
      await c.close();
    },
  );
});

test("client: serve asks for octet-stream and returns a typed array of the served dtype and shape", async (t) => {
  const payload = Buffer.from(new Float64Array([1.5, -2, 3.25]).buffer);
  await withServer(
    [
      (_q, _b, res) => {
        res.writeHead(200, { "content-type": "application/octet-stream", "x-svc-dtype": "float64", "x-svc-shape": "3", "x-svc-version": "2" });
        res.end(payload);
      },
    ],
    async (url, seen) => {
      const c = createClient({ baseUrl: url, apiKey: "k" });
      const r = await c.serve("ns", "k1", { slice: [[0, 3]] });
      t.ok(r.data instanceof Float64Array, "Float64Array");
      t.deepEqual(Array.from(r.data as Float64Array), [1.5, -2, 3.25], "values");
      t.deepEqual([r.shape, r.dtype, r.version], [[3], "float64", 2], "shape, dtype, version from headers");
      t.match(String(seen[0]!.headers.accept), /application\/octet-stream/, "Accept octet-stream");
      t.deepEqual(JSON.parse(seen[0]!.body.toString()), { namespace: "ns", key: "k1", device: "cpu", slice: [[0, 3]] }, "JSON request body");
      await c.close();
    },
  );
});

test("client: an octet-stream serve without a valid X-SVC-Dtype is an internal error, not a wrong array", async (t) => {
  await withServer(
    [
      (_q, _b, res) => {
        res.writeHead(200, { "content-type": "application/octet-stream", "x-svc-shape": "2" });
        res.end(Buffer.alloc(8));
      },
    ],
    async (url) => {
      const c = createClient({ baseUrl: url, apiKey: "k" });
      const e = await c.serve("ns", "k").catch((x) => x);
      t.ok(e instanceof SvcError && e.code === "internal", "internal");
      t.match(e.message, /without valid X-SVC-Dtype/, e.message);
      await c.close();
    },
  );
});

test("client: keys with slashes are percent-encoded per segment in get and delete paths", async (t) => {
  await withServer([jsonRes(200, { ok: 1 }), jsonRes(200, { deleted: true })], async (url, seen) => {
    const c = createClient({ baseUrl: url, apiKey: "k" });
    await c.get("ns", "a/b:c@d=e", { version: 3 });
    await c.delete("ns", "x/y");
    t.equal(seen[0]!.url, "/v1/get/ns/a/b%3Ac%40d%3De?version=3", "get path and version");
    t.equal(seen[1]!.method, "DELETE", "DELETE");
    t.equal(seen[1]!.url, "/v1/delete/ns/x/y", "delete path");
    await c.close();
  });
});

test("client: every write carries an Idempotency-Key of 128 random bits, the same on its retries; reads carry none", async (t) => {
  // A server that applies each write once per key (as a gateway and engine with idempotency
  // keys do), answers the first attempt of each with 502 as if the answer had been lost, and
  // replays the stored answer to a repeat of the key.
  const applied = new Map<string, { version: number }>();
  let version = 0;
  const keysOf = new Map<string, string[]>(); // path -> keys seen, in order
  const idem: Handler = (req, _b, res) => {
    const k = req.headers["idempotency-key"];
    const path = req.url!.split("?")[0]!;
    if (typeof k === "string") keysOf.set(path, [...(keysOf.get(path) ?? []), k]);
    if (typeof k !== "string") return jsonRes(200, { ...putBody, version })(req, _b, res);
    const stored = applied.get(k);
    if (stored) return jsonRes(201, { ...putBody, version: stored.version }, { "idempotent-replayed": "true" })(req, _b, res);
    applied.set(k, { version: ++version });
    jsonRes(502, { detail: "The storage engine is unreachable or did not answer in time.", code: "engine_unreachable", request_id: RID })(req, _b, res);
  };
  await withServer([idem], async (url, seen) => {
    const c = createClient({ baseUrl: url, apiKey: "k", maxRetries: 2, sleep: async () => {} });
    const core = { shape: [1, 2, 1] as [number, number, number], data: new Float32Array([1, 2]) };
    const r1 = await c.put("ns", "a", new Float32Array([1, 2, 3, 4]), { shape: [4] });
    t.equal(r1.version, 1, "put after a lost answer: version 1, not 2");
    t.equal(c.lastResponse?.attempts, 2, "two attempts");
    t.equal(c.lastResponse?.headers["idempotent-replayed"], "true", "the second answer is the stored one");
    const big = await c.put("ns", "b", new Float32Array([1]), { shape: [1], metadata: { pad: "x".repeat(9000) } });
    t.equal(big.version, 2, "JSON put: one version");
    t.equal((await c.putCores("ns", "c", [core])).version, 3, "put_cores: one version");
    await c.putCoresBatch("ns", [{ key: "d", cores: [core] }]);
    await c.delete("ns", "e");
    t.equal(version, 5, "five writes, each applied exactly once");
    for (const path of ["/v1/put", "/v1/put_cores", "/v1/put_cores_batch", "/v1/delete/ns/e"]) {
      const ks = keysOf.get(path) ?? [];
      t.ok(ks.length >= 2, `${path}: sent with a key, and retried`);
    }
    const puts = keysOf.get("/v1/put")!;
    t.deepEqual(puts, [puts[0], puts[0], puts[2], puts[2]], "each put's retry repeats its own key");
    t.notEqual(puts[0], puts[2], "two puts, two keys");
    const all = new Set([...keysOf.values()].flat());
    t.equal(all.size, 5, "five distinct keys for five writes");
    for (const k of all) t.equal(Buffer.from(k, "base64url").length, 16, `key ${k.length} characters: 128 bits`);
    const before = seen.length;
    await c.get("ns", "a");
    t.equal(seen.length, before + 1, "get: one request");
    t.equal(seen[before]!.headers["idempotency-key"], undefined, "a read carries no key");
    await c.close();
  });
});

test("client: error bodies become the library's error classes with code, detail, status and request_id", async (t) => {
  await withServer(
    [
      jsonRes(404, { detail: "Key a not found in namespace ns.", code: "not_found", request_id: RID }),
      jsonRes(409, { detail: "Version conflict.", code: "version_conflict", request_id: RID }),
      jsonRes(400, { detail: "shape: is required.", code: "bad_request", request_id: RID }),
      (_q, _b, res) => {
        res.writeHead(500, { "content-type": "text/html" });
        res.end("<html>oops</html>");
      },
    ],
    async (url) => {
      const c = createClient({ baseUrl: url, apiKey: "k" });
      const e1 = await c.get("ns", "a").catch((e) => e);
      t.ok(e1 instanceof NotFoundError, "NotFoundError");
      t.equal(e1.code, "not_found", "code");
      t.equal(e1.message, "Key a not found in namespace ns.", "detail as message");
      t.equal(e1.requestId, RID, "request id");
      t.equal(e1.status, 404, "status");
      t.equal(e1.extra.request_id, RID, "request id in extra");
      const e2 = await c.get("ns", "a").catch((e) => e);
      t.ok(e2 instanceof VersionConflictError, "VersionConflictError");
      const e3 = await c.get("ns", "a").catch((e) => e);
      t.ok(e3 instanceof ValidationError && e3.code === "bad_request", "ValidationError bad_request");
      const e4 = await c.get("ns", "a").catch((e) => e);
      t.ok(e4 instanceof SvcError && e4.code === "internal", "non-JSON 500 is internal");
      t.equal(e4.message, "The service answered HTTP 500.", "generic sentence, no HTML leaked");
      await c.close();
    },
  );
});

test("client: a 429 with Retry-After is retried after the server's delay, then the 200 is returned", async (t) => {
  const waits: number[] = [];
  await withServer(
    [
      jsonRes(429, { detail: "Rate limit exceeded for tenant acme; retry after 2 seconds.", code: "rate_limited", request_id: RID }, { "retry-after": "2" }),
      jsonRes(200, { namespace: "ns", keys: [], total: 0, limit: 10, offset: 0, next_offset: null }, { "x-svc-cus": "0.1" }),
    ],
    async (url, seen) => {
      const c = createClient({
        baseUrl: url,
        apiKey: "k",
        sleep: async (ms) => {
          waits.push(ms);
        },
      });
      const r = await c.list("ns", { limit: 10 });
      t.equal(r.total, 0, "result of the second attempt");
      t.deepEqual(waits, [2000], "waited Retry-After seconds");
      t.equal(seen.length, 2, "two requests");
      t.equal(c.lastResponse?.attempts, 2, "lastResponse counts the attempts");
      t.equal(c.lastResponse?.cus, 0.1, "lastResponse is the final response");
      await c.close();
    },
  );
});

test("client: 502 is retried with growing backoff; after maxRetries the error is thrown", async (t) => {
  const waits: number[] = [];
  await withServer([jsonRes(502, { detail: "The storage engine is unreachable.", code: "engine_unreachable", request_id: RID })], async (url, seen) => {
    const c = createClient({
      baseUrl: url,
      apiKey: "k",
      maxRetries: 3,
      backoffMs: 100,
      sleep: async (ms) => {
        waits.push(ms);
      },
    });
    const e = await c.get("ns", "a").catch((x) => x);
    t.ok(e instanceof EngineUnreachableError, "EngineUnreachableError after the retries");
    t.equal(seen.length, 4, "1 + 3 attempts");
    t.equal(waits.length, 3, "three waits");
    t.ok(waits[0]! >= 50 && waits[0]! <= 100, `first wait in [50,100]: ${waits[0]}`);
    t.ok(waits[1]! >= 100 && waits[1]! <= 200, `second wait in [100,200]: ${waits[1]}`);
    t.ok(waits[2]! >= 200 && waits[2]! <= 400, `third wait in [200,400]: ${waits[2]}`);
    await c.close();
  });
});

test("client: closed while it waits to retry, a call stops with the closed error and sends nothing more", async (t) => {
  const busy = { detail: "The server is at its memory budget for requests in flight; retry after 1 second.", code: "overloaded", request_id: RID };
  await withServer(
    [jsonRes(503, busy, { "retry-after": "1" }), jsonRes(200, { namespace: "ns", keys: [], total: 0, limit: 10, offset: 0, next_offset: null })],
    async (url, seen) => {
      const c = createClient({ baseUrl: url, apiKey: "k", sleep: async () => c.close() });
      const e = await c.list("ns").catch((x) => x);
      t.ok(e instanceof StoreUnavailableError && e.message === "The client is closed.", `the closed error: ${(e as Error).message}`);
      t.equal(seen.length, 1, "no attempt after the close");
    },
  );
});

test("client: a request in flight when the client is closed rejects with the closed error", async (t) => {
  let arrived!: () => void;
  const there = new Promise<void>((r) => (arrived = r));
  await withServer([() => arrived()], async (url) => {
    const c = createClient({ baseUrl: url, apiKey: "k" });
    const get = c.get("ns", "a").catch((x) => x);
    await there; // the server holds it unanswered
    await c.close();
    const e = await get;
    t.ok(e instanceof StoreUnavailableError && e.message === "The client is closed.", `the closed error: ${(e as Error).message}`);
  });
});

test("client: 503 overloaded is retried after Retry-After; 503 quota_exhausted is not", async (t) => {
  const waits: number[] = [];
  const busy = { detail: "The server is at its memory budget for requests in flight; retry after 1 second.", code: "overloaded", request_id: RID };
  await withServer(
    [
      jsonRes(503, busy, { "retry-after": "1" }),
      jsonRes(200, { namespace: "ns", keys: [], total: 0, limit: 10, offset: 0, next_offset: null }),
      jsonRes(503, { detail: "Monthly quota exhausted for tenant acme.", code: "quota_exhausted", request_id: RID }, { "retry-after": "1" }),
      jsonRes(503, busy, { "retry-after": "1" }),
    ],
    async (url, seen) => {
      const c = createClient({
        baseUrl: url,
        apiKey: "k",
        maxRetries: 1,
        sleep: async (ms) => {
          waits.push(ms);
        },
      });
      t.equal((await c.list("ns", { limit: 10 })).total, 0, "the retry's answer");
      t.deepEqual(waits, [1000], "waited Retry-After");
      const q = await c.get("ns", "a").catch((x) => x);
      t.ok(q instanceof QuotaExhaustedError, "quota exhaustion thrown at once");
      const o = await c.get("ns", "a").catch((x) => x);
      t.ok(o instanceof OverloadedError && o.code === "overloaded" && o.retryAfterS === 1, "after maxRetries: OverloadedError with retryAfterS");
      t.equal(seen.length, 5, "2 + 1 + 2 requests");
      await c.close();
    },
  );
});

test("client: 503 store_unavailable and state_unavailable with Retry-After are retried (a write with the same Idempotency-Key); without Retry-After, or after maxRetries, the typed error is thrown", async (t) => {
  const waits: number[] = [];
  const down = (code: string) => ({ detail: "The store is unavailable; retry later.", code, request_id: RID });
  await withServer(
    [
      jsonRes(503, down("store_unavailable"), { "retry-after": "2" }),
      jsonRes(503, down("state_unavailable"), { "retry-after": "1" }),
      jsonRes(201, putBody),
      jsonRes(503, down("store_unavailable")),
      jsonRes(503, down("state_unavailable"), { "retry-after": "3" }),
      jsonRes(503, down("state_unavailable"), { "retry-after": "3" }),
      jsonRes(503, down("state_unavailable"), { "retry-after": "3" }),
      jsonRes(
        507,
        { detail: "The store has no space left for this write; retry after space is freed.", code: "storage_full", request_id: RID },
        { "retry-after": "30" },
      ),
    ],
    async (url, seen) => {
      const c = createClient({
        baseUrl: url,
        apiKey: "k",
        maxRetries: 2,
        sleep: async (ms) => {
          waits.push(ms);
        },
      });
      const r = await c.put("ns", "a", new Float32Array([1, 2]), { shape: [2] });
      t.equal(r.version, 1, "the put's answer after two refusals");
      t.deepEqual(waits, [2000, 1000], "waited each Retry-After");
      const keys = seen.slice(0, 3).map((s) => s.headers["idempotency-key"]);
      t.ok(typeof keys[0] === "string" && keys.every((k) => k === keys[0]), "the three attempts carry one Idempotency-Key");
      const noHeader = await c.get("ns", "a").catch((x) => x);
      t.ok(noHeader instanceof StoreUnavailableError && noHeader.code === "store_unavailable", "503 without Retry-After: StoreUnavailableError at once");
      const tired = await c.get("ns", "a").catch((x) => x);
      t.ok(tired instanceof StateUnavailableError && tired.retryAfterS === 3, "after maxRetries: StateUnavailableError with retryAfterS");
      const full = await c.get("ns", "a").catch((x) => x);
      t.ok(full instanceof StorageFullError && full.code === "storage_full" && full.retryAfterS === 30, "507: StorageFullError, not retried");
      t.equal(seen.length, 8, "3 + 1 + 3 + 1 requests");
      await c.close();
    },
  );
});

test("client: a Retry-After longer than maxBackoffMs is not waited for; the RateLimitedError carries retryAfterS", async (t) => {
  const waits: number[] = [];
  await withServer(
    [jsonRes(429, { detail: "Rate limit exceeded for tenant acme; retry after 50 seconds.", code: "rate_limited", request_id: RID }, { "retry-after": "50" })],
    async (url, seen) => {
      const c = createClient({
        baseUrl: url,
        apiKey: "k",
        maxBackoffMs: 10_000,
        sleep: async (ms) => {
          waits.push(ms);
        },
      });
      const e = await c.get("ns", "a").catch((x) => x);
      t.ok(e instanceof RateLimitedError, "RateLimitedError");
      t.equal(e.retryAfterS, 50, "retryAfterS from the header");
      t.equal(seen.length, 1, "no retry");
      t.deepEqual(waits, [], "no wait");
      await c.close();
    },
  );
});

test("client: maxRetries 0 disables retries; other 4xx are never retried", async (t) => {
  await withServer(
    [
      jsonRes(429, { detail: "x", code: "rate_limited", request_id: RID }, { "retry-after": "1" }),
      jsonRes(403, { detail: "Namespace other is not in the ACL of tenant acme.", code: "forbidden", request_id: RID }),
    ],
    async (url, seen) => {
      const c = createClient({ baseUrl: url, apiKey: "k", maxRetries: 0 });
      t.ok((await c.get("ns", "a").catch((x) => x)) instanceof RateLimitedError, "429 thrown at once");
      const c2 = createClient({ baseUrl: url, apiKey: "k", sleep: async () => {} });
      const e = await c2.get("ns", "a").catch((x) => x);
      t.equal(e.code, "forbidden", "403 thrown");
      t.equal(seen.length, 2, "one request each");
      await c.close();
      await c2.close();
    },
  );
});

test("client: bad names and options are ValidationErrors before any request; an unreachable server is EngineUnreachableError", async (t) => {
  await withServer([jsonRes(200, {})], async (url, seen) => {
    const c = createClient({ baseUrl: url, apiKey: "k" });
    const e1 = await c.get("bad ns!", "a").catch((x) => x);
    t.ok(e1 instanceof ValidationError && /namespace/.test(e1.message), `bad namespace: ${e1.message}`);
    const e2 = await c.put("ns", "a//b", new Uint8Array(1)).catch((x) => x);
    t.ok(e2 instanceof ValidationError && /key/.test(e2.message), `bad key: ${e2.message}`);
    const e3 = await c.put("ns", "a", "text" as unknown as Uint8Array).catch((x) => x);
    t.ok(e3 instanceof ValidationError && e3.field === "data", "non-binary data refused");
    t.equal(seen.length, 0, "no request was sent");
    await c.close();
    const e4 = await c.get("ns", "a").catch((x) => x);
    t.ok(
      e4 instanceof StoreUnavailableError && e4.message === "The client is closed." && e4.code === "store_unavailable",
      `a closed client refuses calls as a closed store does: ${e4.message}`,
    );
    t.equal(seen.length, 0, "and sends nothing");
  });
  t.throws(() => createClient({ baseUrl: "ftp://x", apiKey: "k" }), ValidationError, "non-http baseUrl refused");
  t.throws(() => createClient({ baseUrl: "http://x", apiKey: "" }), ValidationError, "empty apiKey refused");
  t.throws(() => createClient({ baseUrl: "http://x", apiKey: "k", retries: 3 } as never), /unknown field 'retries'/, "misspelt option refused");
  const c = createClient({ baseUrl: "http://127.0.0.1:1", apiKey: "k" });
  const e = await c.list("ns").catch((x) => x);
  t.ok(e instanceof EngineUnreachableError && /could not be reached/.test(e.message), `unreachable: ${e.message}`);
  t.notOk(/svc_live|\bk\b/.test(e.message.replace("could not be reached", "")), "no key in the message");
  await c.close();
});

test("client: a server that does not answer within timeoutMs is EngineUnreachableError naming the timeout", async (t) => {
  await withServer(
    [
      () => {
        /* never answers */
      },
    ],
    async (url) => {
      const c = createClient({ baseUrl: url, apiKey: "k", timeoutMs: 300 });
      const e = await c.get("ns", "a").catch((x) => x);
      t.ok(e instanceof EngineUnreachableError, "EngineUnreachableError");
      t.match(e.message, /did not answer within 300 ms\.$/, e.message);
      await c.close();
    },
  );
});

test("client: parseRetryAfter reads delta seconds and HTTP dates", (t) => {
  t.equal(parseRetryAfter("17"), 17, "seconds");
  t.equal(parseRetryAfter(new Date(10_000 + 5_000).toUTCString(), 10_000), 5, "HTTP date");
  t.equal(parseRetryAfter("soon"), null, "garbage");
  t.equal(parseRetryAfter(undefined), null, "absent");
  t.end();
});
