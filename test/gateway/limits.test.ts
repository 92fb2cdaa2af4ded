// The size limits the gateway shares with the real engine (server/http/limits.ts): the header
// limit (X-SVC-Metadata of 20 KiB passes both; 120 KiB is a JSON 400 from both, as is a request
// that is not HTTP), and the upload limit, where a JSON put whose decoded payload is within
// SVC_ENGINE_MAX_UPLOAD_BYTES passes the gateway although its base64 body is larger.
import test from "tape";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadEngineConfig } from "../../server/engine/config.js";
import { startEngine, type RunningEngine } from "../../server/engine/server.js";
import type { Logger } from "../../server/engine/app.js";
import { loadGatewayConfig } from "../../server/gateway/config.js";
import { startGateway, type RunningGateway } from "../../server/gateway/server.js";
import { JSON_SLACK_BYTES, jsonBodyLimit, MAX_HEADER_BYTES } from "../../server/http/limits.js";
import { admin, call, SERVICE_KEY } from "./helpers.js";

const LIMIT = 4096;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

interface Raw {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Writes `text` on a plain socket and reads the whole answer until the server closes. */
function rawHttp(url: string, text: string): Promise<Raw> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect(Number(u.port), u.hostname);
    let got = "";
    s.setEncoding("utf8");
    s.on("data", (d) => (got += d));
    s.on("error", (e) => (got ? undefined : reject(e)));
    s.on("close", () => {
      const [head = "", ...rest] = got.split("\r\n\r\n");
      const [line = "", ...lines] = head.split("\r\n");
      const headers: Record<string, string> = {};
      for (const l of lines) {
        const i = l.indexOf(":");
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      resolve({ status: Number(line.split(" ")[1]), headers, body: rest.join("\r\n\r\n") });
    });
    s.write(text);
  });
}

const bigHeaderRequest = (path: string, bytes: number) => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ${"a".repeat(bytes)}\r\n\r\n`;

let dir: string;
let engine: RunningEngine;
let gw: RunningGateway;
let key: string;
const engineLines: Record<string, unknown>[] = [];
const engineRequests = () => engineLines.filter((l) => l.msg === "request");

test("setup: the real engine and gateway, both with SVC_ENGINE_MAX_UPLOAD_BYTES=4096", async (t) => {
  dir = await mkdtemp(join(tmpdir(), "svc-gate-limits-"));
  const logger: Logger = {
    debug: () => {},
    info: (f) => engineLines.push(f),
    warn: (f) => engineLines.push(f),
    error: (f) => engineLines.push(f),
  };
  engine = await startEngine(
    loadEngineConfig({
      SVC_ENGINE_PORT: "0",
      SVC_ENGINE_DATA_DIR: join(dir, "engine"),
      SVC_ENGINE_API_KEYS: SERVICE_KEY,
      SVC_ENGINE_MAX_UPLOAD_BYTES: String(LIMIT),
    }),
    { logger },
  );
  gw = await startGateway(
    loadGatewayConfig({
      SVC_GATE_ENGINE_SERVICE_KEY: SERVICE_KEY,
      SVC_GATE_HOST: "127.0.0.1",
      SVC_GATE_PORT: "0",
      SVC_GATE_ENGINE_URL: engine.url,
      SVC_GATE_DATA_DIR: join(dir, "gate"),
      SVC_GATE_AUDIT_LOG_PATH: join(dir, "audit.jsonl"),
      SVC_ENGINE_MAX_UPLOAD_BYTES: String(LIMIT),
    }),
  );
  key = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
  t.ok(key, "tenant created");
});

test("limits: the JSON body limit is ceil(limit × 4/3) + 1 MiB, one function for both servers", (t) => {
  t.equal(JSON_SLACK_BYTES, 1024 * 1024);
  t.equal(jsonBodyLimit(4096), 5462 + 1024 * 1024, "4096 bytes of payload");
  t.equal(jsonBodyLimit(1), 2 + 1024 * 1024, "rounded up");
  t.equal(jsonBodyLimit(100 * 1024 * 1024), Math.ceil((100 * 1024 * 1024 * 4) / 3) + 1024 * 1024, "the default limit");
  t.equal(MAX_HEADER_BYTES, 96 * 1024, "header limit");
  t.end();
});

test("headers: an octet-stream put with 20 KiB of X-SVC-Metadata passes the gateway and the engine", async (t) => {
  const metadata = { note: "m".repeat(20 * 1024) };
  const header = JSON.stringify(metadata);
  t.ok(header.length > 16 * 1024, `the header (${header.length} bytes) is above Node's 16 KiB default`);
  const payload = Buffer.alloc(1000, 3);
  const put = await call(gw.url, "/v1/put?namespace=default&key=meta", {
    key,
    raw: payload,
    headers: { "content-type": "application/octet-stream", "x-svc-metadata": header },
  });
  t.equal(put.status, 201, `201 through the gateway (${put.status} ${JSON.stringify(put.json).slice(0, 200)})`);
  const got = await call(gw.url, "/v1/get/default/meta", { key });
  t.equal(got.status, 200);
  t.deepEqual(got.json.metadata, metadata, "the engine stored the whole metadata");
});

test("headers: 120 KiB of headers, or a request that is not HTTP, is a JSON 400 with Connection: close from both servers", async (t) => {
  for (const [name, url, path] of [
    ["gateway", gw.url, "/v1/get/default/meta"],
    ["engine", engine.url, "/health"],
  ] as const) {
    const big = await rawHttp(url, bigHeaderRequest(path, 120 * 1024));
    t.equal(big.status, 400, `${name}: 400, not a bare 431`);
    t.equal(big.headers["connection"], "close", `${name}: Connection: close`);
    t.match(big.headers["content-type"] ?? "", /^application\/json/, `${name}: JSON`);
    const body = JSON.parse(big.body);
    t.deepEqual(Object.keys(body).sort(), ["code", "detail", "request_id"], `${name}: the error body of docs/api.md (errors)`);
    t.equal(body.code, "bad_request", `${name}: code bad_request`);
    t.equal(body.detail, "The request headers are larger than the limit of 98304 bytes.", `${name}: the detail names the limit`);
    t.match(body.request_id, UUID, `${name}: a request id`);
    t.equal(big.headers["x-request-id"], body.request_id, `${name}: the same id in X-Request-Id`);
    t.equal(Number(big.headers["content-length"]), Buffer.byteLength(big.body), `${name}: Content-Length matches the body`);

    const garbage = await rawHttp(url, "NOT HTTP AT ALL\r\n\r\n");
    t.equal(garbage.status, 400, `${name}: a request line that is not HTTP: 400`);
    t.deepEqual(
      [JSON.parse(garbage.body).code, JSON.parse(garbage.body).detail],
      ["bad_request", "The request could not be parsed as HTTP."],
      `${name}: JSON body`,
    );
    const badHeader = await rawHttp(url, `GET ${path} HTTP/1.1\r\nHost: x\r\nBad Header Name: 1\r\n\r\n`);
    t.equal(badHeader.status, 400, `${name}: a malformed header line: 400`);
    t.equal(JSON.parse(badHeader.body).code, "bad_request", `${name}: JSON body`);
  }
  const h = await call(gw.url, "/health");
  t.deepEqual([h.status, h.json.engine_reachable], [200, true], "both servers still serve afterwards");
  t.equal((await call(gw.url, "/v1/get/default/meta", { key })).status, 200, "and the data plane too");
});

test("a chunked body that breaks its framing mid-request is a JSON 400 carrying the request's own X-Request-Id", async (t) => {
  const given = "5A1B2C3D-0000-4000-8000-00000000ABCD";
  for (const [name, path, auth] of [
    ["a JSON put to the gateway", "/v1/put", `X-Api-Key: ${key}`],
    ["a search on the engine", "/v1/search", `Authorization: Bearer ${SERVICE_KEY}\r\nX-SVC-Tenant: acme`],
  ] as const) {
    for (const id of [given, undefined]) {
      const r = await rawHttp(
        name.includes("gateway") ? gw.url : engine.url,
        `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n` +
          (id ? `X-Request-Id: ${id}\r\n` : "") +
          `\r\n5\r\n{"nam\r\nZZ-not-a-size\r\n\r\n`,
      );
      const body = JSON.parse(r.body) as { code: string; detail: string; request_id: string };
      t.deepEqual(
        [r.status, body.code, body.detail],
        [400, "bad_request", "The request's chunked body is malformed."],
        `${name}: a JSON 400 that names the framing`,
      );
      t.equal(r.headers["connection"], "close", `${name}: Connection: close`);
      t.equal(r.headers["x-request-id"], body.request_id, `${name}: X-Request-Id and the body's request_id agree`);
      if (id) t.equal(body.request_id, id.toLowerCase(), `${name}: the id the client gave, in lower case`);
      else t.match(body.request_id, UUID, `${name}: the id given to the request`);
    }
  }
  t.equal((await call(gw.url, "/v1/get/default/meta", { key })).status, 200, "the data plane still serves afterwards");
});

test("upload limit: a JSON put whose decoded payload is within the limit passes the gateway; above it the engine says 413", async (t) => {
  const atLimit = Buffer.alloc(LIMIT, 7);
  const body = { namespace: "default", key: "json-at-limit", data_b64: atLimit.toString("base64") };
  t.ok(JSON.stringify(body).length > LIMIT, "the JSON body is larger than the decoded limit");
  const ok = await call(gw.url, "/v1/put", { key, body });
  t.equal(ok.status, 201, "decoded payload of exactly 4096 bytes: 201 through the gateway");
  t.equal(ok.json.bytes_in, LIMIT, "the engine stored all of it");

  const before = engineRequests().length;
  const over = await call(gw.url, "/v1/put", { key, body: { ...body, key: "json-over", data_b64: Buffer.alloc(LIMIT + 1, 7).toString("base64") } });
  t.equal(over.status, 413, "decoded payload of 4097 bytes: 413");
  t.equal(over.json.code, "payload_too_large");
  t.match(
    over.json.detail,
    /payload of 4097 bytes is larger than the upload limit of 4096 bytes \(SVC_ENGINE_MAX_UPLOAD_BYTES\)\.$/,
    "decided by the engine on the decoded payload; names the variable",
  );
  t.equal(engineRequests().length, before + 1, "the engine was asked");

  const limit = jsonBodyLimit(LIMIT);
  const huge = await call(gw.url, "/v1/put", {
    key,
    raw: `{"namespace":"default","key":"huge","data_b64":"${"A".repeat(limit)}"}`,
    headers: { "content-type": "application/json" },
  });
  t.equal(huge.status, 413, "a JSON body above ceil(limit × 4/3) + 1 MiB: 413");
  t.match(
    huge.json.detail,
    new RegExp(`upload limit of ${limit} bytes \\(SVC_ENGINE_MAX_UPLOAD_BYTES\\)\\.$`),
    "the detail names the JSON body limit and the variable",
  );
  t.equal(engineRequests().length, before + 1, "decided by the gateway from Content-Length: the engine was not asked");

  const octet = await call(gw.url, "/v1/put?namespace=default&key=octet-over", {
    key,
    raw: Buffer.alloc(LIMIT + 1),
    headers: { "content-type": "application/octet-stream" },
  });
  t.equal(octet.status, 413, "an octet-stream body is held to the payload limit itself");
  t.match(octet.json.detail, /upload limit of 4096 bytes \(SVC_ENGINE_MAX_UPLOAD_BYTES\)\.$/, "names the variable");
  t.equal(engineRequests().length, before + 1, "not forwarded either");
  const octetOk = await call(gw.url, "/v1/put?namespace=default&key=octet-at-limit", {
    key,
    raw: Buffer.alloc(LIMIT, 1),
    headers: { "content-type": "application/octet-stream" },
  });
  t.equal(octetOk.status, 201, "an octet-stream body of exactly the limit: 201");

  const audit = (await readFile(join(dir, "audit.jsonl"), "utf8"))
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  t.deepEqual(
    audit.filter((a) => a.path === "/v1/put").map((a) => a.status),
    [201, 201, 413, 413, 413, 201],
    "every put audited with its status",
  );
});

test("teardown", async () => {
  await gw.close();
  await engine.close();
  await rm(dir, { recursive: true, force: true });
});
