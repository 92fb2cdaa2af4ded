// The gateway's client of one engine (server/gateway/proxy.ts) against an engine that answers
// with exact bytes: a small answer read whole before the response is returned (its headers as
// the engine sent them, the connection free), a larger or unsized one streamed, and every way an
// exchange can fail named by its phase: a body shorter than its Content-Length, a connection
// closed mid-answer, a reader that drops a streamed answer, no engine, an engine that never
// answers, a request body that fails on the client's side.
import test from "tape";
import { createServer, type Server, type Socket } from "node:net";
import { PassThrough, type Readable } from "node:stream";
import { PayloadTooLargeError } from "../../lib/errors.js";
import { EngineFailure, SMALL_BODY_BYTES, UndiciEngineClient, type EngineResponse } from "../../server/gateway/proxy.js";
import { ask, failure } from "./engine-requests.js";

/** A raw engine: `answer` writes what it likes on the socket of each request it reads. */
async function rawEngine(
  answer: (sock: Socket, head: string) => void,
): Promise<{ url: string; server: Server; heads: string[]; closed: () => number; connections: () => number }> {
  const heads: string[] = [];
  let closed = 0;
  let connections = 0;
  const server = createServer((sock) => {
    connections++;
    let buf = "";
    sock.on("close", () => closed++);
    sock.on("error", () => undefined);
    sock.on("data", (d: Buffer) => {
      buf += d.toString("latin1");
      for (let end = buf.indexOf("\r\n\r\n"); end >= 0; end = buf.indexOf("\r\n\r\n")) {
        const head = buf.slice(0, end);
        buf = buf.slice(end + 4);
        heads.push(head);
        answer(sock, head);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, server, heads, closed: () => closed, connections: () => connections };
}

async function all(body: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of body) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

test("engine client: a small answer comes whole, with the engine's headers; the request carries the service key, tenant and request id", async (t) => {
  const body = Buffer.from(JSON.stringify({ key: "k", version: 3 }));
  const e = await rawEngine((sock) =>
    sock.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Two: a\r\nX-Two: b\r\nContent-Length: ${body.length}\r\n\r\n${body.toString()}`),
  );
  const c = new UndiciEngineClient(e.url, "svc-key", 5000, 2);
  const r = await c.forward(ask());
  t.equal(r.status, 200, "status");
  t.equal(r.body, null, "no stream: the body is read whole");
  t.ok(r.bytes?.equals(body), "its bytes");
  t.equal(r.headers["content-type"], "application/json", "a header, by its lower-case name");
  t.deepEqual(r.headers["x-two"], ["a", "b"], "a header sent twice: both values");
  const head = e.heads[0]!.toLowerCase();
  t.ok(head.startsWith("get /v1/get/ns/k http/1.1"), "method and path as given");
  for (const h of ["authorization: bearer svc-key", "x-svc-tenant: acme", "x-request-id: 0b5a6f3e-6f0d-4c41-9f55-1f0f2d9c4a11", "accept: application/json"])
    t.ok(head.includes(h), `sent ${h}`);
  // the connection is free again: a later request goes on it
  await new Promise((r) => setImmediate(r));
  const again = await c.forward(ask());
  t.ok(again.bytes?.equals(body), "a second request is answered");
  t.equal(e.connections(), 1, "on the same engine connection");
  await c.close();
  e.server.close();
});

test("engine client: answers larger than the small size, or without a Content-Length, stream", async (t) => {
  const big = Buffer.alloc(SMALL_BODY_BYTES + 1, 7);
  const e = await rawEngine((sock, head) => {
    if (head.includes("/big")) sock.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${big.length}\r\n\r\n`), big]));
    else sock.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  });
  const c = new UndiciEngineClient(e.url, "svc-key", 5000, 2);
  const r = await c.forward(ask({ path: "/big" }));
  t.ok(r.body !== null && r.bytes === undefined, `${big.length} bytes: streamed`);
  t.ok((await all(r.body!)).equals(big), "every byte");
  const chunked = await c.forward(ask({ path: "/chunked" }));
  t.ok(chunked.body !== null, "no Content-Length: streamed");
  t.equal((await all(chunked.body!)).toString(), "hello world", "its chunks joined");
  // exactly the small size is still read whole
  const e2 = await rawEngine((sock) =>
    sock.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${SMALL_BODY_BYTES}\r\n\r\n`), Buffer.alloc(SMALL_BODY_BYTES, 1)])),
  );
  const c2 = new UndiciEngineClient(e2.url, "svc-key", 5000, 2);
  const edge = await c2.forward(ask());
  t.ok(edge.body === null && edge.bytes?.length === SMALL_BODY_BYTES, `${SMALL_BODY_BYTES} bytes: whole`);
  await c.close();
  await c2.close();
  e.server.close();
  e2.server.close();
});

test("engine client: an answer cut short, a connection closed mid-answer, no engine, an engine that never answers", async (t) => {
  const e = await rawEngine((sock, head) => {
    if (head.includes("/short")) {
      // promises 100 bytes, sends 10, closes
      sock.end("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
    } else if (head.includes("/headers-only")) {
      sock.end("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n");
    } else if (head.includes("/silent")) {
      // never answers
    } else sock.end("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
  });
  const c = new UndiciEngineClient(e.url, "svc-key", 700, 2);
  for (const path of ["/short", "/headers-only"]) {
    const err = await failure(c.forward(ask({ path })));
    t.ok(err instanceof EngineFailure && err.phase === "exchange", `${path}: EngineFailure, phase exchange (${(err as EngineFailure).phase})`);
  }
  const slow = await failure(c.forward(ask({ path: "/silent" })));
  t.ok(slow instanceof EngineFailure && slow.phase === "timeout", `no answer within the wait: phase timeout (${(slow as EngineFailure).phase})`);
  const ok = await c.forward(ask({ path: "/fine" }));
  t.equal(ok.bytes?.toString(), "{}", "the next request is answered");
  await c.close();
  e.server.close();
  // nothing listens on the port any more
  const gone = new UndiciEngineClient(e.url, "svc-key", 700, 2);
  const refused = await failure(gone.forward(ask()));
  t.ok(refused instanceof EngineFailure && refused.phase === "connect", `no engine: phase connect (${(refused as EngineFailure).phase})`);
  await gone.close();
});

test("engine client: a streamed answer dropped by its reader closes that engine connection", async (t) => {
  let sent = 0;
  const e = await rawEngine((sock) => {
    // 8 MiB promised, 1 MiB sent, the rest never
    sock.write(`HTTP/1.1 200 OK\r\nContent-Length: ${8 * 1024 * 1024}\r\n\r\n`);
    sock.write(Buffer.alloc(1024 * 1024, 3), () => (sent = 1));
  });
  const c = new UndiciEngineClient(e.url, "svc-key", 5000, 2);
  const r: EngineResponse = await c.forward(ask());
  t.ok(r.body !== null, "streamed");
  await new Promise<void>((resolve) => r.body!.once("data", () => resolve()));
  r.body!.destroy();
  for (let i = 0; i < 100 && e.closed() === 0; i++) await new Promise((res) => setTimeout(res, 20));
  t.equal(e.closed(), 1, "the engine saw its connection closed");
  t.equal(sent, 1, "after the engine had sent part of the answer");
  await c.close();
  e.server.close();
});

test("engine client: a request body that fails on the client's side is that failure, not the engine's", async (t) => {
  const e = await rawEngine(() => undefined);
  const c = new UndiciEngineClient(e.url, "svc-key", 5000, 2);
  const body = new PassThrough();
  const p = failure(c.forward(ask({ method: "POST", path: "/v1/put?namespace=ns&key=k", headers: { "content-type": "application/octet-stream" }, body })));
  body.write(Buffer.alloc(1024));
  setTimeout(() => body.destroy(new PayloadTooLargeError("The request body is larger than the upload limit.")), 50);
  const err = await p;
  t.ok(err instanceof PayloadTooLargeError, `PayloadTooLargeError (${(err as Error).constructor.name})`);
  await c.close();
  e.server.close();
});
