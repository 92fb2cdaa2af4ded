// JSON request bodies read one way by every server: within a size limit and the memory budget
// (server/http/body.ts), then parsed with parseStrictJson (duplicate member names,
// "__proto__" and invalid UTF-8 refused with 400).
import type { IncomingMessage } from "node:http";
import type { RequestHandler } from "express";
import { UnsupportedMediaTypeError } from "../../lib/errors.js";
import { readBody, type ReadBodyOptions } from "./body.js";
import { parseStrictJson } from "./json.js";
import { reservationOf, type MemoryBudget } from "./memory-budget.js";

/** 415 unless the Content-Type's charset, when given, is UTF-8. */
export function checkJsonCharset(req: IncomingMessage): void {
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.headers["content-type"] ?? "")?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== "utf-8" && charset !== "utf8") throw new UnsupportedMediaTypeError("JSON bodies must be UTF-8.");
}

/**
 * Reads and parses a JSON body strictly; undefined when the body is empty.
 * @example const body = await readJsonBody(req, { limit: 1 << 20 });
 */
export async function readJsonBody(req: IncomingMessage, opts: ReadBodyOptions): Promise<unknown> {
  checkJsonCharset(req);
  const raw = await readBody(req, opts);
  return raw.byteLength > 0 ? parseStrictJson(raw) : undefined;
}

/**
 * Express middleware: for application/json requests, `req.body` becomes the parsed value
 * (undefined when the body is empty); with `budget`, the body is held within it.
 * @example app.use(strictJsonBody({ limit: 1024 * 1024 }));
 */
export function strictJsonBody({ limit, budget, factor }: { limit: number; budget?: MemoryBudget; factor?: number }): RequestHandler {
  return (req, res, next) => {
    if (!req.is("application/json")) return next();
    const reservation = budget ? reservationOf(res, budget) : undefined;
    readJsonBody(req, { limit, reservation, factor, res, path: req.path }).then((body) => {
      req.body = body;
      next();
    }, next);
  };
}
