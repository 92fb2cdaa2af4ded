// The client's HTTP exchange (lib/client-http.ts, node:http): a kept-alive socket that the
// server drops as it is reused is retried once on a new connection; a server that drops every
// connection is a transport error naming its code; a body sent in chunks reports its progress.
import test from "tape";
import { createServer as createTcpServer, type Socket } from "node:net";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { exchange, HttpPool, HttpTransportError } from "../../lib/client-http.js";
import { createClient } from "../../lib/client.js";

const listen = async (srv: { listen: (port: number, host: string, cb: () => void) => unknown; address: () => unknown }) => {
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
};

const ANSWER = (body: string) =>
  `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: keep-alive\r\n\r\n${body}`;

test("transport: a reused socket dropped by the server is retried once on a new connection", async (t) => {
  // each connection answers its first request and drops the socket at its second, unanswered
  const connections: Socket[] = [];
  let answered = 0;
  const srv = createTcpServer((sock) => {
    connections.push(sock);
    let requests = 0;
    sock.on("data", (d) => {
      if (!d.toString("latin1").includes("\r\n\r\n")) return;
      requests++;
      if (requests === 1) {
        answered++;
        sock.write(ANSWER(JSON.stringify({ n: answered })));
      } else sock.destroy();
    });
  });
  const url = await listen(srv);
  const pool = new HttpPool();
  try {
    const a = await exchange(pool, new URL(`${url}/x`), { method: "GET", headers: {}, timeoutMs: 10_000 });
    t.same(JSON.parse(a.body.toString()), { n: 1 }, "first answer");
    const b = await exchange(pool, new URL(`${url}/x`), { method: "GET", headers: {}, timeoutMs: 10_000 });
    t.same(JSON.parse(b.body.toString()), { n: 2 }, "the second request answered on a new connection");
    t.equal(connections.length, 2, "two connections: the reused one was dropped, one more was opened");
  } finally {
    pool.close();
    srv.close();
  }
});

test("transport: a server that drops every connection is a transport error with its code, once retried at most", async (t) => {
  let connections = 0;
  const srv = createTcpServer((sock) => {
    connections++;
    sock.on("data", () => sock.destroy());
  });
  const url = await listen(srv);
  const pool = new HttpPool();
  try {
    await exchange(pool, new URL(`${url}/x`), { method: "GET", headers: {}, timeoutMs: 10_000 });
    t.fail("no error");
  } catch (e) {
    t.ok(e instanceof HttpTransportError, "HttpTransportError");
    t.equal((e as HttpTransportError).code, "ECONNRESET", "code ECONNRESET");
    t.equal(connections, 1, "a fresh socket is not retried");
  } finally {
    pool.close();
    srv.close();
  }
  const c = createClient({ baseUrl: url.replace(/:\d+$/, ":1"), apiKey: "k", maxRetries: 0 });
  try {
    await c.get("ns", "k");
    t.fail("no error");
  } catch (e) {
    t.match((e as Error).message, /could not be reached \(ECONNREFUSED\)/, "connection refused names its code through the client");
  } finally {
    await c.close();
  }
});

test("transport: a chunked upload reports each chunk and the server receives the whole body", async (t) => {
  let received = 0;
  const srv = createServer((req: IncomingMessage, res) => {
    req.on("data", (c: Buffer) => (received += c.length));
    req.on("end", () => res.end(JSON.stringify({ received })));
  });
  const url = await listen(srv);
  const pool = new HttpPool();
  const seen: number[] = [];
  try {
    const body = Buffer.alloc(5 * 1024 * 1024 + 7, 1);
    const r = await exchange(pool, new URL(`${url}/up`), {
      method: "POST",
      headers: { "content-type": "application/octet-stream" },
      body,
      timeoutMs: 30_000,
      uploadChunk: 1024 * 1024,
      onUpload: (done) => seen.push(done),
    });
    t.same(JSON.parse(r.body.toString()), { received: body.length }, "the server received every byte");
    t.same(seen, [1, 2, 3, 4, 5].map((i) => i * 1024 * 1024).concat(body.length), "progress after each 1 MiB chunk, ending at the total");
  } finally {
    pool.close();
    srv.close();
  }
});
