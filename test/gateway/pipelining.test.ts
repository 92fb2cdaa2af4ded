// Pipelined requests (sent on one connection before the answers) run in the order they came,
// through the real gateway and on the real engine directly: a put then a delete of the same key
// leaves no entry, a put then a get reads what was put. And what Node answers with a bare status
// line or a closed connection gets the JSON error body on both servers: an HTTP/1.1 request
// without Host, an Expect other than 100-continue, a CONNECT.
import test from "tape";
import { sendRaw as pipeline } from "../http/raw-answers.js";
import { SERVICE_KEY, admin, startRealStack, type RealStack } from "./helpers.js";

let stack: RealStack;
let key = "";
const ports = { gateway: 0, engine: 0 };

test("setup: the real engine and gateway, a tenant", async (t) => {
  stack = await startRealStack("svc-pipeline-");
  ports.gateway = Number(new URL(stack.gateway.url).port);
  ports.engine = Number(new URL(stack.engine.url).port);
  const r = await admin(stack.gateway.url, "/gate/onboard/create", { tenant_id: "acme", plan: "enterprise", rate_limit: { requests: 10_000, window_s: 60 } });
  t.equal(r.status, 201, "tenant created");
  key = r.json.api_key as string;
});

// the credentials of each server: a tenant key at the gateway, the service key and the tenant at the engine
const auth = (to: keyof typeof ports) => (to === "gateway" ? `X-Api-Key: ${key}\r\n` : `Authorization: Bearer ${SERVICE_KEY}\r\nX-SVC-Tenant: acme\r\n`);
const put = (to: keyof typeof ports, k: string, bytes: number) => {
  const body = JSON.stringify({ namespace: "default", key: k, data_b64: Buffer.alloc(bytes, 3).toString("base64"), dtype: "bytes" });
  return `POST /v1/put HTTP/1.1\r\nHost: x\r\n${auth(to)}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
};
const del = (to: keyof typeof ports, k: string) => `DELETE /v1/delete/default/${k} HTTP/1.1\r\nHost: x\r\n${auth(to)}\r\n`;
const get = (to: keyof typeof ports, k: string) => `GET /v1/get/default/${k} HTTP/1.1\r\nHost: x\r\n${auth(to)}\r\n`;

for (const to of ["gateway", "engine"] as const) {
  test(`${to}: a pipelined put, delete and get of one key run in the order sent`, async (t) => {
    // a put large enough to take a while (compression is tried), then requests that depend on it
    for (let round = 0; round < 5; round++) {
      const k = `${to}-pd-${round}`;
      const { answers } = await pipeline(ports[to], put(to, k, 200_000) + del(to, k) + get(to, k), 3);
      t.deepEqual(
        answers.map((a) => a.status),
        [201, 200, 404],
        `round ${round}: put 201, delete 200, get 404 (${answers.map((a) => a.text.slice(0, 80)).join(" | ")})`,
      );
      const after = await fetch(`${stack.gateway.url}/v1/get/default/${k}`, { headers: { "x-api-key": key } });
      t.equal(after.status, 404, `round ${round}: no entry is left`);
    }
  });

  test(`${to}: a pipelined put then get reads the version put; gets behind a get are answered in order`, async (t) => {
    const k = `${to}-pg`;
    const { answers } = await pipeline(ports[to], put(to, k, 100_000) + get(to, k) + put(to, k, 50_000) + get(to, k) + get(to, "nothing-here"), 5);
    t.deepEqual(
      answers.map((a) => a.status),
      [201, 200, 201, 200, 404],
      "statuses in order",
    );
    const versions = answers.map((a) => (a.status < 300 ? (JSON.parse(a.text) as { version: number }).version : null));
    t.deepEqual(versions, [1, 1, 2, 2, null], "each get reads the version put just before it");
  });

  test(`${to}: what Node answers bare gets the JSON error body`, async (t) => {
    const noHost = await pipeline(ports[to], `GET /v1/get/default/x HTTP/1.1\r\n${auth(to)}\r\n`, 1);
    const a = noHost.answers[0];
    t.equal(a?.status, 400, "HTTP/1.1 without Host: 400");
    const body = a ? (JSON.parse(a.text) as { code: string; detail: string; request_id: string }) : null;
    t.equal(body?.code, "bad_request", "code bad_request");
    t.match(body?.detail ?? "", /no Host header/, `the detail says why: ${body?.detail}`);
    t.match(noHost.raw, /\r\nx-request-id: [0-9a-f-]{36}\r\n/i, "with X-Request-Id");
    t.match(noHost.raw, /\r\nconnection: close\r\n/i, "and Connection: close");

    const http10 = await pipeline(ports[to], `GET /v1/get/default/nothing HTTP/1.0\r\n${auth(to)}\r\n`, 1);
    t.equal(http10.answers[0]?.status, 404, "HTTP/1.0 needs no Host: the request is served (404 for a missing key)");

    const expect = await pipeline(
      ports[to],
      `POST /v1/search HTTP/1.1\r\nHost: x\r\n${auth(to)}Content-Type: application/json\r\nContent-Length: 2\r\nExpect: 200-ok\r\n\r\n{}`,
      1,
    );
    const e = expect.answers[0];
    t.equal(e?.status, 400, "Expect: 200-ok: 400");
    t.match(e?.text ?? "", /"code":"bad_request"/, "code bad_request");
    t.match(e?.text ?? "", /Expect header is not supported/, "the detail names the Expect header");

    const connect = await pipeline(ports[to], `CONNECT 127.0.0.1:${ports.engine} HTTP/1.1\r\nHost: 127.0.0.1:${ports.engine}\r\n\r\n`, 1);
    const c = connect.answers[0];
    t.equal(c?.status, 404, "CONNECT: 404");
    t.match(c?.text ?? "", /"code":"not_found"/, "code not_found");
    t.match(c?.text ?? "", /No endpoint CONNECT/, "the detail names the method");

    const health = await fetch(`${to === "gateway" ? stack.gateway.url : stack.engine.url}/health`);
    t.equal(health.status, 200, "the server still answers");
  });
}

for (const to of ["gateway", "engine"] as const) {
  test(`${to}: X-SVC-Metadata sent as raw UTF-8 bytes is stored as that text; bytes that are not UTF-8 are refused`, async (t) => {
    const put = (k: string, meta: Buffer) =>
      Buffer.concat([
        Buffer.from(
          `POST /v1/put?namespace=default&key=${k}&dtype=bytes HTTP/1.1\r\nHost: x\r\n${auth(to)}Content-Type: application/octet-stream\r\nContent-Length: 3\r\nX-SVC-Metadata: `,
        ),
        meta,
        Buffer.from("\r\n\r\nabc"),
      ]).toString("latin1");
    const label = "é 日本 😀";
    const ok = await pipeline(ports[to], put(`${to}-utf8`, Buffer.from(JSON.stringify({ label }))), 1);
    t.equal(ok.answers[0]?.status, 201, "stored");
    const back = await fetch(`${stack.gateway.url}/v1/get/default/${to}-utf8`, { headers: { "x-api-key": key } });
    t.deepEqual(((await back.json()) as { metadata: unknown }).metadata, { label }, "the metadata reads back as the text sent");
    const bad = await pipeline(ports[to], put(`${to}-latin1`, Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xe9, 0x22, 0x7d])), 1);
    t.equal(bad.answers[0]?.status, 400, "bytes that are not UTF-8: 400");
    t.match(bad.answers[0]?.text ?? "", /X-SVC-Metadata is not valid UTF-8/, "the detail names the header");
  });
}

test("teardown", async (t) => {
  await stack.close();
  t.pass("stopped");
});
