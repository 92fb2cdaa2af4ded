// Raw client connections for the connection-cap tests: one opened from a chosen local address
// (loopback's 127.0.0.2 and 127.0.0.3 stand for other client machines) or over a Unix socket,
// and one GET /health written on it by hand.
import { connect, type Socket } from "node:net";

/** A connection to `url` from `localAddress`, or to the Unix socket `url` names (unix:/path): resolves once connected (the server may still close it). */
export function openFrom(url: string, localAddress?: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    let s: Socket;
    if (url.startsWith("unix:")) s = connect({ path: url.slice("unix:".length) });
    else {
      const { hostname, port } = new URL(url);
      s = connect({ host: hostname, port: Number(port), localAddress });
    }
    s.once("connect", () => resolve(s));
    s.once("error", reject);
  });
}

/** One GET /health on `s`: its status line, or "closed" when the connection ends without an answer. */
export function healthOn(s: Socket): Promise<string> {
  return new Promise((resolve) => {
    let got = "";
    const onData = (d: Buffer) => {
      got += d.toString("latin1");
      if (got.includes("\r\n\r\n")) done(got.slice(0, got.indexOf("\r\n")));
    };
    const done = (v: string) => {
      s.off("data", onData);
      s.off("close", onClose);
      resolve(v);
    };
    const onClose = () => done("closed");
    s.on("data", onData);
    s.once("close", onClose);
    s.on("error", () => undefined);
    s.write("GET /health HTTP/1.1\r\nHost: server\r\n\r\n");
  });
}

/** How many of `n` connections to `url` from `from` (an address; none for a Unix socket) are served /health, all kept open in `held`. */
export async function servedOf(url: string, n: number, held: Socket[], from?: string): Promise<number> {
  let ok = 0;
  for (let i = 0; i < n; i++) {
    const s = await openFrom(url, from);
    held.push(s);
    if ((await healthOn(s)) === "HTTP/1.1 200 OK") ok++;
  }
  return ok;
}
