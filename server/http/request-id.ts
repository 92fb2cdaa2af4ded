import { randomUUID } from "node:crypto";
import type { RequestHandler, Response } from "express";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Takes `X-Request-Id` when it is a UUID, else generates one; echoes it on the response. */
export const requestId: RequestHandler = (req, res, next) => {
  const given = req.get("x-request-id");
  const id = given && UUID.test(given) ? given.toLowerCase() : randomUUID();
  res.locals.requestId = id;
  res.setHeader("X-Request-Id", id);
  next();
};

export const requestIdOf = (res: Response): string => (res.locals.requestId as string | undefined) ?? randomUUID();
