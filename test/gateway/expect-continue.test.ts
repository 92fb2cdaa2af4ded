// Requests with `Expect: 100-continue` through the real gateway and engine, over raw sockets:
// the gateway sends 100 Continue only right before it reads the body, so that a request it
// refuses first (no key, an unknown key, a body over the upload limit, a tenant over its rate
// limit, a body on a GET) is answered without the body being sent, and its connection closes;
// an accepted one is stored as without Expect (JSON and octet-stream bodies) on a connection
// kept open (a second request on it is answered), and a client that sends its body without
// waiting is answered as before.
import test from "tape";
import net from "node:net";
import { wholeAnswers } from "../http/raw-answers.js";
import { SERVICE_KEY, admin, startRealStack, type RealStack } from "./helpers.js";

interface Exchange {
  /** Everything the gateway sent, in order. */
  raw: string;
  /** Whether "100 Continue" came before any final answer. */
  continued: boolean;
  /** The final answer's status. */
  status: number;
  /** The final answer's body, parsed as JSON when it is. */
  json: any;
  /** Whether the gateway closed the connection (it was not kept open for another request). */
  closed: boolean;
}

/**
 * Sends `head` (ending in the empty line) and then, once 100 Continue arrives (or at once when
 * `eager`), `body`. After the final answer it waits for the gateway to close the connection;
 * with `probe`, it sends that request on the same connection instead, and a second answer
 * shows that the connection was kept open.
 */
function exchange(port: number, head: string, body: Buffer | string, opts: { eager?: boolean; probe?: string } = {}): Promise<Exchange> {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    let raw = "";
    let sent = false;
    let probed = false;
    let byUs = false;
    const end = () => {
      byUs = true;
      s.destroy();
    };
    const ceiling = setTimeout(end, 30_000);
    const send = () => {
      if (sent) return;
      sent = true;
      s.write(body);
    };
    s.on("data", (d: Buffer) => {
      raw += d.toString("latin1");
      if (raw.startsWith("HTTP/1.1 100 Continue\r\n\r\n")) send();
      const got = wholeAnswers(raw).length;
      if (got >= 1 && opts.probe !== undefined && !probed) {
        probed = true;
        s.write(opts.probe);
      }
      if (got >= 2) end();
    });
    s.on("error", () => undefined);
    s.on("close", () => {
      clearTimeout(ceiling);
      const f = wholeAnswers(raw)[0];
      let json: any = null;
      try {
        json = f ? JSON.parse(f.text) : null;
      } catch {
        json = f?.text ?? null;
      }
      const continued = raw.startsWith("HTTP/1.1 100 Continue\r\n\r\n");
      resolve({ raw, continued, status: f?.status ?? 0, json, closed: f !== undefined && !byUs });
    });
    s.write(head);
    if (opts.eager) send();
  });
}

let stack: RealStack;
let port = 0;
let key = "";

test("setup: the real engine and gateway, a tenant", async (t) => {
  stack = await startRealStack("svc-expect-");
  port = Number(new URL(stack.gateway.url).port);
  const r = await admin(stack.gateway.url, "/gate/onboard/create", { tenant_id: "acme", plan: "enterprise", rate_limit: { requests: 1000, window_s: 60 } });
  t.equal(r.status, 201, "tenant created");
  key = r.json.api_key as string;
});

const jsonPut = (auth: string, body: string, extra = "") =>
  `POST /v1/put HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\n${extra}\r\n`;
const probe = (k: string) => `GET /v1/get/default/j1 HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${k}\r\n\r\n`;
const putBody = (k: string) => JSON.stringify({ namespace: "default", key: k, data_b64: Buffer.from("hello expect").toString("base64") });

test("an accepted JSON put: 100 Continue, then the body, then 201; the connection stays open", async (t) => {
  const x = await exchange(port, jsonPut(`X-Api-Key: ${key}\r\n`, putBody("j1")), putBody("j1"), { probe: probe(key) });
  t.ok(x.continued, "100 Continue came first");
  t.equal(x.status, 201, `stored: 201 (${JSON.stringify(x.json)?.slice(0, 120)})`);
  t.equal(x.json?.key, "j1", "the answer names the key");
  t.notOk(x.closed, "the connection was kept alive");
  const get = await fetch(`${stack.gateway.url}/v1/get/default/j1`, { headers: { "x-api-key": key } });
  t.equal(get.status, 200, "the entry reads back");
});

test("an accepted octet-stream put: 100 Continue, then the streamed body, then 201", async (t) => {
  const bytes = Buffer.alloc(100_000, 7);
  const head = `POST /v1/put?namespace=default&key=o1&dtype=bytes HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${bytes.length}\r\nExpect: 100-continue\r\n\r\n`;
  const x = await exchange(port, head, bytes, { probe: probe(key) });
  t.ok(x.continued, "100 Continue came first");
  t.equal(x.status, 201, "stored: 201");
  t.equal(x.json?.bytes_in, bytes.length, "every byte arrived");
  t.notOk(x.closed, "the connection was kept alive");
});

test("refused before the body is read: no 100 Continue, the refusal, the connection closed", async (t) => {
  const body = putBody("r1");
  const cases: [string, string, number, RegExp][] = [
    ["no key", jsonPut("", body), 401, /Missing API key/],
    ["an unknown key", jsonPut(`X-Api-Key: svc_live_${"A".repeat(43)}\r\n`, body), 401, /API key/],
    [
      "a body over the upload limit",
      `POST /v1/put HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Type: application/json\r\nContent-Length: ${200 * 1024 * 1024}\r\nExpect: 100-continue\r\n\r\n`,
      413,
      /larger than the upload limit/,
    ],
    ["an unsupported media type", jsonPut(`X-Api-Key: ${key}\r\n`, body).replace("application/json", "text/plain"), 415, /application\/json/],
    [
      "a body on a GET",
      `GET /v1/get/default/j1 HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n`,
      400,
      /takes no body/,
    ],
    [
      "an octet-stream put with a malformed namespace",
      `POST /v1/put?namespace=bad%20ns&key=k HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${key}\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n`,
      400,
      /namespace/,
    ],
  ];
  for (const [what, head, status, detail] of cases) {
    const x = await exchange(port, head, what.includes("GET") ? "hello" : body);
    t.notOk(x.continued, `${what}: no 100 Continue`);
    t.equal(x.status, status, `${what}: ${status}`);
    t.ok(typeof x.json?.detail === "string" && detail.test(x.json.detail), `${what}: ${x.json?.detail}`);
    t.ok(x.closed, `${what}: the gateway closed the connection`);
  }
});

test("a tenant over its rate limit: 429 without 100 Continue", async (t) => {
  const r = await admin(stack.gateway.url, "/gate/onboard/create", { tenant_id: "tight", plan: "enterprise", rate_limit: { requests: 1, window_s: 3600 } });
  const tight = r.json.api_key as string;
  const first = await exchange(port, jsonPut(`X-Api-Key: ${tight}\r\n`, putBody("t1")), putBody("t1"), { probe: probe(tight) });
  t.ok(first.continued && first.status === 201, `the one request of the window is served (${first.status})`);
  const x = await exchange(port, jsonPut(`X-Api-Key: ${tight}\r\n`, putBody("t2")), putBody("t2"));
  t.notOk(x.continued, "no 100 Continue");
  t.equal(x.status, 429, "429");
  t.match(x.raw, /\r\nretry-after: \d+\r\n/i, "with Retry-After");
  t.ok(x.closed, "the connection closed");
});

test("a client that sends its body without waiting gets the same answers", async (t) => {
  const ok = await exchange(port, jsonPut(`X-Api-Key: ${key}\r\n`, putBody("e1")), putBody("e1"), { eager: true, probe: probe(key) });
  t.equal(ok.status, 201, "accepted: 201");
  t.notOk(ok.closed, "the connection was kept alive");
  const bad = await exchange(port, jsonPut(`X-Api-Key: svc_live_${"B".repeat(43)}\r\n`, putBody("e2")), putBody("e2"), { eager: true });
  t.equal(bad.status, 401, "an unknown key: 401");
  t.notOk(bad.continued, "no 100 Continue for it");
});

test("routes outside the data plane get 100 Continue at once, as from Node", async (t) => {
  const body = JSON.stringify({ tenant_id: "from-expect" });
  const head = `POST /gate/onboard/create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${SERVICE_KEY}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`;
  const x = await exchange(port, head, body, { probe: "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" });
  t.ok(x.continued, "100 Continue");
  t.equal(x.status, 201, "the tenant is created");
});

test("teardown", async (t) => {
  await stack.close();
  t.pass("stopped");
});
