import { randomUUID } from "node:crypto";
import type { RequestHandler, Response } from "express";
import type { ServerResponse } from "node:http";

/** A UUID in lower case (8-4-4-4-12 hex digits), the form this service writes. */
export const LOWERCASE_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const UUID = new RegExp(LOWERCASE_UUID.source, "i");

/** A request's id: its X-Request-Id when that is a UUID (in lower case), else a new one. Every server's rule. */
export function requestIdFrom(given: unknown): string {
  return typeof given === "string" && UUID.test(given) ? given.toLowerCase() : randomUUID();
}

const NOTED = Symbol("svc.requestId");

/**
 * Notes the id a response will carry where its headers are written at once with the answer
 * (writeHead with every header, no setHeader before: Node's fast path), for code that holds only
 * the response (client-error.ts).
 */
export function noteRequestId(res: ServerResponse, id: string): void {
  (res as ServerResponse & { [NOTED]?: string })[NOTED] = id;
}

/** The id a response carries: its X-Request-Id header when set, else the one noted. */
export function requestIdOfResponse(res: ServerResponse): string | undefined {
  const h = res.getHeader("x-request-id");
  return typeof h === "string" ? h : (res as ServerResponse & { [NOTED]?: string })[NOTED];
}

/** Takes `X-Request-Id` when it is a UUID, else generates one; echoes it on the response. */
export const requestId: RequestHandler = (req, res, next) => {
  const id = requestIdFrom(req.get("x-request-id"));
  res.locals.requestId = id;
  res.setHeader("X-Request-Id", id);
  next();
};

export const requestIdOf = (res: Response): string => (res.locals.requestId as string | undefined) ?? randomUUID();
