// The gateway's own HTTP/1.1 connections to an engine (server/gateway/engine-h1.ts), through the
// engine client (proxy.ts) and on their own, against engines that write exact bytes: answers
// split anywhere, interim answers, every framing (length, chunked with extensions and trailers,
// until the close, none), connections reused or not as the answer says, the keep-alive race
// (an engine closing a kept-alive connection as a request goes out), the connection limit, a
// streamed answer held by a slow reader, malformed answers of every kind, and random damage.
import test from "tape";
import { createServer, type Server, type Socket } from "node:net";
import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { H1Client, requestHead, type H1Phase } from "../../server/gateway/engine-h1.js";
import { EngineFailure, UndiciEngineClient, type ForwardRequest } from "../../server/gateway/proxy.js";
import { ask as askOnce, failure } from "./engine-requests.js";

interface Raw {
  url: string;
  server: Server;
  heads: string[];
  /** Request bodies, by request, as received after their heads. */
  bodies: Buffer[];
  connections: () => number;
}

/** A raw engine: `answer` writes what it likes on the socket of each request (number n, from 0). */
async function rawEngine(answer: (sock: Socket, head: string, n: number) => void): Promise<Raw> {
  const heads: string[] = [];
  const bodies: Buffer[] = [];
  let connections = 0;
  const server = createServer((sock) => {
    connections++;
    let buf = Buffer.alloc(0);
    sock.on("error", () => undefined);
    sock.on("data", (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      for (let end = buf.indexOf("\r\n\r\n"); end >= 0; end = buf.indexOf("\r\n\r\n")) {
        const head = buf.toString("latin1", 0, end);
        const len = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        bodies.push(buf.subarray(end + 4, end + 4 + len));
        buf = buf.subarray(end + 4 + len);
        heads.push(head);
        answer(sock, head, heads.length - 1);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, server, heads, bodies, connections: () => connections };
}

const ask = (extra: Partial<ForwardRequest> = {}): ForwardRequest => askOnce({ replayable: true, ...extra });

class Failed extends Error {
  constructor(readonly phase: H1Phase) {
    super(phase);
  }
}

const client = (url: string, o: { connections?: number; timeoutMs?: number; smallBytes?: number } = {}) =>
  new H1Client(new URL(url), {
    connections: o.connections ?? 4,
    timeoutMs: o.timeoutMs ?? 5000,
    smallBytes: o.smallBytes ?? 1024,
    failure: (p) => new Failed(p),
  });

const get = (c: H1Client, path = "/x", method = "GET") => c.request(method, requestHead(method, path, "engine", [])!, null, true);

async function all(body: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of body) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

/** Writes `bytes` a piece at a time, each in a turn of its own. */
async function dribble(sock: Socket, bytes: Buffer, piece: number): Promise<void> {
  for (let i = 0; i < bytes.length; i += piece) {
    sock.write(bytes.subarray(i, i + piece));
    await new Promise((r) => setTimeout(r, 1));
  }
}

test("engine h1: the request's head and body as sent; an answer split into single bytes; an interim answer skipped", async (t) => {
  const answer = Buffer.from(
    'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Type: application/json\r\nConstructor: c\r\n__proto__: p\r\nToString: t\r\nContent-Length: 11\r\n\r\n{"ok":true}',
  );
  const e = await rawEngine((sock) => void dribble(sock, answer, 1));
  const c = new UndiciEngineClient(e.url, "svc-key", 5000, 2);
  const body = Buffer.from('{"namespace":"ns"}');
  const r = await c.forward(
    ask({
      method: "POST",
      path: "/v1/serve",
      headers: { "content-type": "application/json", "content-length": "999", host: "evil", "transfer-encoding": "chunked" },
      body,
    }),
  );
  t.equal(r.status, 201, "the final answer's status");
  t.equal(r.bytes?.toString(), '{"ok":true}', "its body");
  t.equal(r.headers["content-type"], "application/json", "its headers");
  t.equal(r.headers.link, undefined, "nothing of the interim answer");
  t.deepEqual(
    [r.headers.constructor, Object.getOwnPropertyDescriptor(r.headers, "__proto__")?.value, r.headers.tostring],
    ["c", "p", "t"],
    "headers named like Object's members are headers",
  );
  const head = e.heads[0]!.toLowerCase();
  t.ok(head.startsWith("post /v1/serve http/1.1\r\n"), "request line");
  t.ok(head.includes(`\r\nhost: ${new URL(e.url).host}`) && !head.includes("evil"), "the engine's host, not the client's");
  t.ok(head.includes("\r\ncontent-length: 18") && !head.includes("999"), "the body's own length");
  t.notOk(head.includes("transfer-encoding"), "no framing header of the client's");
  t.ok(e.bodies[0]!.equals(body), "the body after the head");
  await c.close();
  e.server.close();
});

test("engine h1: framings: none, zero length, chunked with extensions and trailers (split), until the close", async (t) => {
  const chunked = Buffer.from("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n4;ext=1\r\nabcd\r\n0000A\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n");
  const e = await rawEngine((sock, head) => {
    if (head.includes("/empty")) sock.write("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    else if (head.includes("/no-content")) sock.write("HTTP/1.1 204 No Content\r\n\r\n");
    else if (head.startsWith("HEAD")) sock.write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n");
    else if (head.includes("/chunked")) void dribble(sock, chunked, 3);
    else if (head.includes("/unsized")) sock.end("HTTP/1.1 200 OK\r\n\r\nuntil the end");
  });
  const c = client(e.url);
  const empty = await get(c, "/empty");
  t.ok(empty.body === null && empty.bytes?.length === 0, "Content-Length 0: an empty body");
  const none = await get(c, "/no-content");
  t.ok(none.status === 204 && none.bytes?.length === 0, "204: no body");
  const head = await get(c, "/h", "HEAD");
  t.ok(head.status === 200 && head.bytes?.length === 0, "HEAD: no body whatever its Content-Length");
  t.equal(e.connections(), 1, "one connection for the three");
  const ch = await get(c, "/chunked");
  t.ok(ch.body !== null, "chunked: streamed");
  t.equal((await all(ch.body!)).toString(), "abcd0123456789", "the chunks' data joined, extensions and trailers left out");
  const again = await get(c, "/empty");
  t.equal(again.status, 200, "the connection is reused after a chunked answer");
  t.equal(e.connections(), 1, "still one connection");
  const unsized = await get(c, "/unsized");
  t.equal((await all(unsized.body!)).toString(), "until the end", "no length: read until the engine closes");
  await get(c, "/empty");
  t.equal(e.connections(), 2, "then a new connection");
  await c.close();
  e.server.close();
});

test("engine h1: Connection: close, HTTP/1.0 and an answer longer than its length end the connection; Keep-Alive's timeout is kept", async (t) => {
  const e = await rawEngine((sock, head) => {
    if (head.includes("/close")) sock.write("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
    else if (head.includes("/old")) sock.write("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
    else if (head.includes("/long")) sock.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA");
    else if (head.includes("/brief")) sock.write("HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1\r\nContent-Length: 2\r\n\r\nok");
    else sock.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  const c = client(e.url);
  let n = 0;
  for (const path of ["/close", "/old", "/long"]) {
    const r = await get(c, path);
    t.equal(r.bytes?.toString(), "ok", `${path}: the answer, to its length`);
    await get(c, "/fine");
    n += 1;
    t.equal(e.connections(), n + 1, `${path}: the next request on a new connection`);
  }
  // timeout=1 leaves no time to reuse the connection (a second of margin)
  await get(c, "/brief");
  const before = e.connections();
  await get(c, "/fine");
  t.equal(e.connections(), before + 1, "an engine's keep-alive of 1 s: the connection is not reused");
  await c.close();
  e.server.close();
});

test("engine h1: a kept-alive connection closed as a request goes out: sent once more when it may be, else an exchange failure", async (t) => {
  const e = await rawEngine((sock, head) => {
    // every connection answers its first request, then closes without answering the next
    const n = (sock as Socket & { served?: number }).served ?? 0;
    (sock as Socket & { served?: number }).served = n + 1;
    if (n === 0) sock.write(`HTTP/1.1 200 OK\r\nContent-Length: ${head.length}\r\n\r\n${head}`);
    else sock.destroy();
  });
  const c = new UndiciEngineClient(e.url, "svc-key", 5000, 1);
  await c.forward(ask());
  const again = await c.forward(ask({ path: "/v1/get/ns/again" }));
  t.equal(again.status, 200, "a replayable request is answered");
  t.ok(again.bytes?.toString().includes("/v1/get/ns/again"), "by the request sent again");
  t.equal(e.connections(), 2, "on a new connection");
  const err = await failure(c.forward(ask({ method: "POST", path: "/v1/put", body: Buffer.from("{}"), replayable: false })));
  t.ok(
    err instanceof EngineFailure && err.phase === "exchange",
    `a write that may have been applied: EngineFailure, phase exchange (${(err as EngineFailure).phase})`,
  );
  t.equal(e.heads.filter((h) => h.startsWith("POST")).length, 1, "sent once");
  await c.close();
  e.server.close();
});

test("engine h1: at most `connections` open; requests wait for a free one and are all answered", async (t) => {
  const e = await rawEngine((sock, head) => {
    setTimeout(() => sock.write(`HTTP/1.1 200 OK\r\nContent-Length: ${head.length}\r\n\r\n${head}`), 20);
  });
  const c = client(e.url, { connections: 2 });
  const rs = await Promise.all(Array.from({ length: 9 }, (_, i) => get(c, `/r${i}`)));
  t.deepEqual(
    rs.map((r, i) => r.bytes!.toString().startsWith(`GET /r${i} `)),
    Array.from({ length: 9 }, () => true),
    "each request its own answer",
  );
  t.equal(e.connections(), 2, "two connections");
  t.ok(c.open <= 2, `open: ${c.open}`);
  await c.close();
  t.equal(c.open, 0, "none open after close");
  const late = await failure(get(c));
  t.ok(late instanceof Failed && late.phase === "connect", "a request after close fails");
  e.server.close();
});

test("engine h1: a streamed answer held by a slow reader is not timed out; one the engine stops sending is", async (t) => {
  const big = randomBytes(4 * 1024 * 1024);
  const e = await rawEngine((sock, head) => {
    if (head.includes("/stall")) sock.write(`HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n${"x".repeat(2000)}`);
    else sock.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${big.length}\r\n\r\n`), big]));
  });
  const c = client(e.url, { timeoutMs: 300 });
  const r = await get(c, "/big");
  await new Promise((res) => setTimeout(res, 900));
  t.ok((await all(r.body!)).equals(big), "every byte, read after three times the wait");
  const s = await get(c, "/stall");
  const err = await failure(all(s.body!));
  t.ok(err instanceof Failed && err.phase === "timeout", `the engine stops mid-body: the stream fails, phase timeout (${(err as Failed).phase})`);
  await c.close();
  e.server.close();
});

test("engine h1: malformed answers fail the exchange and close the connection", async (t) => {
  const bad: Record<string, string> = {
    "/status": "HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
    "/garbage": "hello\r\n\r\n",
    "/length": "HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\n",
    "/lengths": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
    "/colon": "HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 0\r\n\r\n",
    "/name": "HTTP/1.1 200 OK\r\nBad Name: v\r\nContent-Length: 0\r\n\r\n",
    "/switch": "HTTP/1.1 101 Switching Protocols\r\n\r\n",
    "/coding": "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc",
    "/chunk": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
    "/chunk-end": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
    "/huge-head": `HTTP/1.1 200 OK\r\nX-Big: ${"a".repeat(200 * 1024)}\r\n\r\n`,
  };
  const e = await rawEngine((sock, head) => {
    const path = head.split(" ")[1]!;
    sock.write(bad[path] ?? "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  const c = client(e.url, { timeoutMs: 2000 });
  await get(c, "/fine");
  for (const path of Object.keys(bad)) {
    const before = e.connections();
    let err: unknown;
    try {
      const r = await get(c, path);
      err = r.body === null ? null : await failure(all(r.body));
    } catch (x) {
      err = x;
    }
    t.ok(err instanceof Failed && err.phase === "exchange", `${path}: phase exchange (${(err as Failed | null)?.phase})`);
    const ok = await get(c, "/fine");
    t.ok(ok.bytes?.toString() === "ok" && e.connections() === before + 1, `${path}: the next request is answered on a new connection`);
  }
  await c.close();
  e.server.close();
});

test("engine h1: a line break or NUL in the path or a header value is never sent", (t) => {
  t.equal(requestHead("GET", "/a\r\nX-Evil: 1", "h", []), null, "in the path");
  t.equal(requestHead("GET", "/a b", "h", []), null, "a space in the path");
  t.equal(requestHead("GET", "/a", "h", ["accept", "a\r\nx-evil: 1"]), null, "in a value");
  t.equal(requestHead("GET", "/a", "h", ["accept", "a\0"]), null, "NUL in a value");
  t.equal(requestHead("GET", "/a?b=1", "h", ["accept", "*/*"]), "GET /a?b=1 HTTP/1.1\r\nhost: h\r\naccept: */*\r\n", "a plain head");
  t.end();
});

test("engine h1: random damage to answers: every request settles, with an answer or an exchange failure", async (t) => {
  const good = Buffer.from(
    'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-A: 1\r\nContent-Length: 13\r\n\r\n{"key":"abc"}HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
  );
  let seed = 7;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const damaged: Buffer[] = [];
  for (let i = 0; i < 150; i++) {
    const b = Buffer.from(good);
    for (let k = 1 + rand(4); k > 0; k--) b[rand(b.length)] = rand(256);
    damaged.push(b.subarray(0, rand(3) === 0 ? rand(b.length) : b.length));
  }
  const e = await rawEngine((sock, _head, n) => {
    sock.end(damaged[n]);
  });
  const c = client(e.url, { timeoutMs: 1500 });
  let answered = 0;
  let failed = 0;
  let other = 0;
  for (let i = 0; i < damaged.length; i++) {
    try {
      const r = await get(c, `/d${i}`);
      if (r.body !== null) await all(r.body);
      answered++;
    } catch (err) {
      if (err instanceof Failed) failed++;
      else other++;
    }
  }
  t.equal(answered + failed, damaged.length, `all ${damaged.length} settled: ${answered} answered, ${failed} failed`);
  t.equal(other, 0, "no failure other than the client's own");
  t.ok(failed > 0 && answered > 0, "both kinds seen");
  await c.close();
  e.server.close();
});
