// Answers read off a raw connection: tests that speak HTTP/1.1 over a socket find where each
// answer ends (by its Content-Length) to stop reading a connection that stays open.
import net from "node:net";

/** An answer's status and body, as latin1 text. */
export interface RawAnswer {
  status: number;
  text: string;
}

/**
 * The whole final answers at the start of `raw` (latin1 text of what a server sent), in order;
 * interim (1xx) answers are left out. One framed otherwise than by Content-Length ends the list,
 * as does one not yet whole.
 */
export function wholeAnswers(raw: string): RawAnswer[] {
  const out: RawAnswer[] = [];
  let off = 0;
  for (;;) {
    const end = raw.indexOf("\r\n\r\n", off);
    if (end < 0) return out;
    const status = Number(raw.slice(off + 9, off + 12));
    if (status >= 100 && status < 200) {
      off = end + 4;
      continue;
    }
    const length = /\r\ncontent-length: *(\d+)\r\n/i.exec(raw.slice(off, end + 2));
    if (!length || raw.length < end + 4 + Number(length[1])) return out;
    out.push({ status, text: raw.slice(end + 4, end + 4 + Number(length[1])) });
    off = end + 4 + Number(length[1]);
  }
}

/**
 * Writes `requests` at once on one new connection to 127.0.0.1:`port` (one byte per character,
 * as HTTP sends a header's bytes) and reads until `count` whole answers came, the server closed,
 * or 30 s passed; returns those answers and everything read.
 */
export function sendRaw(port: number, requests: string, count: number): Promise<{ answers: RawAnswer[]; raw: string }> {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    let raw = "";
    const done = () => {
      clearTimeout(ceiling);
      s.destroy();
      resolve({ answers: wholeAnswers(raw), raw });
    };
    const ceiling = setTimeout(done, 30_000);
    s.on("data", (d: Buffer) => {
      raw += d.toString("latin1");
      if (wholeAnswers(raw).length >= count) done();
    });
    s.on("error", () => undefined);
    s.on("close", done);
    s.write(requests, "latin1");
  });
}
