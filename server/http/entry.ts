// Where a request enters the engine and the gateway, before any route: what Node would answer
// with a bare status line, or would run out of order, is settled here.
import type { IncomingMessage, ServerResponse } from "node:http";
import { ValidationError } from "../../lib/errors.js";
import { writeErrorBody } from "./errors.js";
import { requestIdFrom } from "./request-id.js";

type Listener = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * The servers' request listener around `handler`:
 * - Pipelined requests (HTTP/1.1 lets a client send its next request before the answer to the
 *   last) run one at a time, in the order they came. Node hands each request over as soon as its
 *   headers are parsed and only queues the answers, so a DELETE sent right after a PUT on one
 *   connection could run first, and a GET after a PUT read the version before it. A request whose
 *   response has no socket yet is behind an earlier answer on its connection: it runs once Node
 *   gives its response the socket, that is once the earlier answer has been written. A request
 *   with no earlier answer pending (nearly all) runs at once, at no cost.
 * - An HTTP/1.1 request without a Host header gets the JSON error body (400, Connection: close);
 *   the server is created with requireHostHeader: false, as Node's own answer has no body.
 * @example http.createServer({ maxHeaderSize, requireHostHeader: false }, requestEntry(app))
 */
export function requestEntry(handler: Listener): Listener {
  const run: Listener = (req, res) => {
    if (req.headers.host === undefined && req.httpVersionMajor === 1 && req.httpVersionMinor >= 1) {
      res.shouldKeepAlive = false;
      req.resume();
      const e = new ValidationError("The request has no Host header, which HTTP/1.1 requires.", "Host");
      writeErrorBody(res, e, requestIdFrom(req.headers["x-request-id"]), ["Connection", "close"]);
      return;
    }
    handler(req, res);
  };
  return (req, res) => {
    if (res.socket !== null) return run(req, res);
    // given the socket inside the earlier answer's finish: run after it, on a stack of its own
    res.once("socket", () => setImmediate(run, req, res));
  };
}
