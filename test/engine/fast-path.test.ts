// The engine's GET /v1/get/{ns}/{key} and POST /v1/serve without Express (server/engine/fast.ts):
// their answers are the Express chain's, byte for byte (the same GET sent with "Content-Length:
// 0", the same serve with an Accept header that needs negotiation, go through Express), for
// found, missing, versioned and percent-encoded entries, octet-stream and JSON serves, slices and
// dtype conversions; hostile requests (bad or missing keys, tenants, queries, paths, bodies on
// GET, HEAD, bad serve bodies, bodies past the limit, a lying Content-Length) get the
// documented refusals; the request id, one access-log line per request and the metrics are
// kept. Over real HTTP on LMDB.
import test, { type Test } from "tape";
import http from "node:http";
import { connect, type AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore, type Store } from "../../lib/store/index.js";
import { createApp, type Logger } from "../../server/engine/app.js";
import { loadEngineConfig } from "../../server/engine/config.js";

const KEY = "svc-service-key-" + "fedcba9876543210".repeat(3);
const logs: Record<string, unknown>[] = [];
const logger: Logger = {
  debug: (f) => logs.push({ level: "debug", ...f }),
  info: (f) => logs.push({ level: "info", ...f }),
  warn: (f) => logs.push({ level: "warn", ...f }),
  error: (f) => logs.push({ level: "error", ...f }),
};

interface Raw {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** The answer's body as UTF-8 text, and as it came. */
  body: string;
  bytes: Buffer;
}

function raw(port: number, method: string, path: string, headers: Record<string, string>, body?: string | Buffer): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, method, path, headers, agent: false }, (res) => {
      const parts: Buffer[] = [];
      res.on("data", (d: Buffer) => parts.push(d));
      res.on("end", () => {
        const bytes = Buffer.concat(parts);
        resolve({ status: res.statusCode!, headers: res.headers, body: bytes.toString("utf8"), bytes });
      });
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** A request whose Content-Length is longer than the part of the body sent, then the client leaves. */
function leaveMidBody(port: number, path: string, headers: Record<string, string>, part: string | Buffer): Promise<void> {
  return new Promise<void>((resolve) => {
    const req = http.request({ host: "127.0.0.1", port, method: "POST", path, headers, agent: false });
    req.on("error", () => resolve());
    req.write(part);
    setImmediate(() => {
      req.destroy();
      resolve();
    });
  });
}

/** The engine's request counter line for a method, a status and a route, from GET /metrics. */
async function countedLine(port: number, method: string, status: number, route: string): Promise<string | undefined> {
  const m = await raw(port, "GET", "/metrics", { authorization: `Bearer ${KEY}` });
  return m.body
    .split("\n")
    .find((l) => l.startsWith("svc_engine_http_requests_total{") && l.includes(`method="${method}"`) && l.includes(`status="${status}"`) && l.includes(route));
}

/** An engine over LMDB in a directory of its own, listening on a free loopback port. */
async function startEngine(prefix: string, env: Record<string, string>): Promise<{ port: number; store: Store; close: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const store = await createStore({ path: dir });
  const config = loadEngineConfig({ SVC_ENGINE_PORT: "0", SVC_ENGINE_LOG_LEVEL: "silent", ...env });
  const server = http.createServer(createApp({ store, config, logger, gpu: { unavailable: "no GPU in this test" } }));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const close = async () => {
    await new Promise<void>((r) => server.close(() => r()));
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  };
  return { port: (server.address() as AddressInfo).port, store, close };
}

/**
 * The access-log lines logged since `logs` was emptied: as many as `expected` (status, tenant,
 * path each), the first (the fast path's) with the same fields as the last (the Express
 * route's), and no key anywhere in the logs.
 */
function accessLines(t: Test, count: string, expected: [number, string, string][]): Record<string, unknown>[] {
  const lines = logs.filter((l) => l.msg === "request");
  t.equal(lines.length, expected.length, count);
  t.deepEqual(Object.keys(lines[0]!).sort(), Object.keys(lines.at(-1)!).sort(), "the same fields as the Express line");
  t.deepEqual(
    lines.map((l) => [l.status, l.tenant, l.path]),
    expected,
    "status, tenant and path",
  );
  t.notOk(JSON.stringify(logs).includes(KEY), "no key in the logs");
  return lines;
}

const auth = (tenant = "acme", extra: Record<string, string> = {}) => ({ authorization: `Bearer ${KEY}`, "x-svc-tenant": tenant, ...extra });

test("engine fast path: same answers as the Express chain, hostile requests refused", async (t) => {
  const { port, store, close } = await startEngine("svc-fast-get-", { SVC_ENGINE_API_KEYS: `other-${KEY},${KEY}` });
  try {
    const acme = store.forTenant("acme");
    await acme.put("ns", "k", new Uint8Array([1, 2, 3, 4]), { dtype: "bytes", metadata: { label: "first" } });
    await acme.put("ns", "k", new Uint8Array([5, 6, 7, 8]), { dtype: "bytes", metadata: { label: "second" } });
    await acme.put("ns", "a/b=c", new Uint8Array([9]), { dtype: "bytes" });
    await store.forTenant("other").put("ns", "k", new Uint8Array([0]), { dtype: "bytes" });

    // Content-Length: 0 sends the same request through Express
    const viaExpress = { "content-length": "0" };
    const same = async (what: string, path: string, headers: Record<string, string>) => {
      const fast = await raw(port, "GET", path, headers);
      const slow = await raw(port, "GET", path, { ...headers, ...viaExpress });
      t.equal(fast.status, slow.status, `${what}: status ${slow.status} on both paths`);
      const norm = (r: Raw) => r.body.replace(/"request_id":"[^"]+"/, '"request_id":"-"');
      t.equal(norm(fast), norm(slow), `${what}: the same body`);
      t.equal(fast.headers["content-type"], slow.headers["content-type"], `${what}: the same content type`);
      t.equal(fast.headers["content-length"], slow.headers["content-length"], `${what}: the same length`);
      t.equal(fast.headers["retry-after"], slow.headers["retry-after"], `${what}: the same Retry-After`);
      t.ok(typeof fast.headers["x-request-id"] === "string", `${what}: a request id`);
      return fast;
    };
    const latest = await same("latest version", "/v1/get/ns/k", auth());
    t.equal(JSON.parse(latest.body).version, 2, "the latest version");
    t.equal(JSON.parse(latest.body).metadata.label, "second", "its metadata");
    const v1 = await same("version 1", "/v1/get/ns/k?version=1", auth());
    t.equal(JSON.parse(v1.body).metadata.label, "first", "version 1's metadata");
    t.equal(JSON.parse((await same("encoded key", "/v1/get/ns/a%2Fb%3Dc", auth())).body).key, "a/b=c", "a percent-encoded key");
    for (const bad of ["/v1/get/ns/a%zzb", "/v1/get/n%E0%A4s/k", "/v1/get/ns/%"])
      t.equal(
        JSON.parse((await same(`bad escape ${bad}`, bad, auth())).body).detail,
        "The path is not valid percent-encoded text.",
        `${bad}: the path's sentence`,
      );
    t.equal(JSON.parse((await same("key with a slash", "/v1/get/ns/a/b=c", auth())).body).key, "a/b=c", "the rest of the path is the key");
    t.equal(JSON.parse((await same("other tenant", "/v1/get/ns/k", auth("other"))).body).version, 1, "tenants are apart");
    const missing = await same("missing entry", "/v1/get/ns/nope", auth());
    t.equal(missing.status, 404, "missing: 404");
    t.equal(JSON.parse(missing.body).code, "not_found", "not_found");
    t.equal(JSON.parse(missing.body).request_id, missing.headers["x-request-id"], "the body's request id is the header's");
    t.equal((await same("missing version", "/v1/get/ns/k?version=9", auth())).status, 404, "a missing version: 404");
    t.equal((await same("other tenant's entry", "/v1/get/ns/a%2Fb%3Dc", auth("other"))).status, 404, "another tenant's entry: 404");

    // hostile requests: the documented refusals
    const cases: Array<[string, string, Record<string, string>, number]> = [
      ["no key", "/v1/get/ns/k", { "x-svc-tenant": "acme" }, 401],
      ["wrong key", "/v1/get/ns/k", auth("acme", { authorization: `Bearer x${KEY}` }), 401],
      // a header the length of one that passed before, one character off
      ["wrong key of a passed header's length", "/v1/get/ns/k", auth("acme", { authorization: `Bearer ${KEY.slice(0, -1)}x` }), 401],
      ["a passed header with its key's case changed", "/v1/get/ns/k", auth("acme", { authorization: `Bearer ${KEY.toUpperCase()}` }), 401],
      ["not a bearer", "/v1/get/ns/k", auth("acme", { authorization: `Basic ${KEY}` }), 401],
      ["no tenant", "/v1/get/ns/k", { authorization: `Bearer ${KEY}` }, 400],
      ["bad tenant", "/v1/get/ns/k", auth("Bad Tenant!"), 400],
      ["version not a number", "/v1/get/ns/k?version=abc", auth(), 400],
      ["version negative", "/v1/get/ns/k?version=-1", auth(), 400],
      ["version twice", "/v1/get/ns/k?version=1&version=1", auth(), 400],
      ["unknown parameter", "/v1/get/ns/k?verison=1", auth(), 400],
      ["__proto__ parameter", "/v1/get/ns/k?__proto__=1", auth(), 400],
      ["bad percent-encoding in the query", "/v1/get/ns/k?version=%E0%A4%A", auth(), 400],
      ["bad percent-encoding in the key", "/v1/get/ns/%E0%A4%A", auth(), 400],
      ["bad percent-encoding in the namespace", "/v1/get/%ZZ/k", auth(), 400],
      ["empty namespace", "/v1/get//k", auth(), 404],
      ["no key in the path", "/v1/get/ns/", auth(), 404],
      ["namespace only", "/v1/get/ns", auth(), 404],
      ["bad namespace", "/v1/get/NS!/k", auth(), 400],
      ["key too long", `/v1/get/ns/${"k".repeat(5000)}`, auth(), 400],
    ];
    for (const [what, path, headers, status] of cases) {
      const r = await raw(port, "GET", path, headers);
      t.equal(r.status, status, `${what}: ${status}`);
      const j = JSON.parse(r.body) as { code: string; detail: string; request_id: string };
      t.ok(typeof j.detail === "string" && j.detail.length > 0 && j.request_id === r.headers["x-request-id"], `${what}: the error body with the request id`);
      t.notOk(r.body.includes(KEY), `${what}: no key in the answer`);
    }
    // headers that passed are remembered (not hashed again): every key and every spelling of
    // the header still passes, alternated, and a wrong key still fails after them
    for (let round = 0; round < 3; round++)
      for (const h of [`Bearer ${KEY}`, `Bearer other-${KEY}`, `bearer   ${KEY}`, `Bearer other-${KEY} `]) {
        t.equal(
          (await raw(port, "GET", "/v1/get/ns/k", auth("acme", { authorization: h }))).status,
          200,
          `round ${round}: ${JSON.stringify(h.replace(KEY, "KEY"))} passes`,
        );
        t.equal(
          (await raw(port, "GET", "/v1/get/ns/k", auth("acme", { authorization: h.replace(KEY, KEY.slice(1) + "x") }))).status,
          401,
          `round ${round}: its wrong twin fails`,
        );
      }
    const withBody = await raw(port, "GET", "/v1/get/ns/k", { ...auth(), "content-type": "application/json" }, "{}");
    t.equal(withBody.status, 400, "a GET with a body: 400");
    const chunked = await raw(port, "GET", "/v1/get/ns/k", { ...auth(), "transfer-encoding": "chunked" }, "abc");
    t.equal(chunked.status, 400, "a chunked GET body: 400");
    const head = await raw(port, "HEAD", "/v1/get/ns/k", auth());
    t.equal(head.status, 200, "HEAD is answered (by Express)");
    t.equal(head.body, "", "without a body");

    // pipelined GETs on one connection (a response waits its turn without a socket of its own):
    // every one answered, in order
    const pipelined = await new Promise<string>((resolve, reject) => {
      const sock = connect(port, "127.0.0.1");
      let text = "";
      sock.setEncoding("latin1");
      sock.on("data", (d: string) => (text += d));
      sock.on("end", () => resolve(text));
      sock.on("error", reject);
      const h = `Authorization: Bearer ${KEY}\r\nX-SVC-Tenant: acme\r\nHost: x\r\n`;
      const paths = ["/v1/get/ns/k", "/v1/get/ns/k?version=1", "/v1/get/ns/missing", "/v1/get/ns/k"];
      sock.end(paths.map((p, i) => `GET ${p} HTTP/1.1\r\n${h}${i === paths.length - 1 ? "Connection: close\r\n" : ""}\r\n`).join(""));
    });
    const statuses = [...pipelined.matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => Number(m[1]));
    t.deepEqual(statuses, [200, 200, 404, 200], "four pipelined GETs: four answers in order");
    const versions = [...pipelined.matchAll(/"version":(\d+),"latest_version"/g)].map((m) => Number(m[1]));
    t.deepEqual(versions, [2, 1, 2], "each with its own entry");

    // serves: octet-stream and JSON, the fast path against Express's negotiation of the same Accept
    const floats = new Float32Array(4096).map((_, i) => Math.sin(i / 10));
    await acme.put("ns", "f", floats, { shape: [64, 64], tolerance: 0 });
    const serveSame = async (what: string, body: string, accept: string | undefined, negotiated: string) => {
      const base = { ...auth(), "content-type": "application/json" };
      const fast = await raw(port, "POST", "/v1/serve", accept === undefined ? base : { ...base, accept }, body);
      const slow = await raw(port, "POST", "/v1/serve", { ...base, accept: negotiated }, body);
      t.equal(fast.status, slow.status, `${what}: status ${slow.status} on both paths`);
      const norm = (r: Raw) => r.body.replace(/"request_id":"[^"]+"/, '"request_id":"-"');
      t.ok(norm(fast) === norm(slow), `${what}: the same body (${fast.body.length} characters)`);
      for (const h of ["content-type", "content-length", "x-svc-dtype", "x-svc-shape", "x-svc-version", "retry-after"])
        t.equal(fast.headers[h], slow.headers[h], `${what}: the same ${h}`);
      return fast;
    };
    const octetAs = "application/octet-stream, application/json;q=0.5";
    const jsonAs = "application/json;q=0.9, text/plain;q=0.1";
    const s1 = await serveSame("octet serve", JSON.stringify({ namespace: "ns", key: "f" }), "application/octet-stream", octetAs);
    t.equal(s1.headers["x-svc-shape"], "64,64", "the shape header");
    await serveSame("JSON serve", JSON.stringify({ namespace: "ns", key: "f" }), "application/json", jsonAs);
    await serveSame("JSON serve, no Accept", JSON.stringify({ namespace: "ns", key: "f" }), undefined, jsonAs);
    await serveSame("JSON serve, */*", JSON.stringify({ namespace: "ns", key: "f" }), "*/*", jsonAs);
    await serveSame(
      "slice as float64",
      JSON.stringify({
        namespace: "ns",
        key: "f",
        slice: [
          [1, 3],
          [5, 9],
        ],
        dtype: "float64",
      }),
      "application/octet-stream",
      octetAs,
    );
    await serveSame("bytes entry, version 1", JSON.stringify({ namespace: "ns", key: "k", version: 1 }), "application/octet-stream", octetAs);
    const hostileServes: Array<[string, string, number]> = [
      ["missing entry", JSON.stringify({ namespace: "ns", key: "nope" }), 404],
      ["missing version", JSON.stringify({ namespace: "ns", key: "f", version: 7 }), 404],
      ["unknown member", JSON.stringify({ namespace: "ns", key: "f", extra: 1 }), 400],
      ["duplicate member", '{"namespace":"ns","key":"f","key":"k"}', 400],
      ["__proto__ member", '{"namespace":"ns","key":"f","__proto__":{"x":1}}', 400],
      ["lone surrogate", '{"namespace":"ns","key":"\ud800"}', 400],
      ["not JSON", "{namespace", 400],
      ["an array", "[]", 400],
      [
        "slice out of range",
        JSON.stringify({
          namespace: "ns",
          key: "f",
          slice: [
            [0, 99],
            [0, 1],
          ],
        }),
        400,
      ],
      ["bad dtype", JSON.stringify({ namespace: "ns", key: "f", dtype: "complex" }), 400],
      [
        "gpu with a slice",
        JSON.stringify({
          namespace: "ns",
          key: "f",
          device: "gpu",
          slice: [
            [0, 1],
            [0, 1],
          ],
        }),
        400,
      ],
      ["deep nesting", "[".repeat(100_000) + "]".repeat(100_000), 400],
    ];
    for (const [what, body, status] of hostileServes) {
      const r = await serveSame(what, body, "application/octet-stream", octetAs);
      t.equal(r.status, status, `${what}: ${status}`);
      t.equal(JSON.parse(r.body).request_id, r.headers["x-request-id"], `${what}: the body's request id is the header's`);
    }
    const tooBig = await raw(
      port,
      "POST",
      "/v1/serve",
      { ...auth(), "content-type": "application/json", accept: "application/octet-stream" },
      JSON.stringify({ namespace: "ns", key: "f", pad: "x".repeat(2 * 1024 * 1024) }),
    );
    t.equal(tooBig.status, 413, "a serve body past the limit: 413");
    const latin = await raw(
      port,
      "POST",
      "/v1/serve",
      { ...auth(), "content-type": "application/json; charset=latin1" },
      JSON.stringify({ namespace: "ns", key: "f" }),
    );
    t.equal(latin.status, 415, "a JSON body in another charset: 415");
    const noAuth = await raw(
      port,
      "POST",
      "/v1/serve",
      { "x-svc-tenant": "acme", "content-type": "application/json" },
      JSON.stringify({ namespace: "ns", key: "f" }),
    );
    t.equal(noAuth.status, 401, "a serve without the key: 401");
    // a Content-Length longer than the body sent, then the client leaves: no answer owed, the server goes on
    await leaveMidBody(port, "/v1/serve", { ...auth(), "content-type": "application/json", "content-length": "500" }, '{"namespace":"ns"');
    t.equal((await raw(port, "GET", "/v1/get/ns/k", auth())).status, 200, "the engine serves on after a client left mid-body");

    // the request id: a given UUID is kept (lower case), anything else replaced
    const uuid = "0F8FAD5B-D9CB-469F-A165-70867728950E";
    t.equal(
      (await raw(port, "GET", "/v1/get/ns/k", auth("acme", { "x-request-id": uuid }))).headers["x-request-id"],
      uuid.toLowerCase(),
      "a given UUID is echoed in lower case",
    );
    const replaced = (await raw(port, "GET", "/v1/get/ns/k", auth("acme", { "x-request-id": "not-a-uuid\u00e9" }))).headers["x-request-id"];
    t.ok(typeof replaced === "string" && /^[0-9a-f-]{36}$/.test(replaced), "anything else is replaced by a fresh id");

    // one access-log line per request, the same fields as Express's, without the key
    logs.length = 0;
    await raw(port, "GET", "/v1/get/ns/k", auth());
    await raw(port, "GET", "/v1/get/ns/nope", auth());
    await raw(port, "GET", "/v1/get/ns/k", { ...auth(), ...viaExpress });
    const lines = accessLines(t, "three requests, three lines", [
      [200, "acme", "/v1/get/ns/k"],
      [404, "acme", "/v1/get/ns/nope"],
      [200, "acme", "/v1/get/ns/k"],
    ]);
    t.deepEqual(Object.keys(lines[0]!).sort(), ["latency_ms", "level", "method", "msg", "path", "request_id", "status", "tenant"], "fields");

    // metrics: the route template counted
    const line = await countedLine(port, "GET", 404, "/v1/get/");
    t.ok(line !== undefined && Number(line.split(" ").pop()) >= 3, `404s of GET /v1/get counted: ${line}`);
  } finally {
    await close();
  }
});

test("engine fast path: octet-stream puts answer as the Express route; hostile puts refused", async (t) => {
  const { port, close } = await startEngine("svc-fast-put-", { SVC_ENGINE_API_KEYS: KEY, SVC_ENGINE_MAX_UPLOAD_BYTES: "65536" });
  const OCTET = "application/octet-stream";
  // a parameter on the content type sends the same put through Express
  const VIA_EXPRESS = "application/octet-stream; x=1";
  const put = (query: string, body: Buffer, headers: Record<string, string> = {}, type = OCTET) =>
    raw(port, "POST", `/v1/put?${query}`, { ...auth(), "content-type": type, ...headers }, body);
  const bin = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 131 + seed * 17 + ((i * i) >> 3)) & 0xff));
  const floats = Buffer.from(new Float32Array(Array.from({ length: 256 }, (_, i) => Math.sin(i / 7) + i / 100)).buffer);
  try {
    for (const [what, query, body, headers] of [
      ["plain bytes", "namespace=ns&key=b", bin(5000, 1), {}],
      ["float32 with a shape and a tolerance", "namespace=ns&key=f&dtype=float32&shape=16,16&tolerance=0.001", floats, {}],
      ["exact floats", "namespace=ns&key=e&dtype=float32&shape=256&codec=lossless", floats, {}],
      ["metadata", "namespace=ns&key=m", bin(300, 2), { "x-svc-metadata": JSON.stringify({ label: "x", n: [1, 2] }) }],
      ["if_version 0 on a new key", "namespace=ns&key=iv&if_version=0", bin(64, 3), {}],
    ] as [string, string, Buffer, Record<string, string>][]) {
      const fast = await put(query, body, headers);
      const slow = await put(query.replace("key=", "key=x"), body, headers, VIA_EXPRESS);
      t.equal(fast.status, 201, `${what}: 201`);
      t.equal(slow.status, 201, `${what}: 201 through Express`);
      t.equal(fast.headers["content-type"], slow.headers["content-type"], `${what}: the same content type`);
      const a = JSON.parse(fast.body) as Record<string, unknown>;
      const b = JSON.parse(slow.body) as Record<string, unknown>;
      t.deepEqual(Object.keys(a).sort(), Object.keys(b).sort(), `${what}: the same fields`);
      const differ = Object.keys(a).filter((k) => k !== "key" && !k.endsWith("_at") && JSON.stringify(a[k]) !== JSON.stringify(b[k]));
      t.deepEqual(differ, [], `${what}: the same values but the key and times`);
      t.ok(typeof fast.headers["x-request-id"] === "string", `${what}: a request id`);
      const back = await raw(
        port,
        "POST",
        "/v1/serve",
        { ...auth(), "content-type": "application/json", accept: OCTET },
        Buffer.from(JSON.stringify({ namespace: "ns", key: String(a.key) })),
      );
      if (!query.includes("tolerance")) t.ok(back.bytes.equals(body), `${what}: the bytes read back`);
      else t.equal(back.status, 200, `${what}: served back`);
    }
    const meta = JSON.parse((await raw(port, "GET", "/v1/get/ns/m", auth())).body) as { metadata: unknown };
    t.deepEqual(meta.metadata, { label: "x", n: [1, 2] }, "X-SVC-Metadata is stored");
    const second = JSON.parse((await put("namespace=ns&key=b", bin(10, 4))).body) as { version: number };
    t.equal(second.version, 2, "a second put: version 2");

    // hostile puts: the documented refusals, on whichever path takes them
    const hostile: Array<[string, string, Buffer, Record<string, string>, number]> = [
      ["no key", "namespace=ns&key=h", bin(10, 5), { authorization: "" }, 401],
      ["wrong key", "namespace=ns&key=h", bin(10, 5), { authorization: `Bearer x${KEY}` }, 401],
      ["bad tenant", "namespace=ns&key=h", bin(10, 5), { "x-svc-tenant": "Bad Tenant!" }, 400],
      ["no namespace", "key=h", bin(10, 5), {}, 400],
      ["unknown parameter", "namespace=ns&key=h&colour=red", bin(10, 5), {}, 400],
      ["__proto__ parameter", "namespace=ns&key=h&__proto__=1", bin(10, 5), {}, 400],
      ["parameter twice", "namespace=ns&key=h&key=i", bin(10, 5), {}, 400],
      ["bad percent-encoding", "namespace=ns&key=%E0%A4%A", bin(10, 5), {}, 400],
      ["shape that does not fit the bytes", "namespace=ns&key=h&dtype=float32&shape=3", bin(10, 5), {}, 400],
      ["negative tolerance", "namespace=ns&key=h&dtype=float32&shape=4&tolerance=-1", floats.subarray(0, 16), {}, 400],
      ["metadata not JSON", "namespace=ns&key=h", bin(10, 5), { "x-svc-metadata": "{label:" }, 400],
      ["metadata not an object", "namespace=ns&key=h", bin(10, 5), { "x-svc-metadata": "[1,2]" }, 400],
      ["metadata with a duplicate member", "namespace=ns&key=h", bin(10, 5), { "x-svc-metadata": '{"a":1,"a":2}' }, 400],
      ["a compressed body", "namespace=ns&key=h", bin(10, 5), { "content-encoding": "gzip" }, 415],
      ["a version that is not the latest", "namespace=ns&key=b&if_version=1", bin(10, 5), {}, 409],
      ["a body past the upload limit", "namespace=ns&key=h", bin(65537, 6), {}, 413],
    ];
    for (const [what, query, body, headers, status] of hostile) {
      const h = Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== ""));
      const r = await raw(
        port,
        "POST",
        `/v1/put?${query}`,
        { ...(headers.authorization === "" ? { "x-svc-tenant": "acme" } : auth()), "content-type": OCTET, ...h },
        body,
      );
      t.equal(r.status, status, `${what}: ${status}`);
      const j = JSON.parse(r.body) as { code: string; detail: string; request_id: string };
      t.ok(typeof j.detail === "string" && j.detail.length > 0 && j.request_id === r.headers["x-request-id"], `${what}: the error body with the request id`);
      t.notOk(r.body.includes(KEY), `${what}: no key in the answer`);
    }
    t.equal((await raw(port, "GET", "/v1/get/ns/h", auth())).status, 404, "no refused put stored anything");

    // with an Idempotency-Key (Express): a repeat is answered from the first
    const once = await put("namespace=ns&key=idem", bin(100, 7), { "idempotency-key": "k-1" });
    const again = await put("namespace=ns&key=idem", bin(100, 7), { "idempotency-key": "k-1" });
    t.equal(again.headers["idempotent-replayed"], "true", "an idempotent repeat is replayed");
    t.equal(JSON.parse(again.body).version, JSON.parse(once.body).version, "with the first answer's version");

    // a Content-Length longer than the body sent, then the client leaves: nothing stored, the engine goes on
    await leaveMidBody(port, "/v1/put?namespace=ns&key=cut", { ...auth(), "content-type": OCTET, "content-length": "4000" }, bin(1000, 8));
    const puts = await Promise.all(Array.from({ length: 8 }, (_, i) => put(`namespace=ns&key=after${i}`, bin(60_000, i))));
    t.deepEqual(
      puts.map((r) => r.status),
      Array(8).fill(201),
      "eight large puts at once after a client left mid-body: the budget it held is free",
    );
    t.equal((await raw(port, "GET", "/v1/get/ns/cut", auth())).status, 404, "the cut put stored nothing");

    // one access-log line per put, the same fields as Express's; the route counted
    logs.length = 0;
    await put("namespace=ns&key=log", bin(10, 9));
    await put("namespace=ns&key=log", bin(10, 9), {}, VIA_EXPRESS);
    accessLines(t, "two puts, two lines", [
      [201, "acme", "/v1/put"],
      [201, "acme", "/v1/put"],
    ]);
    const line = await countedLine(port, "POST", 201, "/v1/put");
    t.ok(line !== undefined && Number(line.split(" ").pop()) >= 14, `201s of POST /v1/put counted: ${line}`);
  } finally {
    await close();
  }
});
