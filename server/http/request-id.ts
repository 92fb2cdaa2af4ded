import { randomUUID } from "node:crypto";
import type { RequestHandler, Response } from "express";

/** A UUID in lower case (8-4-4-4-12 hex digits), the form this service writes. */
export const LOWERCASE_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const UUID = new RegExp(LOWERCASE_UUID.source, "i");

/** A request's id: its X-Request-Id when that is a UUID (in lower case), else a new one. Every server's rule. */
export function requestIdFrom(given: unknown): string {
  return typeof given === "string" && UUID.test(given) ? given.toLowerCase() : randomUUID();
}

/** Takes `X-Request-Id` when it is a UUID, else generates one; echoes it on the response. */
export const requestId: RequestHandler = (req, res, next) => {
  const id = requestIdFrom(req.get("x-request-id"));
  res.locals.requestId = id;
  res.setHeader("X-Request-Id", id);
  next();
};

export const requestIdOf = (res: Response): string => (res.locals.requestId as string | undefined) ?? randomUUID();
