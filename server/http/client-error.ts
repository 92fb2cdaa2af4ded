// Requests Node cannot parse (headers above the limit, malformed request lines or headers, a
// request not received in time) never reach the app; Node answers them with a bare status line.
// Here they get the error body of docs/api.md (errors) instead: 400 bad_request, Connection: close.
import { randomUUID } from "node:crypto";
import { STATUS_CODES, type Server } from "node:http";
import type { Socket } from "node:net";
import { STATUS_OF } from "../../lib/errors.js";
import type { ErrorBody } from "./errors.js";

// How long a socket that was answered may wait for its peer to close before it is destroyed.
const LINGER_MS = 2000;

function detailOf(err: NodeJS.ErrnoException, maxHeaderBytes: number): string {
  switch (err.code) {
    case "HPE_HEADER_OVERFLOW":
      return `The request headers are larger than the limit of ${maxHeaderBytes} bytes.`;
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return "The request was not received in time.";
    default:
      return "The request could not be parsed as HTTP.";
  }
}

/** The raw HTTP/1.1 response for a request that could not be parsed. */
export function clientErrorResponse(err: NodeJS.ErrnoException, maxHeaderBytes: number): string {
  const requestId = randomUUID();
  const status = STATUS_OF.bad_request;
  const body: ErrorBody = { detail: detailOf(err, maxHeaderBytes), code: "bad_request", request_id: requestId };
  const text = JSON.stringify(body);
  return [
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}`,
    "Content-Type: application/json; charset=utf-8",
    `Content-Length: ${Buffer.byteLength(text)}`,
    `X-Request-Id: ${requestId}`,
    "Connection: close",
    "",
    text,
  ].join("\r\n");
}

/**
 * Answers the server's 'clientError's with the JSON error body. It writes nothing when the peer
 * is gone or a response on this connection is still owed, and it never throws: the socket is
 * closed in every case.
 * @example answerClientErrors(http.createServer({ maxHeaderSize: MAX_HEADER_BYTES }, app), MAX_HEADER_BYTES);
 */
export function answerClientErrors<S extends Server>(server: S, maxHeaderBytes: number): S {
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Socket) => {
    // Node has removed its own error listener from the socket by now: a later EPIPE or reset
    // must not become an uncaught exception.
    socket.on("error", () => socket.destroy());
    // A response still owed on this connection (pipelining): an answer now would be read as
    // that one's, so the connection is only closed.
    const inFlight = (socket as Socket & { _httpMessage?: unknown })._httpMessage;
    if (err.code === "ECONNRESET" || !socket.writable || inFlight) {
      socket.destroy();
      return;
    }
    // end() rather than destroy(): the answer is sent before FIN, and unread request bytes
    // do not turn the close into a reset that could discard it at the client.
    const timer = setTimeout(() => socket.destroy(), LINGER_MS);
    timer.unref();
    socket.once("close", () => clearTimeout(timer));
    socket.end(clientErrorResponse(err, maxHeaderBytes));
  });
  return server;
}
