// The engine and the gateway read a request the same way (server/http/*): hostile query
// strings, malformed framing (a Transfer-Encoding other than chunked, conflicting lengths),
// bodies sent with GET and DELETE, and duplicate JSON members get the same status and a JSON
// error body from both, over raw sockets against a real engine and a real gateway in front of it.
import test from "tape";
import net from "node:net";
import { admin, call, SERVICE_KEY, startRealStack } from "../gateway/helpers.js";
import { wholeAnswers } from "./raw-answers.js";

interface Answer {
  status: number;
  json: any;
  raw: string;
}

/**
 * Sends `head` + `body` on a fresh connection and reads until `answers` whole answers have come,
 * the server closes the connection, or 5 s have passed.
 */
function rawRequest(port: number, head: string, body: string | Buffer = "", answers = 1): Promise<Answer> {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    const done = () => {
      clearTimeout(timer);
      const raw = Buffer.concat(chunks).toString("latin1");
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(raw)?.[1] ?? 0);
      const text = raw.slice(raw.indexOf("\r\n\r\n") + 4);
      let json: any = null;
      try {
        json = JSON.parse(text);
      } catch {
        json = null;
      }
      resolve({ status, json, raw });
    };
    const timer = setTimeout(() => s.destroy(), 5000);
    s.on("data", (d: Buffer) => {
      chunks.push(d);
      // a kept-alive connection is not waited on once the answers asked for are whole
      if (wholeAnswers(Buffer.concat(chunks).toString("latin1")).length >= answers) s.destroy();
    });
    s.on("error", () => undefined);
    s.on("close", done);
    s.write(head);
    if (body.length) s.write(body);
  });
}

const isErrorBody = (j: any) => j && typeof j.detail === "string" && typeof j.code === "string" && /^[0-9a-f-]{36}$/.test(j.request_id);

test("engine and gateway agree on hostile query strings, framing and bodies of GET and DELETE", async (t) => {
  const stack = await startRealStack("svc-agree-");
  const { engine, gateway: gw } = stack;
  try {
    const key = (await admin(gw.url, "/gate/onboard/create", { tenant_id: "acme" })).json.api_key as string;
    const put = await call(gw.url, "/v1/put", { key, body: { namespace: "default", key: "k", data_b64: Buffer.from("abc").toString("base64") } });
    t.equal(put.status, 201, "an entry to read");
    const gwPort = Number(new URL(gw.url).port);
    const targets = [
      { name: "engine", port: engine.port, auth: `Authorization: Bearer ${SERVICE_KEY}\r\nX-SVC-Tenant: acme\r\n` },
      { name: "gateway", port: gwPort, auth: `X-Api-Key: ${key}\r\n` },
    ];
    const both = async (head: (auth: string) => string, body: string | Buffer = "") => {
      const out: Answer[] = [];
      for (const tg of targets) out.push(await rawRequest(tg.port, head(tg.auth), body));
      return out;
    };
    const get = (target: string) => (auth: string) => `GET ${target} HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n`;

    // ---- query strings ----
    const many = Array.from({ length: 1500 }, (_, i) => `p${i}=1`).join("&");
    const queries: [string, number, RegExp | null][] = [
      ["/v1/get/default/k?version=1", 200, null],
      ["/v1/get/default/k?version=0x1", 400, /decimal digits/],
      ["/v1/get/default/k?version=1e0", 400, /decimal digits/],
      ["/v1/get/default/k?version=%201", 400, /decimal digits/],
      ["/v1/get/default/k?version=+1", 400, /decimal digits/],
      ["/v1/get/default/k?version=%2B1", 400, /decimal digits/],
      ["/v1/get/default/k?version=01", 400, /leading zeros/],
      ["/v1/get/default/k?version=", 400, /decimal digits/],
      ["/v1/get/default/k?version=1.0", 400, /decimal digits/],
      ["/v1/get/default/k?version=99999999999999999999", 400, /decimal digits/],
      ["/v1/get/default/k?version=1&version=1", 400, /version must be given once/],
      ["/v1/get/default/k?version=%E0%A4%A", 400, /not valid percent-encoded UTF-8/],
      ["/v1/get/default/k?version=%FF", 400, /not valid percent-encoded UTF-8/],
      ["/v1/get/default/k?__proto__=1", 400, /__proto__/],
      ["/v1/get/default/k?constructor=1", 400, /constructor/],
      ["/v1/get/default/k?=1", 400, /without a name/],
      [`/v1/get/default/k?${many}`, 400, /more than 32 parameters/],
      [`/v1/get/default/k?${"&".repeat(2000)}version=1`, 200, null],
      ["/v1/list/default?limit=10&offset=0", 200, null],
      ["/v1/list/default?limit=1e1", 400, /decimal digits/],
      ["/v1/list/default?offset=-1", 400, /decimal digits/],
      ["/v1/list/default?limit=10&limit=20", 400, /given once/],
    ];
    for (const [target, status, re] of queries) {
      const [e, g] = await both(get(target));
      const label = target.length > 70 ? `${target.slice(0, 70)}...` : target;
      t.equal(e!.status, status, `engine ${label}: ${status}`);
      t.equal(g!.status, e!.status, `gateway ${label}: the same status`);
      if (re) {
        t.ok(isErrorBody(e!.json) && re.test(e!.json.detail), `engine detail: ${e!.json?.detail}`);
        t.ok(isErrorBody(g!.json) && g!.json.detail === e!.json.detail, "gateway detail: the same sentence");
      }
    }
    // the octet-stream put reads numbers the same way
    for (const q of ["if_version=0x0", "max_rank=%2016", "tolerance=0x1", "shape=3,01", "tolerance=1e-3&tolerance=1e-3"]) {
      const head = (auth: string) =>
        `POST /v1/put?namespace=default&key=o&dtype=uint8&shape=3&${q} HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/octet-stream\r\nContent-Length: 3\r\nConnection: close\r\n\r\n`;
      const [e, g] = await both(head, "abc");
      t.ok(e!.status === 400 && isErrorBody(e!.json), `engine octet put ?${q}: 400 (${e!.json?.detail})`);
      t.equal(g!.status, 400, `gateway octet put ?${q}: 400`);
    }
    const okPut = await both(
      (auth) =>
        `POST /v1/put?namespace=default&key=o&dtype=uint8&shape=3&tolerance=0.001&max_rank=16 HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/octet-stream\r\nContent-Length: 3\r\nConnection: close\r\n\r\n`,
      "abc",
    );
    t.deepEqual(
      okPut.map((a) => a.status),
      [201, 201],
      "a well-formed octet put: 201 from both",
    );

    // ---- framing ----
    const framing: [string, (auth: string) => string, string][] = [
      [
        "Transfer-Encoding: xchunked",
        (a) => `POST /v1/search HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nTransfer-Encoding: xchunked\r\n\r\n`,
        '{"namespace":"default"}',
      ],
      ["Transfer-Encoding: gzip", (a) => `POST /v1/search HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n`, "{}"],
      [
        "Transfer-Encoding: chunked, xchunked",
        (a) => `POST /v1/search HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nTransfer-Encoding: chunked, xchunked\r\n\r\n`,
        "2\r\n{}\r\n0\r\n\r\n",
      ],
      [
        "chunked and Content-Length",
        (a) => `POST /v1/search HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n`,
        "2\r\n{}\r\n0\r\n\r\n",
      ],
      [
        "two Content-Lengths",
        (a) => `POST /v1/search HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n`,
        "{}",
      ],
      [
        "a bad chunk size",
        (a) => `POST /v1/search HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
        "zz\r\n{}\r\n0\r\n\r\n",
      ],
    ];
    for (const [what, head, body] of framing) {
      const [e, g] = await both(head, body);
      t.ok(e!.status === 400 && isErrorBody(e!.json), `engine, ${what}: JSON 400 (${e!.json?.detail})`);
      t.ok(g!.status === 400 && isErrorBody(g!.json), `gateway, ${what}: JSON 400 (${g!.json?.detail})`);
    }

    // ---- bodies sent with GET and DELETE ----
    const bodied: [string, (auth: string) => string, string | Buffer][] = [
      ["GET, chunked body", (a) => `GET /v1/get/default/k HTTP/1.1\r\nHost: x\r\n${a}Transfer-Encoding: chunked\r\n\r\n`, "5\r\nhello\r\n0\r\n\r\n"],
      ["GET, Content-Length body", (a) => `GET /v1/list/default HTTP/1.1\r\nHost: x\r\n${a}Content-Length: 5\r\n\r\n`, "hello"],
      [
        "DELETE, chunked body",
        (a) => `DELETE /v1/delete/default/nothing HTTP/1.1\r\nHost: x\r\n${a}Transfer-Encoding: chunked\r\n\r\n`,
        "5\r\nhello\r\n0\r\n\r\n",
      ],
      ["GET, a 1 MiB body", (a) => `GET /v1/get/default/k HTTP/1.1\r\nHost: x\r\n${a}Content-Length: ${1 << 20}\r\n\r\n`, Buffer.alloc(1 << 20, 0x61)],
      [
        "GET, a chunked body that never ends",
        (a) => `GET /v1/get/default/k HTTP/1.1\r\nHost: x\r\n${a}Transfer-Encoding: chunked\r\n\r\n`,
        `10000\r\n${"b".repeat(0x10000)}\r\n10000\r\n${"b".repeat(0x10000)}\r\n`,
      ],
    ];
    for (const [what, head, body] of bodied) {
      const [e, g] = await both(head, body);
      t.ok(
        e!.status === 400 && isErrorBody(e!.json) && /takes no body/.test(e!.json.detail),
        `engine, ${what}: 400 (${e!.json?.detail ?? e!.raw.slice(0, 40)})`,
      );
      t.ok(
        g!.status === 400 && isErrorBody(g!.json) && g!.json.detail === e!.json?.detail,
        `gateway, ${what}: the same 400 (${g!.json?.detail ?? g!.raw.slice(0, 40)})`,
      );
    }
    // keep-alive after a refused small body: the next request on the same connection is answered
    const twice = await rawRequest(
      engine.port,
      `GET /v1/get/default/k HTTP/1.1\r\nHost: x\r\n${targets[0]!.auth}Content-Length: 5\r\n\r\nhello` + get("/v1/get/default/k")(targets[0]!.auth),
      "",
      2,
    );
    t.deepEqual(
      [...twice.raw.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => m[1]),
      ["400", "200"],
      "the engine answers the next request on the connection",
    );

    // ---- strict JSON on both ----
    const dup = '{"namespace":"default","key":"k","key":"other"}';
    const [e, g] = await both(
      (a) => `POST /v1/serve HTTP/1.1\r\nHost: x\r\n${a}Content-Type: application/json\r\nContent-Length: ${dup.length}\r\nConnection: close\r\n\r\n`,
      dup,
    );
    t.ok(e!.status === 400 && /names the member "key" twice/.test(e!.json.detail), "engine: duplicate member refused");
    t.ok(g!.status === 400 && g!.json.detail === e!.json.detail, "gateway: the same sentence");
  } finally {
    await stack.close();
  }
});
