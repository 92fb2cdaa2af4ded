// Maps any thrown value to the error body of docs/api.md (errors), with the status that
// lib/errors.ts STATUS_OF gives its code; stack traces and messages of unexpected errors never
// reach a response.
import type { ErrorRequestHandler, Response } from "express";
import type { ServerResponse } from "node:http";
import { z } from "zod";
import { SvcError, STATUS_OF, type ErrorCode, RateLimitedError, QuotaExhaustedError, OverloadedError, DependencyError } from "../../lib/errors.js";
import { validationErrorFrom } from "../../lib/fields.js";

export interface ErrorBody {
  detail: string;
  code: ErrorCode;
  request_id: string;
}

/**
 * A request's path as an error sentence names it: past 200 characters (a path may be as long
 * as the header limit allows) its first 200 and how long it was.
 */
export function pathInSentence(path: string): string {
  return path.length > 200 ? `${path.slice(0, 200)}... (${path.length} characters)` : path;
}

/** Normalises anything thrown into an SvcError (unknown errors become `internal`). */
export function toSvcError(err: unknown): SvcError {
  if (err instanceof SvcError) return err;
  if (err instanceof z.ZodError) return validationErrorFrom(err);
  const e = err as { type?: string; status?: number; statusCode?: number } | null;
  // body-parser / raw-body errors
  if (e?.type === "entity.too.large")
    return new SvcError("payload_too_large", "The request body is larger than the upload limit (SVC_ENGINE_MAX_UPLOAD_BYTES).");
  if (e?.type === "entity.parse.failed") return new SvcError("bad_request", "The request body is not valid JSON.");
  if (e?.type === "encoding.unsupported" || e?.type === "charset.unsupported")
    return new SvcError("unsupported_media_type", "The request body's encoding is not supported.");
  if (e?.type === "request.aborted") return new SvcError("bad_request", "The request was aborted by the client.");
  // the router's decoding of a path parameter (a stray %, an escape that is not UTF-8)
  if (err instanceof URIError) return new SvcError("bad_request", "The path is not valid percent-encoded text.");
  if ((e?.status ?? e?.statusCode) === 400) return new SvcError("bad_request", "The request is malformed.");
  return new SvcError("internal", "Internal error.");
}

export function statusOf(err: SvcError): number {
  return STATUS_OF[err.code];
}

/** Seconds of the Retry-After header an error is answered with (429, 503, 507), or null. */
export function retryAfterOf(e: SvcError): number | null {
  const retryable = e instanceof RateLimitedError || e instanceof QuotaExhaustedError || e instanceof OverloadedError || e instanceof DependencyError;
  return retryable && e.retryAfterS > 0 ? Math.ceil(e.retryAfterS) : null;
}

/**
 * The error body of docs/api.md (errors) on a plain node:http response (the servers' paths
 * without express), with X-Request-Id, the pairs of `head` (name, value, name, value...) and
 * Retry-After where it applies, all given to one writeHead (headers set before are kept, and
 * overridden by these); a response already started is cut off.
 */
export function writeErrorBody(res: ServerResponse, e: SvcError, requestId: string, head: readonly string[] = []): void {
  if (res.headersSent) {
    if (!res.writableEnded) res.destroy();
    return;
  }
  const body = JSON.stringify({ detail: e.message, code: e.code, request_id: requestId });
  const headers = ["X-Request-Id", requestId, ...head];
  const retry = retryAfterOf(e);
  if (retry !== null) headers.push("Retry-After", String(retry));
  headers.push("Content-Type", "application/json; charset=utf-8", "Content-Length", String(Buffer.byteLength(body)));
  res.writeHead(statusOf(e), headers).end(body);
}

/** Writes the error response (status, Retry-After where it applies, JSON body). */
export function sendError(res: Response, err: unknown, requestId: string): SvcError {
  const e = toSvcError(err);
  const retry = retryAfterOf(e);
  if (retry !== null) res.setHeader("Retry-After", String(retry));
  const body: ErrorBody = { detail: e.message, code: e.code, request_id: requestId };
  if (!res.headersSent) res.status(statusOf(e)).json(body);
  else if (!res.writableEnded) res.destroy(); // an answer already sent in full is left to flush
  return e;
}

/** Express error middleware; `requestIdOf` reads the id the request was given. */
export function errorMiddleware(requestIdOf: (res: Response) => string, log?: (e: SvcError, raw: unknown) => void): ErrorRequestHandler {
  return (err, _req, res, _next) => {
    const e = sendError(res, err, requestIdOf(res));
    log?.(e, err);
  };
}
