// Requests Node cannot parse (headers above the limit, malformed request lines or headers, a
// request not received in time) never reach the app; Node answers them with a bare status line.
// Here they get the error body of docs/api.md (errors) instead: 400 bad_request, Connection: close.
import { randomUUID } from "node:crypto";
import { requestIdFrom, requestIdOfResponse } from "./request-id.js";
import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { STATUS_OF, ValidationError, type ErrorCode } from "../../lib/errors.js";
import { pathInSentence, writeErrorBody, type ErrorBody } from "./errors.js";

// How long a socket that was answered may wait for its peer to close before it is destroyed.
const LINGER_MS = 2000;

function detailOf(err: NodeJS.ErrnoException, maxHeaderBytes: number): string {
  switch (err.code) {
    case "HPE_HEADER_OVERFLOW":
      return `The request headers are larger than the limit of ${maxHeaderBytes} bytes.`;
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return "The request was not received in time.";
    case "HPE_INVALID_TRANSFER_ENCODING":
      return "The request's Transfer-Encoding is not supported (only chunked is).";
    case "HPE_INVALID_CHUNK_SIZE":
      return "The request's chunked body is malformed.";
    case "HPE_INVALID_CONTENT_LENGTH":
    case "HPE_UNEXPECTED_CONTENT_LENGTH":
      return "The request's Content-Length is invalid or conflicts with its framing.";
    default:
      return "The request could not be parsed as HTTP.";
  }
}

/** The error body of docs/api.md (errors) as JSON text. */
function errorJson(code: ErrorCode, detail: string, requestId: string): string {
  const body: ErrorBody = { detail, code, request_id: requestId };
  return JSON.stringify(body);
}

/** A raw HTTP/1.1 answer with the error body, Connection: close. */
function rawErrorResponse(code: ErrorCode, detail: string, requestId: string = randomUUID()): string {
  const status = STATUS_OF[code];
  const text = errorJson(code, detail, requestId);
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

/** The raw HTTP/1.1 response for a request that could not be parsed. */
export function clientErrorResponse(err: NodeJS.ErrnoException, maxHeaderBytes: number): string {
  return rawErrorResponse("bad_request", detailOf(err, maxHeaderBytes));
}

/** Ends a socket with `text`, destroying it if the peer has not closed within LINGER_MS. */
function endWith(socket: Socket, text: string): void {
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
  socket.end(text);
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
    const inFlight = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
    const parsing = (socket as Socket & { parser?: { incoming?: IncomingMessage | null } | null }).parser?.incoming;
    // A client that reset or closed its side mid-request (HPE_INVALID_EOF_STATE) reads no answer;
    // destroying the socket also ends the request stream, so the app's handler finishes.
    if (err.code === "ECONNRESET" || err.code === "HPE_INVALID_EOF_STATE" || !socket.writable) {
      socket.destroy();
      return;
    }
    if (inFlight) {
      // The headers were parsed and the request handed to the app, then its body failed to parse
      // (a Transfer-Encoding other than chunked, a bad chunk): the response owed is this
      // request's, so the answer goes through it. A response owed to an earlier request
      // (pipelining) or already started: an answer now would be read as that one's, so the
      // connection is only closed.
      if (inFlight.req === parsing && !inFlight.headersSent && !inFlight.writableEnded) {
        answerThrough(inFlight, socket, err, maxHeaderBytes);
        return;
      }
      socket.destroy();
      return;
    }
    // end() rather than destroy(): the answer is sent before FIN, and unread request bytes
    // do not turn the close into a reset that could discard it at the client.
    endWith(socket, clientErrorResponse(err, maxHeaderBytes));
  });
  // An Expect other than 100-continue (Node answers a bare 417) and CONNECT (Node closes the
  // connection without a word): the JSON error body, and the connection closes.
  server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
    res.shouldKeepAlive = false;
    req.resume();
    const e = new ValidationError("The request's Expect header is not supported; only 100-continue is.", "Expect");
    writeErrorBody(res, e, requestIdFrom(req.headers["x-request-id"]), ["Connection", "close"]);
  });
  server.on("connect", (req: IncomingMessage, socket: Socket) => {
    socket.on("error", () => socket.destroy());
    endWith(socket, rawErrorResponse("not_found", `No endpoint CONNECT ${pathInSentence(String(req.url ?? ""))}.`, requestIdFrom(req.headers["x-request-id"])));
  });
  return server;
}

function answerThrough(res: ServerResponse, socket: Socket, err: NodeJS.ErrnoException, maxHeaderBytes: number): void {
  const requestId = requestIdFrom(requestIdOfResponse(res));
  const text = errorJson("bad_request", detailOf(err, maxHeaderBytes), requestId);
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
  res.shouldKeepAlive = false;
  res.writeHead(STATUS_OF.bad_request, {
    "Content-Type": "application/json; charset=utf-8",
    "Content-Length": Buffer.byteLength(text),
    "X-Request-Id": requestId,
    Connection: "close",
  });
  res.end(text, () => socket.end());
}
